//! Where a member's back may point, for the literal addresses of A backs: into its own
//! account's networks, never another member's nor the internet (docs/ARCHITECTURE.md,
//! "Where a back may point"). The members' networks come from `MEMBER_NETWORKS` here. No
//! address is ever connected to: the generator only reads them.

use autoproxy::names::HostName;
use autoproxy_generate::explain;

use super::*;

/// A's VPC and B's, as the operator gives them.
const NETWORKS: &str = "111111111111:10.1.0.0/16,222222222222:10.2.0.0/16";

/// The API pair of `zone` with its back at `address`.
fn api_at(zone: &str, address: &str) -> Vec<Record> {
    vec![
        Record::a(format!("api.{zone}"), address),
        Record::cname(format!("proxy.api.{zone}"), PROXY),
    ]
}

#[tokio::test]
async fn a_members_literal_back_routes_only_into_its_own_network() {
    let estate = Estate::start().await;
    // A's back in its own VPC; at an address of B's VPC; at a public address.
    for (zone, address) in [
        ("own.a.internal", "10.1.0.5"),
        ("into-b.a.internal", "10.2.0.9"),
        ("out.a.internal", "52.94.76.10"),
    ] {
        estate
            .a
            .seed_zone(ZoneSpec::private(zone, api_at(zone, address)))
            .await
            .unwrap();
    }
    let deps = estate.deps(&[("MEMBER_NETWORKS", NETWORKS)]).await;
    let summary = run(&deps, &json!({"dry_run": true}), AT).await;
    let config = summary.config.as_deref().unwrap();
    assert_eq!(summary.rules, 1, "{:#?}", summary.warnings);
    assert!(config.contains("proxy.api.own.a.internal"), "{config}");
    for absent in ["proxy.api.into-b.a.internal", "proxy.api.out.a.internal"] {
        assert!(!config.contains(absent), "{absent} routed:\n{config}");
    }
    // Each refusal names the route (zone and back record), the address and whose network.
    for expected in [
        "back record api.into-b.a.internal is an A record at 10.2.0.9, inside account \
         222222222222's network 10.2.0.0/16, another member's",
        "back record api.out.a.internal is an A record at 52.94.76.10, a globally routable \
         address, the internet: public backs are not allowed (ALLOW_PUBLIC_BACKS)",
    ] {
        assert!(
            summary.warnings.iter().any(|w| w.contains(expected)),
            "no warning says {expected:?}: {:#?}",
            summary.warnings
        );
    }
    // `explain` says why, once a run has published.
    assert!(run(&deps, &json!({}), AT).await.published);
    let answer = explain::explain(
        &deps,
        &HostName::parse("proxy.api.into-b.a.internal").unwrap(),
    )
    .await
    .unwrap();
    assert!(!answer.routed, "{answer:#?}");
    assert!(
        answer.why.iter().any(|step| step.contains(
            "api.into-b.a.internal is an A record at 10.2.0.9, inside account 222222222222's \
             network 10.2.0.0/16"
        )),
        "{:#?}",
        answer.why
    );

    // The operator may let backs reach the internet; B's network stays B's.
    let allowing = estate
        .deps(&[
            ("MEMBER_NETWORKS", NETWORKS),
            ("ALLOW_PUBLIC_BACKS", "true"),
        ])
        .await;
    let summary = run(&allowing, &json!({"dry_run": true}), AT).await;
    let config = summary.config.as_deref().unwrap();
    assert_eq!(summary.rules, 2, "{:#?}", summary.warnings);
    assert!(config.contains("proxy.api.out.a.internal"), "{config}");
    assert!(!config.contains("proxy.api.into-b.a.internal"), "{config}");
}
