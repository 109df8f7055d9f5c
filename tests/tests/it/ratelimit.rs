//! The per-account Route53 rate limit, asserted on the wire: every account's Route53 client
//! talks to its own recording proxy in front of moto, and the proxy's timestamps (not the
//! limiter's own bookkeeping) must never show more than `ROUTE53_REQUESTS_PER_SECOND`
//! requests of one account in any one-second window, while the accounts run in parallel.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use autoproxy::settings::GenerateSettings;
use autoproxy_generate::handler::Deps;
use autoproxy_tests::bench::{self, Shape};
use autoproxy_tests::estate::{self, role_arn};
use autoproxy_tests::generator::run_at;
use autoproxy_tests::moto::{Moto, OWN_ACCOUNT};
use autoproxy_tests::recording_proxy::{RecordingProxy, peak_in_window};

const RATE: usize = 5;
const BUCKET: &str = "ratelimit-config";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_sweep_keeps_every_account_under_its_rate_on_the_wire() {
    tokio::time::timeout(Duration::from_secs(90), sweep_three_accounts())
        .await
        .expect("the sweep finished within 90 s");
}

async fn sweep_three_accounts() {
    let moto = Moto::start();
    let sdk = moto.sdk_config().await;
    // 15 zones per account: 1 page of zones + 15 pages of records = 16 calls, > 3 s at 5/s.
    let shape = Shape {
        zones: 45,
        records: 20,
        accounts: 3,
        rules_every: 3,
    };
    let seeded = bench::seed(&sdk, &shape, estate::DEFAULT_PARALLELISM)
        .await
        .unwrap();
    estate::versioned_bucket(&sdk, BUCKET).await.unwrap();
    let upstream = format!("127.0.0.1:{}", moto.port).parse().unwrap();
    let proxies: BTreeMap<String, RecordingProxy> = seeded
        .keys()
        .map(|account| (account.clone(), RecordingProxy::start(upstream)))
        .collect();
    let endpoints = proxies
        .iter()
        .map(|(account, proxy)| (account.clone(), proxy.endpoint()))
        .collect();
    let roles = seeded
        .keys()
        .filter(|a| *a != OWN_ACCOUNT)
        .map(|a| role_arn(a))
        .collect::<Vec<_>>()
        .join(",");
    let settings = GenerateSettings::from_lookup(|name| match name {
        "CONFIG_BUCKET" => Some(BUCKET.to_owned()),
        "PEERING_PROXY_HOSTNAME" => Some(bench::PROXY.to_owned()),
        "ACCOUNT_ROLE_ARNS" => Some(roles.clone()),
        "ROUTE53_REQUESTS_PER_SECOND" => Some(RATE.to_string()),
        "MEMBER_REGIONS" => Some(autoproxy_tests::moto::REGION.to_owned()),
        _ => None,
    })
    .unwrap();
    let accounts = bench::proxied_accounts(
        &sdk,
        OWN_ACCOUNT,
        &settings.account_roles,
        &endpoints,
        settings.route53_requests_per_second,
    )
    .await;
    let deps = Deps::with_accounts(settings, &sdk, accounts).unwrap();
    let schedule = serde_json::from_str(include_str!("../../../events/schedule.json")).unwrap();

    let started = Instant::now();
    let summary = run_at(&deps, &schedule, "2026-01-01T00:00:00Z", None)
        .await
        .unwrap();
    let wall = started.elapsed();

    assert_eq!(summary.rules, shape.expected_routes(), "{summary:#?}");
    let mut largest = 0;
    let mut spans = Vec::new();
    for (account, proxy) in &proxies {
        let times = proxy.take();
        let minimum = bench::minimum_calls(&seeded[account]) as usize;
        assert_eq!(
            times.len(),
            minimum,
            "account {account}: one ListHostedZones page and one record page per zone"
        );
        let peak = peak_in_window(&times, Duration::from_secs(1));
        let gaps: Vec<u128> = times
            .windows(2)
            .map(|w| w[1].duration_since(w[0]).as_millis())
            .collect();
        assert!(
            peak <= RATE,
            "account {account}: {peak} requests in one second on the wire (limit {RATE}); \
             gaps in ms: {gaps:?}"
        );
        largest = largest.max(times.len());
        spans.push((account, times[0], times[times.len() - 1]));
    }
    // Paced: at least the largest account's calls at the rate.
    let floor = Duration::from_secs_f64((largest - 1) as f64 / RATE as f64);
    assert!(
        wall >= floor,
        "sweep took {wall:?}; one account's pace is {floor:?}"
    );
    // In parallel: every account's calls began before any account's ended. (On the wire, not
    // by the clock: how long the sweep takes beyond its pace is the machine's, a benchmark's
    // figure, not a test's.)
    let last_start = spans.iter().map(|(_, first, _)| *first).max();
    let first_end = spans.iter().map(|(_, _, last)| *last).min();
    assert!(
        last_start < first_end,
        "the accounts were read one after another: {:?}",
        spans
            .iter()
            .map(|(account, first, last)| format!(
                "{account}: {:?} to {:?} after the start",
                first.duration_since(started),
                last.duration_since(started)
            ))
            .collect::<Vec<_>>()
    );
}
