//! Names no zone blocks or takes: a zone under a domain AWS owns.

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
