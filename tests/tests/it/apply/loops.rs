//! Never into itself: a route whose back resolves to the proxy, by name or by any address the
//! kernel delivers to it, or to another proxy of the fleet, is held (counted, explained, its
//! connections rejected as having no address) and never forwarded, where it would come back
//! in and be routed again until `maxconn`.

use std::net::Ipv4Addr;

use autoproxy::names::HostName;
use autoproxy_tests::backends::Backend;
use autoproxy_tests::netns::Namespace;

use super::held::{ip, ready_resolver, stats_get, wait_until};
use super::*;

/// The `stot` of frontend `tls_passthrough`: every connection it accepted.
fn frontend_sessions(f: &Fixture) -> u64 {
    crate::metrics::sessions(&f.haproxy, "FRONTEND")["tls_passthrough"]
}

/// A config routing `good.test` to backend `a`, and `self.test` and `nlb.test` to hosts that
/// resolve to the proxy: by address (the address HAProxy listens on, returned) and by name (a
/// CNAME to the proxy's own name `peering-proxy.test`, at an address standing for the load
/// balancer's); both at the port HAProxy listens on, so that a forwarded connection would
/// come back in.
fn looping_config(f: &Fixture, dns: &DnsServer, generation: u64) -> (String, Ipv4Addr) {
    dns.set("api.good.test", &[ip(f, "a")]);
    let std::net::IpAddr::V4(bound) = f.haproxy.https.ip() else {
        unreachable!("HAProxy listens on IPv4 loopback")
    };
    dns.set("api.self.test", &[bound]);
    dns.set("peering-proxy.test", &[Ipv4Addr::new(127, 0, 0, 99)]);
    dns.cname("api.nlb.test", "peering-proxy.test");
    let mut options = f.haproxy.options(f.backends.port);
    options.backend_port = None;
    let route = |zone: &str, host: &str, port: u16| {
        let mut route = proxy::api_route(zone, f.backends.get("a"));
        route.back = HostName::parse(host).unwrap();
        route.port = port;
        route
    };
    let https = f.haproxy.https.port();
    let routes = [
        route("good.test", "api.good.test", f.backends.port),
        route("self.test", "api.self.test", https),
        route("nlb.test", "api.nlb.test", https),
    ];
    let config = autoproxy::render::Renderer::new(autoproxy::render::DEFAULT_TEMPLATE)
        .unwrap()
        .render(&autoproxy::render::RenderInput {
            routes: &routes,
            resolvers: &[dns.addr()],
            proxies: &[HostName::parse("Peering-Proxy.test.").unwrap()],
            options: &options,
            generation,
            generated_at: "2026-01-01T00:00:00Z",
            trigger: "test",
        })
        .unwrap()
        .text;
    (config, bound)
}

/// A member's record that points back at the proxy: by address (its A record is the address
/// the proxy listens on) and by name (a CNAME to the proxy's own name, `#@proxy`, whose
/// address stands for the load balancer's). Both routes are held, counted and explained, at
/// the apply and in the address service; their connections are rejected as having no
/// address, never forwarded into the proxy: HAProxy accepts exactly the connections the
/// client made.
#[test]
fn a_route_into_the_proxy_itself_is_held_and_never_forwarded() {
    let f = Fixture::new(&["a"]);
    let dns = DnsServer::start("127.0.0.1:0".parse().unwrap()).unwrap();
    // A first install waits for no address: the apply that judges the hosts is the next one,
    // on a proxy that serves (with no address service yet, it resolves them itself).
    f.install_first(&looping_config(&f, &dns, 1).0);
    let (config, bound) = looping_config(&f, &dns, 2);
    assert!(
        config.contains("\n#@proxy peering-proxy.test\n"),
        "{config}"
    );
    let (run, record) = f.apply_and_record(&f.upload(&config));
    assert!(run.success(), "{run}");
    assert_eq!(
        record["unresolved_routes"], 2,
        "held at the apply: {record}\n{run}"
    );
    let resolver = ready_resolver(&f);
    let explained = wait_until(Duration::from_secs(5), || {
        resolver.output().lines().any(|line| {
            line.contains("held routes: 2 of 3 routes")
                && line.contains(&format!("api.self.test resolves to this proxy ({bound})"))
                && line.contains("api.nlb.test resolves to this proxy (127.0.0.99)")
        })
    });
    assert!(explained, "{}", resolver.output());

    let before = frontend_sessions(&f);
    let rejected_before = crate::metrics::backend_sessions(&f.haproxy)["reject_no_address"];
    let tries = 3;
    for _ in 0..tries {
        for looped in ["self.test", "nlb.test"] {
            let answer = f.haproxy.probe(&format!("proxy.api.{looped}"));
            assert!(
                matches!(answer, Err(ProbeError::Closed)),
                "{looped}: {answer:?}"
            );
        }
    }
    f.assert_routes("good.test", "a");
    assert_eq!(
        frontend_sessions(&f) - before,
        2 * tries + 1,
        "only the client's connections, none from the proxy to itself"
    );
    let rejected = crate::metrics::backend_sessions(&f.haproxy)["reject_no_address"];
    assert_eq!(rejected - rejected_before, 2 * tries);
    let metrics = stats_get(&f, "/agent/metrics").body;
    assert_eq!(
        autoproxy_tests::observe::sample(&metrics, "autoproxy_unresolved_routes"),
        Some(2.0),
        "{metrics}"
    );
    let map = autoproxy_tests::resolver::show_map(
        &f.haproxy.stats_socket(),
        &MapFiles::stable().addresses,
    )
    .unwrap();
    assert_eq!(
        map.keys().map(String::as_str).collect::<Vec<_>>(),
        ["api.good.test"],
        "the worker's address map holds no address of the proxy"
    );
}

/// The zones whose back loops with a wildcard bind: at 127.0.0.2 (loopback, but not the
/// address the client used), at 0.0.0.0 (this host), at `::ffff:127.0.0.2` (AAAA only, behind
/// a CNAME: IPv4-mapped), and at another proxy of the fleet.
const WILDCARD_LOOPS: [&str; 4] = ["lo.test", "zero.test", "mapped.test", "peer.test"];

/// A config with the production bind, a wildcard on the routes' own port: `good.test` to a
/// backend in the namespace `ns` (its `.2`), the first three of [`WILDCARD_LOOPS`] at
/// addresses of this host on that port, and `peer.test` to the namespace's `.3`, which the
/// fleet report names as another proxy's and where a backend listens too on the same port (so
/// only knowing the peer holds it).
fn wildcard_config(
    f: &Fixture,
    dns: &DnsServer,
    ns: &Namespace,
    port: u16,
    generation: u64,
) -> String {
    dns.set("api.good.test", &[ns.address(2)]);
    dns.set("api.lo.test", &[Ipv4Addr::new(127, 0, 0, 2)]);
    dns.set("api.zero.test", &[Ipv4Addr::UNSPECIFIED]);
    dns.cname("api.mapped.test", "mapped.target.test");
    dns.set6(
        "mapped.target.test",
        &[Ipv4Addr::new(127, 0, 0, 2).to_ipv6_mapped()],
    );
    dns.set("api.peer.test", &[ns.address(3)]);
    let https = f.haproxy.https.port();
    let mut options = f.haproxy.options(f.backends.port);
    options.backend_port = None;
    options.https_bind = format!(":{https}");
    let route = |zone: &str, port: u16| {
        let mut route = proxy::api_route(zone, f.backends.get("a"));
        route.back = HostName::parse(&format!("api.{zone}")).unwrap();
        route.port = port;
        route
    };
    let mut routes = vec![route("good.test", port), route("peer.test", port)];
    routes.extend(WILDCARD_LOOPS[..3].iter().map(|zone| route(zone, https)));
    proxy::render_with(generation, &routes, &options, &[dns.addr()])
}

/// The fleet report as the configure function writes it (the part an apply reads): this
/// instance, and another proxy at `peer`.
fn put_fleet_report(f: &Fixture, peer: Ipv4Addr) {
    let report = serde_json::json!({"fleet": [
        {"instance_id": INSTANCE, "state": "current", "addresses": ["10.213.254.1"]},
        {"instance_id": "i-0peer0000000000001", "state": "current", "addresses": [peer.to_string()]},
    ]});
    let s3 = aws_sdk_s3::Client::new(&f.sdk);
    f.rt.block_on(
        s3.put_object()
            .bucket(BUCKET)
            .key(autoproxy::fleet::report_key(KEY))
            .body(report.to_string().into_bytes().into())
            .send(),
    )
    .unwrap();
}

/// With the production bind (a wildcard on the routes' port), a back at any address the
/// kernel delivers locally (127.0.0.2, 0.0.0.0, `::ffff:127.0.0.2`) or at another proxy of
/// the fleet is held at the apply and in the address service, explained, and its one client
/// connection is the only session it makes: rejected as having no address, never forwarded
/// back in. A route beside them, to a backend off this host (a network namespace), serves;
/// `/ready` answers 200.
#[test]
fn with_a_wildcard_bind_a_back_at_any_local_address_or_another_proxy_is_held() {
    let ns = Namespace::create("lp").expect("a network namespace (needs root)");
    let good = Backend::start("good", ns.listen((ns.address(2), 0).into()).unwrap());
    let port = good.addr.port();
    // What a route to the peer's address would reach if it were not held.
    let peer = ns.listen((ns.address(3), port).into()).unwrap();
    let peer = Backend::start("peer", peer);
    let f = Fixture::new(&["a"]);
    let dns = DnsServer::start("127.0.0.1:0".parse().unwrap()).unwrap();
    put_fleet_report(&f, ns.address(3));
    // The first install learns the other proxies at its end; the next one judges with them.
    f.install_first(&wildcard_config(&f, &dns, &ns, port, 1));
    let config = wildcard_config(&f, &dns, &ns, port, 2);
    let (run, record) = f.apply_and_record(&f.upload(&config));
    assert!(run.success(), "{run}");
    assert_eq!(
        record["unresolved_routes"], 4,
        "held at the apply: {record}\n{run}"
    );
    assert!(
        record["addresses"]
            .as_array()
            .is_some_and(|a| a.iter().all(|a| {
                a.as_str()
                    .is_some_and(|a| !a.starts_with("127.") && a != "::1")
            })),
        "the record names this instance's addresses, not loopback: {record}"
    );
    let resolver = ready_resolver(&f);
    let peer_address = ns.address(3);
    let explained = wait_until(Duration::from_secs(5), || {
        resolver.output().lines().any(|line| {
            line.contains("held routes: 4 of 5 routes")
                && line.contains("api.lo.test resolves to this proxy (127.0.0.2)")
                && line.contains("api.zero.test resolves to this proxy (0.0.0.0)")
                && line.contains("api.mapped.test resolves to this proxy (::ffff:127.0.0.2)")
                && line.contains(&format!(
                    "api.peer.test resolves to another proxy of the fleet ({peer_address})"
                ))
        })
    });
    assert!(explained, "{}", resolver.output());

    let before = frontend_sessions(&f);
    let rejected_before = crate::metrics::backend_sessions(&f.haproxy)["reject_no_address"];
    for zone in WILDCARD_LOOPS {
        let answer = f.haproxy.probe(&format!("proxy.api.{zone}"));
        assert!(
            matches!(answer, Err(ProbeError::Closed)),
            "{zone}: {answer:?}"
        );
    }
    assert_eq!(
        f.haproxy.probe("proxy.api.good.test").unwrap(),
        good.banner(),
        "the route beside them serves"
    );
    assert_eq!(
        frontend_sessions(&f) - before,
        u64::try_from(WILDCARD_LOOPS.len()).unwrap() + 1,
        "only the client's connections, none from the proxy to itself"
    );
    let rejected = crate::metrics::backend_sessions(&f.haproxy)["reject_no_address"];
    assert_eq!(rejected - rejected_before, 4);
    let metrics = stats_get(&f, "/agent/metrics").body;
    assert_eq!(
        autoproxy_tests::observe::sample(&metrics, "autoproxy_unresolved_routes"),
        Some(4.0),
        "{metrics}"
    );
    assert_eq!(stats_get(&f, "/ready").status, 200);
    drop((good, peer));
}
