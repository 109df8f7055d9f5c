//! The three patterns in moto's EventBridge, against the samples in `events/`: a member's event
//! and the central account's own, both made in us-east-1, reach the generator's rule in the
//! stack's region through the templates' forwarders; a local event reaches it directly;
//! nothing else reaches any of them.

use std::collections::BTreeMap;

use super::*;
use autoproxy_tests::eventbridge::{Place, Plan, Put, Rule, deliver};
use autoproxy_tests::moto::Moto;

/// The generator's rule (template.yaml) in the stack's region, targeting `queue`.
fn generator_rule(queue: &Place) -> Rule {
    Rule {
        account: CENTRAL.to_owned(),
        region: STACK_REGION.to_owned(),
        name: "autoproxy-Route53Change".to_owned(),
        pattern: generator_pattern(),
        targets: vec![json!({"Id": "generate", "Arn": queue.queue_arn()})],
    }
}

/// A template's forwarder as deployed in `account`'s us-east-1: its pattern and targets,
/// plus `tap` (a queue that shows what the rule matched).
fn forwarder_rule(template: &Value, stack: &Stack, account: &str, tap: &Place) -> Rule {
    let rule = resource(template, stack, "Route53ChangeForwarder").expect("a forwarder");
    let mut targets = rule["Targets"].as_array().unwrap().clone();
    targets.push(json!({"Id": "tap", "Arn": tap.queue_arn()}));
    Rule {
        account: account.to_owned(),
        region: EVENTS_REGION.to_owned(),
        name: "autoproxy-member-Route53ChangeForwarder".to_owned(),
        pattern: rule["EventPattern"].clone(),
        targets,
    }
}

/// `event`, made recognisable: its CloudTrail `eventID` becomes `id`.
fn tagged(mut event: Json, id: &str) -> Json {
    event["detail"]["eventID"] = json!(id);
    event
}

/// Events that must reach no rule, each by what sets it apart.
fn refused() -> Vec<(&'static str, Json)> {
    let change = sample("change-resource-record-sets.json");
    let mut failed = change.clone();
    failed["detail"]["errorCode"] = json!("InvalidChangeBatch");
    failed["detail"]["errorMessage"] =
        json!("RRSet with DNS name api.prod.example.internal. is not permitted");
    let mut read = change.clone();
    read["detail"]["eventName"] = json!("ListResourceRecordSets");
    let mut other_source = change.clone();
    other_source["source"] = json!("aws.ec2");
    let mut other_type = change;
    other_type["detail-type"] = json!("AWS Service Event via CloudTrail");
    vec![
        ("failed-call", failed),
        ("read-only-call", read),
        ("other-source", other_source),
        ("other-detail-type", other_type),
        ("schedule", sample("schedule.json")),
    ]
}

/// The CloudTrail `eventID`s of the events a queue received, with the events by id.
fn by_id(received: &BTreeMap<String, Vec<Json>>, queue: &Place) -> BTreeMap<String, Json> {
    received
        .get(&queue.name)
        .unwrap_or_else(|| panic!("no answer for queue {}", queue.name))
        .iter()
        .map(|event| {
            let id = event["detail"]["eventID"].as_str().unwrap_or("(none)");
            (id.to_owned(), event.clone())
        })
        .collect()
}

#[test]
fn samples_reach_the_generator_from_every_account_and_nothing_else() {
    let moto = Moto::start();
    let generate = Place::new(CENTRAL, STACK_REGION, "generate");
    let member_tap = Place::new(MEMBER, EVENTS_REGION, "member-tap");
    let central_tap = Place::new(CENTRAL, EVENTS_REGION, "central-tap");
    let (member, member_deployed) = member_stack(MEMBER, STACK_REGION);
    let (forwarding, forwarding_deployed) = central_forwarding_stack(STACK_REGION);
    let mut plan = Plan {
        queues: vec![generate.clone(), member_tap.clone(), central_tap.clone()],
        rules: vec![
            generator_rule(&generate),
            forwarder_rule(&member, &member_deployed, MEMBER, &member_tap),
            forwarder_rule(&forwarding, &forwarding_deployed, CENTRAL, &central_tap),
        ],
        events: Vec::new(),
    };
    // Each sample made in the member's us-east-1, in the central account's us-east-1, and
    // put on the stack region's bus itself (as a stack in us-east-1 hears its own).
    let origins = [
        ("member", MEMBER, EVENTS_REGION),
        ("central", CENTRAL, EVENTS_REGION),
        ("local", CENTRAL, STACK_REGION),
    ];
    let mut sent = BTreeMap::new();
    for (origin, account, region) in origins {
        for name in SAMPLES {
            let id = format!("{origin}:{name}");
            let event = tagged(sample(name), &id);
            plan.events.push(Put::event(account, region, &event));
            sent.insert(id, event);
        }
        for (why, event) in refused() {
            let event = tagged(event, &format!("{origin}:refused:{why}"));
            plan.events.push(Put::event(account, region, &event));
        }
    }
    let received = deliver(&moto, &plan).unwrap();

    let ids = |origins: &[&str]| -> Vec<String> {
        sent.keys()
            .filter(|id| origins.iter().any(|o| id.starts_with(&format!("{o}:"))))
            .cloned()
            .collect()
    };
    // Every sample from every origin reaches the generator, once; no refused event does.
    let at_generator = by_id(&received, &generate);
    assert_eq!(
        at_generator.keys().cloned().collect::<Vec<_>>(),
        ids(&["central", "local", "member"]),
        "{at_generator:#?}"
    );
    assert_eq!(
        received[&generate.name].len(),
        at_generator.len(),
        "delivered twice"
    );
    // Unchanged on the way: source, detail-type and the whole CloudTrail record. (moto stamps
    // a forwarded event with the receiving bus's account and region, and drops `resources`;
    // EventBridge keeps them: see generator.rs for the event as delivered.)
    for (id, event) in &at_generator {
        let put = &sent[id];
        assert_eq!(event["source"], put["source"], "{id}");
        assert_eq!(event["detail-type"], put["detail-type"], "{id}");
        assert_eq!(event["detail"], put["detail"], "{id}");
    }
    // Each forwarder matched its own account's samples and nothing else.
    assert_eq!(
        by_id(&received, &member_tap)
            .into_keys()
            .collect::<Vec<_>>(),
        ids(&["member"])
    );
    assert_eq!(
        by_id(&received, &central_tap)
            .into_keys()
            .collect::<Vec<_>>(),
        ids(&["central"])
    );
}
