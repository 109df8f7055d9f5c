//! The alarms notify someone: the topic given in `AlarmTopicArn`, or the one the stack creates
//! when it is empty (encrypted with a key CloudWatch may use), with an optional e-mail
//! subscription; and the ways to act on them name the deployed functions.

use serde_json::{Value as Json, json};
use serde_yaml::Value;

use super::stack::stack;
use super::template;

const GIVEN: &str = "arn:aws:sns:us-east-1:123456789012:ops-alarms";
const CREATED: &str = "arn:aws:sns:us-east-1:123456789012:autoproxy-AlarmTopic-0TEST";

/// Every alarm's (name, AlarmActions, OKActions) as a stack with `topic` deploys them.
fn actions(template: &Value, topic: &str) -> Vec<(String, Json, Json)> {
    let mut stack = stack(template);
    let given = !topic.is_empty();
    stack.refs.insert("AlarmTopicArn".into(), json!(topic));
    stack.refs.insert("AlarmTopic".into(), json!(CREATED));
    stack.conditions.insert("HasAlarmTopic".into(), given);
    stack.conditions.insert("CreatesAlarmTopic".into(), !given);
    let resources = template["Resources"].as_mapping().unwrap();
    resources
        .iter()
        .filter(|(_, resource)| resource["Type"].as_str() == Some("AWS::CloudWatch::Alarm"))
        .map(|(name, resource)| {
            let properties = &resource["Properties"];
            (
                name.as_str().unwrap().to_owned(),
                stack.resolve(&properties["AlarmActions"]).unwrap(),
                stack.resolve(&properties["OKActions"]).unwrap(),
            )
        })
        .collect()
}

#[test]
fn every_alarm_notifies_the_given_topic_or_the_created_one() {
    let template = template();
    for (topic, expected) in [(GIVEN, GIVEN), ("", CREATED)] {
        let alarms = actions(&template, topic);
        assert!(alarms.len() >= 13, "{alarms:?}");
        for (name, on_alarm, on_ok) in alarms {
            assert_eq!(on_alarm, json!([expected]), "{name} with {topic:?}");
            assert_eq!(on_ok, json!([expected]), "{name} with {topic:?}");
        }
    }
    let resources = &template["Resources"];
    for created in ["AlarmTopic", "AlarmTopicKey"] {
        assert_eq!(
            resources[created]["Condition"].as_str(),
            Some("CreatesAlarmTopic"),
            "{created} exists only when no topic is given"
        );
    }
    assert_eq!(
        template["Conditions"]["CreatesAlarmTopic"],
        serde_yaml::from_str::<Value>("!Equals [!Ref AlarmTopicArn, \"\"]").unwrap()
    );
    let output = &template["Outputs"]["AlarmTopicArn"]["Value"];
    let mut created = stack(&template);
    created.refs.insert("AlarmTopic".into(), json!(CREATED));
    created.conditions.insert("HasAlarmTopic".into(), false);
    assert_eq!(created.resolve(output).unwrap(), json!(CREATED));
}

#[test]
fn the_created_topic_is_encrypted_with_a_key_cloudwatch_may_use() {
    let template = template();
    let resources = &template["Resources"];
    let topic = &resources["AlarmTopic"]["Properties"];
    assert_eq!(
        topic["KmsMasterKeyId"],
        serde_yaml::from_str::<Value>("!Ref AlarmTopicKey").unwrap(),
        "the AWS managed alias/aws/sns refuses CloudWatch: the topic needs a key of its own"
    );
    let key = &resources["AlarmTopicKey"]["Properties"];
    assert_eq!(key["EnableKeyRotation"].as_bool(), Some(true));
    let statements = key["KeyPolicy"]["Statement"].as_sequence().unwrap();
    let cloudwatch = statements
        .iter()
        .find(|s| s["Principal"]["Service"].as_str() == Some("cloudwatch.amazonaws.com"))
        .expect("a statement for CloudWatch");
    let actions: Vec<&str> = cloudwatch["Action"]
        .as_sequence()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(actions, ["kms:Decrypt", "kms:GenerateDataKey*"]);
}

#[test]
fn an_alarm_email_is_optional_and_follows_the_topic_parameter() {
    let template = template();
    let names: Vec<&str> = template["Parameters"]
        .as_mapping()
        .unwrap()
        .keys()
        .filter_map(Value::as_str)
        .collect();
    let at = names.iter().position(|n| *n == "AlarmTopicArn").unwrap();
    assert_eq!(names.get(at + 1), Some(&"AlarmEmail"), "{names:?}");
    assert_eq!(
        template["Parameters"]["AlarmEmail"]["Default"].as_str(),
        Some("")
    );
    let subscription = &template["Resources"]["AlarmEmailSubscription"];
    assert_eq!(subscription["Condition"].as_str(), Some("HasAlarmEmail"));
    assert_eq!(
        subscription["Properties"]["Protocol"].as_str(),
        Some("email")
    );
    let mut created = stack(&template);
    created.refs.insert("AlarmTopic".into(), json!(CREATED));
    created.conditions.insert("HasAlarmTopic".into(), false);
    assert_eq!(
        created
            .resolve(&subscription["Properties"]["TopicArn"])
            .unwrap(),
        json!(CREATED)
    );
}

#[test]
fn alarms_tell_how_to_invoke_the_deployed_functions_never_cargo_lambda() {
    let template = template();
    let text = serde_yaml::to_string(&template["Resources"]).unwrap();
    assert!(!text.contains("cargo lambda"), "a local emulator's command");
    for (alarm, function) in [
        ("FleetBehindAlarm", "FleetReportFunction"),
        ("FleetUnhealthyAlarm", "FleetReportFunction"),
        ("GuardBlockedAlarm", "GenerateFunction"),
        ("AccountHeldAlarm", "GenerateFunction"),
    ] {
        let description =
            serde_yaml::to_string(&template["Resources"][alarm]["Properties"]["AlarmDescription"])
                .unwrap();
        assert!(
            description.contains(&format!(
                "aws lambda invoke --function-name ${{{function}}}"
            )),
            "{alarm}: {description}"
        );
    }
    for (output, function) in [
        ("GenerateFunctionName", "GenerateFunction"),
        ("ConfigureFunctionName", "ConfigureFunction"),
        ("FleetReportFunctionName", "FleetReportFunction"),
    ] {
        assert_eq!(
            template["Outputs"][output]["Value"],
            serde_yaml::from_str::<Value>(&format!("!Ref {function}")).unwrap(),
            "{output}"
        );
    }
}
