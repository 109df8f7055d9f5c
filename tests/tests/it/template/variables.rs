//! `template.yaml` sets exactly the environment variables each function reads
//! (`autoproxy::settings::GENERATE_VARIABLES` / `CONFIGURE_VARIABLES`): a setting added to the
//! code but not to the template, or left in the template after the code stopped reading it,
//! fails here instead of in a deployed function.

use std::collections::BTreeSet;

use autoproxy::settings::{CONFIGURE_VARIABLES, GENERATE_VARIABLES};
use serde_yaml::Value;

use super::{keys_at, template};

/// The function's variables merged with `Globals.Function` (SAM merges the two maps).
fn function_variables(template: &Value, function: &str) -> BTreeSet<String> {
    assert!(
        template["Resources"].get(function).is_some(),
        "template.yaml has no resource {function}"
    );
    let own = [
        "Resources",
        function,
        "Properties",
        "Environment",
        "Variables",
    ];
    let global = ["Globals", "Function", "Environment", "Variables"];
    let mut names = keys_at(template, &own);
    names.extend(keys_at(template, &global));
    names
}

/// Empty when the template sets exactly `expected`; otherwise one line per direction.
fn differences(function: &str, set: &BTreeSet<String>, expected: &[&str]) -> Vec<String> {
    let expected: BTreeSet<String> = expected.iter().map(|name| (*name).to_owned()).collect();
    let missing: Vec<&String> = expected.difference(set).collect();
    let orphans: Vec<&String> = set.difference(&expected).collect();
    let mut lines = Vec::new();
    if !missing.is_empty() {
        lines.push(format!(
            "{function}: read by the code, not set in template.yaml: {missing:?}"
        ));
    }
    if !orphans.is_empty() {
        lines.push(format!(
            "{function}: set in template.yaml, not read by the code: {orphans:?}"
        ));
    }
    lines
}

#[test]
fn each_function_gets_exactly_the_settings_its_code_reads() {
    let template = template();
    let mut problems = Vec::new();
    for (function, expected) in [
        ("GenerateFunction", GENERATE_VARIABLES),
        ("ConfigureFunction", CONFIGURE_VARIABLES),
        // The same binary: it reads the same settings at its start.
        ("FleetReportFunction", CONFIGURE_VARIABLES),
        // Its only input is the layer's file and the resource's properties.
        ("AgentPublisherFunction", &[]),
    ] {
        let set = function_variables(&template, function);
        problems.extend(differences(function, &set, expected));
    }
    assert!(problems.is_empty(), "\n{}", problems.join("\n"));
}

/// The comparison itself must be able to fail, in both directions.
#[test]
fn a_missing_or_an_orphan_variable_is_reported() {
    let set: BTreeSet<String> = ["CONFIG_KEY", "STALE"].map(str::to_owned).into();
    let lines = differences("F", &set, &["CONFIG_KEY", "NEW"]);
    assert_eq!(
        lines,
        [
            r#"F: read by the code, not set in template.yaml: ["NEW"]"#,
            r#"F: set in template.yaml, not read by the code: ["STALE"]"#,
        ]
    );
    assert!(differences("F", &set, &["CONFIG_KEY", "STALE"]).is_empty());
}
