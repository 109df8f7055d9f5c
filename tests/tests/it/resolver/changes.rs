//! Addresses that change: followed within a refresh, kept when a lookup fails, and carried
//! across HAProxy's reloads.

use std::net::Ipv4Addr;
use std::process::Command;
use std::time::{Duration, Instant};

use autoproxy_tests::proxy::HaproxyFiles;

use super::fixture::{Fixture, QUICK, asked, expected, host, unused_address};

#[test]
fn changes_follow_and_failures_keep_the_last_address() {
    let knobs = QUICK;
    let f = Fixture::start(5, &["first", "second"]);
    let (first, second) = (f.backend_ip("first"), f.backend_ip("second"));
    // 0: an A record that moves; 1: a CNAME chain; 2: will stop answering; 3: will vanish;
    // 4: a load balancer with several addresses.
    f.dns.set(&host(0), &[first]);
    f.dns.cname(&host(1), "lb.test.internal");
    f.dns.cname("lb.test.internal", "node.lb.test.internal");
    f.dns.set("node.lb.test.internal", &[second]);
    f.dns.set(&host(2), &[unused_address(2)]);
    f.dns.set(&host(3), &[unused_address(3)]);
    f.dns
        .set(&host(4), &[unused_address(40), unused_address(41)]);
    let mut table = vec![
        (host(0), first),
        (host(1), second),
        (host(2), unused_address(2)),
        (host(3), unused_address(3)),
        (host(4), unused_address(40)),
    ];

    let mut resolver = f.resolving(knobs, &table);
    let settle = Duration::from_secs_f64(3.0 * knobs.refresh_seconds);
    f.assert_routes(0, "first");
    f.assert_routes(1, "second");

    // An address that moves is followed within a refresh; one still among the answers is
    // kept (no flapping between a load balancer's nodes).
    f.dns.set(&host(0), &[second]);
    f.dns
        .set(&host(4), &[unused_address(42), unused_address(40)]);
    table[0].1 = second;
    f.assert_running_map(settle, &expected(&table), "after the move", &resolver);
    f.assert_routes(0, "second");

    // No answer, then NXDOMAIN: asked again, the last address stays.
    let since = Instant::now();
    f.dns.drop_queries(&host(2), true);
    f.dns.remove(&host(3));
    assert!(
        f.wait_until(settle, |f| asked(&f.dns, &host(2), since) >= 2
            && asked(&f.dns, &host(3), since) >= 2),
        "the failing names were asked again:\n{}",
        resolver.output()
    );
    std::thread::sleep(Duration::from_secs_f64(knobs.query_timeout * 2.0));
    assert_eq!(f.running_map(), expected(&table), "last addresses kept");
    assert_eq!(
        f.file_map(),
        expected(&table),
        "last addresses kept in the file"
    );
    let output = resolver.output();
    assert!(
        output.contains(&format!("{}: timeout", host(2))),
        "{output}"
    );
    assert!(
        output.contains(&format!("{}: NXDOMAIN", host(3))),
        "{output}"
    );

    let status = resolver.terminate().expect("exits on SIGTERM");
    println!("{}", resolver.output());
    assert!(
        status.success(),
        "exit status {status}:\n{}",
        resolver.output()
    );
}

#[test]
fn a_reload_keeps_the_current_addresses() {
    let knobs = QUICK;
    let f = Fixture::start(20, &["first", "second"]);
    let (first, second) = (f.backend_ip("first"), f.backend_ip("second"));
    let mut table: Vec<(String, Ipv4Addr)> =
        (0..20).map(|i| (host(i), unused_address(i))).collect();
    table[0].1 = first;
    for (name, ip) in &table {
        f.dns.set(name, &[*ip]);
    }
    let resolver = f.resolving(knobs, &table);
    let settle = Duration::from_secs_f64(3.0 * knobs.refresh_seconds);

    let reload = |f: &Fixture| {
        let before = f.haproxy.worker_pid();
        let status = Command::new("sh")
            .args(["-c", &f.haproxy.reload_command(&[])])
            .status()
            .expect("run reload.sh");
        assert!(status.success(), "reload failed:\n{}", f.haproxy.log());
        assert!(
            // Generous: the whole suite shares two cores with this master's re-execution.
            f.wait_until(Duration::from_secs(30), |f| {
                f.haproxy
                    .worker_pid()
                    .is_some_and(|pid| Some(pid) != before && f.haproxy.master_has_taken_in(pid))
            }),
            "no new worker taken in by its master within 30 s of the reload (worker before: {before:?}, now: {:?}):\n{}",
            f.haproxy.worker_pid(),
            f.haproxy.log()
        );
    };

    // A change the resolver has applied just before the reload: the new worker loads it.
    f.dns.set(&host(0), &[second]);
    table[0].1 = second;
    assert!(
        f.wait_until(settle, |f| f.file_map() == expected(&table)),
        "the change reached the file:\n{}",
        resolver.output()
    );
    reload(&f);
    assert_eq!(f.running_map(), expected(&table), "the new worker's map");
    f.assert_routes(0, "second");

    // A change racing with the reload reaches the new worker too.
    f.dns.set(&host(0), &[first]);
    f.dns.set(&host(1), &[second]);
    table[0].1 = first;
    table[1].1 = second;
    reload(&f);
    f.assert_running_map(
        settle,
        &expected(&table),
        "after the racing reload",
        &resolver,
    );
    f.assert_routes(0, "first");
    f.assert_routes(1, "second");
}
