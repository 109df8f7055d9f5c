//! Nesting counts only what shadows, against moto with the real generator: an empty zone that
//! another account creates inside a routed zone takes nothing, in both rule modes.

use autoproxy_tests::estate::{ZoneSpec, api_pair};
use serde_json::json;

use autoproxy_generate::handler::Summary;

use super::super::generate::{AT, Estate, LATER, PROXY, api_sni, run, snis};

const VICTIM: &str = "victim.example.internal";

/// The victim's route is the config's only one, and the run warned of nothing.
async fn victim_alone_routed(estate: &Estate, summary: &Summary) {
    let config = estate.artifact().await.text;
    assert_eq!(snis(&config), [api_sni(VICTIM)], "{summary:#?}");
    assert!(summary.warnings.is_empty(), "{:#?}", summary.warnings);
}

/// Member A's empty private zone `api.<victim zone>`, on a VPC that is not the proxies'.
async fn empty_inside(estate: &Estate) {
    estate
        .a
        .seed_zone(ZoneSpec::private(format!("api.{VICTIM}"), vec![]))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn with_proxy_vpcs_an_empty_zone_not_associated_inside_a_routed_zone_takes_nothing() {
    const PROXY_VPC: &str = "vpc-0aaaaaaaaaaaaaaaa";
    let estate = Estate::start().await;
    // The victim's zone is on the proxy VPC (the own account: moto lists only the caller's).
    estate.own_api_zone_on_vpc(VICTIM, PROXY_VPC).await;
    let vpcs = format!("us-east-1:{PROXY_VPC}");
    let deps = estate.deps(&[("PROXY_VPCS", &vpcs)]).await;
    let summary = run(&deps, &json!({}), AT).await;
    victim_alone_routed(&estate, &summary).await;

    empty_inside(&estate).await;
    let summary = run(&deps, &json!({}), LATER).await;
    victim_alone_routed(&estate, &summary).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn first_holder_an_empty_zone_inside_a_routed_zone_of_another_account_takes_nothing() {
    let estate = Estate::start().await;
    estate
        .b
        .seed_zone(ZoneSpec::private(VICTIM, api_pair(VICTIM, PROXY)))
        .await
        .unwrap();
    let deps = estate.deps(&[]).await;
    let summary = run(&deps, &json!({}), AT).await;
    victim_alone_routed(&estate, &summary).await;

    empty_inside(&estate).await;
    // The next run, and the one after (the holder is remembered by then).
    for at in [LATER, "2026-11-23T03:30:00Z"] {
        let summary = run(&deps, &json!({}), at).await;
        victim_alone_routed(&estate, &summary).await;
    }
}
