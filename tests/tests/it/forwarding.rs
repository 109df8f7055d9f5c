//! A stack outside us-east-1 hears Route53's events: the member template and
//! docs/central-forwarding.yaml forward them from us-east-1 to the central default bus in the
//! stack's region, and the generator's rule (template.yaml) takes them there as it takes local
//! ones. The patterns, targets and roles are read from the templates, never copied.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use autoproxy_tests::cfn::Stack;
use autoproxy_tests::moto::OWN_ACCOUNT;
use autoproxy_tests::root;
use serde_json::{Value as Json, json};
use serde_yaml::Value;

mod generator;
mod patterns;
mod templates;

/// The central account: where template.yaml runs.
const CENTRAL: &str = OWN_ACCOUNT;
const MEMBER: &str = "111111111111";
/// Where Route53's events exist.
const EVENTS_REGION: &str = "us-east-1";
/// The central stack's region: not us-east-1.
const STACK_REGION: &str = "eu-west-1";
const GENERATOR_ROLE: &str = "arn:aws:iam::123456789012:role/autoproxy-GenerateFunctionRole-X";
const FORWARDER_ROLE: &str = "EventForwarderRole.Arn";

/// A template of the repository as YAML, CloudFormation tags kept.
fn template(path: &str) -> Value {
    let path = root().join(path);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|err| panic!("{path:?}: {err}"));
    serde_yaml::from_str(&text).unwrap_or_else(|err| panic!("{path:?} is not YAML: {err}"))
}

/// A sample event from `events/`.
fn sample(name: &str) -> Json {
    let path = root().join("events").join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|err| panic!("{path:?}: {err}"));
    serde_json::from_str(&text).unwrap_or_else(|err| panic!("{path:?} is not JSON: {err}"))
}

/// The Route53 samples the generator's rule must take.
const SAMPLES: [&str; 3] = [
    "change-resource-record-sets.json",
    "create-hosted-zone.json",
    "delete-hosted-zone.json",
];

/// `template` deployed by `account` in `region` with these parameters, its conditions decided
/// and the forwarder role's ARN known.
fn deployed(template: &Value, account: &str, region: &str, parameters: &[(&str, Json)]) -> Stack {
    let mut stack = Stack::new(
        template,
        account,
        region,
        &format!("arn:aws:cloudformation:{region}:{account}:stack/autoproxy-forwarding/1"),
    );
    for (name, value) in parameters {
        stack.refs.insert((*name).to_owned(), value.clone());
    }
    stack.attributes.insert(
        FORWARDER_ROLE.to_owned(),
        format!("arn:aws:iam::{account}:role/autoproxy-forwarding-EventForwarderRole-X"),
    );
    stack.decide_conditions(template).unwrap();
    stack
}

/// docs/member-account.yaml in the member's us-east-1, for a central stack in `central_region`
/// (empty: the parameter left at its default).
fn member_stack(account: &str, central_region: &str) -> (Value, Stack) {
    let member = template("docs/member-account.yaml");
    let stack = deployed(
        &member,
        account,
        EVENTS_REGION,
        &[
            ("GeneratorRoleArn", json!(GENERATOR_ROLE)),
            ("CentralAccountId", json!(CENTRAL)),
            ("CentralRegion", json!(central_region)),
        ],
    );
    (member, stack)
}

/// docs/central-forwarding.yaml in the central account's us-east-1, for a stack in
/// `central_region`.
fn central_forwarding_stack(central_region: &str) -> (Value, Stack) {
    let forwarding = template("docs/central-forwarding.yaml");
    let stack = deployed(
        &forwarding,
        CENTRAL,
        EVENTS_REGION,
        &[("CentralRegion", json!(central_region))],
    );
    (forwarding, stack)
}

/// A resource's properties as `stack` deploys them; `None` when its condition leaves it out.
fn resource(template: &Value, stack: &Stack, name: &str) -> Option<Json> {
    let resource = &template["Resources"][name];
    assert!(!resource.is_null(), "no resource {name}");
    if let Some(condition) = resource["Condition"].as_str() {
        let holds = stack.conditions.get(condition).copied();
        if !holds.unwrap_or_else(|| panic!("condition {condition} not decided")) {
            return None;
        }
    }
    Some(stack.resolve(&resource["Properties"]).unwrap())
}

/// The generator's own rule: template.yaml's `Route53ChangeRule` pattern.
fn generator_pattern() -> Json {
    let template = template("template.yaml");
    let stack = Stack::new(&template, CENTRAL, STACK_REGION, "stack");
    let pattern = &template["Resources"]["Route53ChangeRule"]["Properties"]["EventPattern"];
    assert!(
        !pattern.is_null(),
        "template.yaml has no Route53ChangeRule pattern"
    );
    stack.resolve(pattern).unwrap()
}

/// The central default bus in `region`.
fn central_bus(region: &str) -> String {
    format!("arn:aws:events:{region}:{CENTRAL}:event-bus/default")
}
