//! The Route53 events reach the generator through a queue: the rule's target is the queue, the
//! mapping hands over small batches at once and keeps failed records one by one, the queue is
//! encrypted and gives up on a message into a dead-letter queue of its own, which an alarm watches, and
//! only the rule may send to it.

use autoproxy_generate::handler::FUNCTION_TIMEOUT;
use autoproxy_tests::cfn::Stack;
use serde_json::{Value as Json, json};

use super::stack::stack;
use super::template;

const DEAD_ARN: &str = "arn:aws:sqs:us-east-1:123456789012:autoproxy-Route53EventsDeadLetterQueue";
const DEAD_NAME: &str = "autoproxy-Route53EventsDeadLetterQueue";
const RULE_ARN: &str = "arn:aws:events:us-east-1:123456789012:rule/autoproxy-Route53ChangeRule";
const QUEUE_URL: &str =
    "https://sqs.us-east-1.amazonaws.com/123456789012/autoproxy-Route53EventsQueue";

/// The template, and a stack that knows the queues' and the rule's names.
fn deployed() -> (serde_yaml::Value, Stack) {
    let template = template();
    let mut stack = stack(&template);
    for (name, value) in [
        ("Route53EventsDeadLetterQueue.Arn", DEAD_ARN),
        ("Route53EventsDeadLetterQueue.QueueName", DEAD_NAME),
        ("Route53ChangeRule.Arn", RULE_ARN),
    ] {
        stack.attributes.insert(name.into(), value.into());
    }
    stack
        .refs
        .insert("Route53EventsQueue".into(), json!(QUEUE_URL));
    stack.refs.insert(
        "GenerateFunction".into(),
        json!("autoproxy-GenerateFunction"),
    );
    (template, stack)
}

/// A resource's value at `path` below `Resources`, resolved as the stack deploys it.
fn resolved(template: &serde_yaml::Value, stack: &Stack, path: &[&str]) -> Json {
    let mut value = &template["Resources"];
    for key in path {
        value = &value[*key];
    }
    assert!(!value.is_null(), "template.yaml has no {}", path.join("."));
    stack.resolve(value).unwrap()
}

fn queue_arn(stack: &Stack) -> Json {
    json!(stack.attributes["Route53EventsQueue.Arn"])
}

/// The rule targets the queue alone; the mapping delivers ten at once, with no window,
/// records failed one by one, two pollers; one run at a time.
#[test]
fn route53_events_reach_the_generator_through_its_queue() {
    let (template, stack) = deployed();
    let targets = resolved(
        &template,
        &stack,
        &["Route53ChangeRule", "Properties", "Targets"],
    );
    let targets = targets.as_array().unwrap();
    assert_eq!(targets.len(), 1, "{targets:?}");
    assert_eq!(targets[0]["Arn"], queue_arn(&stack));
    assert_eq!(targets[0]["DeadLetterConfig"]["Arn"], json!(DEAD_ARN));
    let function = &template["Resources"]["GenerateFunction"]["Properties"];
    let kinds: Vec<&str> = function["Events"]
        .as_mapping()
        .unwrap()
        .values()
        .filter_map(|event| event["Type"].as_str())
        .collect();
    assert_eq!(kinds, ["Schedule"], "the schedule stays; no direct rule");
    let mapping = resolved(
        &template,
        &stack,
        &["GenerateFromRoute53Events", "Properties"],
    );
    assert_eq!(mapping["FunctionName"], json!("autoproxy-GenerateFunction"));
    assert_eq!(mapping["EventSourceArn"], queue_arn(&stack));
    assert_eq!(mapping["BatchSize"], json!(10));
    assert_eq!(mapping["MaximumBatchingWindowInSeconds"], json!(0));
    assert_eq!(
        mapping["FunctionResponseTypes"],
        json!(["ReportBatchItemFailures"])
    );
    assert_eq!(mapping["ScalingConfig"], json!({"MaximumConcurrency": 2}));
    assert_eq!(function["ReservedConcurrentExecutions"].as_u64(), Some(1));
    let url = stack.resolve(&function["Environment"]["Variables"]["EVENT_QUEUE_URL"]);
    assert_eq!(url.unwrap(), json!(QUEUE_URL));
}

/// The queue: encrypted; hidden long enough for a throttled batch's retries (six times the
/// function's timeout, AWS's advice); a message failing five deliveries goes where the alarm
/// looks.
#[test]
fn the_event_queue_is_encrypted_and_gives_up_where_the_alarm_looks() {
    let (template, stack) = deployed();
    let queue = resolved(&template, &stack, &["Route53EventsQueue", "Properties"]);
    assert_eq!(queue["SqsManagedSseEnabled"], json!(true));
    // The timeout the generator holds taken messages for when it has no deadline.
    let timeout = template["Resources"]["GenerateFunction"]["Properties"]["Timeout"].as_u64();
    assert_eq!(timeout, Some(FUNCTION_TIMEOUT.as_secs()));
    let hidden = queue["VisibilityTimeout"].as_u64().unwrap();
    assert!(hidden >= 6 * FUNCTION_TIMEOUT.as_secs(), "{queue}");
    assert_eq!(
        queue["RedrivePolicy"]["deadLetterTargetArn"],
        json!(DEAD_ARN)
    );
    assert_eq!(queue["RedrivePolicy"]["maxReceiveCount"], json!(5));
    let dimensions = resolved(
        &template,
        &stack,
        &["Route53EventsDeadLetterAlarm", "Properties", "Metrics"],
    );
    let watched = &dimensions[0]["MetricStat"]["Metric"]["Dimensions"][0]["Value"];
    assert_eq!(watched, &json!(DEAD_NAME));
}

/// The generator (its mapping and its runs) reads that queue and no other: no SAM SQS event,
/// whose managed policy would reach every queue; only the rule sends to it.
#[test]
fn only_the_rule_sends_and_only_the_generator_drains() {
    let (template, stack) = deployed();
    let statements = super::stack::statements_in(&template, "GenerateFunction", &stack);
    let role = &template["Resources"]["GenerateFunction"]["Properties"];
    assert!(
        role["ManagedPolicyArns"].is_null(),
        "{:?}",
        role["ManagedPolicyArns"]
    );
    let drain = statements
        .iter()
        .find(|s| s["Sid"] == "DrainRoute53Events")
        .expect("a DrainRoute53Events statement");
    let actions = [
        "sqs:DeleteMessage",
        "sqs:GetQueueAttributes",
        "sqs:ReceiveMessage",
    ];
    let queue = queue_arn(&stack).as_str().unwrap().to_owned();
    assert_eq!(
        super::grants::grant(drain),
        (actions.map(str::to_owned).to_vec(), vec![queue])
    );
    let path = ["Route53EventsQueuePolicy", "Properties", "PolicyDocument"];
    let sends = &resolved(&template, &stack, &path)["Statement"][0];
    assert_eq!(
        sends["Principal"],
        json!({"Service": "events.amazonaws.com"})
    );
    assert_eq!(sends["Action"], json!("sqs:SendMessage"));
    assert_eq!(
        sends["Condition"]["ArnEquals"]["aws:SourceArn"],
        json!(RULE_ARN)
    );
}
