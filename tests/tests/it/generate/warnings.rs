//! Records no rule can route cost a run neither the size of its reply and manifest nor its
//! memory: three zones of 10,000 records whose names are not host names, beside a good zone.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

use autoproxy::warnings::RUN_BYTES;

use super::*;

const ZONES: usize = 3;
const RECORDS: usize = 10_000;
/// The rest of a reply beside its warnings (counts, hashes, the diff of one route's config).
const REPLY_REST: usize = 64 * 1024;
/// The manifest of these four zones: one route, and one warning entry per bad zone.
const MANIFEST_BYTES: usize = 64 * 1024;

/// A record name of 200 octets in four labels under `zone`. `escaped` spells 176 of them as
/// Route53 escapes a '#' (`\043`): not a host name, and shown as about 1 KB; otherwise plain
/// letters, the same estate with names that pass.
fn record_name(i: usize, zone: &str, escaped: bool) -> String {
    let octets = if escaped { "\\043" } else { "x" }.repeat(44);
    let label = format!("r{i:05}{octets}");
    format!("{label}.{label}.{label}.{label}.{zone}")
}

/// Seeds the good zone (the API pair) and [`ZONES`] zones of [`RECORDS`] A records each:
/// the good zone's name and the first big zone's id.
async fn seed(estate: &Estate, escaped: bool) -> (String, String) {
    let good = "good.example.internal".to_owned();
    let mut specs = vec![ZoneSpec::private(&good, api_pair(&good, PROXY))];
    for z in 0..ZONES {
        let zone = format!("names{z}.example.internal");
        let records = (0..RECORDS)
            .map(|i| Record::a(record_name(i, &zone, escaped), "10.0.0.1"))
            .collect();
        specs.push(ZoneSpec::private(zone, records));
    }
    let seeded = estate.own.seed(specs, DEFAULT_PARALLELISM).await.unwrap();
    (good, seeded[1].id.clone())
}

/// What `bench_sweep` printed for its full sweep and for an event naming `event_zone`: the
/// generator in a process of its own, so its peak RSS (`VmHWM`) is the run's.
fn sweep_in_child(estate: &Estate, event_zone: &str) -> (Value, Value) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_bench_sweep"))
        .envs(estate._moto.env())
        .env("CONFIG_BUCKET", BUCKET)
        .env("CONFIG_KEY", KEY)
        .env("PEERING_PROXY_HOSTNAME", PROXY)
        .env("ROUTE53_REQUESTS_PER_SECOND", "1000")
        .env(
            "BENCH_ROUTE53_ENDPOINTS",
            format!("{OWN_ACCOUNT}={}", estate._moto.endpoint()),
        )
        .env("BENCH_EVENT_ZONE", format!("{OWN_ACCOUNT}/{event_zone}"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    // The generator also prints its EMF metric lines: only the phases count.
    let mut phase = || loop {
        let line = lines.next().expect("bench_sweep ended early").unwrap();
        let value: Value = serde_json::from_str(&line).unwrap_or(Value::Null);
        if value.get("phase").is_some() {
            return value;
        }
    };
    let sweep = phase();
    writeln!(child.stdin.as_mut().unwrap()).unwrap();
    let event = phase();
    assert!(child.wait().unwrap().success(), "bench_sweep failed");
    (sweep, event)
}

#[tokio::test]
async fn refused_names_keep_the_reply_the_manifest_and_memory_small() {
    let started = Instant::now();
    let escaped = Estate::start().await;
    let (good, big_zone) = seed(&escaped, true).await;
    let plain = Estate::start().await;
    let (_, plain_zone) = seed(&plain, false).await;
    println!(
        "seeded 2 x {} records in {:.0?}",
        ZONES * RECORDS,
        started.elapsed()
    );

    let (sweep, event) = sweep_in_child(&escaped, &big_zone);
    let (plain_sweep, plain_event) = sweep_in_child(&plain, &plain_zone);
    let mb = |run: &Value| run["peak_rss_bytes"].as_u64().unwrap() as f64 / 1e6;
    let (peak, plain_peak) = (mb(&sweep), mb(&plain_sweep));
    for (what, run) in [
        ("escaped names, sweep", &sweep),
        ("escaped names, event", &event),
        ("plain names, sweep", &plain_sweep),
        ("plain names, event", &plain_event),
    ] {
        let run = &run["run"];
        println!(
            "{what}: reply {} bytes ({} of warnings, {} warnings), {} ms",
            run["reply_bytes"], run["warnings_bytes"], run["warnings"], run["wall_ms"]
        );
    }
    println!(
        "peak RSS over sweep and event: escaped names {peak:.1} MB, plain names {plain_peak:.1} MB"
    );

    // The good zone's route publishes in that very run.
    assert_eq!(sweep["run"]["published"], json!(true), "{sweep}");
    assert_eq!(snis(&escaped.artifact().await.text), [api_sni(&good)]);
    // The reply stays small, in the sweep and in an event run (which reports every zone's
    // warnings from the manifest).
    for run in [&sweep["run"], &event["run"]] {
        let warnings = run["warnings_bytes"].as_u64().unwrap() as usize;
        let reply = run["reply_bytes"].as_u64().unwrap() as usize;
        assert!(warnings <= RUN_BYTES, "{run}");
        assert!(reply <= RUN_BYTES + REPLY_REST, "{run}");
    }
    let manifest = autoproxy_tests::estate::object_text(&escaped.s3, BUCKET, MANIFEST_KEY).await;
    println!("escaped names: manifest {} bytes", manifest.len());
    assert!(
        manifest.len() <= MANIFEST_BYTES,
        "the manifest is {} bytes",
        manifest.len()
    );
    assert!(
        manifest.contains(&format!(
            "{RECORDS} records in zone names0.example.internal"
        )),
        "{}",
        autoproxy::excerpt(&manifest, 4096)
    );
    // Memory grows with what routes, not with what is refused.
    assert!(
        peak <= 1.5 * plain_peak + 16.0,
        "peak RSS {peak:.1} MB with escaped names, {plain_peak:.1} MB with plain ones"
    );
}
