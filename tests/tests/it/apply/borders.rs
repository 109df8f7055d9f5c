//! Never into another member's network or the link-local range: a route whose back resolves
//! (through a CNAME, which the generator never sees as an address) into another member's
//! network or to a link-local address is held by the agent, at the apply and in the address
//! service, as a loop is (counted, explained, its connections rejected as having no address),
//! and never forwarded; the same address serves the member it belongs to. Public addresses are
//! judged by the table tests of `autoproxy::networks` and `autoproxy_agent::borders` alone:
//! nothing here connects to one.

use std::net::Ipv4Addr;
use std::sync::Arc;

use autoproxy::names::HostName;
use autoproxy::networks::{Borders, Networks, PublicBacks};
use autoproxy_tests::backends::Backend;
use autoproxy_tests::netns::Namespace;

use super::held::{ready_resolver, stats_get, wait_until};
use super::*;

const A: &str = "111111111111";
const B: &str = "222222222222";

/// A backend in the namespace that counts the connections it accepted.
fn counting(
    ns: &Namespace,
    address: Ipv4Addr,
    port: u16,
    name: &str,
) -> (Backend, Arc<AtomicUsize>) {
    let listener = ns.listen((address, port).into()).unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let banner = format!("backend {name}\n");
    let backend = Backend::serving(name, listener, {
        let accepted = Arc::clone(&accepted);
        move |mut stream, _| {
            use std::io::{Read, Write};
            accepted.fetch_add(1, Ordering::SeqCst);
            let _ = stream.write_all(banner.as_bytes());
            let _ = stream.shutdown(std::net::Shutdown::Write);
            let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
            let mut sink = [0u8; 4096];
            while matches!(stream.read(&mut sink), Ok(n) if n > 0) {}
        }
    });
    (backend, accepted)
}

/// The estate: A's network holds the namespace's `.2`, B's its `.3`; public backs refused.
fn borders(ns: &Namespace) -> Borders {
    let mut networks = Networks::default();
    networks.insert(A, format!("{}/32", ns.address(2)).parse().unwrap());
    networks.insert(B, format!("{}/32", ns.address(3)).parse().unwrap());
    Borders::new(networks, PublicBacks::Refused)
}

/// Routes as the generator renders them, borders included: `(zone, account, back)` each, at
/// `port`.
fn config(
    f: &Fixture,
    dns: &DnsServer,
    ns: &Namespace,
    port: u16,
    generation: u64,
    routes: &[(&str, &str, &str)],
) -> String {
    let routes: Vec<_> = routes
        .iter()
        .map(|(zone, account, back)| {
            let mut route = proxy::api_route(zone, f.backends.get("a"));
            route.account = (*account).to_owned();
            route.back = HostName::parse(back).unwrap();
            route.port = port;
            route
        })
        .collect();
    let mut options = f.haproxy.options(f.backends.port);
    options.backend_port = None;
    autoproxy::render::Renderer::new(autoproxy::render::DEFAULT_TEMPLATE)
        .unwrap()
        .render_within(
            &autoproxy::render::RenderInput {
                routes: &routes,
                resolvers: &[dns.addr()],
                proxies: &[],
                options: &options,
                generation,
                generated_at: "2026-01-01T00:00:00Z",
                trigger: "test",
            },
            &borders(ns),
        )
        .unwrap()
        .text
}

/// The routes of the first generations: A's to its own network, B's to its own, and A's
/// CNAMEs into B's network and to a link-local address.
const ROUTES: [(&str, &str, &str); 4] = [
    ("own.a.test", A, "api.own.a.test"),
    ("own.b.test", B, "api.own.b.test"),
    ("into-b.a.test", A, "api.into-b.a.test"),
    ("link.a.test", A, "api.link.a.test"),
];

/// Member A's routes whose back resolves into member B's network (a CNAME to B's internal
/// load balancer) or to a link-local address (a CNAME to a record at 169.254.x.x) are held at
/// the apply, with no address service (the apply resolves by itself), and in the service,
/// explained with the route, the address and whose network it is; their connections are
/// rejected as having no address and no backend there accepts one. A's route into its own
/// network serves, and so does B's into B's, at the address A may not reach. A later
/// generation's new route into B's network, applied while the service runs (the apply asks
/// it, naming the route's account), is held as well.
#[test]
fn a_back_that_resolves_into_another_members_network_or_link_local_is_held() {
    let ns = Namespace::create("bd").expect("a network namespace (needs root)");
    let link_local = ns.link_local();
    ns.add_address(link_local)
        .expect("a link-local address in the namespace");
    let (own_a, own_a_hits) = counting(&ns, ns.address(2), 0, "own-a");
    let port = own_a.addr.port();
    let (own_b, own_b_hits) = counting(&ns, ns.address(3), port, "own-b");
    let (link, link_hits) = counting(&ns, link_local, port, "link");
    let f = Fixture::new(&["a"]);
    let dns = DnsServer::start("127.0.0.1:0".parse().unwrap()).unwrap();
    dns.set("api.own.a.test", &[ns.address(2)]);
    dns.set("internal-lb.b.test", &[ns.address(3)]);
    dns.cname("api.own.b.test", "internal-lb.b.test");
    dns.cname("api.into-b.a.test", "internal-lb.b.test");
    dns.set("metadata.a.test", &[link_local]);
    dns.cname("api.link.a.test", "metadata.a.test");

    f.install_first(&config(&f, &dns, &ns, port, 1, &ROUTES));
    let text = config(&f, &dns, &ns, port, 2, &ROUTES);
    assert!(
        text.contains(&format!("\n#@network {B} {}/32\n", ns.address(3))),
        "{text}"
    );
    let (run, record) = f.apply_and_record(&f.upload(&text));
    assert!(run.success(), "{run}");
    assert_eq!(
        record["unresolved_routes"], 2,
        "held at the apply: {record}\n{run}"
    );

    let resolver = ready_resolver(&f);
    let b_net = format!(
        "inside account {B}'s network {}/32, another member's",
        ns.address(3)
    );
    let explained = wait_until(Duration::from_secs(5), || {
        resolver.output().lines().any(|line| {
            line.contains("held routes: 2 of 4 routes")
                && line.contains(&format!(
                    "api.into-b.a.test resolves to {}: {b_net}",
                    ns.address(3)
                ))
                && line.contains(&format!("(route proxy.api.into-b.a.test of account {A})"))
                && line.contains(&format!(
                    "api.link.a.test resolves to {link_local}: a link-local address"
                ))
        })
    });
    assert!(explained, "{}", resolver.output());

    let rejected_before = crate::metrics::backend_sessions(&f.haproxy)["reject_no_address"];
    for held in ["into-b.a.test", "link.a.test"] {
        let answer = f.haproxy.probe(&format!("proxy.api.{held}"));
        assert!(
            matches!(answer, Err(ProbeError::Closed)),
            "{held}: {answer:?}"
        );
    }
    assert_eq!(
        f.haproxy.probe("proxy.api.own.a.test").unwrap(),
        own_a.banner()
    );
    assert_eq!(
        f.haproxy.probe("proxy.api.own.b.test").unwrap(),
        own_b.banner()
    );
    let rejected = crate::metrics::backend_sessions(&f.haproxy)["reject_no_address"];
    assert_eq!(rejected - rejected_before, 2);
    assert_eq!(
        link_hits.load(Ordering::SeqCst),
        0,
        "nothing reached the link-local backend"
    );
    assert_eq!(
        own_b_hits.load(Ordering::SeqCst),
        1,
        "only B's own route reached B's backend"
    );
    assert_eq!(own_a_hits.load(Ordering::SeqCst), 1);
    let metrics = stats_get(&f, "/agent/metrics").body;
    assert_eq!(
        autoproxy_tests::observe::sample(&metrics, "autoproxy_unresolved_routes"),
        Some(2.0),
        "{metrics}"
    );

    // A new route of A into B's network, applied while the service runs: the apply names
    // the route's account, the service holds it before the config that routes it is in.
    dns.cname("api.late.a.test", "internal-lb.b.test");
    let mut routes = ROUTES.to_vec();
    routes.push(("late.a.test", A, "api.late.a.test"));
    let (run, record) = f.apply_and_record(&f.upload(&config(&f, &dns, &ns, port, 3, &routes)));
    assert!(run.success(), "{run}");
    assert_eq!(record["unresolved_routes"], 3, "{record}\n{run}");
    let answer = f.haproxy.probe("proxy.api.late.a.test");
    assert!(matches!(answer, Err(ProbeError::Closed)), "{answer:?}");
    assert_eq!(
        own_b_hits.load(Ordering::SeqCst),
        1,
        "{}",
        resolver.output()
    );
    let ready = wait_until(Duration::from_secs(5), || {
        stats_get(&f, "/ready").status == 200
    });
    assert!(
        ready,
        "a member's record never makes a proxy unready: {:?}",
        stats_get(&f, "/ready")
    );
    drop((own_a, own_b, link));
}
