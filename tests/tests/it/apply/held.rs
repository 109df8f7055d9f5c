//! A route whose host has no address yet never goes live pointing nowhere: it is held (left
//! out, or kept at the target it served with), counted in the fleet record, and put in by the
//! address service once its host resolves, without another apply.

use std::net::Ipv4Addr;

use autoproxy::names::HostName;
use autoproxy_tests::resolver::{Knobs, Resolver};

use super::runtime::{assert_maps_equal_files, file_map, held_map};
use super::*;

/// The resolver as the instances run it, asking every name again each 2 s.
const QUICK: Knobs = Knobs {
    refresh_seconds: 2.0,
    max_qps: 50,
    query_timeout: 0.3,
    max_stale_seconds: 900.0,
};

fn ip(f: &Fixture, backend: &str) -> Ipv4Addr {
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

fn wait_until(timeout: Duration, mut done: impl FnMut() -> bool) -> bool {
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

    // NXDOMAIN: the route stays out, the apply returns at once, the record counts it.
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
        !file_map(&f, &routes_map).iter().any(|e| e.starts_with(key)),
        "held out of the file"
    );
    assert!(f.haproxy.probe(key).is_err(), "not live");
    f.assert_routes("g1.test", "a");

    // Its host appears: the resolver puts the route in, in the file and the running worker.
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
    // Every new route the apply put in serves the moment it returns: the service had pushed
    // its host's address to the worker before it answered the apply.
    let live: Vec<String> = file_map(&f, &MapFiles::stable().routes)
        .into_iter()
        .filter_map(|entry| entry.split_whitespace().next().map(str::to_owned))
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
