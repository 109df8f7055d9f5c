//! No member can take what another holds, or loop the proxy, against moto with the real
//! generator: a rules change with a contested EKS name, a holder's record absent for one run,
//! a parent zone claiming a child zone's name, two rules giving one SNI, a back that points at
//! the proxy, two proxy VPCs holding one name, and a weighted set at a back name.

use autoproxy_tests::estate::{Record, ZoneSpec, api_pair};
use autoproxy_tests::moto::OWN_ACCOUNT;
use serde_json::json;

use super::super::generate::{
    AT, Estate, LATER, MEMBER_A, PROXY, api_sni, assert_warning, run, snis,
};

/// An EKS endpoint's name, as the back record's CNAME gives it.
const ENDPOINT: &str = "abc123def456.gr7.us-east-1.eks.amazonaws.com";
/// A run after [`LATER`], well within the default grace.
const THEN: &str = "2026-11-23T03:30:00Z";

pub(super) fn eks_rule(port: u16) -> String {
    format!(
        r#"[{{"id": "eks", "front": "proxy.eks", "back": "eks", "back_types": ["CNAME"], "sni": "back-target", "port": {port}}}]"#
    )
}

/// The EKS rule and the built-in api rule.
fn with_api(port: u16) -> String {
    format!(
        r#"[{{"id": "api", "front": "proxy.api", "back": "api", "back_types": ["A"], "sni": "front"}}, {}]"#,
        eks_rule(port).trim_matches(['[', ']'])
    )
}

/// `eks.<zone>` CNAME → `target`, `proxy.eks.<zone>` CNAME → the proxy.
pub(super) fn eks_records(zone: &str, target: &str) -> Vec<Record> {
    vec![
        Record::cname(format!("eks.{zone}"), target),
        Record::cname(format!("proxy.eks.{zone}"), PROXY),
    ]
}

/// The config's route line for the endpoint, if any: `host:port rule account zone`.
fn endpoint_route(config: &str) -> Option<String> {
    config
        .lines()
        .find_map(|line| line.strip_prefix(&format!("#@route {ENDPOINT} ")))
        .map(str::to_owned)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rules_change_keeps_the_holder_of_a_contested_eks_name() {
    let estate = Estate::start().await;
    let holder = "prod.example.internal";
    let seeded = estate
        .own
        .seed_zone(ZoneSpec::private(holder, eks_records(holder, ENDPOINT)))
        .await
        .unwrap();
    let deps = estate.deps(&[("ROUTING_RULES", &eks_rule(443))]).await;
    run(&deps, &json!({}), AT).await;
    // A lower account claims the same endpoint: refused, the holder keeps it.
    let claimant = "other.example.internal";
    estate
        .a
        .seed_zone(ZoneSpec::private(claimant, eks_records(claimant, ENDPOINT)))
        .await
        .unwrap();
    run(&deps, &json!({}), LATER).await;

    // The operator changes the rule's port: the holder still holds the name.
    let deps = estate.deps(&[("ROUTING_RULES", &eks_rule(8443))]).await;
    let summary = run(&deps, &json!({}), THEN).await;
    let route = endpoint_route(&estate.artifact().await.text);
    assert_eq!(
        route.as_deref(),
        Some(format!("eks.{holder}:8443 eks {OWN_ACCOUNT} {}", seeded.id).as_str()),
        "{summary:#?}"
    );
    assert_warning(&summary, &[ENDPOINT, "held by zone", MEMBER_A]);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_holder_whose_record_is_absent_for_one_run_keeps_its_name() {
    let estate = Estate::start().await;
    let holder = "prod.example.internal";
    let records = eks_records(holder, ENDPOINT);
    // The api pair too: an account that loses every route is held by its own guard.
    let mut zone_records = records.clone();
    zone_records.extend(api_pair(holder, PROXY));
    let seeded = estate
        .own
        .seed_zone(ZoneSpec::private(holder, zone_records))
        .await
        .unwrap();
    let claimant = "other.example.internal";
    let deps = estate.deps(&[("ROUTING_RULES", &with_api(443))]).await;
    run(&deps, &json!({}), AT).await;
    let other = estate
        .a
        .seed_zone(ZoneSpec::private(claimant, eks_records(claimant, ENDPOINT)))
        .await
        .unwrap();

    // The cluster is being recreated: the holder's record is gone for one run.
    estate
        .own
        .delete_records(&seeded.id, &records[..1])
        .await
        .unwrap();
    let summary = run(&deps, &json!({}), LATER).await;
    assert_eq!(endpoint_route(&estate.artifact().await.text), None);
    assert_warning(
        &summary,
        &[
            &format!("SNI {ENDPOINT}"),
            &format!("held by zone {}", seeded.id),
            &format!("{} in account {MEMBER_A}", other.id),
            "OWNERSHIP_GRACE_HOURS",
        ],
    );

    // It is back: the holder routes again, the claimant still does not.
    estate.own.upsert(&seeded.id, &records[..1]).await.unwrap();
    run(&deps, &json!({}), THEN).await;
    let route = endpoint_route(&estate.artifact().await.text).unwrap_or_default();
    assert!(route.contains(&seeded.id), "{route}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_parent_zone_cannot_route_a_name_inside_a_child_zone_of_another_account() {
    let estate = Estate::start().await;
    let parent = "corp.example.internal";
    let child = format!("team.{parent}");
    // The parent points its EKS back at a name that lies in the child zone.
    let inside = format!("api.{child}");
    estate
        .own
        .seed_zone(ZoneSpec::private(parent, eks_records(parent, &inside)))
        .await
        .unwrap();
    estate
        .a
        .seed_zone(ZoneSpec::private(
            &child,
            vec![Record::a(&inside, "10.0.0.9")],
        ))
        .await
        .unwrap();
    let summary = run(
        &estate.deps(&[("ROUTING_RULES", &eks_rule(443))]).await,
        &json!({}),
        AT,
    )
    .await;
    assert_eq!(summary.rules, 0, "{summary:#?}");
    assert_warning(
        &summary,
        &[&format!("SNI {inside}"), &format!("lies in zone {child}")],
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn two_rules_giving_one_sni_route_neither_and_the_rest_routes() {
    let estate = Estate::start().await;
    let zone = "two.example.internal";
    let mut records = api_pair(zone, PROXY);
    records.push(Record::cname(format!("p1.{zone}"), PROXY));
    records.push(Record::cname(format!("p2.{zone}"), PROXY));
    records.push(Record::a(format!("svc.{zone}"), "10.0.0.7"));
    estate
        .own
        .seed_zone(ZoneSpec::private(zone, records))
        .await
        .unwrap();
    let rules = r#"[
        {"id": "api", "front": "proxy.api", "back": "api", "back_types": ["A"], "sni": "front"},
        {"id": "svc-a", "front": "p1", "back": "svc", "back_types": ["A"], "sni": "back", "port": 8443},
        {"id": "svc-b", "front": "p2", "back": "svc", "back_types": ["A"], "sni": "back", "port": 9443}
    ]"#;
    let summary = run(
        &estate.deps(&[("ROUTING_RULES", rules)]).await,
        &json!({}),
        AT,
    )
    .await;
    assert_eq!(snis(&estate.artifact().await.text), [api_sni(zone)]);
    assert_warning(&summary, &["rules svc-a and svc-b", &format!("svc.{zone}")]);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_back_that_points_at_the_proxy_is_refused_and_the_rest_routes() {
    let estate = Estate::start().await;
    let zone = "loop.example.internal";
    let mut records = api_pair(zone, PROXY);
    // The ingress back is a CNAME to the proxy, spelled as Route53 may return it.
    records.push(Record::cname(format!("*.int.{zone}"), PROXY));
    records.push(Record::cname(
        format!("ingress-int.{zone}"),
        "Peering-Proxy.Tools.Example.COM.",
    ));
    let looped = estate
        .own
        .seed_zone(ZoneSpec::private(zone, records))
        .await
        .unwrap();
    // A back-target whose back points at the proxy, in another account.
    let eks = "eks.example.internal";
    estate
        .a
        .seed_zone(ZoneSpec::private(
            eks,
            eks_records(eks, &format!("{PROXY}.")),
        ))
        .await
        .unwrap();
    let rules = format!(
        r#"[{{"id": "api", "front": "proxy.api", "back": "api", "back_types": ["A"], "sni": "front"}},
            {{"id": "ingress-int", "front": "*.int", "back": "ingress-int", "back_types": ["A", "CNAME"], "sni": "front-suffix"}},
            {}]"#,
        eks_rule(443).trim_matches(['[', ']'])
    );
    let summary = run(
        &estate.deps(&[("ROUTING_RULES", &rules)]).await,
        &json!({}),
        AT,
    )
    .await;
    let config = estate.artifact().await.text;
    assert_eq!(snis(&config), [api_sni(zone)]);
    assert!(!config.contains(&format!(" {PROXY}:")), "{config}");
    assert_warning(
        &summary,
        &[
            &looped.id,
            &format!("back record ingress-int.{zone}"),
            PROXY,
        ],
    );
    assert_warning(
        &summary,
        &[MEMBER_A, &format!("back record eks.{eks}"), PROXY],
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_name_that_zones_of_two_proxy_vpcs_hold_routes_from_neither() {
    const VPCS: [&str; 2] = ["vpc-0aaaaaaaaaaaaaaaa", "vpc-0cccccccccccccccc"];
    let estate = Estate::start().await;
    let zone = "twice.example.internal";
    let mut ids = Vec::new();
    for vpc in VPCS {
        ids.push(estate.own_api_zone_on_vpc(zone, vpc).await);
    }
    let vpcs = VPCS.map(|vpc| format!("us-east-1:{vpc}")).join(",");
    let summary = run(&estate.deps(&[("PROXY_VPCS", &vpcs)]).await, &json!({}), AT).await;
    assert_eq!(summary.rules, 0, "{summary:#?}");
    for id in &ids {
        assert_warning(&summary, &[id, "associated with other proxy VPCs too"]);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_weighted_set_at_a_back_name_is_warned_about_naming_its_sets() {
    let estate = Estate::start().await;
    let zone = "weighted.example.internal";
    let back = format!("ingress-int.{zone}");
    let records = vec![
        Record::cname(format!("*.int.{zone}"), PROXY),
        Record::weighted_cname(&back, "blue-lb.example.com", "blue"),
        Record::weighted_cname(&back, "green-lb.example.com", "green"),
    ];
    estate
        .own
        .seed_zone(ZoneSpec::private(zone, records))
        .await
        .unwrap();
    let summary = run(&estate.deps(&[]).await, &json!({}), AT).await;
    // Routed by name: the proxy's resolver gets whichever set Route53 answers.
    assert_eq!(
        snis(&estate.artifact().await.text),
        [format!("*.int.{zone}")]
    );
    assert_warning(&summary, &[&back, "blue, green", "routing-policy set"]);
}
