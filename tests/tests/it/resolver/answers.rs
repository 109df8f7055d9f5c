//! Answers as DNS gives them: truncated ones asked again over TCP, CNAME chains chased,
//! several addresses, TTLs, and dead names dropped by the rules.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use autoproxy_tests::resolver::Knobs;

use super::fixture::{
    Fixture, QUICK, asked, asked_over_tcp, expected, high_address, host, unused_address,
};

/// A long answer is never used in part: one too long even for EDNS0 is asked again over TCP
/// (all 60 records, of which the backend's is the lowest, so the map routes to it), and one
/// longer than 512 bytes but within EDNS0's 1,232 comes whole over UDP.
#[test]
fn truncated_answers_are_asked_again_over_tcp() {
    let knobs = QUICK;
    let f = Fixture::start(2, &["first", "second"]);
    let (first, second) = (f.backend_ip("first"), f.backend_ip("second"));
    let mut many: Vec<Ipv4Addr> = (1..=59).map(high_address).collect();
    many.push(first);
    f.dns.set(&host(0), &many);
    // Seven CNAMEs of long names before the A record: about 900 bytes.
    let link = |k: usize| format!("c{k}-{}.test.internal", "a".repeat(50));
    f.dns.cname(&host(1), &link(0));
    for k in 0..6 {
        f.dns.cname(&link(k), &link(k + 1));
    }
    f.dns.set(&link(6), &[second]);

    let started = Instant::now();
    let table = [(host(0), first), (host(1), second)];
    let _resolver = f.resolving(knobs, &table);
    assert_eq!(f.file_map(), expected(&table));
    f.assert_routes(0, "first");
    f.assert_routes(1, "second");
    assert!(
        asked_over_tcp(&f.dns, &host(0), started) >= 1,
        "the truncated answer was asked again over TCP"
    );
    assert_eq!(
        asked_over_tcp(&f.dns, &host(1), started),
        0,
        "EDNS0 carried the 900-byte answer over UDP"
    );
}

/// CNAME targets an answer leaves out are asked for; the lowest IPv4 of several is the map's
/// value; a name with only AAAA records gets its IPv6 address; a short TTL is asked again
/// when it runs out, a long one at the refresh period.
#[test]
fn chains_every_address_and_ttls_are_followed() {
    let knobs = Knobs {
        refresh_seconds: 6.0,
        max_qps: 50,
        query_timeout: 0.3,
        ..Knobs::default()
    };
    let f = Fixture::start(5, &["first", "second"]);
    let (first, second) = (f.backend_ip("first"), f.backend_ip("second"));
    f.dns.cname(&host(0), "target.test.internal");
    f.dns.cname_alone(&host(0), true);
    f.dns.set("target.test.internal", &[first]);
    f.dns
        .set(&host(1), &[high_address(9), high_address(3), second]);
    let v6: std::net::Ipv6Addr = "fd00::2".parse().unwrap();
    f.dns.set6(&host(2), &[v6]);
    f.dns.set(&host(3), &[unused_address(3)]);
    f.dns.set_ttl(&host(3), 1);
    f.dns.set(&host(4), &[unused_address(4)]);
    f.dns.set_ttl(&host(4), 600);

    let resolver = f.resolver(knobs);
    let want: BTreeMap<String, String> = [
        (host(0), first.to_string()),
        (host(1), second.to_string()),
        (host(2), v6.to_string()),
        (host(3), unused_address(3).to_string()),
        (host(4), unused_address(4).to_string()),
    ]
    .into_iter()
    .collect();
    f.assert_running_map(Duration::from_secs(10), &want, "addresses", &resolver);
    assert_eq!(f.file_map(), want);
    f.assert_routes(0, "first");
    f.assert_routes(1, "second");
    assert!(
        f.dns
            .queries()
            .iter()
            .any(|q| q.name == "target.test.internal"),
        "the CNAME's target was asked for"
    );

    // One and a half refresh periods: names that came due together are spread over the
    // steady spacing, so the long-TTL names' second query may come a few seconds late.
    let since = Instant::now();
    let window = 1.5 * knobs.refresh_seconds;
    std::thread::sleep(Duration::from_secs_f64(window));
    let (short, long) = (
        asked(&f.dns, &host(3), since),
        asked(&f.dns, &host(4), since),
    );
    println!("in {window} s: TTL 1 s asked {short} times, TTL 600 s {long} times");
    assert!(
        short >= 5,
        "a 1-s TTL is asked again as it runs out: {short} queries in {window} s"
    );
    assert!(
        (1..=2).contains(&long),
        "a long TTL is asked once per refresh period: {long} queries"
    );
}

/// NXDOMAIN drops an address after three answers over a refresh period; SERVFAIL and
/// silence keep it until it is older than the stale age, then drop it too.
#[test]
fn dead_addresses_are_dropped_by_the_rules() {
    let knobs = Knobs {
        refresh_seconds: 1.0,
        max_qps: 50,
        fill_qps: 50,
        query_timeout: 0.2,
        max_stale_seconds: 5.0,
    };
    let f = Fixture::start(4, &["first"]);
    let table: Vec<(String, Ipv4Addr)> = (0..4).map(|i| (host(i), unused_address(i))).collect();
    for (name, ip) in &table {
        f.dns.set(name, &[*ip]);
    }
    let resolver = f.resolving(knobs, &table);

    let failing_since = Instant::now();
    f.dns.remove(&host(0));
    f.dns.servfail(&host(1), true);
    f.dns.drop_queries(&host(2), true);
    // NXDOMAIN: gone after three negative answers a refresh period apart.
    assert!(
        f.wait_until(Duration::from_secs(8), |f| !f
            .running_map()
            .contains_key(&host(0))),
        "the NXDOMAIN name was dropped: {:?}\n{}",
        f.running_map(),
        resolver.output()
    );
    let nx_gone = failing_since.elapsed();
    // SERVFAIL and time-outs: still kept while younger than the stale age.
    let running = f.running_map();
    if failing_since.elapsed() < Duration::from_secs(4) {
        assert!(running.contains_key(&host(1)), "{running:?}");
        assert!(running.contains_key(&host(2)), "{running:?}");
    }
    assert!(
        f.wait_until(Duration::from_secs(15), |f| {
            let map = f.running_map();
            !map.contains_key(&host(1)) && !map.contains_key(&host(2))
        }),
        "stale addresses dropped: {:?}\n{}",
        f.running_map(),
        resolver.output()
    );
    let stale_gone = failing_since.elapsed();
    println!("NXDOMAIN dropped after {nx_gone:?}, stale ones after {stale_gone:?}");
    assert!(
        stale_gone >= Duration::from_secs(4),
        "not before the stale age: {stale_gone:?}"
    );
    assert_eq!(
        f.file_map(),
        expected(&table[3..]),
        "the healthy name stays, in the file too"
    );
    let output = resolver.output();
    assert!(
        output.contains(&format!("{}: NXDOMAIN; dropped", host(0))),
        "{output}"
    );
    assert!(
        output.contains(&format!("{}: rcode ServFail", host(1))),
        "{output}"
    );
}
