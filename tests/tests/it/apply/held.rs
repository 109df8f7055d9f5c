//! A route whose host has no address yet never goes live pointing nowhere: it is held (left
//! out, or kept at the target it served with), counted in the fleet record, and put in by the
//! address service once its host resolves, without another apply.

use std::net::Ipv4Addr;

use autoproxy::names::HostName;
use autoproxy_tests::resolver::{Knobs, Resolver};

use super::runtime::{assert_maps_equal_files, file_map};
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
    dns.set("api.moved.test", &[ip(&f, "a")]);
    let moved = wait_until(Duration::from_secs(10), || {
        f.haproxy
            .probe(key)
            .is_ok_and(|banner| banner == f.backends.get("a").banner())
    });
    assert!(moved, "{}", resolver.output());
    assert_maps_equal_files(&f);
}
