//! No zone blocks or takes another member's name, against moto with the real generator: in the
//! default mode an empty zone under a domain AWS owns blocks no EKS route, and a zone its owner
//! deletes and recreates keeps its name against another account's zone of the same name.

use autoproxy_tests::estate::{ZoneSpec, api_pair};
use serde_json::json;

use super::super::generate::{
    AT, Estate, LATER, MEMBER_A, MEMBER_B, PROXY, api_sni, assert_warning, run, snis,
};
use super::tenants::{eks_records, eks_rule};

/// Runs after [`LATER`], well within the default grace (24 hours).
const THEN: &str = "2026-11-23T03:30:00Z";
const AFTER_THEN: &str = "2026-11-23T03:40:00Z";

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

#[tokio::test(flavor = "multi_thread")]
async fn a_zone_its_owner_recreates_keeps_its_name_against_another_accounts() {
    const SHARED: &str = "shared.example.internal";
    let estate = Estate::start().await;
    // B's other zone keeps its account's routes from falling to zero while it recreates.
    let keeper = "keeper.example.internal";
    estate
        .b
        .seed_zone(ZoneSpec::private(keeper, api_pair(keeper, PROXY)))
        .await
        .unwrap();
    let held = estate
        .b
        .seed_zone(ZoneSpec::private(SHARED, api_pair(SHARED, PROXY)))
        .await
        .unwrap();
    let deps = estate.deps(&[("MAX_RULE_DROP_PERCENT", "100")]).await;
    run(&deps, &json!({}), AT).await;
    // A's zone of the same name, made beforehand: refused while B's zone holds the name.
    let other = estate
        .a
        .seed_zone(ZoneSpec::private(SHARED, api_pair(SHARED, PROXY)))
        .await
        .unwrap();
    run(&deps, &json!({}), LATER).await;

    // B deletes its zone to recreate it: in the gap, A's zone does not take the name.
    estate.b.delete_zone(&held.id).await.unwrap();
    let summary = run(&deps, &json!({}), THEN).await;
    let config = estate.artifact().await.text;
    assert!(!config.contains(&other.id), "{summary:#?}");
    assert_eq!(snis(&config), [api_sni(keeper)], "{summary:#?}");
    assert_warning(
        &summary,
        &[&other.id, MEMBER_A, MEMBER_B, "OWNERSHIP_GRACE_HOURS"],
    );

    // The new zone (a new id) holds the name; A's is still refused.
    let recreated = estate
        .b
        .seed_zone(ZoneSpec::private(SHARED, api_pair(SHARED, PROXY)))
        .await
        .unwrap();
    assert_ne!(recreated.id, held.id);
    let summary = run(&deps, &json!({}), AFTER_THEN).await;
    let config = estate.artifact().await.text;
    assert_eq!(
        route(&config, &api_sni(SHARED)).map(|line| line.ends_with(&recreated.id)),
        Some(true),
        "{summary:#?}"
    );
    assert!(!config.contains(&other.id), "{config}");
}
