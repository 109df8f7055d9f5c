//! What an apply says is what it read where the action happened: a new host's address that
//! the worker refused leaves its route unresolved in the record (and not live), and a
//! rollback puts last-known-good's maps back byte for byte, not tables computed again from
//! files the failed generation had changed.

use std::net::TcpListener;

use autoproxy::names::HostName;
use autoproxy_tests::refusing_socket::RefusingSocket;
use autoproxy_tests::resolver::Resolver;

use super::held::{QUICK, ip, wait_until};
use super::*;

/// A config of `generation` routing `proxy.api.<zone>` to `host` by name, per pair, resolved
/// through `dns`.
fn by_name(
    f: &Fixture,
    dns: &DnsServer,
    generation: u64,
    routes: &[(&str, &str)],
    options: &autoproxy::render::RenderOptions,
) -> String {
    let to_a: Vec<_> = routes.iter().map(|(zone, _)| (*zone, "a")).collect();
    let mut api = f.api_routes(&to_a);
    for (route, (_, host)) in api.iter_mut().zip(routes) {
        route.back = HostName::parse(host).unwrap();
    }
    proxy::render_with(generation, &api, options, &[dns.addr()])
}

/// The address service resolves a new route's host and writes it to the file, but the worker
/// refuses the push: the service answers the apply `missing`, never `ok`; the route is not
/// live, and the record counts it unresolved. Once the worker takes pushes again, the route
/// serves without another apply.
#[test]
fn a_refused_push_leaves_the_route_unresolved_in_the_record() {
    let f = Fixture::new(&["a"]);
    let dns = DnsServer::start("127.0.0.1:0".parse().unwrap()).unwrap();
    let options = f.haproxy.options(f.backends.port);
    dns.set("api.one.test", &[ip(&f, "a")]);
    f.install_first(&by_name(
        &f,
        &dns,
        1,
        &[("one.test", "api.one.test")],
        &options,
    ));
    let resolver = Resolver::start(&f.haproxy.config_path(), QUICK);
    let control = f.haproxy.dir().join("autoproxy/resolver.sock");
    // A first install waits for no address: the service puts one.test in.
    assert!(
        wait_until(Duration::from_secs(10), || {
            std::os::unix::net::UnixStream::connect(&control).is_ok()
                && f.haproxy.probe("proxy.api.one.test").is_ok()
        }),
        "{}",
        resolver.output()
    );
    let map = MapFiles::stable().addresses;
    let refusing = RefusingSocket::start(
        &f.haproxy.stats_socket(),
        &[&format!("add map {map} "), &format!("set map {map} ")],
    )
    .unwrap();
    dns.set("api.new.test", &[ip(&f, "a")]);
    let second = by_name(
        &f,
        &dns,
        2,
        &[("one.test", "api.one.test"), ("new.test", "api.new.test")],
        &options,
    );
    let (run, record) = f.apply_and_record(&f.upload(&second));
    assert!(run.success(), "{run}");
    assert!(refusing.refused() > 0, "the push was not refused\n{run}");
    assert!(
        autoproxy_tests::resolver::read_map_file(&f.haproxy.dir().join(&map))
            .contains_key("api.new.test"),
        "the service wrote the file"
    );
    assert_eq!(record["result"], "applied", "{record}");
    assert_eq!(record["unresolved_routes"], 1, "{record}\n{run}");
    f.assert_no_route("new.test");
    f.assert_routes("one.test", "a");

    drop(refusing);
    assert!(
        wait_until(Duration::from_secs(10), || f
            .haproxy
            .probe("proxy.api.new.test")
            .is_ok()),
        "{}",
        resolver.output()
    );
}

/// The generation's own map files: routes, suffixes, generation.
fn generation_maps(f: &Fixture) -> BTreeMap<String, Vec<u8>> {
    let maps = MapFiles::stable();
    [maps.routes, maps.suffixes, maps.generation.unwrap()]
        .into_iter()
        .map(|map| {
            let bytes = std::fs::read(f.haproxy.dir().join(&map)).unwrap();
            (map, bytes)
        })
        .collect()
}

/// A route held at its old target (its new host has no address) in last-known-good; the
/// next generation moves it to a host that has one, and cannot start: the rollback puts
/// every map back byte for byte, and the route serves where it did.
#[test]
fn a_rollback_leaves_every_map_byte_for_byte_as_it_was() {
    let f = Fixture::new(&["a", "b"]);
    let dns = DnsServer::start("127.0.0.1:0".parse().unwrap()).unwrap();
    let options = f.haproxy.options(f.backends.port);
    dns.set("api.one.test", &[ip(&f, "a")]);
    dns.set("api.three.test", &[ip(&f, "b")]);
    f.install_first(&by_name(
        &f,
        &dns,
        1,
        &[("r.test", "api.one.test")],
        &options,
    ));
    // A first install waits for no address: the next apply resolves api.one.test (itself:
    // no address service runs here).
    let run = f.apply(&f.upload(&by_name(
        &f,
        &dns,
        2,
        &[("r.test", "api.one.test"), ("s.test", "api.one.test")],
        &options,
    )));
    assert!(run.success(), "{run}");
    f.assert_routes("r.test", "a");
    // api.two.test does not resolve: the route stays at api.one.test.
    let run = f.apply(&f.upload(&by_name(
        &f,
        &dns,
        3,
        &[("r.test", "api.two.test")],
        &options,
    )));
    assert!(run.success(), "{run}");
    f.assert_routes("r.test", "a");
    let before = generation_maps(&f);

    let squatter = TcpListener::bind("127.0.0.1:0").unwrap();
    let mut cannot_start = options.clone();
    cannot_start.http_bind = squatter.local_addr().unwrap().to_string();
    let third = by_name(&f, &dns, 4, &[("r.test", "api.three.test")], &cannot_start);
    let run = f.apply(&f.upload(&third));
    assert_eq!(run.status, Some(2), "{run}");
    assert_eq!(f.haproxy.running_generation(), Some(3), "{run}");
    let after = generation_maps(&f);
    for (map, bytes) in &before {
        assert_eq!(
            String::from_utf8_lossy(&after[map]),
            String::from_utf8_lossy(bytes),
            "{map}\n{run}"
        );
    }
    f.assert_routes("r.test", "a");
    drop(squatter);
}
