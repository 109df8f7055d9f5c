//! The budget shared between members: one member's short TTLs or failing servers never slow
//! another member's refresh.

use super::*;

/// Nine members of 900 names each (TTL 300: 18 queries a second each, 162 in all at the
/// default 200/s cap), and member B's names.
const MEMBERS: usize = 9;
const PER_MEMBER: usize = 900;
const B: &str = "999999999999";

fn account(member: usize) -> String {
    format!("{:012}", member + 1)
}

/// Every name, with its account and the TTL its answers carry (none: its servers never
/// answer); B has `names` names of TTL `b_ttl`.
fn estate(names: usize, b_ttl: Option<u32>) -> Vec<(String, String, Option<u32>)> {
    let members = (0..MEMBERS).flat_map(|m| {
        (0..PER_MEMBER).map(move |i| (format!("n{i}.m{m}.example"), account(m), Some(300)))
    });
    let b = (0..names).map(|i| (format!("n{i}.b.example"), B.to_owned(), b_ttl));
    members.chain(b).collect()
}

/// How often member A's names are asked once the schedule has settled, and how many
/// queries a second member B's names got.
#[derive(Debug, Clone, Copy)]
struct Measured {
    mean: f64,
    max: f64,
    b_qps: f64,
}

/// Runs the default engine (refresh 50 s, cap 200/s) over `estate` for `seconds` on its
/// ticks, answering every query but those of names whose servers fail; what it measured
/// after the first refresh period (member A is the first member).
fn refresh_periods(estate: &[(String, String, Option<u32>)], seconds: u64) -> Measured {
    let (mut engine, start) = engine_with(Knobs {
        fill_qps: 200,
        ..Knobs::default()
    });
    let accounts: BTreeMap<String, String> = estate
        .iter()
        .map(|(name, account, _)| (name.clone(), account.clone()))
        .collect();
    let ttls: BTreeMap<String, Option<u32>> =
        estate.iter().map(|(n, _, t)| (n.clone(), *t)).collect();
    let known: BTreeMap<String, IpAddr> = ttls
        .keys()
        .map(|n| (n.clone(), "10.0.0.1".parse().expect("ip")))
        .collect();
    engine.set_accounts(&accounts);
    engine.load(&known, start);
    engine.set_config_names(&ttls.keys().cloned().collect(), start);
    let settled = start + Duration::from_secs(50);
    let mut last: BTreeMap<String, Instant> = BTreeMap::new();
    let mut gaps: Vec<f64> = Vec::new();
    let mut b_queries = 0;
    let mut now = start;
    while now < start + Duration::from_secs(seconds) {
        engine.expire(now);
        while let Some(query) = engine.poll_send(now) {
            let (name, _) = question(&query);
            if let Some(ttl) = ttls.get(&name).copied().flatten() {
                let bytes = reply(&query, |m| {
                    m.add_answer(a_record(&name, ttl));
                });
                engine.on_udp(&bytes, query.server, now);
            }
            let who = accounts.get(&name).map_or("", String::as_str);
            if now >= settled && who == B {
                b_queries += 1;
            }
            if let Some(before) = last.insert(name.clone(), now)
                && before >= settled
                && who == account(0)
            {
                gaps.push((now - before).as_secs_f64());
            }
        }
        now += TICK;
    }
    assert!(!gaps.is_empty(), "A's names asked again");
    Measured {
        mean: gaps.iter().sum::<f64>() / gaps.len() as f64,
        max: gaps.iter().copied().fold(0.0, f64::max),
        b_qps: f64::from(b_queries) / (seconds - 50) as f64,
    }
}

/// Member A's names (TTL 300) are asked every REFRESH (50 s) whether member B has no names,
/// 200 of TTL 0, 2,000 of TTL 0 (more than the budget even at the floor's pace), or 2,000
/// whose servers never answer (three tries a turn): B's short TTLs and failures cost B's
/// refresh, never A's. Prints the periods measured.
#[test]
fn one_members_ttl_0_names_never_slow_another_members_refresh() {
    let mut late = Vec::new();
    for (names, ttl) in [
        (0, Some(0)),
        (200, Some(0)),
        (2_000, Some(0)),
        (2_000, None),
    ] {
        let a = refresh_periods(&estate(names, ttl), 150);
        let kind = ttl.map_or_else(|| "unanswered".to_owned(), |t| format!("TTL-{t}"));
        eprintln!(
            "B with {names} {kind} names: A's names asked every {:.1} s (at most {:.1} s); \
             B's names {:.0} queries/s",
            a.mean, a.max, a.b_qps
        );
        if a.max > 50.0 + TICK.as_secs_f64() {
            late.push(format!(
                "with {names} {kind} names of B, A's names asked every {:.1} s, at most {:.1} s apart",
                a.mean, a.max
            ));
        }
    }
    assert!(late.is_empty(), "A's refresh slowed by B: {late:?}");
}
