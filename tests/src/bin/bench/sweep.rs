//! The full sweep and the CloudTrail event, run by `bench_sweep` through per-account
//! recording proxies, and the rows they give; then the resulting config's rows.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write as _};
use std::process::Stdio;
use std::time::{Duration, Instant};

use autoproxy::rules::merge_claims;
use autoproxy::s3::ConfigStore;
use autoproxy::settings::manifest_key;
use autoproxy_tests::bench::{self, Shape, time_check, time_render};
use autoproxy_tests::moto::{Moto, OWN_ACCOUNT};
use autoproxy_tests::recording_proxy::{RecordingProxy, peak_in_window};
use serde_json::Value;

use super::{Args, BUCKET, CONFIG_KEY, MOTO_SAMPLES, Row, Seeded, moto_page_ms, sweep_command};

/// What `bench_sweep` printed for the sweep and the event, and the calls the proxies saw.
pub(super) struct Swept {
    pub(super) sweep: Value,
    pub(super) event: Value,
    /// Each account's Route53 calls during the sweep, when they reached its proxy.
    pub(super) sweep_wire: BTreeMap<String, Vec<Instant>>,
    /// The calls of the event run, all accounts.
    pub(super) event_wire: usize,
}

/// A full sweep at `rate` calls/s per account, then an event naming one known zone with
/// rules (in a member account when there is one); the config and its manifest at `key`;
/// with `rules`, `ROUTING_RULES` set to them.
pub(super) fn run(
    moto: &Moto,
    seeded: &Seeded,
    shape: &Shape,
    rate: f64,
    unit: Option<&str>,
    key: &str,
    rules: Option<&str>,
) -> Swept {
    let upstream = format!("127.0.0.1:{}", moto.port).parse().unwrap();
    let proxies: BTreeMap<String, RecordingProxy> = seeded
        .keys()
        .map(|account| (account.clone(), RecordingProxy::start(upstream)))
        .collect();
    let endpoints: Vec<String> = proxies
        .iter()
        .map(|(account, proxy)| format!("{account}={}", proxy.endpoint()))
        .collect();
    // The event names a known zone with rules, in a member account when there is one.
    let event_zone = seeded
        .iter()
        .flat_map(|(account, zones)| zones.iter().map(move |zone| (account, zone)))
        .filter(|(_, zone)| shape.has_rules(&zone.name))
        .min_by_key(|(account, _)| *account == OWN_ACCOUNT)
        .map(|(account, zone)| {
            autoproxy::manifest::zone_key(&autoproxy::model::ZoneKey {
                account: account.to_string(),
                id: zone.id.clone(),
            })
        })
        .expect("a zone with rules");

    let mut command = sweep_command(moto, seeded, &endpoints, rate, unit);
    if let Some(rules) = rules {
        command.env("ROUTING_RULES", rules);
    }
    let mut child = command
        .env("CONFIG_KEY", key)
        .env("BENCH_EVENT_ZONE", &event_zone)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap_or_else(|err| panic!("bench_sweep: {err} (cargo build --bins first)"));
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    // The generator also prints its CloudWatch EMF metrics line to stdout: skip those.
    let mut next_line = || -> Value {
        loop {
            let line = lines
                .next()
                .expect("bench_sweep ended early")
                .expect("read bench_sweep");
            let value: Value = serde_json::from_str(&line).unwrap_or_default();
            if value.get("phase").is_some() {
                println!("bench_sweep: {line}");
                return value;
            }
        }
    };
    println!("full sweep at {rate} calls/s per account …");
    let sweep = next_line();
    let sweep_wire: BTreeMap<String, Vec<Instant>> =
        proxies.iter().map(|(a, p)| (a.clone(), p.take())).collect();
    writeln!(child.stdin.as_mut().unwrap()).unwrap();
    let event = next_line();
    let event_wire: usize = proxies.values().map(|p| p.take().len()).sum();
    assert!(child.wait().unwrap().success(), "bench_sweep failed");

    Swept {
        sweep,
        event,
        sweep_wire,
        event_wire,
    }
}

/// The sweep's and the event's rows.
pub(super) async fn rows(
    rows: &mut Vec<Row>,
    args: &Args,
    swept: &Swept,
    sdk: &aws_config::SdkConfig,
    seeded: &Seeded,
    seeding: Duration,
    unit: Option<&str>,
) {
    let shape = args.shape;
    let Swept {
        sweep,
        event,
        sweep_wire,
        ..
    } = swept;
    // The sweep, as the harness saw it on the wire.
    let minimum: u64 = seeded
        .values()
        .map(|zones| bench::minimum_calls(zones))
        .sum();
    let wire_calls: usize = sweep_wire.values().map(Vec::len).sum();
    let client_calls: u64 = sweep["run"]["calls"]
        .as_object()
        .unwrap()
        .values()
        .map(|v| v.as_u64().unwrap())
        .sum();
    let largest = sweep_wire.values().map(Vec::len).max().unwrap_or(0);
    let peak = sweep_wire
        .values()
        .map(|times| peak_in_window(times, Duration::from_secs(1)))
        .max()
        .unwrap_or(0);
    let sweep_s = sweep["run"]["wall_ms"].as_f64().unwrap() / 1000.0;
    // moto serves every account from one Python thread: the sweep cannot be faster than the
    // time moto needs for its calls one after another, whatever the limiter allows.
    let page_ms = moto_page_ms(sdk, &seeded[OWN_ACCOUNT]).await;
    let moto_floor_s = page_ms * wire_calls as f64 / 1000.0;
    let rules = sweep["run"]["rules"].as_u64().unwrap();
    rows.push(estate_row(&shape, rules, seeding));
    rows.push(Row(
        "Full sweep: Route53 calls (counted at the proxies)".into(),
        format!("{wire_calls} (client counted {client_calls}; largest account {largest})"),
        format!("minimum {minimum} = pages of zones + pages of records"),
    ));
    if let Some(unit) = unit {
        rows.push(Row(
            format!("Full sweep: Organizations calls (members listed from {unit})"),
            format!(
                "{} (the event run: {})",
                sweep["run"]["organizations_calls"], event["run"]["organizations_calls"]
            ),
            "listing pages only".into(),
        ));
    }
    rows.push(Row(
        "Full sweep: wall time (S3 reads/writes and render included)".into(),
        format!("{sweep_s:.1} s"),
        format!(
            "≈ largest account ÷ rate = {:.1} s (all calls ÷ rate would be {:.1} s); moto \
             alone needs ≈ {moto_floor_s:.0} s for these calls, one at a time",
            largest as f64 / args.rate,
            wire_calls as f64 / args.rate
        ),
    ));
    rows.push(Row(
        "moto's service time for one page of records (sequential, no limiter)".into(),
        format!("{page_ms:.1} ms (mean of {MOTO_SAMPLES})"),
        String::new(),
    ));
    rows.push(Row(
        "Peak Route53 calls per account in any 1-s window".into(),
        peak.to_string(),
        format!("≤ {}", args.rate),
    ));
    event_rows(rows, swept, shape.zones);
}

/// What was seeded, and the routes the sweep found in it.
fn estate_row(shape: &Shape, rules: u64, seeding: Duration) -> Row {
    Row(
        format!(
            "Estate: {} zones × {} records, {} accounts, 1 in {} zones with both rules",
            shape.zones, shape.records, shape.accounts, shape.rules_every
        ),
        format!(
            "{} record sets; {rules} routes found (expected {}); seeded in {:.0} s",
            shape.zones * shape.records,
            shape.expected_routes(),
            seeding.as_secs_f64()
        ),
        String::new(),
    )
}

/// The event run's row, and the generator's peak memory over the sweep of `zones` zones.
fn event_rows(rows: &mut Vec<Row>, swept: &Swept, zones: usize) {
    let Swept {
        sweep,
        event,
        event_wire,
        ..
    } = swept;
    let event_s = event["run"]["wall_ms"].as_f64().unwrap() / 1000.0;
    rows.push(Row(
        "CloudTrail event (one known zone): Route53 calls, wall time".into(),
        format!(
            "{event_wire} calls, {:.2} s (zones scanned: {})",
            event_s, event["run"]["zones_scanned"]
        ),
        "≤ 3 calls".into(),
    ));
    let rss = sweep["peak_rss_bytes"].as_u64().unwrap_or(0);
    rows.push(Row(
        format!(
            "Generator peak RSS (VmHWM of bench_sweep) after the sweep of {} zones",
            zones
        ),
        format!("{:.1} MB", rss as f64 / 1e6),
        String::new(),
    ));
}

/// The resulting config, rendered again from the manifest for timing and checked as stored,
/// and a synthetic one of `big_routes` routes.
pub(super) async fn config_rows(
    rows: &mut Vec<Row>,
    sdk: &aws_config::SdkConfig,
    big_routes: usize,
) {
    // The resulting config: rendered again from the manifest for timing, checked as stored.
    let store = ConfigStore::new(
        aws_sdk_s3::Client::new(sdk),
        BUCKET,
        CONFIG_KEY,
        &manifest_key(CONFIG_KEY),
    );
    let stored = store
        .current_config()
        .await
        .expect("read config")
        .expect("a published config");
    let manifest = store
        .manifest(&autoproxy::rules::DEFAULT_RULES)
        .await
        .expect("read manifest")
        .expect("a manifest");
    // Every zone's routes, as a sweep of distinct zone names gives them (no ownership
    // refusals: each name has one holder here).
    let candidates = manifest
        .zones
        .values()
        .flat_map(|entry| entry.routes.iter().cloned())
        .collect();
    let (routes, _) = merge_claims(candidates);
    let (render_ms, _) = time_render(&routes);
    let (check_ms, valid) = time_check(&stored.text);
    rows.push(Row(
        format!("Render the resulting config ({} routes)", routes.len()),
        format!("{render_ms:.1} ms"),
        String::new(),
    ));
    rows.push(Row(
        format!(
            "`haproxy -c` the resulting config ({} KB)",
            stored.text.len() / 1024
        ),
        format!(
            "{check_ms:.0} ms, {}",
            if valid { "valid" } else { "INVALID" }
        ),
        String::new(),
    ));
    let big = bench::synthetic_routes(big_routes / 2);
    let (big_ms, big_text) = time_render(&big);
    let (big_check_ms, big_valid) = time_check(&big_text);
    rows.push(Row(
        format!("Render {} routes", big.len()),
        format!("{big_ms:.1} ms"),
        "< 100 ms".into(),
    ));
    rows.push(Row(
        format!(
            "`haproxy -c` {} routes ({} KB)",
            big.len(),
            big_text.len() / 1024
        ),
        format!(
            "{big_check_ms:.0} ms, {}",
            if big_valid { "valid" } else { "INVALID" }
        ),
        String::new(),
    ));
}
