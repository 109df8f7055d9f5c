//! A route whose host has no address yet is held (kept at the target it served with, or in
//! with no address, its connections rejected as having no address), counted in the fleet
//! record, and served by the address service once its host resolves, without another apply.

use std::net::Ipv4Addr;

use autoproxy::names::HostName;
use autoproxy_tests::observe::CloudWatch;
use autoproxy_tests::prometheus;
use autoproxy_tests::resolver::{Knobs, Resolver};

use super::runtime::{assert_maps_equal_files, file_map, held_map};
use super::*;

/// The resolver as the instances run it, asking every name again each 2 s.
pub(super) const QUICK: Knobs = Knobs {
    refresh_seconds: 2.0,
    max_qps: 50,
    query_timeout: 0.3,
    max_stale_seconds: 900.0,
};

pub(super) fn ip(f: &Fixture, backend: &str) -> Ipv4Addr {
    match f.backends.get(backend).addr.ip() {
        std::net::IpAddr::V4(ip) => ip,
        std::net::IpAddr::V6(_) => unreachable!("backends listen on IPv4 loopback"),
    }
}

/// A config routing `g1.test` to backend `a` by address and `named.test` to `host` by name.
fn config(f: &Fixture, dns: &DnsServer, generation: u64, host: &str) -> String {
    let mut named = proxy::api_route("named.test", f.backends.get("a"));
    named.backend = HostName::parse(host).unwrap();
    let routes = [proxy::api_route("g1.test", f.backends.get("a")), named];
    proxy::render_with(
        generation,
        &routes,
        &f.haproxy.options(f.backends.port),
        &[dns.addr()],
    )
}

pub(super) fn wait_until(timeout: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = std::time::Instant::now() + timeout;
    while !done() {
        if std::time::Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    true
}

#[test]
fn a_route_to_a_name_that_does_not_resolve_is_held_then_put_in_by_the_resolver() {
    let f = Fixture::new(&["a", "b"]);
    let dns = DnsServer::start("127.0.0.1:0".parse().unwrap()).unwrap();
    let routes_map = MapFiles::stable().routes;
    let key = "proxy.api.named.test";

    // NXDOMAIN: the route goes in with no address, the apply returns at once, the record
    // counts it.
    let started = std::time::Instant::now();
    let (run, record) = f.apply_and_record(&f.upload(&config(&f, &dns, 1, "api.new.test")));
    assert!(run.success(), "{run}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(record["unresolved_routes"], 1, "{record}");
    assert!(
        file_map(&f, &routes_map).contains(&format!("{key} api.new.test:{}", f.backends.port)),
        "in the file at its host with no address"
    );
    assert!(f.haproxy.probe(key).is_err(), "not live");
    f.assert_routes("g1.test", "a");

    // Its host appears: the resolver gives the worker its address, and the route serves.
    let resolver = Resolver::start(&f.haproxy.config_path(), QUICK);
    dns.set("api.new.test", &[ip(&f, "b")]);
    let live = wait_until(Duration::from_secs(10), || {
        f.haproxy
            .probe(key)
            .is_ok_and(|banner| banner == f.backends.get("b").banner())
    });
    assert!(live, "{}", resolver.output());
    assert_maps_equal_files(&f);
    assert_eq!(f.haproxy.running_generation(), Some(1), "no further apply");

    // Moved to a name that does not resolve yet: it keeps serving where it did.
    let run = f.apply(&f.upload(&config(&f, &dns, 2, "api.moved.test")));
    assert!(run.success(), "{run}");
    assert_eq!(f.haproxy.probe(key).unwrap(), f.backends.get("b").banner());
    // ... and goes on: the service, which sees the new config within a second and pushes
    // every 2 s, keeps the old host's address while a route serves with it.
    std::thread::sleep(Duration::from_secs(4));
    assert_eq!(
        f.haproxy.probe(key).map_err(|err| format!("{err:?}")),
        Ok(f.backends.get("b").banner()),
        "{}",
        resolver.output()
    );
    dns.set("api.moved.test", &[ip(&f, "a")]);
    let moved = wait_until(Duration::from_secs(10), || {
        f.haproxy
            .probe(key)
            .is_ok_and(|banner| banner == f.backends.get("a").banner())
    });
    assert!(moved, "{}", resolver.output());
    assert_maps_equal_files(&f);
}

/// `count` routes `n<i>.test` to hosts `h<i>.named.test`, all by name.
fn named_config(f: &Fixture, dns: &DnsServer, generation: u64, count: usize) -> String {
    let routes: Vec<_> = (0..count)
        .map(|i| {
            let mut route = proxy::api_route(&format!("n{i}.test"), f.backends.get("a"));
            route.backend = HostName::parse(&format!("h{i}.named.test")).unwrap();
            route
        })
        .collect();
    proxy::render_with(
        generation,
        &routes,
        &f.haproxy.options(f.backends.port),
        &[dns.addr()],
    )
}

/// While the address service runs it is the one writer of the worker's address map: an apply
/// of new hosts while it pushes asks it, never writes itself, and the worker ends with one
/// entry per host, equal to the file.
#[test]
fn an_apply_while_the_resolver_pushes_leaves_one_entry_per_host() {
    let f = Fixture::new(&["a"]);
    let dns = DnsServer::start("127.0.0.1:0".parse().unwrap()).unwrap();
    for i in 0..300 {
        dns.set(&format!("h{i}.named.test"), &[ip(&f, "a")]);
    }
    f.install_first(&named_config(&f, &dns, 1, 200));
    let resolver = Resolver::start(&f.haproxy.config_path(), QUICK);
    let run = f.apply(&f.upload(&named_config(&f, &dns, 2, 300)));
    assert!(run.success(), "{run}");
    assert!(
        !run.stdout.contains("gave the running HAProxy"),
        "the apply wrote the worker's address map itself:\n{run}"
    );
    // The new routes whose host the worker holds when the apply returns serve then (the
    // service pushed those addresses before it answered the apply); the others are in too,
    // rejected for no address until the service pushes theirs.
    let known = autoproxy_tests::resolver::show_map(
        &f.haproxy.stats_socket(),
        &MapFiles::stable().addresses,
    )
    .unwrap();
    let live: Vec<String> = file_map(&f, &MapFiles::stable().routes)
        .into_iter()
        .filter_map(|entry| {
            let (key, target) = entry.split_once(' ')?;
            let host = target.rsplit_once(':').map_or(target, |(host, _)| host);
            known.contains_key(host).then(|| key.to_owned())
        })
        .filter(|key| (200..300).any(|i| *key == format!("proxy.api.n{i}.test")))
        .collect();
    assert!(live.len() > 10, "{live:?}\n{run}");
    for sni in &live {
        assert!(
            f.haproxy.probe(sni).is_ok(),
            "{sni} does not serve yet:\n{run}"
        );
    }
    let map = &MapFiles::stable().addresses;
    let settled = wait_until(Duration::from_secs(10), || {
        f.haproxy
            .stats_command(&format!("show map {map}"))
            .is_ok_and(|a| a.lines().filter(|l| !l.trim().is_empty()).count() >= 300)
    });
    assert!(settled, "{}", resolver.output());
    let answer = f.haproxy.stats_command(&format!("show map {map}")).unwrap();
    let mut keys: Vec<&str> = answer
        .lines()
        .filter_map(|line| line.split_whitespace().nth(1))
        .collect();
    let all = keys.len();
    keys.sort_unstable();
    keys.dedup();
    assert_eq!(
        keys.len(),
        all,
        "a duplicate key in the worker's map:\n{answer}"
    );
    // The held routes go in too, the worker's tables and the files alike.
    let routes = MapFiles::stable().routes;
    let all_in = wait_until(Duration::from_secs(10), || {
        file_map(&f, &routes).len() == 300 && held_map(&f, &routes).len() == 300
    });
    assert!(all_in, "{}", resolver.output());
    assert_maps_equal_files(&f);
}

/// A held route's connections are rejected for what they lack, an address, never as a
/// missing route: in `show stat`, HAProxy's `/metrics`, the log line and the address
/// service's CloudWatch figures, beside connections to SNIs that have no route at all.
#[test]
fn a_held_routes_connections_are_rejected_as_no_address() {
    let f = Fixture::new(&["a"]);
    let dns = DnsServer::start("127.0.0.1:0".parse().unwrap()).unwrap();
    let log = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let mut options = f.haproxy.options(f.backends.port);
    options.log = format!("{} local0", log.local_addr().unwrap());
    let mut named = proxy::api_route("named.test", f.backends.get("a"));
    named.backend = HostName::parse("api.nowhere.test").unwrap();
    let routes = [proxy::api_route("g1.test", f.backends.get("a")), named];
    let config = proxy::render_with(1, &routes, &options, &[dns.addr()]);
    let (run, record) = f.apply_and_record(&f.upload(&config));
    assert!(run.success(), "{run}");
    assert_eq!(record["unresolved_routes"], 1, "{record}");

    let cloudwatch = CloudWatch::start();
    let mut env = cloudwatch.env();
    env.push(("AUTOPROXY_METRICS_SECONDS".to_owned(), "1".to_owned()));
    env.push(("AUTOPROXY_INSTANCE_ID".to_owned(), INSTANCE.to_owned()));
    let resolver = Resolver::start_with(&f.haproxy.config_path(), QUICK, &env);
    let published = |metric: &str| {
        cloudwatch
            .points(metric, INSTANCE)
            .unwrap_or_else(|err| panic!("{metric}: {err}"))
    };
    assert!(
        wait_until(Duration::from_secs(15), || published("HAProxyUp").count
            >= 1.0),
        "a first publish:\n{}",
        resolver.output()
    );

    let (unrouted, unresolved): (u32, u32) = (7, 5);
    for _ in 0..unrouted {
        let answer = f.haproxy.probe("proxy.api.unknown.test");
        assert!(matches!(answer, Err(ProbeError::Closed)), "{answer:?}");
    }
    for _ in 0..unresolved {
        let answer = f.haproxy.probe("proxy.api.named.test");
        assert!(matches!(answer, Err(ProbeError::Closed)), "{answer:?}");
    }
    f.assert_routes("g1.test", "a");

    let stat = crate::metrics::backend_sessions(&f.haproxy);
    assert_eq!(
        (stat["reject_no_route"], stat["reject_no_address"]),
        (u64::from(unrouted), u64::from(unresolved)),
        "show stat: {stat:?}"
    );
    let metrics = prometheus::get(f.haproxy.stats, "/metrics").unwrap();
    let samples = prometheus::samples(&metrics.body).unwrap();
    let sessions =
        |backend: &str| samples[&format!("haproxy_backend_sessions_total{{proxy=\"{backend}\"}}")];
    assert_eq!(
        (sessions("reject_no_route"), sessions("reject_no_address")),
        (f64::from(unrouted), f64::from(unresolved)),
        "/metrics"
    );
    let total = usize::try_from(unrouted + unresolved).unwrap() + 1;
    let lines = crate::metrics::log_lines(&log, total, Duration::from_secs(5));
    let held: Vec<&String> = lines
        .iter()
        .filter(|l| l.contains("sni=proxy.api.named.test "))
        .collect();
    assert_eq!(held.len(), 5, "{lines:#?}");
    let route = format!("route=api.nowhere.test:{} addr=-", f.backends.port);
    assert!(
        held.iter()
            .all(|l| l.contains(" reject_no_address/<NOSRV> ") && l.contains(&route)),
        "{held:#?}"
    );

    let sums = || {
        (
            published("RejectedNoRoute").sum,
            published("RejectedNoAddress").sum,
        )
    };
    let want = (f64::from(unrouted), f64::from(unresolved));
    assert!(
        wait_until(Duration::from_secs(5), || sums() == want),
        "CloudWatch has {:?}, sent {want:?}\n{}",
        sums(),
        resolver.output()
    );
}
