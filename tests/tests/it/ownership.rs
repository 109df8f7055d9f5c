//! Who may route a zone name, end to end against moto: a zone name held by another account,
//! a newcomer with a name already routed, the proxy-VPC mode, `IGNORE_ZONES` in one account,
//! and the opt-out of scanning the own account. Every run goes through the generator as
//! `main` builds it and every published config passes `haproxy -c`.

use autoproxy_tests::estate::{Record, ZoneSpec, api_pair};
use serde_json::json;

mod names;
mod nesting;
mod tenants;

use super::generate::{
    AT, Estate, LATER, MEMBER_A, MEMBER_B, PROXY, api_sni, assert_warning, run, snis,
};

const SHARED: &str = "shared.example.internal";

/// B's zone without the opt-in: it holds the name, it asked for nothing.
fn held_only() -> Vec<Record> {
    vec![Record::a(format!("api.{SHARED}"), "10.0.0.9")]
}

#[tokio::test(flavor = "multi_thread")]
async fn an_opt_in_on_a_name_another_account_holds_gets_no_route() {
    let estate = Estate::start().await;
    let in_b = estate
        .b
        .seed_zone(ZoneSpec::private(SHARED, held_only()))
        .await
        .unwrap();
    let deps = estate.deps(&[]).await;
    run(&deps, &json!({}), AT).await;

    // A creates a zone of the same name and opts in: the proxy would resolve api.SHARED in
    // whichever zone the tools VPC sees, which may be B's.
    let in_a = estate
        .a
        .seed_zone(ZoneSpec::private(SHARED, api_pair(SHARED, PROXY)))
        .await
        .unwrap();
    let summary = run(&deps, &json!({}), LATER).await;
    assert!(
        !snis(&estate.artifact().await.text).contains(&api_sni(SHARED)),
        "{summary:?}"
    );
    assert_warning(
        &summary,
        &[
            &format!("{} in account {MEMBER_A}", in_a.id),
            &format!("account {MEMBER_B} held the name first"),
            &in_b.id,
        ],
    );

    // A fresh deployment (no memory of who came first) that meets both does not guess either.
    let fresh = Estate::start().await;
    fresh
        .b
        .seed_zone(ZoneSpec::private(SHARED, held_only()))
        .await
        .unwrap();
    fresh
        .a
        .seed_zone(ZoneSpec::private(SHARED, api_pair(SHARED, PROXY)))
        .await
        .unwrap();
    let summary = run(&fresh.deps(&[]).await, &json!({}), AT).await;
    assert_eq!(summary.rules, 0, "{summary:?}");
    assert_warning(&summary, &["not all of which opted in", MEMBER_A, MEMBER_B]);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_newcomer_does_not_add_to_or_move_an_existing_route() {
    let estate = Estate::start().await;
    let in_b = estate
        .b
        .seed_zone(ZoneSpec::private(SHARED, api_pair(SHARED, PROXY)))
        .await
        .unwrap();
    let deps = estate.deps(&[]).await;
    run(&deps, &json!({}), AT).await;
    let before = estate.artifact().await.text;
    assert!(
        before.contains(&format!(" {MEMBER_B} {}\n", in_b.id)),
        "{before}"
    );

    // A has the lower account id, which used to win every tie.
    let mut records = api_pair(SHARED, PROXY);
    records.push(Record::cname(format!("*.int.{SHARED}"), PROXY));
    records.push(Record::cname(
        format!("ingress-int.{SHARED}"),
        "elb.example.com",
    ));
    let in_a = estate
        .a
        .seed_zone(ZoneSpec::private(SHARED, records))
        .await
        .unwrap();
    let summary = run(&deps, &json!({}), LATER).await;
    assert!(
        !summary.changed,
        "the newcomer changed the config: {}",
        summary.diff
    );
    assert!(!estate.artifact().await.text.contains(&in_a.id));
    assert_warning(
        &summary,
        &[
            &format!("{} in account {MEMBER_A}", in_a.id),
            &format!("account {MEMBER_B} held the name first"),
        ],
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn with_proxy_vpcs_a_zone_not_associated_with_them_gets_no_route() {
    const PROXY_VPC: &str = "vpc-0aaaaaaaaaaaaaaaa";
    let estate = Estate::start().await;
    // In the own account (the VPC's owner): one zone on the proxy VPC, one on another VPC.
    let on_vpc = "onvpc.example.internal";
    let elsewhere = "elsewhere.example.internal";
    for (name, vpc) in [(on_vpc, PROXY_VPC), (elsewhere, "vpc-0bbbbbbbbbbbbbbbb")] {
        estate.own_api_zone_on_vpc(name, vpc).await;
    }
    // A member account's zone: Route53 lists it for the VPC's owner only when associated with
    // the VPC (moto lists only the caller's own zones, which is that answer for this one).
    estate
        .a
        .seed_zone(ZoneSpec::private(SHARED, api_pair(SHARED, PROXY)))
        .await
        .unwrap();

    let vpcs = format!("us-east-1:{PROXY_VPC}");
    let summary = run(&estate.deps(&[("PROXY_VPCS", &vpcs)]).await, &json!({}), AT).await;
    assert_eq!(snis(&estate.artifact().await.text), [api_sni(on_vpc)]);
    for name in [elsewhere, SHARED] {
        assert_warning(&summary, &[name, "not associated with the proxy VPC(s)"]);
    }

    // The same estate without the setting routes all three (each name has one holder).
    let summary = run(&estate.deps(&[]).await, &json!({}), LATER).await;
    assert_eq!(summary.rules, 3, "{summary:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn ignore_zones_drops_one_of_two_same_named_zones_by_account() {
    let estate = Estate::start().await;
    let in_b = estate
        .b
        .seed_zone(ZoneSpec::private(SHARED, held_only()))
        .await
        .unwrap();
    let in_a = estate
        .a
        .seed_zone(ZoneSpec::private(SHARED, api_pair(SHARED, PROXY)))
        .await
        .unwrap();
    // B's zone is the stray one: ignoring it in B alone leaves A the only holder.
    let ignore = format!("{MEMBER_B}:{SHARED}");
    let summary = run(
        &estate.deps(&[("IGNORE_ZONES", &ignore)]).await,
        &json!({}),
        AT,
    )
    .await;
    let text = estate.artifact().await.text;
    assert!(
        text.contains(&format!(" {MEMBER_A} {}\n", in_a.id)),
        "{text}"
    );
    assert!(!text.contains(&in_b.id));
    assert!(summary.warnings.is_empty(), "{:?}", summary.warnings);
}

#[tokio::test(flavor = "multi_thread")]
async fn scan_own_account_false_leaves_the_own_account_unread() {
    let own_zone = "own.example.internal";
    let (estate, _) = Estate::with_api_zone(own_zone).await;
    let member_zone = "member.example.internal";
    estate
        .a
        .seed_zone(ZoneSpec::private(member_zone, api_pair(member_zone, PROXY)))
        .await
        .unwrap();
    let deps = estate.deps(&[("SCAN_OWN_ACCOUNT", "false")]).await;
    assert!(
        deps.accounts
            .iter()
            .all(|a| a.account != autoproxy_tests::moto::OWN_ACCOUNT)
    );
    run(&deps, &json!({}), AT).await;
    assert_eq!(snis(&estate.artifact().await.text), [api_sni(member_zone)]);
}
