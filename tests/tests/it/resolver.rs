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
    max_stale_seconds: 900.0,
};

#[test]
fn two_thousand_names_resolve_under_the_rate_cap() {
    const NAMES: usize = 2_000;
    let knobs = Knobs {
        refresh_seconds: 4.0,
        max_qps: 800,
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

/// The queries for `name` at or after `since` that came over TCP.
fn asked_over_tcp(dns: &DnsServer, name: &str, since: Instant) -> usize {
    dns.queries()
        .iter()
        .filter(|q| q.name == name && q.at >= since && q.tcp)
        .count()
}

/// Addresses above loopback's, so that a backend (on 127.0.0.x) is the lowest of a set.
fn high_address(i: u8) -> Ipv4Addr {
    Ipv4Addr::new(198, 18, 0, i)
}

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
    let resolver = f.resolver(knobs);
    let table = [(host(0), first), (host(1), second)];
    assert!(
        f.wait_until(Duration::from_secs(10), |f| f.running_map()
            == expected(&table)),
        "addresses: {:?}\n{}",
        f.running_map(),
        resolver.output()
    );
    assert_eq!(f.file_map(), expected(&table));
    assert_eq!(f.haproxy.probe(&sni(0)).expect("routed"), "backend first");
    assert_eq!(f.haproxy.probe(&sni(1)).expect("routed"), "backend second");
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
    assert!(
        f.wait_until(Duration::from_secs(10), |f| f.running_map() == want),
        "addresses: {:?}\n{}",
        f.running_map(),
        resolver.output()
    );
    assert_eq!(f.file_map(), want);
    assert_eq!(f.haproxy.probe(&sni(0)).expect("routed"), "backend first");
    assert_eq!(f.haproxy.probe(&sni(1)).expect("routed"), "backend second");
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
        query_timeout: 0.2,
        max_stale_seconds: 5.0,
    };
    let f = Fixture::start(4, &["first"]);
    let table: Vec<(String, Ipv4Addr)> = (0..4).map(|i| (host(i), unused_address(i))).collect();
    for (name, ip) in &table {
        f.dns.set(name, &[*ip]);
    }
    let resolver = f.resolver(knobs);
    assert!(
        f.wait_until(Duration::from_secs(10), |f| f.running_map()
            == expected(&table)),
        "first addresses: {:?}\n{}",
        f.running_map(),
        resolver.output()
    );

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

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// An apply's new names get their addresses from the running resolver before the apply
/// swaps the config in, and the resolver keeps them although its config does not name them
/// yet; with no resolver running, `ensure` resolves them itself into the same file.
#[test]
fn an_apply_gets_its_new_names_before_the_swap() {
    use autoproxy_agent::addresses::{self, By};
    let knobs = QUICK;
    let f = Fixture::start(2, &["first", "second"]);
    let (first, second) = (f.backend_ip("first"), f.backend_ip("second"));
    f.dns.set(&host(0), &[first]);
    f.dns.set(&host(1), &[first]);
    f.dns.set("new-a.test.internal", &[second]);
    f.dns.set("new-b.test.internal", &[unused_address(7)]);
    let config_dir = f.haproxy.config_path().parent().unwrap().to_owned();
    let resolver = f.resolver(knobs);
    assert!(
        f.wait_until(Duration::from_secs(10), |f| f.file_map().len() == 2),
        "{}",
        resolver.output()
    );

    let names = vec![
        "new-a.test.internal".to_owned(),
        "new-b.test.internal".to_owned(),
        "nowhere.test.internal".to_owned(),
    ];
    let started = Instant::now();
    let ensured = runtime().block_on(addresses::ensure(
        &config_dir,
        &names,
        &[f.dns.addr()],
        Duration::from_secs(10),
    ));
    println!(
        "ensure through the resolver: {ensured:?} in {:?}",
        started.elapsed()
    );
    assert_eq!(ensured.by, By::Resolver);
    assert_eq!(ensured.resolved, 2, "{ensured:?}\n{}", resolver.output());
    assert_eq!(ensured.missing.len(), 1);
    assert_eq!(ensured.missing[0].0, "nowhere.test.internal");
    assert!(ensured.missing[0].1.contains("NXDOMAIN"), "{ensured:?}");
    let file = f.file_map();
    assert_eq!(file.get("new-a.test.internal"), Some(&second.to_string()));
    assert_eq!(
        file.get("new-b.test.internal"),
        Some(&unused_address(7).to_string())
    );
    // Kept, and pushed, though the installed config does not name them.
    std::thread::sleep(Duration::from_secs_f64(2.5 * knobs.refresh_seconds));
    assert!(f.file_map().contains_key("new-a.test.internal"));
    assert!(
        f.wait_until(Duration::from_secs(5), |f| f
            .running_map()
            .contains_key("new-a.test.internal")),
        "{}",
        resolver.output()
    );
    drop(resolver);

    // No resolver: ensure resolves by itself and merges into the file.
    f.dns.set("new-c.test.internal", &[unused_address(8)]);
    let ensured = runtime().block_on(addresses::ensure(
        &config_dir,
        &["new-c.test.internal".to_owned()],
        &[f.dns.addr()],
        Duration::from_secs(10),
    ));
    assert_eq!(ensured.by, By::Itself, "{ensured:?}");
    assert_eq!(ensured.resolved, 1, "{ensured:?}");
    let file = f.file_map();
    assert_eq!(
        file.get("new-c.test.internal"),
        Some(&unused_address(8).to_string())
    );
    assert!(file.contains_key(&host(0)), "other entries kept: {file:?}");
}

/// The unit passes `systemd-analyze verify`, and is installed through `systemctl` (a
/// stand-in that records its calls): written and restarted when its text changes (a new
/// agent path is an upgrade), started when inactive, left alone when running.
#[test]
fn the_service_unit_verifies_and_installs_through_systemctl() {
    use autoproxy_agent::resolve::service::{self, Host, ServiceState};
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("etc/haproxy.cfg");
    std::fs::create_dir_all(config.parent().unwrap()).unwrap();
    std::fs::write(&config, "global\n").unwrap();
    let agent = autoproxy_tests::agent_binary();

    let unit = service::unit(&agent, &config).expect("a unit");
    let unit_dir = dir.path().join("units");
    std::fs::create_dir_all(&unit_dir).unwrap();
    std::fs::write(unit_dir.join(service::UNIT), &unit).unwrap();
    let verify = Command::new("systemd-analyze")
        .arg("verify")
        .arg(unit_dir.join(service::UNIT))
        .output()
        .expect("run systemd-analyze");
    let complaints = String::from_utf8_lossy(&verify.stderr).into_owned();
    println!("systemd-analyze verify:\n{complaints}");
    assert!(verify.status.success(), "{complaints}");
    let ours: Vec<&str> = complaints
        .lines()
        .filter(|l| l.contains(service::UNIT))
        .collect();
    assert!(ours.is_empty(), "complaints about the unit: {ours:?}");

    let calls = dir.path().join("calls");
    let inactive = dir.path().join("inactive");
    let systemctl = dir.path().join("systemctl");
    std::fs::write(
        &systemctl,
        format!(
            "#!/bin/sh\necho \"$*\" >>'{}'\nif [ \"$1\" = is-active ] && [ -e '{}' ]; then exit 3; fi\nexit 0\n",
            calls.display(),
            inactive.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&systemctl, std::fs::Permissions::from_mode(0o755)).unwrap();
    let marker = dir.path().join("run-systemd-system");
    let host = Host {
        unit_path: dir.path().join(service::UNIT),
        systemd_marker: marker.clone(),
        systemctl: systemctl.clone(),
        require_root: false,
    };
    let take_calls = || {
        let text = std::fs::read_to_string(&calls).unwrap_or_default();
        let _ = std::fs::remove_file(&calls);
        text.lines().map(str::to_owned).collect::<Vec<_>>()
    };
    let name = service::UNIT;

    assert_eq!(
        service::ensure(&agent, &config, &host).unwrap(),
        ServiceState::NoSystemd
    );
    assert!(take_calls().is_empty());
    std::fs::create_dir_all(&marker).unwrap();

    assert_eq!(
        service::ensure(&agent, &config, &host).unwrap(),
        ServiceState::Installed
    );
    assert_eq!(
        take_calls(),
        [
            "daemon-reload".to_owned(),
            format!("enable --quiet {name}"),
            format!("restart {name}")
        ]
    );
    assert_eq!(std::fs::read_to_string(&host.unit_path).unwrap(), unit);
    assert!(
        config.parent().unwrap().join("autoproxy").is_dir(),
        "the maps directory exists before the unit starts"
    );

    assert_eq!(
        service::ensure(&agent, &config, &host).unwrap(),
        ServiceState::Running
    );
    assert_eq!(take_calls(), [format!("is-active --quiet {name}")]);

    std::fs::write(&inactive, "").unwrap();
    assert_eq!(
        service::ensure(&agent, &config, &host).unwrap(),
        ServiceState::Started
    );
    assert_eq!(
        take_calls(),
        [
            format!("is-active --quiet {name}"),
            format!("enable --quiet {name}"),
            format!("start {name}")
        ]
    );

    // An upgrade: the launcher caches each build under its own path.
    let upgraded = dir.path().join("agent/0123abcd/autoproxy-agent");
    assert_eq!(
        service::ensure(&upgraded, &config, &host).unwrap(),
        ServiceState::Installed
    );
    assert_eq!(take_calls().last().unwrap(), &format!("restart {name}"));
    assert!(
        std::fs::read_to_string(&host.unit_path)
            .unwrap()
            .contains(&format!("ExecStart={} resolve ", upgraded.display()))
    );
}
