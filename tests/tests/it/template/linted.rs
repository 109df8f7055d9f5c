//! Every CloudFormation template in the repository goes through `.ci/check-templates.sh`'s
//! cfn-lint and checkov: a new template cannot ship unchecked.

use std::collections::BTreeSet;

use autoproxy_tests::root;

/// The `templates=(…)` list of `.ci/check-templates.sh`.
fn checked() -> BTreeSet<String> {
    let script = std::fs::read_to_string(root().join(".ci/check-templates.sh")).unwrap();
    let line = script
        .lines()
        .find_map(|line| line.strip_prefix("templates=("))
        .expect(".ci/check-templates.sh lists its templates as templates=(…)");
    let list = line.strip_suffix(')').expect("templates=(…) on one line");
    list.split_whitespace().map(str::to_owned).collect()
}

/// template.yaml and every YAML file in docs/ that declares itself a CloudFormation template.
fn templates() -> BTreeSet<String> {
    let mut found = BTreeSet::from(["template.yaml".to_owned()]);
    for entry in std::fs::read_dir(root().join("docs")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("yaml") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        if text.contains("AWSTemplateFormatVersion:") {
            let name = path.file_name().unwrap().to_string_lossy();
            found.insert(format!("docs/{name}"));
        }
    }
    found
}

#[test]
fn every_template_is_linted() {
    let templates = templates();
    assert!(
        templates.contains("docs/member-account.yaml"),
        "{templates:?}"
    );
    assert!(
        templates.contains("docs/central-forwarding.yaml"),
        "{templates:?}"
    );
    assert_eq!(checked(), templates);
}
