//! A DNS server, backends and an HAProxy whose config names that server: the world
//! autoproxy-resolver runs in, and what the tests read back from it.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use autoproxy::model::{Route, SniMatch};
use autoproxy::names::HostName;
use autoproxy::render::DEFAULT_TEMPLATE;
use autoproxy_agent::haproxy::{DeclaredSocket, declared_agent_socket};
use autoproxy_tests::dns::DnsServer;
use autoproxy_tests::proxy::{self, Backends, Haproxy, HaproxyFiles};
use autoproxy_tests::resolver::{self, ADDRESS_MAP, Knobs, Resolver};

/// The backend host name of route `i`.
pub(super) fn host(i: usize) -> String {
    format!("svc-{i:04}.test.internal")
}

/// The SNI that routes to `host(i)`.
pub(super) fn sni(i: usize) -> String {
    format!("proxy.api.z{i:04}.test.internal")
}

/// An address no backend listens on, distinct for every `i`.
pub(super) fn unused_address(i: usize) -> Ipv4Addr {
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
        back: HostName::parse(&host(i)).expect("a valid host"),
        port,
        records: vec![zone_name.with_prefix("api")],
        zone_name,
    }
}

/// A DNS server, backends, and an HAProxy serving `routes` routes whose config names the DNS
/// server as its nameserver; nothing resolves yet.
pub(super) struct Fixture {
    pub(super) dns: DnsServer,
    pub(super) backends: Backends,
    pub(super) haproxy: Haproxy,
}

impl Fixture {
    pub(super) fn start(routes: usize, backends: &[&str]) -> Fixture {
        let dns = DnsServer::start(SocketAddr::from((Ipv4Addr::LOCALHOST, 0))).expect("start dns");
        let backends = Backends::start(backends);
        let haproxy = Haproxy::new();
        let routes: Vec<Route> = (0..routes).map(|i| route(i, backends.port)).collect();
        let template = with_agent_backend(&haproxy);
        let options = haproxy.options(backends.port);
        let config = proxy::render_template(&template, 1, &routes, &options, &[dns.addr()]);
        haproxy.start(&config);
        Fixture {
            dns,
            backends,
            haproxy,
        }
    }

    pub(super) fn resolver(&self, knobs: Knobs) -> Resolver {
        Resolver::start(&self.haproxy.config_path(), knobs)
    }

    /// The address service's HTTP socket, as the installed config names it.
    pub(super) fn agent_socket(&self) -> PathBuf {
        let config = std::fs::read_to_string(self.haproxy.config_path()).expect("the config");
        match declared_agent_socket(&config) {
            DeclaredSocket::Path(path) => path,
            other => panic!("the config names no agent socket: {other:?}"),
        }
    }

    /// The address of backend `name`.
    pub(super) fn backend_ip(&self, name: &str) -> Ipv4Addr {
        match self.backends.get(name).addr.ip() {
            std::net::IpAddr::V4(ip) => ip,
            std::net::IpAddr::V6(_) => unreachable!("backends listen on IPv4 loopback"),
        }
    }

    pub(super) fn running_map(&self) -> BTreeMap<String, String> {
        resolver::show_map(&self.haproxy.stats_socket(), ADDRESS_MAP).unwrap_or_default()
    }

    pub(super) fn file_map(&self) -> BTreeMap<String, String> {
        resolver::read_map_file(&resolver::address_map_path(&self.haproxy.config_path()))
    }

    /// Polls until `done` holds, for at most `timeout`; whether it held.
    pub(super) fn wait_until(
        &self,
        timeout: Duration,
        mut done: impl FnMut(&Fixture) -> bool,
    ) -> bool {
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

    /// Waits (at most `timeout`) until HAProxy's address map is `want`; else fails with
    /// `what`, the map it holds and the resolver's output.
    #[track_caller]
    pub(super) fn assert_running_map(
        &self,
        timeout: Duration,
        want: &BTreeMap<String, String>,
        what: &str,
        resolver: &Resolver,
    ) {
        assert!(
            self.wait_until(timeout, |f| f.running_map() == *want),
            "{what}: {:?}\n{}",
            self.running_map(),
            resolver.output()
        );
    }

    /// Starts the resolver and waits (10 s at most) until HAProxy holds `table`'s addresses.
    pub(super) fn resolving(&self, knobs: Knobs, table: &[(String, Ipv4Addr)]) -> Resolver {
        let resolver = self.resolver(knobs);
        self.assert_running_map(
            Duration::from_secs(10),
            &expected(table),
            "first addresses",
            &resolver,
        );
        resolver
    }

    /// SNI `sni(i)` reaches backend `backend`.
    #[track_caller]
    pub(super) fn assert_routes(&self, i: usize, backend: &str) {
        assert_eq!(
            self.haproxy.probe(&sni(i)).expect("routed"),
            self.backends.get(backend).banner()
        );
    }
}

/// The default template, with the backend HAProxy forwards `/ready` to when it has none.
fn with_agent_backend(haproxy: &Haproxy) -> String {
    if DEFAULT_TEMPLATE.contains("backend autoproxy_agent") {
        return DEFAULT_TEMPLATE.to_owned();
    }
    let socket = haproxy.dir().join("agent.sock");
    format!(
        "{DEFAULT_TEMPLATE}\nbackend autoproxy_agent\n    server agent unix@{}\n",
        socket.display()
    )
}

pub(super) fn expected(entries: &[(String, Ipv4Addr)]) -> BTreeMap<String, String> {
    entries
        .iter()
        .map(|(name, ip)| (name.clone(), ip.to_string()))
        .collect()
}

/// The queries for `name` at or after `since`.
pub(super) fn asked(dns: &DnsServer, name: &str, since: Instant) -> usize {
    dns.queries()
        .iter()
        .filter(|q| q.name == name && q.at >= since)
        .count()
}

pub(super) const QUICK: Knobs = Knobs::QUICK;

/// The queries for `name` at or after `since` that came over TCP.
pub(super) fn asked_over_tcp(dns: &DnsServer, name: &str, since: Instant) -> usize {
    dns.queries()
        .iter()
        .filter(|q| q.name == name && q.at >= since && q.tcp)
        .count()
}

/// Addresses above loopback's, so that a backend (on 127.0.0.x) is the lowest of a set.
pub(super) fn high_address(i: u8) -> Ipv4Addr {
    Ipv4Addr::new(198, 18, 0, i)
}
