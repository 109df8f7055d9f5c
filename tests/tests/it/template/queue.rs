//! The Route53 events reach the generator through a queue: the rule's target is the queue, the
//! mapping hands over small batches at once and keeps failed records one by one, the queue is
//! encrypted and gives up on a message into the queue the failed-invocations alarm watches, and
//! only the rule may send to it.

use serde_json::{Value as Json, json};

use super::stack::stack;
use super::template;

#[test]
fn route53_events_reach_the_generator_through_its_queue() {
    let template = template();
    let mut stack = stack(&template);
    let failed_arn = "arn:aws:sqs:us-east-1:123456789012:autoproxy-FailedInvocationsQueue";
    let rule_arn = "arn:aws:events:us-east-1:123456789012:rule/autoproxy-Route53ChangeRule";
    let queue_url = "https://sqs.us-east-1.amazonaws.com/123456789012/autoproxy-Route53EventsQueue";
    for (name, value) in [
        ("FailedInvocationsQueue.Arn", failed_arn),
        (
            "FailedInvocationsQueue.QueueName",
            "autoproxy-FailedInvocationsQueue",
        ),
        ("Route53ChangeRule.Arn", rule_arn),
    ] {
        stack.attributes.insert(name.into(), value.into());
    }
    stack
        .refs
        .insert("Route53EventsQueue".into(), json!(queue_url));
    let resolve = |path: &[&str]| -> Json {
        let mut value = &template["Resources"];
        for key in path {
            value = &value[*key];
        }
        assert!(!value.is_null(), "template.yaml has no {}", path.join("."));
        stack.resolve(value).unwrap()
    };
    let queue_arn = json!(stack.attributes["Route53EventsQueue.Arn"]);

    // The rule targets the queue alone, not the function.
    let targets = resolve(&["Route53ChangeRule", "Properties", "Targets"]);
    let targets = targets.as_array().unwrap();
    assert_eq!(targets.len(), 1, "{targets:?}");
    assert_eq!(targets[0]["Arn"], queue_arn);
    let events = &template["Resources"]["GenerateFunction"]["Properties"]["Events"];
    let kinds: Vec<&str> = events
        .as_mapping()
        .unwrap()
        .values()
        .filter_map(|event| event["Type"].as_str())
        .collect();
    assert_eq!(
        kinds,
        ["SQS", "Schedule"],
        "the schedule stays; no direct rule"
    );

    // The mapping: ten at once, no window, records failed one by one, two pollers; one run at
    // a time.
    let mapping = resolve(&[
        "GenerateFunction",
        "Properties",
        "Events",
        "Route53Events",
        "Properties",
    ]);
    assert_eq!(mapping["Queue"], queue_arn);
    assert_eq!(mapping["BatchSize"], json!(10));
    assert_eq!(mapping["MaximumBatchingWindowInSeconds"], json!(0));
    assert_eq!(
        mapping["FunctionResponseTypes"],
        json!(["ReportBatchItemFailures"])
    );
    assert_eq!(mapping["ScalingConfig"], json!({"MaximumConcurrency": 2}));
    let function = &template["Resources"]["GenerateFunction"]["Properties"];
    assert_eq!(function["ReservedConcurrentExecutions"].as_u64(), Some(1));
    let url = stack.resolve(&function["Environment"]["Variables"]["EVENT_QUEUE_URL"]);
    assert_eq!(url.unwrap(), json!(queue_url));

    // The queue: encrypted; hidden long enough for a throttled batch's retries (six times
    // the function's timeout, AWS's advice); a message failing five deliveries goes where the
    // alarm looks.
    let queue = resolve(&["Route53EventsQueue", "Properties"]);
    assert_eq!(queue["SqsManagedSseEnabled"], json!(true));
    let timeout = function["Timeout"].as_u64().unwrap();
    assert_eq!(timeout, 900);
    assert!(
        queue["VisibilityTimeout"].as_u64().unwrap() >= 6 * timeout,
        "{queue}"
    );
    let failed = json!(failed_arn);
    assert_eq!(queue["RedrivePolicy"]["deadLetterTargetArn"], failed);
    assert_eq!(queue["RedrivePolicy"]["maxReceiveCount"], json!(5));
    assert_eq!(targets[0]["DeadLetterConfig"]["Arn"], failed);
    let alarm = resolve(&["FailedInvocationsAlarm", "Properties", "Dimensions"]);
    assert_eq!(alarm[0]["Value"], json!("autoproxy-FailedInvocationsQueue"));

    // The run drains that queue and no other.
    let statements = super::stack::statements_in(&template, "GenerateFunction", &stack);
    let drain = statements
        .iter()
        .find(|s| s["Sid"] == "DrainRoute53Events")
        .expect("a DrainRoute53Events statement");
    assert_eq!(
        super::grants::grant(drain),
        (
            [
                "sqs:ChangeMessageVisibility",
                "sqs:DeleteMessage",
                "sqs:GetQueueAttributes",
                "sqs:ReceiveMessage",
            ]
            .map(str::to_owned)
            .to_vec(),
            vec![queue_arn.as_str().unwrap().to_owned()]
        )
    );

    // Only the rule sends.
    let policy = resolve(&["Route53EventsQueuePolicy", "Properties", "PolicyDocument"]);
    let sends = &policy["Statement"][0];
    assert_eq!(
        sends["Principal"],
        json!({"Service": "events.amazonaws.com"})
    );
    assert_eq!(sends["Action"], json!("sqs:SendMessage"));
    assert_eq!(
        sends["Condition"]["ArnEquals"]["aws:SourceArn"],
        json!(rule_arn)
    );
}
