//! The template's `Rules`: parameter combinations CloudFormation refuses at deploy time, before
//! any resource changes. Evaluated here as CloudFormation does: a rule whose `RuleCondition`
//! holds must have every `Assert` hold, else the deploy stops with its `AssertDescription`.

use std::collections::BTreeMap;

use serde_yaml::Value;

use super::template;

/// Parameter values of one deploy: the template's defaults, then `overrides`.
fn parameters(template: &Value, overrides: &[(&str, &str)]) -> BTreeMap<String, String> {
    let mut values: BTreeMap<String, String> = template["Parameters"]
        .as_mapping()
        .expect("the template has parameters")
        .iter()
        .map(|(name, spec)| {
            let name = name
                .as_str()
                .expect("parameter names are strings")
                .to_owned();
            let default = autoproxy_tests::cfn::scalar(&spec["Default"]).unwrap_or_default();
            (name, default)
        })
        .collect();
    for (name, value) in overrides {
        assert!(values.contains_key(*name), "no parameter {name}");
        values.insert((*name).to_owned(), (*value).to_owned());
    }
    values
}

/// A rule function's value: a string (`Ref`, a literal) or a condition (`Fn::Equals`, …).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Rule {
    Text(String),
    Holds(bool),
}

fn eval(value: &Value, parameters: &BTreeMap<String, String>) -> Rule {
    let (tag, arg) = match value {
        Value::String(text) => return Rule::Text(text.clone()),
        Value::Tagged(tagged) => (tagged.tag.to_string(), &tagged.value),
        Value::Mapping(mapping) if mapping.len() == 1 => {
            let (key, arg) = mapping.iter().next().expect("one entry");
            let key = key.as_str().expect("a function name");
            (format!("!{}", key.trim_start_matches("Fn::")), arg)
        }
        other => panic!("not a rule function: {other:?}"),
    };
    let holds = |value: &Value| match eval(value, parameters) {
        Rule::Holds(holds) => holds,
        Rule::Text(text) => panic!("{tag}: expected a condition, got {text:?}"),
    };
    let items = || {
        arg.as_sequence()
            .unwrap_or_else(|| panic!("{tag} takes a list: {arg:?}"))
    };
    match tag.as_str() {
        "!Ref" => {
            let name = arg.as_str().expect("!Ref of a name");
            Rule::Text(
                parameters
                    .get(name)
                    .unwrap_or_else(|| panic!("!Ref {name}: no such parameter"))
                    .clone(),
            )
        }
        "!Equals" => {
            let [a, b] = items().as_slice() else {
                panic!("!Equals takes two values: {arg:?}")
            };
            Rule::Holds(eval(a, parameters) == eval(b, parameters))
        }
        "!Not" => {
            let [inner] = items().as_slice() else {
                panic!("!Not takes one condition: {arg:?}")
            };
            Rule::Holds(!holds(inner))
        }
        "!And" => Rule::Holds(items().iter().all(holds)),
        "!Or" => Rule::Holds(items().iter().any(holds)),
        other => panic!("a rule function this test does not know: {other}"),
    }
}

/// The `AssertDescription` of every assertion that fails for these parameters.
fn refusals(template: &Value, overrides: &[(&str, &str)]) -> Vec<String> {
    let parameters = parameters(template, overrides);
    let rules = template["Rules"].as_mapping().expect("a Rules section");
    let mut refused = Vec::new();
    for (name, rule) in rules {
        let applies = match rule.get("RuleCondition") {
            None => true,
            Some(condition) => eval(condition, &parameters) == Rule::Holds(true),
        };
        if !applies {
            continue;
        }
        for assertion in rule["Assertions"].as_sequence().expect("assertions") {
            if eval(&assertion["Assert"], &parameters) != Rule::Holds(true) {
                let description = assertion["AssertDescription"].as_str().unwrap_or_default();
                refused.push(format!("{}: {description}", name.as_str().unwrap_or("?")));
            }
        }
    }
    refused
}

#[test]
fn member_accounts_without_a_role_name_are_refused_at_deploy_time() {
    let template = template();
    for member_accounts in ["organization", "ou-ab12-workload1", "111111111111"] {
        let refused = refusals(&template, &[("MemberAccounts", member_accounts)]);
        assert_eq!(refused.len(), 1, "{member_accounts}: {refused:?}");
        assert!(
            refused[0].starts_with("MemberAccountsNeedMemberRoleName: ")
                && refused[0].contains("MemberRoleName must name"),
            "{refused:?}"
        );
        let named = refusals(
            &template,
            &[
                ("MemberAccounts", member_accounts),
                ("MemberRoleName", "autoproxy-route53-read"),
            ],
        );
        assert!(named.is_empty(), "{member_accounts}: {named:?}");
    }
    // The defaults deploy, and a role name alone (no members yet) harms nothing.
    assert_eq!(refusals(&template, &[]), Vec::<String>::new());
    assert!(refusals(&template, &[("MemberRoleName", "autoproxy-route53-read")]).is_empty());
}
