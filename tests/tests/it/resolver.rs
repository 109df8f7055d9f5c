//! autoproxy-resolver against a counting DNS server and a real HAProxy on loopback: names get
//! their addresses in the map file and in the running worker, changes follow within a refresh,
//! failed lookups keep the last address, a reload loses nothing, and the query rate never
//! exceeds the cap.
#![allow(clippy::print_stdout)]

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::process::Command;
use std::time::{Duration, Instant};

use autoproxy::model::{Route, SniMatch};
use autoproxy::names::HostName;
use autoproxy::render::{DEFAULT_TEMPLATE, RenderInput, Renderer};
use autoproxy_tests::dns::{self, DnsServer};
use autoproxy_tests::proxy::HaproxyFiles;
use autoproxy_tests::proxy::{Backends, Haproxy};
use autoproxy_tests::resolver::{self, ADDRESS_MAP, Knobs, Resolver};

/// The backend host name of route `i`.
fn host(i: usize) -> String {
    format!("svc-{i:04}.test.internal")
}

/// The SNI that routes to `host(i)`.
fn sni(i: usize) -> String {
    format!("proxy.api.z{i:04}.test.internal")
}

/// An address no backend listens on, distinct for every `i`.
fn unused_address(i: usize) -> Ipv4Addr {
    let i = u32::try_from(i).expect("few routes");
    Ipv4Addr::from(u32::from(Ipv4Addr::new(10, 77, 0, 0)) + i)
}

fn route(i: usize, port: u16) -> Route {
    let zone = format!("z{i:04}.test.internal");
    let zone_name = HostName::parse(&zone).expect("a valid zone");
    Route {
        rule: "api".to_owned(),
        account: autoproxy_tests::moto::OWN_ACCOUNT.to_owned(),
        zone_id: format!("Z{i:04}"),
        sni: sni(i),
        sni_match: SniMatch::Exact,
        backend: HostName::parse(&host(i)).expect("a valid host"),
        port,
        records: vec![zone_name.with_prefix("api")],
        zone_name,
    }
}

/// A DNS server, backends, and an HAProxy serving `routes` routes whose config names the DNS
/// server as its nameserver; nothing resolves yet.
struct Fixture {
    dns: DnsServer,
    backends: Backends,
    haproxy: Haproxy,
}

impl Fixture {
    fn start(routes: usize, backends: &[&str]) -> Fixture {
        let dns = DnsServer::start(SocketAddr::from((Ipv4Addr::LOCALHOST, 0))).expect("start dns");
        let backends = Backends::start(backends);
        let haproxy = Haproxy::new();
        let routes: Vec<Route> = (0..routes).map(|i| route(i, backends.port)).collect();
        let config = Renderer::new(DEFAULT_TEMPLATE)
            .expect("the default template compiles")
            .render(&RenderInput {
                routes: &routes,
                resolvers: &[dns.addr()],
                options: &haproxy.options(backends.port),
                generation: 1,
                generated_at: "2026-01-01T00:00:00Z",
                trigger: "test",
            })
            .expect("render")
            .text;
        haproxy.start(&config);
        Fixture {
            dns,
            backends,
            haproxy,
        }
    }

    fn resolver(&self, knobs: Knobs) -> Resolver {
        Resolver::start(&self.haproxy.config_path(), knobs)
    }

    /// The address of backend `name`.
    fn backend_ip(&self, name: &str) -> Ipv4Addr {
        match self.backends.get(name).addr.ip() {
            std::net::IpAddr::V4(ip) => ip,
            std::net::IpAddr::V6(_) => unreachable!("backends listen on IPv4 loopback"),
        }
    }

    fn running_map(&self) -> BTreeMap<String, String> {
        resolver::show_map(&self.haproxy.stats_socket(), ADDRESS_MAP).unwrap_or_default()
    }

    fn file_map(&self) -> BTreeMap<String, String> {
        resolver::read_map_file(&resolver::address_map_path(&self.haproxy.config_path()))
    }

    /// Polls until `done` holds, for at most `timeout`; whether it held.
    fn wait_until(&self, timeout: Duration, mut done: impl FnMut(&Fixture) -> bool) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            if done(self) {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

fn expected(entries: &[(String, Ipv4Addr)]) -> BTreeMap<String, String> {
    entries
        .iter()
        .map(|(name, ip)| (name.clone(), ip.to_string()))
        .collect()
}

/// The queries for `name` at or after `since`.
fn asked(dns: &DnsServer, name: &str, since: Instant) -> usize {
    dns.queries()
        .iter()
        .filter(|q| q.name == name && q.at >= since)
        .count()
}

/// A short refresh and timeout, so changes and failures show within seconds.
const QUICK: Knobs = Knobs {
    refresh_seconds: 2.0,
    max_qps: 50,
    query_timeout: 0.3,
};

#[test]
fn two_thousand_names_resolve_under_the_rate_cap() {
    const NAMES: usize = 2_000;
    let knobs = Knobs {
        refresh_seconds: 4.0,
        max_qps: 800,
        query_timeout: 1.0,
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
    // The resolver sends at least 1/MAX_QPS apart; the server's receive times jitter by a
    // few milliseconds, which a window 10 ms short of a second absorbs.
    let busiest = dns::max_in_window(&queries, Duration::from_millis(990));
    assert!(
        busiest <= knobs.max_qps as usize,
        "{busiest} queries within one second, above the cap of {}: {per_second:?}",
        knobs.max_qps
    );
    assert!(queries.iter().all(|q| q.qtype == dns::A), "only A queries");
    assert!(
        resolver.output().contains("cycle: names=2000"),
        "a cycle summary:\n{}",
        resolver.output()
    );
}

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

    let mut resolver = f.resolver(knobs);
    let settle = Duration::from_secs_f64(3.0 * knobs.refresh_seconds);
    assert!(
        f.wait_until(Duration::from_secs(10), |f| f.running_map()
            == expected(&table)),
        "first addresses: {:?}\n{}",
        f.running_map(),
        resolver.output()
    );
    assert_eq!(f.haproxy.probe(&sni(0)).expect("routed"), "backend first");
    assert_eq!(f.haproxy.probe(&sni(1)).expect("routed"), "backend second");

    // An address that moves is followed within a refresh; one still among the answers is
    // kept (no flapping between a load balancer's nodes).
    f.dns.set(&host(0), &[second]);
    f.dns
        .set(&host(4), &[unused_address(42), unused_address(40)]);
    table[0].1 = second;
    assert!(
        f.wait_until(settle, |f| f.running_map() == expected(&table)),
        "after the move: {:?}\n{}",
        f.running_map(),
        resolver.output()
    );
    assert_eq!(f.haproxy.probe(&sni(0)).expect("routed"), "backend second");

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
    let resolver = f.resolver(knobs);
    let settle = Duration::from_secs_f64(3.0 * knobs.refresh_seconds);
    assert!(
        f.wait_until(Duration::from_secs(10), |f| f.running_map()
            == expected(&table)),
        "first addresses: {:?}\n{}",
        f.running_map(),
        resolver.output()
    );

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
    assert_eq!(f.haproxy.probe(&sni(0)).expect("routed"), "backend second");

    // A change racing with the reload reaches the new worker too.
    f.dns.set(&host(0), &[first]);
    f.dns.set(&host(1), &[second]);
    table[0].1 = first;
    table[1].1 = second;
    reload(&f);
    assert!(
        f.wait_until(settle, |f| f.running_map() == expected(&table)),
        "after the racing reload: {:?}\n{}",
        f.running_map(),
        resolver.output()
    );
    assert_eq!(f.haproxy.probe(&sni(0)).expect("routed"), "backend first");
    assert_eq!(f.haproxy.probe(&sni(1)).expect("routed"), "backend second");
}
