//! The forwarders as deployed: their target, their role, and the central bus policy that lets
//! the members' events in, resolved from the templates.

use super::*;
use autoproxy_generate::trigger::ROUTE53_EVENTS;

/// The forwarding rule and its role in a deployed template; `None` when it deploys none.
fn forwarder(template: &Value, stack: &Stack) -> Option<(Json, Json)> {
    let rule = resource(template, stack, "Route53ChangeForwarder");
    let role = resource(template, stack, "EventForwarderRole");
    assert_eq!(rule.is_some(), role.is_some(), "a rule without its role");
    rule.zip(role)
}

/// The forwarder targets `bus` through its role, and the role may put events there and
/// nowhere else, trusted only by EventBridge on behalf of `account`.
fn assert_forwards_to(template: &Value, stack: &Stack, account: &str, bus: &str) {
    let (rule, role) = forwarder(template, stack).expect("a forwarder");
    let role_arn = stack.attributes[FORWARDER_ROLE].clone();
    assert_eq!(rule["State"], "ENABLED");
    // A bus in another region or account takes RoleArn.
    assert_eq!(
        rule["Targets"],
        json!([{"Id": "central-default-bus", "Arn": bus, "RoleArn": role_arn}])
    );
    let statements: Vec<&Json> = role["Policies"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| p["PolicyDocument"]["Statement"].as_array().unwrap())
        .collect();
    assert_eq!(
        statements,
        [&json!({"Effect": "Allow", "Action": "events:PutEvents", "Resource": bus})]
    );
    assert_eq!(
        role["AssumeRolePolicyDocument"]["Statement"],
        json!([{
            "Effect": "Allow",
            "Principal": {"Service": "events.amazonaws.com"},
            "Action": "sts:AssumeRole",
            "Condition": {"StringEquals": {"aws:SourceAccount": account}}
        }])
    );
}

#[test]
fn forwarders_put_on_the_stack_region_s_bus_only() {
    let (member, stack) = member_stack(MEMBER, STACK_REGION);
    assert_forwards_to(&member, &stack, MEMBER, &central_bus(STACK_REGION));
    let (forwarding, stack) = central_forwarding_stack(STACK_REGION);
    assert_forwards_to(&forwarding, &stack, CENTRAL, &central_bus(STACK_REGION));
}

#[test]
fn member_stacks_deployed_before_keep_their_target() {
    // CentralRegion left at its default: the central bus in the member stack's own region, as
    // the template targeted before the parameter existed.
    let (member, stack) = member_stack(MEMBER, "");
    assert_forwards_to(&member, &stack, MEMBER, &central_bus(EVENTS_REGION));
    assert_eq!(
        member["Parameters"]["CentralRegion"]["Default"].as_str(),
        Some("")
    );
}

#[test]
fn no_rule_puts_events_back_on_the_bus_they_came_from() {
    // The member template in the central account (a unit the StackSet reaches may hold it):
    // a forwarder only when the central stack runs in another region.
    for (central_region, forwards) in [("", false), (EVENTS_REGION, false), (STACK_REGION, true)] {
        let (member, stack) = member_stack(CENTRAL, central_region);
        assert_eq!(
            forwarder(&member, &stack).is_some(),
            forwards,
            "member template in the central account, CentralRegion {central_region:?}"
        );
    }
    // The central account's template refuses its own region.
    for (central_region, accepted) in [(EVENTS_REGION, false), (STACK_REGION, true)] {
        let (forwarding, stack) = central_forwarding_stack(central_region);
        let assertions = forwarding["Rules"]["ForwardsToAnotherRegion"]["Assertions"]
            .as_sequence()
            .expect("central-forwarding.yaml asserts its region");
        let holds = assertions
            .iter()
            .all(|a| stack.holds(&forwarding, &a["Assert"]).unwrap());
        assert_eq!(holds, accepted, "CentralRegion {central_region:?}");
    }
}

#[test]
fn forwarders_take_exactly_what_the_generator_takes() {
    let generator = generator_pattern();
    let (member, stack) = member_stack(MEMBER, STACK_REGION);
    let member_rule = forwarder(&member, &stack).unwrap().0;
    let (forwarding, stack) = central_forwarding_stack(STACK_REGION);
    let central_rule = forwarder(&forwarding, &stack).unwrap().0;
    // Nothing the generator would take is dropped on the way, and nothing it refuses is sent.
    assert_eq!(member_rule["EventPattern"], generator);
    assert_eq!(central_rule["EventPattern"], generator);
    // The generator's calls, no more: the code's list.
    assert_eq!(generator["detail"]["eventName"], json!(ROUTE53_EVENTS));
    // Forwarded events keep their account and region: a pattern that named either would
    // refuse them.
    let mut keys: Vec<&String> = generator.as_object().unwrap().keys().collect();
    keys.sort();
    assert_eq!(keys, ["detail", "detail-type", "source"]);
}

#[test]
fn the_bus_policy_admits_the_members_forwarded_events() {
    let central = template("template.yaml");
    let mut stack = Stack::new(&central, CENTRAL, STACK_REGION, "stack");
    stack
        .refs
        .insert("MemberAccountIds".to_owned(), json!([MEMBER]));
    stack.decide_conditions(&central).unwrap();
    let policy = resource(&central, &stack, "MemberAccountEvents").expect("a bus policy");
    let statement = &policy["Statement"];
    assert_eq!(policy["EventBusName"], "default");
    assert_eq!(statement["Effect"], "Allow");
    assert_eq!(statement["Principal"], json!({"AWS": [MEMBER]}));
    assert_eq!(statement["Action"], "events:PutEvents");
    // The bus the member's forwarder targets.
    let (member, member_stack) = member_stack(MEMBER, STACK_REGION);
    let target = forwarder(&member, &member_stack).unwrap().0["Targets"][0]["Arn"].clone();
    assert_eq!(statement["Resource"], target);
    // Its conditions admit every sample as forwarded (source and detail-type unchanged).
    let condition = &statement["Condition"];
    for name in SAMPLES {
        let event = sample(name);
        let sources = condition["ForAllValues:StringEquals"]["events:source"]
            .as_array()
            .unwrap();
        assert!(sources.contains(&event["source"]), "{name}: {condition}");
        assert_eq!(
            condition["StringEquals"]["events:detail-type"], event["detail-type"],
            "{name}"
        );
    }
    // Without members, no policy: the central account's own forwarded events need none.
    let mut alone = Stack::new(&central, CENTRAL, STACK_REGION, "stack");
    alone.decide_conditions(&central).unwrap();
    assert!(resource(&central, &alone, "MemberAccountEvents").is_none());
}
