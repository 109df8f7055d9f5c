//! The template as a stack deploys it in these tests: the stack's names and ids, and the
//! statements the template gives a function's role, resolved as that stack holds them.

use autoproxy_tests::cfn::Stack;
use autoproxy_tests::moto::{OWN_ACCOUNT, REGION};
use serde_json::{Value, json};

const STACK_ID: &str = "arn:aws:cloudformation:us-east-1:123456789012:stack/autoproxy/0f1e2d3c-aaaa-bbbb-cccc-0123456789ab";
/// The bucket the template names: `autoproxy-<account>-<first part of the stack id's uuid>`.
pub(crate) const BUCKET: &str = "autoproxy-123456789012-0f1e2d3c";
pub(crate) const TEMPLATE_KEY: &str = "haproxy/custom.cfg.j2";
pub(crate) const DOCUMENT: &str = "autoproxy-ApplyConfigDocument-0TEST";

/// The stack as deployed here: a custom template, no member roles, no proxy VPCs.
pub(crate) fn stack(template: &serde_yaml::Value) -> Stack {
    let mut stack = Stack::new(template, OWN_ACCOUNT, REGION, STACK_ID);
    stack.refs.insert("TemplateKey".into(), json!(TEMPLATE_KEY));
    stack
        .refs
        .insert("ApplyConfigDocument".into(), json!(DOCUMENT));
    stack.refs.insert("ConfigBucket".into(), json!(BUCKET));
    stack
        .attributes
        .insert("ConfigBucket.Arn".into(), format!("arn:aws:s3:::{BUCKET}"));
    stack.attributes.insert(
        "Route53EventsQueue.Arn".into(),
        format!("arn:aws:sqs:{REGION}:{OWN_ACCOUNT}:autoproxy-Route53EventsQueue"),
    );
    for (condition, holds) in [
        ("HasTemplateKey", true),
        ("HasAccountRoles", false),
        ("HasProxyVpcs", false),
        ("HasBreakGlassRole", false),
        ("HasAlarmTopic", false),
        ("HasMemberAccounts", false),
        ("ListsMemberAccounts", false),
        ("ListsWholeOrganization", false),
        ("ListsUnits", false),
    ] {
        stack.conditions.insert(condition.into(), holds);
    }
    stack
}

/// The statements template.yaml gives a function's role as `stack` deploys them: its inline
/// `Policies`, plus the standalone policies attached to that role.
pub(crate) fn statements_in(
    template: &serde_yaml::Value,
    function: &str,
    stack: &Stack,
) -> Vec<Value> {
    let mut statements = Vec::new();
    let policies = &template["Resources"][function]["Properties"]["Policies"];
    for policy in policies.as_sequence().into_iter().flatten() {
        let resolved = stack.resolve(policy).unwrap();
        statements.extend(
            resolved["Statement"]
                .as_array()
                .cloned()
                .unwrap_or_default(),
        );
    }
    let role = format!("{function}Role");
    for (_, resource) in template["Resources"].as_mapping().unwrap() {
        let attached = format!("{:?}", resource["Properties"]["Roles"]);
        if resource["Type"].as_str() == Some("AWS::IAM::Policy") && attached.contains(&role) {
            let document = stack
                .resolve(&resource["Properties"]["PolicyDocument"])
                .unwrap();
            let document: Value = match document {
                Value::String(text) => serde_json::from_str(&text).unwrap(),
                other => other,
            };
            statements.extend(
                document["Statement"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default(),
            );
        }
    }
    statements
}
