//! An account's backlog is its own, against moto with the real generator: an account with
//! zones never read keeps its published routes, and every other account publishes in that
//! run, its event runs included.

use std::time::Duration;

use autoproxy::discovery::EVENT_ZONES_PER_ACCOUNT;
use autoproxy_tests::estate::{Account, DEFAULT_PARALLELISM, Seeded, ZoneSpec, api_pair, filler};
use autoproxy_tests::generator::run_at;
use serde_json::json;

use super::{AT, Estate, LATER, MEMBER_A, MEMBER_B, PROXY, api_sni, event, run, snis};

/// The sweep budget: the handler's deadline less its publishing reserve, as Lambda's would be.
const BUDGET: Duration = Duration::from_secs(20);
/// New zones in one account: at 5 calls a second they take longer than the budget to read.
const ZONES: usize = 150;

/// A zone of `account` with the api pair.
async fn api_zone(account: &Account, name: &str) -> Seeded {
    let spec = ZoneSpec::private(name, api_pair(name, PROXY));
    account.seed_zone(spec).await.unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn an_account_with_zones_never_read_holds_only_its_own_routes() {
    let estate = Estate::start().await;
    let published = "published.example.internal";
    api_zone(&estate.b, published).await;
    let deps = estate.deps(&[("ROUTE53_REQUESTS_PER_SECOND", "5")]).await;
    run(&deps, &json!({}), AT).await;

    // A creates many zones, one of them routed; B adds a route.
    let mut zones: Vec<ZoneSpec> = (0..ZONES)
        .map(|i| {
            let name = format!("z{i:03}.backlog.internal");
            ZoneSpec::private(&name, filler(&name, 2))
        })
        .collect();
    let routed = "z000.backlog.internal";
    zones[0] = ZoneSpec::private(routed, api_pair(routed, PROXY));
    let started = std::time::Instant::now();
    estate.a.seed(zones, DEFAULT_PARALLELISM).await.unwrap();
    println!("{ZONES} zones created in {:?}", started.elapsed());
    let added = "added.example.internal";
    api_zone(&estate.b, added).await;

    let deadline = tokio::time::Instant::now() + BUDGET;
    let summary = run_at(&deps, &json!({}), LATER, Some(deadline))
        .await
        .unwrap();
    let config = estate.artifact().await.text;
    assert_eq!(
        snis(&config),
        [api_sni(added), api_sni(published)],
        "{summary:#?}"
    );
    let reply = serde_json::to_value(&summary).unwrap();
    let unread = reply["unread_zones"][MEMBER_A].as_u64().unwrap_or(0);
    println!("after a {BUDGET:?} budget: {unread} zone(s) of {MEMBER_A} never read");
    assert!(unread > 0 && unread < ZONES as u64, "{reply:#}");
    assert!(reply["unread_zones"].get(MEMBER_B).is_none(), "{reply:#}");
    assert_eq!(reply["accounts"]["pending"], 1, "{reply:#}");
    assert!(
        summary
            .warnings
            .iter()
            .any(|w| w.contains(&format!("account {MEMBER_A}: {unread}"))),
        "{:#?}",
        summary.warnings
    );

    // An event run reads the pending zones first, at most its share of A's, and is not held
    // either: B's change publishes in it; A's routes wait until its last zone is read.
    let evented = "evented.example.internal";
    let seeded = api_zone(&estate.b, evented).await;
    let payload = event("create-hosted-zone.json", MEMBER_B, &seeded.id);
    let summary = run(&deps, &payload, "2026-11-23T03:30:00Z").await;
    let served = snis(&estate.artifact().await.text);
    for name in [added, evented, published] {
        assert!(served.contains(&api_sni(name)), "{served:?}");
    }
    assert!(
        summary.zones_scanned <= 1 + EVENT_ZONES_PER_ACCOUNT,
        "{summary:#?}"
    );
    let still_unread = summary.unread_zones.get(MEMBER_A).copied().unwrap_or(0);
    println!("after an event run: {still_unread} zone(s) of {MEMBER_A} never read");
    assert_eq!(
        still_unread as u64,
        unread.saturating_sub(EVENT_ZONES_PER_ACCOUNT as u64)
    );
    assert_eq!(served.contains(&api_sni(routed)), still_unread == 0);
}
