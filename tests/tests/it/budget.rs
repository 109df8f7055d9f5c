//! The sweep under a time budget (a Lambda runs at most 15 minutes): an estate too large for
//! one invocation still converges, and an account with zones never read keeps the routes last
//! published for it (none on a new install) until they are read.

use std::time::Duration;

use autoproxy::settings::GenerateSettings;
use autoproxy_generate::handler::Deps;
use autoproxy_tests::check::assert_valid;
use autoproxy_tests::estate::{Account, ZoneSpec, api_pair, versioned_bucket};
use autoproxy_tests::generator::run_at;
use autoproxy_tests::moto::{Moto, OWN_ACCOUNT};
use serde_json::json;
use tokio::time::Instant;

const PROXY: &str = "peering-proxy.tools.example.com";
const BUCKET: &str = "autoproxy-budget";
const ZONES: usize = 24;
/// The runs' time stamps, the later for the runs after the first.
const AT: &str = "2026-11-23T03:14:02Z";
const LATER: &str = "2026-11-23T03:20:00Z";

async fn deps(moto: &Moto) -> Deps {
    let sdk = moto.sdk_config().await;
    versioned_bucket(&sdk, BUCKET).await.unwrap();
    let zones = (0..ZONES)
        .map(|i| {
            let name = format!("c{i:02}.budget.internal");
            ZoneSpec::private(name.clone(), api_pair(&name, PROXY))
        })
        .collect();
    Account::own(&sdk).seed(zones, 8).await.unwrap();
    // 20 calls a second: one zone costs one call, so a 0.5 s budget reads about ten.
    let vars = [
        ("CONFIG_BUCKET", BUCKET),
        ("PEERING_PROXY_HOSTNAME", PROXY),
        ("ROUTE53_REQUESTS_PER_SECOND", "20"),
    ];
    let settings = GenerateSettings::from_lookup(|n| {
        vars.iter()
            .find(|(k, _)| *k == n)
            .map(|(_, v)| (*v).to_owned())
    })
    .unwrap();
    Deps::new(settings, &sdk, OWN_ACCOUNT).await.unwrap()
}

fn budget(ms: u64) -> Option<Instant> {
    Some(Instant::now() + Duration::from_millis(ms))
}

/// The manifest the last run stored (a test that reads it expects one).
async fn stored_manifest(deps: &Deps) -> autoproxy::manifest::Manifest {
    deps.store
        .manifest(&deps.settings.routing_rules)
        .await
        .unwrap()
        .expect("a stored manifest")
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unfinished_first_sweep_publishes_none_of_that_account_and_the_next_runs_finish_it() {
    let moto = Moto::start();
    let deps = deps(&moto).await;
    // The schedule's event as EventBridge delivers it (events/schedule.json).
    let schedule: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(autoproxy_tests::root().join("events/schedule.json")).unwrap(),
    )
    .unwrap();

    let first = run_at(&deps, &schedule, AT, budget(500)).await.unwrap();
    assert!(
        first.zones_scanned > 0 && first.zones_scanned < ZONES,
        "{first:?}"
    );
    // The only account has zones never read: none of its routes goes out, read or not.
    assert_eq!(first.rules, 0, "{first:?}");
    assert_eq!(first.unread_zones[OWN_ACCOUNT], ZONES - first.zones_scanned);
    let manifest = stored_manifest(&deps).await;
    assert_eq!(manifest.pending.len(), ZONES - first.zones_scanned);
    assert_eq!(manifest.progress.len(), first.zones_scanned);
    assert!(
        first
            .warnings
            .iter()
            .any(|w| w.contains("sweep unfinished")),
        "{:?}",
        first.warnings
    );

    // Each run reads the pending zones first, so the sweep converges in a few runs.
    let mut runs = 1;
    let summary = loop {
        runs += 1;
        assert!(runs < 10, "the sweep did not converge");
        let summary = run_at(&deps, &schedule, LATER, budget(1500)).await.unwrap();
        if summary.unread_zones.is_empty() {
            assert!(summary.published, "{summary:?}");
            break summary;
        }
        assert_eq!(summary.rules, 0, "{summary:?}");
    };
    assert_eq!(summary.rules, ZONES);
    let manifest = stored_manifest(&deps).await;
    assert!(manifest.pending.is_empty() && manifest.progress.is_empty());
    let current = deps.store.current_config().await.unwrap().unwrap();
    assert_valid(&current.text);
    assert_eq!(current.rules(), ZONES);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unfinished_later_sweep_keeps_the_unread_zones_routes() {
    let moto = Moto::start();
    let deps = deps(&moto).await;
    let full = run_at(&deps, &json!({}), AT, None).await.unwrap();
    assert!(full.published);
    assert_eq!(full.rules, ZONES);

    let partial = run_at(&deps, &json!({}), LATER, budget(300)).await.unwrap();
    assert!(partial.zones_scanned < ZONES, "{partial:?}");
    // Nothing changed in Route53, and the unread zones kept their routes: no new config.
    assert_eq!(partial.rules, ZONES);
    assert!(!partial.changed, "{partial:?}");
    let manifest = stored_manifest(&deps).await;
    assert_eq!(manifest.pending.len(), ZONES - partial.zones_scanned);
}
