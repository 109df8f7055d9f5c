//! This proxy's own addresses and names. A route whose host resolves to one of them would
//! send each connection back into the proxy, which would route it again, and again, until
//! `maxconn`: one member's record (an A record naming the proxy's address, a CNAME to the
//! proxy's name) would take the proxy down for everyone. Such a host gets no address in the
//! address map, so its routes are held like any route whose host does not resolve: counted,
//! explained, their connections rejected as `reject_no_address`, never forwarded.
//!
//! Own addresses (ranges, [`Nets`]): every address a `bind` line of the installed config
//! names and, for a wildcard bind (`:443`, `*:443`, `0.0.0.0:443`, `:::443`) on a port a
//! route forwards to (a port range counts as any), every range the kernel delivers locally
//! (its `LOCAL` routes with their prefixes: all of 127.0.0.0/8, not only 127.0.0.1;
//! [`local`]); 0.0.0.0/8 and `::` always, which mean this host. An
//! IPv4-mapped or IPv4-compatible IPv6 address is judged as its IPv4 address. A specific bind
//! keeps to its own addresses: nothing listens on the others, so a backend there is no loop.
//! Own names: the `#@proxy` lines of the config (the peering proxy's host names, the load
//! balancer's among them; [`autoproxy::artifact::proxy_names`]); the addresses they resolve to
//! are own addresses too, whatever the port, since a load balancer in front of the proxies
//! forwards to them. The fleet's other
//! proxies ([`peers`]): a back at one of them is held as a back at this one is, or two
//! proxies that each judge only themselves could pass a connection back and forth.

mod local;
mod nets;
pub mod peers;

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::Path;

use autoproxy::artifact;
use nets::IpNet;

pub use local::instance_addresses;
pub use nets::Nets;

/// This proxy's own addresses and names, as the installed config, the instance and the fleet
/// report say.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Own {
    /// Where this proxy itself listens: the ranges a connection to its port lands in it.
    pub local: Nets,
    /// The fleet's other proxies' addresses.
    pub peers: Nets,
    /// The proxy's own host names (`#@proxy` lines), lower-cased without a trailing dot.
    pub names: BTreeSet<String>,
}

/// Why a host may not be routed: it is a loop.
fn loop_reason(name: &str, address: IpAddr) -> String {
    format!("{name} resolves to this proxy ({address}): a loop, never routed")
}

/// Why a host may not be routed: it is another proxy of the fleet.
fn peer_reason(name: &str, address: IpAddr) -> String {
    format!("{name} resolves to another proxy of the fleet ({address}): a loop, never routed")
}

impl Own {
    /// What the config's text says, with the instance's local ranges when a bind is a
    /// wildcard, and the other proxies' addresses [`peers::FILE`] in `config_dir` holds.
    pub fn of(config: &str, config_dir: &Path) -> Own {
        let (addresses, wildcard) = bind_addresses(config);
        let mut local: Nets = addresses.into_iter().map(IpNet::from).collect();
        // "This host" in either family, whatever the bind.
        local.extend(nets::net(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 8));
        local.insert(IpNet::from(IpAddr::V6(Ipv6Addr::UNSPECIFIED)));
        // Only a wildcard on a port a route forwards to makes the whole host a loop: one on
        // another port (a stats listener's `:8404`) answers a forwarded connection, once.
        let ports = route_ports(config);
        let routed = |port: &Option<u16>| port.is_none_or(|port| ports.contains(&port));
        if wildcard.iter().any(routed) {
            local.extend(local::nets().iter().copied());
        }
        Own {
            local,
            peers: peers::read(config_dir),
            names: artifact::proxy_names(config),
        }
    }

    /// Whether nothing is own (no address, no name): every host may be routed.
    pub fn is_empty(&self) -> bool {
        self.local.is_empty() && self.peers.is_empty() && self.names.is_empty()
    }

    /// Why `name` at `address` may not be routed (`resolved`: what the own names resolve to);
    /// none when it may.
    pub fn looped(
        &self,
        name: &str,
        address: IpAddr,
        resolved: &BTreeMap<String, Vec<IpAddr>>,
    ) -> Option<String> {
        let own = self.names.contains(name)
            || self.local.contains(address)
            || resolved
                .values()
                .flatten()
                .any(|a| nets::canonical(*a) == nets::canonical(address));
        if own {
            Some(loop_reason(name, address))
        } else {
            self.peers
                .contains(address)
                .then(|| peer_reason(name, address))
        }
    }
}

/// The addresses the `bind` lines of `config` name, and the ports of its wildcard binds (none
/// for a port that is not one number, such as a range: it may be any).
fn bind_addresses(config: &str) -> (BTreeSet<IpAddr>, BTreeSet<Option<u16>>) {
    let mut addresses = BTreeSet::new();
    let mut wildcard = BTreeSet::new();
    for line in config.lines() {
        let mut words = line.split_whitespace();
        if words.next() != Some("bind") {
            continue;
        }
        for spec in words.next().unwrap_or_default().split(',') {
            let spec = spec
                .strip_prefix("ipv4@")
                .or_else(|| spec.strip_prefix("ipv6@"))
                .unwrap_or(spec);
            if spec.contains('@') || spec.starts_with('/') {
                continue; // unix@, abns@, fd@, sockpair@, a path: no IP address
            }
            let Some((host, port)) = spec.rsplit_once(':') else {
                continue;
            };
            let host = host.trim_start_matches('[').trim_end_matches(']');
            match host.parse::<IpAddr>() {
                Ok(address) if !address.is_unspecified() => {
                    addresses.insert(address);
                }
                Err(_) if !(host.is_empty() || host == "*" || host == ":") => {}
                _ => {
                    wildcard.insert(port.parse().ok());
                }
            }
        }
    }
    (addresses, wildcard)
}

/// The ports the route lines (`#@route`, `#@suffix`) of `config` forward to.
fn route_ports(config: &str) -> BTreeSet<u16> {
    artifact::route_targets(config)
        .filter_map(|target| artifact::target_host(target)?.1.parse().ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().expect("an address")
    }

    fn net(text: &str) -> IpNet {
        text.parse().expect("a range")
    }

    #[test]
    fn binds_name_own_addresses_and_wildcards() {
        let check = |config: &str, want: &[&str], wildcard: &[Option<u16>]| {
            let want: BTreeSet<IpAddr> = want.iter().map(|a| ip(a)).collect();
            let wildcard: BTreeSet<Option<u16>> = wildcard.iter().copied().collect();
            assert_eq!(bind_addresses(config), (want, wildcard), "{config}");
        };
        check("    bind 127.0.0.1:443\n", &["127.0.0.1"], &[]);
        check(
            "  bind 10.0.0.5:443,ipv6@[fd00::5]:443 ssl\n bind 127.0.0.1:8404\n",
            &["10.0.0.5", "fd00::5", "127.0.0.1"],
            &[],
        );
        check("bind :443\n", &[], &[Some(443)]);
        check("bind *:443\n", &[], &[Some(443)]);
        check("bind 0.0.0.0:443\n", &[], &[Some(443)]);
        check("bind :::443\n", &[], &[Some(443)]);
        check("bind [::]:443\nbind :8000-8010\n", &[], &[Some(443), None]);
        check(
            "bind unix@/run/a.sock\nbind /run/b.sock\n# bind 10.9.9.9:1\n",
            &[],
            &[],
        );
        check("    server route 10.1.1.1:443\n", &[], &[]);
    }

    #[test]
    fn a_host_at_an_own_address_or_name_is_a_loop() {
        let own = Own {
            local: [IpNet::from(ip("10.0.0.5")), net("127.0.0.0/8")]
                .into_iter()
                .collect(),
            peers: [IpNet::from(ip("10.0.3.3"))].into_iter().collect(),
            names: ["nlb.example".to_owned()].into(),
        };
        let resolved: BTreeMap<String, Vec<IpAddr>> = [(
            "nlb.example".to_owned(),
            vec![ip("10.0.1.7"), ip("10.0.2.7")],
        )]
        .into();
        let check = |name: &str, address: &str, looped: bool| {
            assert_eq!(
                own.looped(name, ip(address), &resolved).is_some(),
                looped,
                "{name} {address}"
            );
        };
        check("api.a.example", "10.0.0.9", false);
        check("api.a.example", "10.0.0.5", true);
        check("api.a.example", "10.0.2.7", true);
        check("api.a.example", "::ffff:10.0.2.7", true);
        check("nlb.example", "10.0.9.9", true);
        check("api.a.example", "127.0.0.2", true);
        check("api.a.example", "::ffff:127.0.0.2", true);
        check("api.a.example", "10.0.3.3", true);
        check("api.a.example", "10.0.3.4", false);
        assert_eq!(
            own.looped("x.example", ip("10.0.0.5"), &resolved),
            Some("x.example resolves to this proxy (10.0.0.5): a loop, never routed".to_owned())
        );
        assert_eq!(
            own.looped("x.example", ip("10.0.3.3"), &resolved),
            Some(
                "x.example resolves to another proxy of the fleet (10.0.3.3): a loop, never routed"
                    .to_owned()
            )
        );
    }

    #[test]
    fn this_host_is_own_whatever_the_bind_and_a_wildcard_adds_all_of_loopback() {
        let dir = tempfile::tempdir().expect("temp dir");
        let check = |bind: &str, address: &str, looped: bool| {
            let config = format!(
                "frontend f\n    bind {bind}\n#@route proxy.api.a.example api.a.example:443 api 1 Z\n"
            );
            let own = Own::of(&config, dir.path());
            let got = own.looped("api.a.example", ip(address), &BTreeMap::new());
            assert_eq!(
                got.is_some(),
                looped,
                "bind {bind}, back {address}: {got:?}"
            );
        };
        for bind in ["127.0.0.1:443", ":443"] {
            check(bind, "127.0.0.1", true);
            check(bind, "0.0.0.0", true);
            check(bind, "0.1.2.3", true);
            check(bind, "::", true);
            check(bind, "::ffff:127.0.0.1", true);
            check(bind, "10.213.250.2", false);
        }
        // A specific bind: other loopback addresses are other hosts (nothing listens there).
        check("127.0.0.1:443", "127.0.0.2", false);
        check("127.0.0.1:443", "::ffff:127.0.0.2", false);
        // A wildcard bind: the kernel delivers all of 127.0.0.0/8 here.
        check(":443", "127.0.0.2", true);
        check(":443", "127.254.0.9", true);
        check(":443", "::ffff:127.0.0.2", true);
        check(":443", "::127.0.0.2", true);
        // A wildcard on a port no route forwards to (a stats listener's) answers, once.
        check("127.0.0.1:443\n    bind :8404", "127.0.0.2", false);
        check("127.0.0.1:443\n    bind :8000-8500", "127.0.0.2", true);
    }
}
