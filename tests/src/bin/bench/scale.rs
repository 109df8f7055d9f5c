//! The scale part: the estate the targets are set for (10,000 zones in 50 accounts), its
//! member accounts in one unit of an organization, swept four times at the rate limit, the
//! members named by role ARNs (`ACCOUNT_ROLE_ARNS`) or listed from the unit
//! (`MEMBER_ACCOUNTS`), in the order named, listed, listed, named so that a drift in moto's
//! pace over the four falls on both alike; side by side, with the generator's peak memory.

use autoproxy_tests::bench::Shape;
use autoproxy_tests::moto::OWN_ACCOUNT;

use super::sweep::{self, Swept};
use super::{Row, seeded_moto};

/// How far the sweeps listing members from Organizations may stray from those naming them.
const WITHIN_PERCENT: f64 = 5.0;

/// The order of the sweeps: `true` lists the members from the unit.
const ORDER: [bool; 4] = [false, true, true, false];

/// The rows of the scale part: Route53 calls, wall time and Organizations calls of the
/// sweeps, then the generator's peak RSS.
pub(super) async fn rows(shape: Shape, rate: f64) -> Vec<Row> {
    let (moto, _, seeded, seeding, unit) = seeded_moto(&shape, "scale estate", true).await;
    let unit = unit.expect("the scale estate's unit");
    let (mut named, mut listed) = (Vec::new(), Vec::new());
    for (i, from_unit) in ORDER.into_iter().enumerate() {
        let how = if from_unit { "listed" } else { "named" };
        println!("scale sweep {} of {} (members {how}) …", i + 1, ORDER.len());
        // Each sweep into a key of its own: no manifest yet, a full first run every time.
        let key = format!("scale-{i}-{how}/haproxy.cfg");
        let swept = sweep::run(
            &moto,
            &seeded,
            &shape,
            rate,
            from_unit.then_some(unit.as_str()),
            &key,
            None,
        );
        assert_eq!(
            swept.sweep["run"]["rules"].as_u64(),
            Some(shape.expected_routes() as u64),
            "the scale estate's sweep with members {how} found every route"
        );
        if from_unit {
            listed.push(swept);
        } else {
            named.push(swept);
        }
    }
    let members = seeded.keys().filter(|a| *a != OWN_ACCOUNT).count();
    let within = format!("within {WITHIN_PERCENT} %");
    vec![
        Row(
            format!(
                "Scale estate: {} zones × {} records in {} accounts (seeded in {:.0} s), swept \
                 {} times at {rate} calls/s per account, the {members} members listed from \
                 Organizations ({unit}) or named by role ARNs. Route53 calls (counted at the \
                 proxies)",
                shape.zones,
                shape.records,
                shape.accounts,
                seeding.as_secs_f64(),
                ORDER.len(),
            ),
            compared(&listed, &named, wire_calls, |v| format!("{v:.0}")),
            within.clone(),
        ),
        Row(
            "The scale sweeps: wall time".into(),
            compared(&listed, &named, wall_s, |v| format!("{v:.1} s")),
            within,
        ),
        Row(
            "The scale sweeps: Organizations calls".into(),
            format!(
                "listed: {} (their event runs: {}); named: {}",
                each(&listed, |s| s.sweep["run"]["organizations_calls"]
                    .to_string()),
                each(&listed, |s| s.event["run"]["organizations_calls"]
                    .to_string()),
                each(&named, |s| s.sweep["run"]["organizations_calls"]
                    .to_string()),
            ),
            "listing pages only".into(),
        ),
        Row(
            format!(
                "Generator peak RSS (VmHWM of bench_sweep) over a scale sweep ({} routes)",
                shape.expected_routes()
            ),
            format!(
                "listed: {}; named: {}",
                each(&listed, |s| format!("{:.1} MB", peak_rss_mb(s))),
                each(&named, |s| format!("{:.1} MB", peak_rss_mb(s))),
            ),
            "< 128 MB for 10,000 zones".into(),
        ),
    ]
}

/// `listed a, b vs named c, d (means: x vs y, ±z %, within)`.
fn compared(
    listed: &[Swept],
    named: &[Swept],
    figure: fn(&Swept) -> f64,
    show: impl Fn(f64) -> String,
) -> String {
    let mean =
        |sweeps: &[Swept]| sweeps.iter().map(figure).sum::<f64>() / sweeps.len().max(1) as f64;
    let (listed_mean, named_mean) = (mean(listed), mean(named));
    let change = if named_mean > 0.0 {
        (listed_mean - named_mean) / named_mean * 100.0
    } else {
        0.0
    };
    let verdict = if change.abs() <= WITHIN_PERCENT {
        "within"
    } else {
        "OUTSIDE"
    };
    format!(
        "listed {} vs named {} (means {} vs {}: {change:+.1} %, {verdict})",
        each(listed, |s| show(figure(s))),
        each(named, |s| show(figure(s))),
        show(listed_mean),
        show(named_mean),
    )
}

/// One figure of each sweep, in the order they ran.
fn each(sweeps: &[Swept], figure: impl Fn(&Swept) -> String) -> String {
    sweeps.iter().map(figure).collect::<Vec<_>>().join(", ")
}

fn wire_calls(swept: &Swept) -> f64 {
    swept.sweep_wire.values().map(Vec::len).sum::<usize>() as f64
}

fn wall_s(swept: &Swept) -> f64 {
    swept.sweep["run"]["wall_ms"].as_f64().unwrap_or(0.0) / 1000.0
}

fn peak_rss_mb(swept: &Swept) -> f64 {
    swept.sweep["peak_rss_bytes"].as_u64().unwrap_or(0) as f64 / 1e6
}
