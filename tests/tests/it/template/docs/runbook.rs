//! docs/RUNBOOK.md, the one runbook a release bundle's user follows: its parts in order (the
//! values, upgrade, roll back, the alarms, removal), and one row in its alarm table for each
//! alarm `template.yaml` creates, no more. Its commands are held with the other docs' (the
//! AWS CLI v1's parser, dash, the parameters, the region variable).

use std::collections::BTreeSet;

use autoproxy_tests::root;

/// The runbook's parts, in the order an operator meets them.
const PARTS: [&str; 5] = [
    "## The values every command needs",
    "## Upgrade",
    "## Roll back",
    "## When an alarm fires",
    "## Remove",
];

/// The parts of `text` missing or out of order.
fn missing_parts(text: &str) -> Vec<String> {
    let mut at = 0;
    let mut problems = Vec::new();
    for part in PARTS {
        match text[at..].find(&format!("\n{part}\n")) {
            Some(found) => at += found + part.len(),
            None => problems.push(format!("no `{part}` after the parts before it")),
        }
    }
    problems
}

/// The alarms the rows of `text`'s table under "When an alarm fires" name (`| \`Name\` |`).
fn alarm_rows(text: &str) -> BTreeSet<String> {
    let section = text
        .split("\n## When an alarm fires\n")
        .nth(1)
        .and_then(|rest| rest.split("\n## ").next())
        .unwrap_or_default();
    section
        .lines()
        .filter_map(|line| line.strip_prefix("| `"))
        .filter_map(|rest| rest.split_once("` |").map(|(name, _)| name.to_owned()))
        .filter(|name| name.ends_with("Alarm"))
        .collect()
}

#[test]
fn the_runbook_has_its_parts_and_a_row_for_every_alarm_the_stack_creates() {
    let text = std::fs::read_to_string(root().join("docs/RUNBOOK.md")).unwrap();
    assert_eq!(missing_parts(&text), Vec::<String>::new());
    let template = super::super::template();
    let created: BTreeSet<String> = template["Resources"]
        .as_mapping()
        .unwrap()
        .iter()
        .filter(|(_, r)| r["Type"].as_str() == Some("AWS::CloudWatch::Alarm"))
        .filter_map(|(id, _)| id.as_str().map(str::to_owned))
        .collect();
    assert!(created.len() >= 15, "{created:?}");
    let rows = alarm_rows(&text);
    let lacking: Vec<_> = created.difference(&rows).collect();
    let unknown: Vec<_> = rows.difference(&created).collect();
    assert!(
        lacking.is_empty() && unknown.is_empty(),
        "docs/RUNBOOK.md's alarm table lacks {lacking:?} and names {unknown:?}, which the \
         template does not create"
    );
}

#[test]
fn a_part_out_of_order_or_an_alarm_row_is_found() {
    let text = "# R\n\n## The values every command needs\n\n## Roll back\n\n## Upgrade\n\n\
                ## When an alarm fires\n\n| alarm | x |\n|---|---|\n| `AAlarm` | x |\n\
                | `Other` | y |\n\n## Remove\n\n| `BAlarm` | z |\n";
    assert_eq!(
        missing_parts(text),
        vec!["no `## Roll back` after the parts before it"]
    );
    assert_eq!(alarm_rows(text), BTreeSet::from(["AAlarm".to_owned()]));
}
