//! Names no zone blocks or takes: a zone under a domain AWS owns, and a name its holder's
//! account recreates its zone for.

use super::*;

#[test]
fn aws_domains_are_matched_label_wise() {
    let cases = [
        ("amazonaws.com", Some("amazonaws.com")),
        ("eks.amazonaws.com", Some("amazonaws.com")),
        ("abc.gr7.us-east-1.eks.amazonaws.com", Some("amazonaws.com")),
        ("eks.cn-north-1.amazonaws.com.cn", Some("amazonaws.com.cn")),
        ("abc.lambda-url.us-east-1.on.aws", Some("aws")),
        ("eks.us-east-1.api.aws", Some("aws")),
        ("d111111abcdef8.cloudfront.net", Some("cloudfront.net")),
        ("xamazonaws.com", None),
        ("amazonaws.com.example.internal", None),
        ("aws.example.internal", None),
        ("corp.internal", None),
    ];
    for (name, expected) in cases {
        let name = HostName::parse(name).unwrap();
        assert_eq!(aws_domain(&name), expected, "{name:?}");
    }
}

/// Zone ids routed and the zones refused, in first-holder mode with no memory.
fn first_run(entries: Vec<ZoneEntry>) -> (Vec<String>, Vec<(ZoneKey, String)>) {
    let owned = owned_routes(&zones(entries), &Holders::default(), Mode::FirstHolder);
    let routed = owned.candidates.iter().map(|r| r.zone_id.clone()).collect();
    let refused = owned
        .refusals
        .iter()
        .map(|r| (r.zone().clone(), r.to_string()))
        .collect();
    (routed, refused)
}

#[test]
fn without_proxy_vpcs_a_zone_under_an_aws_domain_blocks_and_routes_nothing() {
    let cluster = || eks_entry(B, "ZB", "b.internal.", ENDPOINT);
    // C's empty zone over every EKS endpoint's name: B routes, C's zone is named as refused.
    let (routed, refused) = first_run(vec![cluster(), entry(C, "ZE", "eks.amazonaws.com.", false)]);
    assert_eq!(routed, ["ZB"]);
    let [(zone, text)] = &refused[..] else {
        panic!("{refused:?}")
    };
    assert_eq!(zone, &zk(C, "ZE"));
    assert!(
        text.contains("eks.amazonaws.com") && text.contains("AWS owns"),
        "{text}"
    );
    // The zone opted in itself: refused, and still blocks nothing.
    let (routed, refused) = first_run(vec![cluster(), entry(C, "ZE", "eks.amazonaws.com.", true)]);
    assert_eq!(routed, ["ZB"]);
    assert_eq!(refused.len(), 1, "{refused:?}");
    // An idle one (no route's SNI inside it, no opt-in) is left alone, without a warning.
    let idle = entry(C, "ZS", "ssm.us-east-1.amazonaws.com.", false);
    assert_eq!(
        first_run(vec![cluster(), idle]),
        (vec!["ZB".to_owned()], vec![])
    );
    // A zone of another name keeps blocking as before: only AWS's names are set aside.
    let (routed, _) = first_run(vec![
        eks_entry(B, "ZB", "b.internal.", "api.team.internal"),
        entry(C, "ZT", "team.internal.", false),
    ]);
    assert!(routed.is_empty(), "{routed:?}");
}

#[test]
fn with_proxy_vpcs_an_associated_aws_zone_still_shadows() {
    let associated = BTreeSet::from([zk(B, "ZB"), zk(C, "ZE")]);
    let state = zones(vec![
        eks_entry(B, "ZB", "b.internal.", ENDPOINT),
        entry(C, "ZE", "eks.amazonaws.com.", false),
    ]);
    let owned = owned_routes(&state, &Holders::default(), Mode::Vpc(&associated));
    assert!(owned.candidates.is_empty());
    assert!(matches!(
        owned.refusals[..],
        [Refusal::InAnotherZone { .. }]
    ));
}

#[test]
fn a_name_is_held_by_its_account_through_the_grace() {
    let name = "shared.internal";
    let remembered = held(BTreeMap::from([(name.to_owned(), zk(B, "ZB"))]));
    let other = || entry(A, "ZA", "shared.internal.", true);
    let recreated = || entry(B, "ZB2", "shared.internal.", true);
    // B deleted its zone: A's, made beforehand, does not take the name in the gap.
    let gap = owned_routes(&zones(vec![other()]), &remembered, Mode::FirstHolder);
    assert!(routed(&gap).is_empty());
    assert_eq!(gap.holders.zones[name], zk(B, "ZB"));
    assert_eq!(gap.holders.zones_absent[name], NOW);
    let [refusal @ Refusal::HeldInGrace { .. }] = &gap.refusals[..] else {
        panic!("{:?}", gap.refusals)
    };
    let text = refusal.to_string();
    for word in [
        "ZA in account 111111111111",
        "ZB in account 222222222222",
        "OWNERSHIP_GRACE_HOURS",
    ] {
        assert!(text.contains(word), "{word:?} in {text}");
    }
    // B recreates it (a new id): the new zone holds the name, A's is refused.
    let back = owned_routes(
        &zones(vec![other(), recreated()]),
        &gap.holders,
        Mode::FirstHolder,
    );
    assert_eq!(routed(&back), [B]);
    assert_eq!(back.holders.zones[name], zk(B, "ZB2"));
    assert!(back.holders.zones_absent.is_empty());
    assert!(matches!(back.refusals[..], [Refusal::HeldByAnother { .. }]));
    // Deleted and recreated between two runs: the same.
    let between = owned_routes(
        &zones(vec![other(), recreated()]),
        &remembered,
        Mode::FirstHolder,
    );
    assert_eq!(routed(&between), [B]);
    // No zone of the name at all in the gap: the account keeps it all the same.
    let empty = owned_routes(&BTreeMap::new(), &remembered, Mode::FirstHolder);
    assert_eq!(empty.holders.zones[name], zk(B, "ZB"));
    assert_eq!(empty.holders.zones_absent[name], NOW);
    // The grace runs from the first run that saw it gone; past it, a sole survivor takes it.
    let end = Grace {
        now: NOW + GRACE.seconds,
        ..GRACE
    };
    let after =
        crate::ownership::owned_routes(&zones(vec![other()]), &gap.holders, Mode::FirstHolder, end);
    assert_eq!(routed(&after), [A]);
    assert_eq!(after.holders.zones[name], zk(A, "ZA"));
    assert!(after.holders.zones_absent.is_empty());
    let forgotten =
        crate::ownership::owned_routes(&BTreeMap::new(), &empty.holders, Mode::FirstHolder, end);
    assert_eq!(forgotten.holders, Holders::default());
    // No grace (OWNERSHIP_GRACE_HOURS=0): at once.
    let none = Grace {
        now: NOW,
        seconds: 0,
    };
    let at_once =
        crate::ownership::owned_routes(&zones(vec![other()]), &remembered, Mode::FirstHolder, none);
    assert_eq!(routed(&at_once), [A]);
}
