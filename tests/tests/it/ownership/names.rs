//! No zone blocks or takes another member's name, against moto with the real generator: in the
//! default mode an empty zone under a domain AWS owns blocks no EKS route.

use autoproxy_tests::estate::ZoneSpec;
use serde_json::json;

use super::super::generate::{AT, Estate, LATER, MEMBER_A, MEMBER_B, assert_warning, run};
use super::tenants::{eks_records, eks_rule};

/// The config's route line for `sni`, if any: `host:port rule account zone`.
fn route(config: &str, sni: &str) -> Option<String> {
    config
        .lines()
        .find_map(|line| line.strip_prefix(&format!("#@route {sni} ")))
        .map(str::to_owned)
}

#[tokio::test(flavor = "multi_thread")]
async fn with_no_proxy_vpcs_an_empty_aws_zone_blocks_no_eks_route() {
    const ENDPOINT: &str = "abc123def456.gr7.us-east-1.eks.amazonaws.com";
    const RECREATED: &str = "fed654cba321.gr7.us-east-1.eks.amazonaws.com";
    let estate = Estate::start().await;
    // Member A's empty private zone over every EKS endpoint's name, there before B's cluster.
    let blocker = estate
        .a
        .seed_zone(ZoneSpec::private("eks.amazonaws.com", vec![]))
        .await
        .unwrap();
    let zone = "prod.example.internal";
    let records = eks_records(zone, ENDPOINT);
    let seeded = estate
        .b
        .seed_zone(ZoneSpec::private(zone, records))
        .await
        .unwrap();
    let deps = estate.deps(&[("ROUTING_RULES", &eks_rule(443))]).await;
    let summary = run(&deps, &json!({}), AT).await;
    let config = estate.artifact().await.text;
    assert_eq!(
        route(&config, ENDPOINT),
        Some(format!("eks.{zone}:443 eks {MEMBER_B} {}", seeded.id)),
        "{summary:#?}"
    );
    // The zone itself is refused, and says so.
    assert_warning(
        &summary,
        &[&blocker.id, MEMBER_A, "eks.amazonaws.com", "AWS owns"],
    );

    // B recreates its cluster: a new endpoint name, which A's zone does not block either.
    estate
        .b
        .upsert(&seeded.id, &eks_records(zone, RECREATED)[..1])
        .await
        .unwrap();
    let summary = run(&deps, &json!({}), LATER).await;
    let config = estate.artifact().await.text;
    assert_eq!(
        route(&config, RECREATED),
        Some(format!("eks.{zone}:443 eks {MEMBER_B} {}", seeded.id)),
        "{summary:#?}"
    );
}
