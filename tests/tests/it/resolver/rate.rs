//! Many names under the rate caps: every address arrives at the fill's cap, and the queries
//! never come faster than the cap that applies: the fill's while names are new to the map,
//! the steady one after.

use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use autoproxy_tests::dns;
use autoproxy_tests::resolver::Knobs;

use super::fixture::{Fixture, expected, host, sni, unused_address};

#[test]
fn two_thousand_names_fill_at_the_fill_cap_then_hold_the_steady_one() {
    const NAMES: usize = 2_000;
    // The names' demand after the fill (2,000 every 5 s: 400/s) is above the steady cap.
    let knobs = Knobs {
        refresh_seconds: 5.0,
        max_qps: 200,
        fill_qps: 800,
        query_timeout: 1.0,
        ..Knobs::default()
    };
    let f = Fixture::start(NAMES, &["b0", "b1", "b2"]);
    // The first three routes lead to the backends, every other one to an address of its own.
    let mut table: Vec<(String, Ipv4Addr)> =
        (0..NAMES).map(|i| (host(i), unused_address(i))).collect();
    for (i, backend) in ["b0", "b1", "b2"].into_iter().enumerate() {
        table[i].1 = f.backend_ip(backend);
    }
    for (name, ip) in &table {
        f.dns.set(name, &[*ip]);
    }
    let want = expected(&table);

    let started = Instant::now();
    let resolver = f.resolver(knobs);
    assert!(
        f.wait_until(Duration::from_secs(30), |f| f.running_map() == want),
        "HAProxy's map lacks names after 30 s ({} of {NAMES} present); resolver output:\n{}",
        f.running_map().len(),
        resolver.output()
    );
    // Every name had its turn by now: the fill is over.
    let filled = Instant::now();
    println!("filled in {:.1} s", (filled - started).as_secs_f64());
    assert_eq!(f.file_map(), want, "the map file holds every address");
    for (i, backend) in ["b0", "b1", "b2"].into_iter().enumerate() {
        assert_eq!(
            f.haproxy.probe(&sni(i)).expect("routed"),
            f.backends.get(backend).banner()
        );
    }

    // Two more refresh periods of the steady cycle.
    std::thread::sleep(Duration::from_secs_f64(2.0 * knobs.refresh_seconds));
    let queries = f.dns.queries();
    let per_second = dns::per_second(&queries, started, Instant::now());
    println!("queries per second: {per_second:?}");
    // Counted over every whole second (sliding), on the kernel's receive stamps: on loopback
    // those are the resolver's send times, with no jitter from the counting server's thread.
    // The resolver caps any 1,025 ms of its own clock at MAX_QPS; a sender even one query a
    // second over the cap fails this.
    let busiest = dns::max_per_second(&queries);
    println!(
        "busiest second: {busiest} queries (fill cap {})",
        knobs.fill_qps
    );
    assert!(
        busiest <= knobs.fill_qps as usize,
        "{busiest} queries within one second, above the fill cap of {}: {per_second:?}",
        knobs.fill_qps
    );
    // The fill went at its own cap, not at the steady one (2.5 s, not 10 s, for 2,000 names).
    assert!(
        busiest > 600,
        "the busiest second of the fill had {busiest} queries (fill cap {}): {per_second:?}",
        knobs.fill_qps
    );
    let after = queries.partition_point(|q| q.at < filled);
    let steady = dns::max_per_second(&queries[after..]);
    println!(
        "busiest second after the fill: {steady} queries (cap {})",
        knobs.max_qps
    );
    assert!(
        steady <= knobs.max_qps as usize,
        "{steady} queries within one second after the fill, above the steady cap of {}: {per_second:?}",
        knobs.max_qps
    );
    assert!(queries.iter().all(|q| q.qtype == dns::A), "only A queries");
    assert!(
        resolver.output().contains("cycle: names=2000"),
        "a cycle summary:\n{}",
        resolver.output()
    );
}
