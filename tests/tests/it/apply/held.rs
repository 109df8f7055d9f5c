//! A route whose host has no address yet is held (kept at the target it served with, or in
//! with no address, its connections rejected as having no address), counted in the fleet
//! record, and served by the address service once its host resolves, without another apply.

use std::net::Ipv4Addr;

use autoproxy::names::HostName;
use autoproxy_agent::resolve::observe::ready::WARM_UP;
use autoproxy_tests::observe::CloudWatch;
use autoproxy_tests::prometheus;
use autoproxy_tests::resolver::{Knobs, Resolver};

use super::runtime::{assert_maps_equal_files, file_map, held_map};
use super::*;

pub(super) const QUICK: Knobs = Knobs::QUICK;

pub(super) fn ip(f: &Fixture, backend: &str) -> Ipv4Addr {
    match f.backends.get(backend).addr.ip() {
        std::net::IpAddr::V4(ip) => ip,
        std::net::IpAddr::V6(_) => unreachable!("backends listen on IPv4 loopback"),
    }
}

/// A config routing `g1.test` to backend `a` by address and `named.test` to `host` by name.
fn config(f: &Fixture, dns: &DnsServer, generation: u64, host: &str) -> String {
    let mut named = proxy::api_route("named.test", f.backends.get("a"));
    named.back = HostName::parse(host).unwrap();
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

/// Whether `sni` serves with backend `backend` within 10 s.
fn serves_soon(f: &Fixture, sni: &str, backend: &str) -> bool {
    wait_until(Duration::from_secs(10), || {
        f.haproxy
            .probe(sni)
            .is_ok_and(|banner| banner == f.backends.get(backend).banner())
    })
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
    assert!(serves_soon(&f, key, "b"), "{}", resolver.output());
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
    assert!(serves_soon(&f, key, "a"), "{}", resolver.output());
    assert_maps_equal_files(&f);
}

/// An apply on a running instance asks the address service only for the hosts new to its
/// generation, and for none when it has none. The installed config's hosts that have no address are the service's own: it
/// reads them from that config and retries them at its pace. Asking for them again cost a new
/// instance's second apply, during the fill, 0.57 s at 10,000 routes.
#[test]
fn an_apply_asks_the_address_service_only_for_the_hosts_new_to_its_generation() {
    let f = Fixture::new(&["a", "b"]);
    let dns = DnsServer::start("127.0.0.1:0".parse().unwrap()).unwrap();
    // Generation 1: `named.test` to a host nobody answers (NXDOMAIN): held, no address.
    let run = f.apply(&f.upload(&config(&f, &dns, 1, "api.never.test")));
    assert!(run.success(), "{run}");
    let resolver = Resolver::start(&f.haproxy.config_path(), QUICK);
    let socket = f.haproxy.dir().join(autoproxy_agent::control::SOCKET);
    assert!(
        wait_until(Duration::from_secs(10), || socket.exists()),
        "the service listens: {}",
        resolver.output()
    );

    // Generation 2: the same, and `fresh.test` to a host that resolves.
    dns.set("api.fresh.test", &[ip(&f, "b")]);
    let mut fresh = proxy::api_route("fresh.test", f.backends.get("a"));
    fresh.back = HostName::parse("api.fresh.test").unwrap();
    let mut named = proxy::api_route("named.test", f.backends.get("a"));
    named.back = HostName::parse("api.never.test").unwrap();
    let routes = [
        proxy::api_route("g1.test", f.backends.get("a")),
        named,
        fresh,
    ];
    let second = proxy::render_with(
        2,
        &routes,
        &f.haproxy.options(f.backends.port),
        &[dns.addr()],
    );
    let run = f.apply(&f.upload(&second));
    assert!(run.success(), "{run}");
    // Before: "2 new host(s): 1 resolved, 1 without an address yet (first: api.never.test…".
    assert!(
        run.stdout
            .contains("addresses: 1 new host(s): 1 resolved, 0 without an address yet"),
        "asked for more than its new host:\n{run}"
    );
    assert_eq!(
        f.haproxy.probe("proxy.api.fresh.test").unwrap(),
        f.backends.get("b").banner(),
        "{}",
        resolver.output()
    );
    assert!(f.haproxy.probe("proxy.api.named.test").is_err(), "held");

    // Generation 3: `g1.test` gone, no new host. The held one is still the service's.
    let third = proxy::render_with(
        3,
        &routes[1..],
        &f.haproxy.options(f.backends.port),
        &[dns.addr()],
    );
    let run = f.apply(&f.upload(&third));
    assert!(run.success(), "{run}");
    // Before: "1 new host(s): 0 resolved, 1 without an address yet (first: api.never.test…".
    assert!(
        run.stdout.contains(
            "addresses: no new host; 1 of the installed config's without an address are the address service's"
        ),
        "asked for the installed config's host:\n{run}"
    );
    assert!(f.haproxy.probe("proxy.api.g1.test").is_err(), "removed");
    assert!(f.haproxy.probe("proxy.api.named.test").is_err(), "held");
}

/// `count` routes `n<i>.test` to hosts `h<i>.named.test`, all by name.
pub(super) fn named_config(f: &Fixture, dns: &DnsServer, generation: u64, count: usize) -> String {
    let named: Vec<(String, String)> = (0..count)
        .map(|i| (format!("n{i}"), format!("h{i}.named.test")))
        .collect();
    let named: Vec<(&str, &str)> = named
        .iter()
        .map(|(s, h)| (s.as_str(), h.as_str()))
        .collect();
    named_routes(f, dns.addr(), generation, &named)
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
    named.back = HostName::parse("api.nowhere.test").unwrap();
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

/// The address service started on the fixture's config, once `/ready` answers 200 (within
/// the warm-up).
pub(super) fn ready_resolver(f: &Fixture) -> Resolver {
    let resolver = Resolver::start(&f.haproxy.config_path(), QUICK);
    let ready = wait_until(WARM_UP, || stats_get(f, "/ready").status == 200);
    assert!(
        ready,
        "/ready within the warm-up: {:?}\n{}",
        stats_get(f, "/ready"),
        resolver.output()
    );
    resolver
}

/// `GET path` through HAProxy's stats listener, as a load balancer's health check asks it.
pub(super) fn stats_get(f: &Fixture, path: &str) -> prometheus::Answer {
    prometheus::get(f.haproxy.stats, path).unwrap_or_else(|err| panic!("GET {path}: {err}"))
}

/// Routes `<sni>.test` to each `(sni, host)`, by name, through the nameserver `dns`.
fn named_routes(f: &Fixture, dns: SocketAddr, generation: u64, routes: &[(&str, &str)]) -> String {
    let routes: Vec<_> = routes
        .iter()
        .map(|(sni, host)| {
            let mut route = proxy::api_route(&format!("{sni}.test"), f.backends.get("a"));
            route.back = HostName::parse(host).unwrap();
            route
        })
        .collect();
    proxy::render_with(
        generation,
        &routes,
        &f.haproxy.options(f.backends.port),
        &[dns],
    )
}

/// One member's broken records never make the proxy unready: a route whose host answers
/// NXDOMAIN and one whose host is never answered are held, counted and explained, `/ready`
/// answers 200 within the warm-up, and the other route serves.
#[test]
fn routes_whose_hosts_do_not_resolve_are_held_and_the_proxy_is_ready() {
    let f = Fixture::new(&["a"]);
    let dns = DnsServer::start("127.0.0.1:0".parse().unwrap()).unwrap();
    dns.set("api.good.test", &[ip(&f, "a")]);
    dns.drop_queries("api.silent.test", true);
    let routes = [
        ("good", "api.good.test"),
        ("gone", "api.gone.test"),
        ("silent", "api.silent.test"),
    ];
    // A first install waits for no address: the apply that resolves the hosts (itself, with
    // no address service yet) is the next one, on a proxy that serves.
    f.install_first(&named_routes(&f, dns.addr(), 1, &routes[..1]));
    let (run, record) = f.apply_and_record(&f.upload(&named_routes(&f, dns.addr(), 2, &routes)));
    assert!(run.success(), "{run}");
    assert_eq!(record["unresolved_routes"], 2, "{record}");
    let resolver = ready_resolver(&f);
    f.assert_routes("good.test", "a");
    for held in ["proxy.api.gone.test", "proxy.api.silent.test"] {
        let answer = f.haproxy.probe(held);
        assert!(
            matches!(answer, Err(ProbeError::Closed)),
            "{held}: {answer:?}"
        );
    }
    let metrics = stats_get(&f, "/agent/metrics").body;
    assert_eq!(
        autoproxy_tests::observe::sample(&metrics, "autoproxy_unresolved_routes"),
        Some(2.0),
        "{metrics}"
    );
    assert_eq!(
        autoproxy_tests::observe::sample(&metrics, "autoproxy_ready"),
        Some(1.0)
    );
    let explained = wait_until(Duration::from_secs(5), || {
        let output = resolver.output();
        output.lines().any(|line| {
            line.contains("held routes: 2 of 3 routes")
                && line.contains("api.gone.test (1 route: NXDOMAIN")
                && line.contains("api.silent.test (1 route: timeout")
        })
    });
    assert!(explained, "{}", resolver.output());
}

/// The proxy's own failure still makes it unready: a resolver that answers nothing at all
/// keeps `/ready` at 503 after the first pass is over, and says why.
#[test]
fn a_resolver_that_answers_nothing_makes_the_proxy_unready() {
    let f = Fixture::new(&["a"]);
    // Bound, never read: every query to it goes unanswered.
    let silent = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let nameserver = silent.local_addr().unwrap();
    let routes = [("one", "api.one.test"), ("two", "api.two.test")];
    let run = f.apply(&f.upload(&named_routes(&f, nameserver, 1, &routes)));
    assert!(run.success(), "{run}");
    let resolver = Resolver::start(&f.haproxy.config_path(), QUICK);
    let passed = wait_until(Duration::from_secs(10), || {
        let answer = stats_get(&f, "/ready");
        answer.status == 503
            && !answer.body.contains("first pass")
            && answer
                .body
                .contains("the resolver has had no DNS answer yet")
    });
    assert!(
        passed,
        "{:?}\n{}",
        stats_get(&f, "/ready"),
        resolver.output()
    );
    let metrics = stats_get(&f, "/agent/metrics").body;
    assert_eq!(
        autoproxy_tests::observe::sample(&metrics, "autoproxy_ready"),
        Some(0.0)
    );
    drop(silent);
}
