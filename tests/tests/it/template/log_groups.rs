//! Every function of the stack writes to a log group the stack holds, with a retention: none
//! leaves Lambda to make `/aws/lambda/<function>` itself, kept forever and left behind when
//! the stack is removed.

use serde_yaml::Value;

use super::template;

#[test]
fn every_function_writes_to_a_log_group_of_the_stack_with_a_retention() {
    let template = template();
    let resources = template["Resources"].as_mapping().expect("Resources");
    let mut functions = Vec::new();
    let mut problems = Vec::new();
    for (name, resource) in resources {
        let kind = resource["Type"].as_str().unwrap_or_default();
        if !["AWS::Lambda::Function", "AWS::Serverless::Function"].contains(&kind) {
            continue;
        }
        let name = name.as_str().unwrap_or_default();
        functions.push(name.to_owned());
        let group = match &resource["Properties"]["LoggingConfig"]["LogGroup"] {
            Value::Tagged(tagged) if tagged.tag == "Ref" => tagged.value.as_str(),
            _ => None,
        };
        let Some(group) = group else {
            problems.push(format!("{name} names no log group of the stack (`!Ref`)"));
            continue;
        };
        let declared = &template["Resources"][group];
        if declared["Type"].as_str() != Some("AWS::Logs::LogGroup") {
            problems.push(format!(
                "{name}'s log group {group} is not a log group of the stack"
            ));
        } else if declared["Properties"]["RetentionInDays"].is_null() {
            problems.push(format!("{name}'s log group {group} has no retention"));
        } else if declared["Condition"] != resource["Condition"] {
            problems.push(format!(
                "{name} and its log group {group} differ in their condition"
            ));
        }
    }
    assert!(
        problems.is_empty() && functions.len() >= 5,
        "{}\nfunctions: {functions:?}",
        problems.join("\n")
    );
}
