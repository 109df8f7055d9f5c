//! The default template's data plane at a few thousand routes, on a real HAProxy: every
//! route, first or last, exact or suffix, reaches its backend through the map lookups, and
//! HAProxy sends no DNS query when it checks, starts or reloads such a config (the
//! addresses come from the address map, which autoproxy-resolver keeps).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use autoproxy::artifact::MapFiles;
use autoproxy::model::{Route, SniMatch};
use autoproxy::names::HostName;
use autoproxy_tests::dns::DnsServer;
use autoproxy_tests::proxy::HaproxyFiles;
use autoproxy_tests::proxy::{self, Backends, Haproxy, ProbeError};

mod shares;

/// The backends: one for each end of each kind of route, one for every route between.
const BACKENDS: [&str; 5] = [
    "api-first",
    "api-last",
    "ingress-first",
    "ingress-last",
    "other",
];

/// Zones in the test estate; each has an API route and an internal-ingress route.
const ZONES: usize = 2_000;
/// The counting DNS server that stands in for the VPC resolver, reachable through the
/// resolv.conf of the namespace HAProxy runs in (port 53: what libc asks).
const RESOLVER: &str = "127.0.0.77:53";

fn zone(index: usize) -> String {
    format!("z{index:04}.dataplane.test")
}

fn route(index: usize, sni_match: SniMatch) -> Route {
    let zone_name = HostName::parse(&zone(index)).unwrap();
    let (rule, sni, backend) = match sni_match {
        SniMatch::Exact => (
            "api",
            format!("proxy.api.{zone_name}"),
            zone_name.with_prefix("api"),
        ),
        SniMatch::Suffix => (
            "ingress-int",
            format!(".int.{zone_name}"),
            zone_name.with_prefix("ingress-int"),
        ),
    };
    Route {
        rule: rule.to_owned(),
        account: "111111111111".to_owned(),
        zone_id: format!("Z{index:05}"),
        sni,
        sni_match,
        records: vec![backend.clone()],
        back: backend,
        port: 443,
        zone_name,
    }
}

/// 4,000 routes whose backends are host names, as the rules produce them.
fn routes() -> Vec<Route> {
    (0..ZONES)
        .flat_map(|i| [route(i, SniMatch::Exact), route(i, SniMatch::Suffix)])
        .collect()
}

/// The address map autoproxy-resolver would have written: the first and last zone's
/// backends on their own loopback addresses, every other name on `other`.
fn address_map(backends: &Backends) -> String {
    let ip = |name: &str| backends.get(name).addr.ip();
    let mut map = String::new();
    for index in 0..ZONES {
        let (api, ingress) = match index {
            0 => (ip("api-first"), ip("ingress-first")),
            i if i == ZONES - 1 => (ip("api-last"), ip("ingress-last")),
            _ => (ip("other"), ip("other")),
        };
        let zone = zone(index);
        map.push_str(&format!("api.{zone} {api}\ningress-int.{zone} {ingress}\n"));
    }
    map
}

/// Writes the address map as autoproxy-resolver would have.
fn write_addresses(haproxy: &Haproxy, text: &str) {
    let path = haproxy.dir().join(MapFiles::stable().addresses);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

#[test]
fn first_last_exact_and_suffix_routes_reach_their_backends_at_four_thousand_routes() {
    let backends = Backends::start(&BACKENDS);
    let haproxy = Haproxy::new();
    let config = proxy::render(1, &routes(), &haproxy.options(backends.port));
    write_addresses(&haproxy, &address_map(&backends));
    haproxy.start(&config);

    let last = zone(ZONES - 1);
    let first = zone(0);
    for (sni, backend) in [
        (format!("proxy.api.{first}"), "api-first"),
        (format!("proxy.api.{last}"), "api-last"),
        (format!("PROXY.API.{}", last.to_uppercase()), "api-last"),
        (format!("proxy.api.{}", zone(1234)), "other"),
        (format!("app.int.{first}"), "ingress-first"),
        (format!("app.int.{last}"), "ingress-last"),
        // The longest suffix is found however many labels stand in front of it.
        (format!("a.b.c.d.e.f.g.int.{last}"), "ingress-last"),
    ] {
        let banner = haproxy
            .probe(&sni)
            .unwrap_or_else(|err| panic!("SNI {sni}: {err}\n{}", haproxy.log()));
        assert_eq!(banner, backends.get(backend).banner(), "SNI {sni}");
    }
    for sni in [
        // The suffix itself is not under it; nor is a name in no zone, or too deep a name.
        format!("int.{last}"),
        "proxy.api.unknown.test".to_owned(),
        format!("a.b.c.d.e.f.g.h.i.int.{last}"),
        format!("api.{last}"),
    ] {
        let answer = haproxy.probe(&sni);
        assert!(
            matches!(answer, Err(ProbeError::Closed)),
            "SNI {sni}: {answer:?}"
        );
    }
}

#[test]
fn a_route_without_an_address_yet_is_closed_not_misrouted() {
    let backends = Backends::start(&["a"]);
    let haproxy = Haproxy::new();
    let routes = [route(0, SniMatch::Exact), route(1, SniMatch::Exact)];
    let config = proxy::render(1, &routes, &haproxy.options(backends.port));
    let ip = backends.get("a").addr.ip();
    write_addresses(&haproxy, &format!("api.{} {ip}\n", zone(0)));
    haproxy.start(&config);
    assert_eq!(
        haproxy.probe(&format!("proxy.api.{}", zone(0))).unwrap(),
        "backend a"
    );
    let answer = haproxy.probe(&format!("proxy.api.{}", zone(1)));
    assert!(matches!(answer, Err(ProbeError::Closed)), "{answer:?}");
}

/// Runs `script` (its arguments `args` as `$1`, `$2`, ...) in a private mount namespace whose
/// /etc/resolv.conf points at the counting server: every libc lookup lands there.
fn in_namespace(dir: &Path, script: &str, args: &[&str]) -> std::process::Output {
    let resolv = dir.join("resolv.conf");
    let ip = RESOLVER.split(':').next().unwrap();
    std::fs::write(
        &resolv,
        format!("nameserver {ip}\noptions timeout:1 attempts:1\n"),
    )
    .unwrap();
    Command::new("unshare")
        .args(["-m", "sh", "-c"])
        .arg(format!(
            "mount --bind \"$1\" /etc/resolv.conf && shift && {script}"
        ))
        .arg("sh")
        .arg(&resolv)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run unshare (util-linux)")
}

#[test]
fn check_start_and_reload_of_a_large_config_send_no_dns_query() {
    let dns = DnsServer::start(RESOLVER.parse::<SocketAddr>().unwrap()).unwrap();
    let backends = Backends::start(&BACKENDS);
    for index in 0..ZONES {
        dns.set(&format!("api.{}", zone(index)), &[Ipv4Addr::LOCALHOST]);
        dns.set(
            &format!("ingress-int.{}", zone(index)),
            &[Ipv4Addr::LOCALHOST],
        );
    }
    // The harness sees a lookup made the way HAProxy would make one: without this, a quiet
    // counter could mean a broken harness.
    let control = in_namespace(
        Path::new(&std::env::temp_dir()),
        "getent hosts \"$1\"",
        &["api.z0000.dataplane.test"],
    );
    assert!(control.status.success(), "{control:?}");
    assert!(
        dns.count() >= 1,
        "the control lookup did not reach the counting server"
    );
    dns.clear_log();

    let haproxy = Haproxy::new();
    let config = proxy::render(1, &routes(), &haproxy.options(backends.port));
    proxy::install_config(haproxy.dir(), &config);
    let cfg = haproxy.config_path();
    let cfg = cfg.to_str().unwrap();
    let checked = in_namespace(haproxy.dir(), "haproxy -c -f \"$1\"", &[cfg]);
    assert!(checked.status.success(), "{checked:?}");
    assert_eq!(
        dns.count(),
        0,
        "haproxy -c asked DNS: {:?}",
        dns.queries().first()
    );

    let pid = haproxy.dir().join("haproxy.pid");
    let master_cli = haproxy.master_socket();
    let started = in_namespace(
        haproxy.dir(),
        "exec haproxy -W -D -S \"$3\" -f \"$1\" -p \"$2\" </dev/null >/dev/null 2>&1",
        &[cfg, pid.to_str().unwrap(), master_cli.to_str().unwrap()],
    );
    assert!(started.status.success(), "{started:?}");
    assert!(haproxy.wait_for_generation(1, Duration::from_secs(10)));

    let second = proxy::render(2, &routes(), &haproxy.options(backends.port));
    proxy::install_config(haproxy.dir(), &second);
    let master = std::fs::read_to_string(&pid).unwrap();
    let status = Command::new("kill")
        .args(["-USR2", master.trim()])
        .status()
        .unwrap();
    assert!(status.success());
    assert!(
        haproxy.wait_for_generation(2, Duration::from_secs(10)),
        "{}",
        haproxy.log()
    );
    // Any query the new worker would send at start has been sent by now.
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(
        dns.count(),
        0,
        "HAProxy asked DNS at start or reload: {:?}",
        dns.queries().first()
    );
    let sni = format!("proxy.api.{}", zone(ZONES - 1));
    let answer = haproxy.probe(&sni);
    assert!(
        matches!(answer, Err(ProbeError::Closed)),
        "no address is known yet, so no route: {answer:?}"
    );
}
