//! This proxy's own addresses and names. A route whose host resolves to one of them would
//! send each connection back into the proxy, which would route it again, and again, until
//! `maxconn`: one member's record (an A record naming the proxy's address, a CNAME to the
//! proxy's name) would take the proxy down for everyone. Such a host gets no address in the
//! address map, so its routes are held like any route whose host does not resolve: counted,
//! explained, their connections rejected as `reject_no_address`, never forwarded.
//!
//! Own addresses: every address a `bind` line of the installed config names, and, for a
//! wildcard bind (`:443`, `*:443`, `0.0.0.0:443`, `:::443`), every local address of the
//! instance (the kernel's `LOCAL` routes, `/proc/net/fib_trie`, and `/proc/net/if_inet6`).
//! Own names: the `#@proxy` lines of the config (the peering proxy's host names, the load
//! balancer's among them); the addresses they resolve to are own addresses too, whatever the
//! port, since a load balancer in front of the proxies forwards to them.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// This proxy's own addresses and names, as the installed config and the instance say.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Own {
    /// Addresses the config binds, and the instance's local ones for a wildcard bind.
    pub addresses: BTreeSet<IpAddr>,
    /// The proxy's own host names (`#@proxy` lines), lower-cased without a trailing dot.
    pub names: BTreeSet<String>,
}

/// Why a host may not be routed: it is a loop.
pub fn loop_reason(name: &str, address: IpAddr) -> String {
    format!("{name} resolves to this proxy ({address}): a loop, never routed")
}

impl Own {
    /// What the config's text says, with the instance's local addresses when a bind is a
    /// wildcard.
    pub fn of(config: &str) -> Own {
        let (mut addresses, wildcard) = bound(config);
        if wildcard {
            addresses.extend(local_addresses());
        }
        Own {
            addresses,
            names: proxy_names(config),
        }
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
            || self.addresses.contains(&address)
            || resolved
                .values()
                .any(|addresses| addresses.contains(&address));
        own.then(|| loop_reason(name, address))
    }
}

/// The addresses the `bind` lines of `config` name, and whether any is a wildcard.
pub fn bound(config: &str) -> (BTreeSet<IpAddr>, bool) {
    let mut addresses = BTreeSet::new();
    let mut wildcard = false;
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
            let Some((host, _port)) = spec.rsplit_once(':') else {
                continue;
            };
            let host = host.trim_start_matches('[').trim_end_matches(']');
            match host.parse::<IpAddr>() {
                Ok(address) if address.is_unspecified() => wildcard = true,
                Ok(address) => {
                    addresses.insert(address);
                }
                Err(_) if host.is_empty() || host == "*" || host == ":" => wildcard = true,
                Err(_) => {}
            }
        }
    }
    (addresses, wildcard)
}

/// The names of the config's `#@proxy` lines.
pub fn proxy_names(config: &str) -> BTreeSet<String> {
    config
        .lines()
        .filter_map(|line| line.strip_prefix("#@proxy "))
        .filter_map(|name| autoproxy::names::HostName::parse(name.trim()).ok())
        .map(|name| name.as_str().to_owned())
        .collect()
}

/// The instance's local addresses; none that cannot be read.
fn local_addresses() -> BTreeSet<IpAddr> {
    let mut addresses = BTreeSet::new();
    if let Ok(trie) = std::fs::read_to_string("/proc/net/fib_trie") {
        addresses.extend(local_ipv4(&trie).into_iter().map(IpAddr::V4));
    }
    if let Ok(table) = std::fs::read_to_string("/proc/net/if_inet6") {
        addresses.extend(local_ipv6(&table).into_iter().map(IpAddr::V6));
    }
    addresses
}

/// The `/32 host LOCAL` leaves of `/proc/net/fib_trie`: the addresses of the interfaces.
fn local_ipv4(trie: &str) -> BTreeSet<Ipv4Addr> {
    let mut out = BTreeSet::new();
    let mut leaf = None;
    for line in trie.lines() {
        let line = line.trim_start();
        if let Some(rest) = line.strip_prefix("|-- ") {
            leaf = rest.trim().parse::<Ipv4Addr>().ok();
        } else if line.starts_with("/32 host LOCAL")
            && let Some(address) = leaf
        {
            out.insert(address);
        }
    }
    out
}

/// The addresses of `/proc/net/if_inet6` (32 hex digits first on each line).
fn local_ipv6(table: &str) -> BTreeSet<Ipv6Addr> {
    table
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .filter_map(|hex| u128::from_str_radix(hex, 16).ok())
        .map(Ipv6Addr::from)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().expect("an address")
    }

    #[test]
    fn binds_name_own_addresses_and_wildcards() {
        let check = |config: &str, want: &[&str], wildcard: bool| {
            let want: BTreeSet<IpAddr> = want.iter().map(|a| ip(a)).collect();
            assert_eq!(bound(config), (want, wildcard), "{config}");
        };
        check("    bind 127.0.0.1:443\n", &["127.0.0.1"], false);
        check(
            "  bind 10.0.0.5:443,ipv6@[fd00::5]:443 ssl\n bind 127.0.0.1:8404\n",
            &["10.0.0.5", "fd00::5", "127.0.0.1"],
            false,
        );
        check("bind :443\n", &[], true);
        check("bind *:443\n", &[], true);
        check("bind 0.0.0.0:443\n", &[], true);
        check("bind :::443\n", &[], true);
        check("bind [::]:443\n", &[], true);
        check(
            "bind unix@/run/a.sock\nbind /run/b.sock\n# bind 10.9.9.9:1\n",
            &[],
            false,
        );
        check("    server route 10.1.1.1:443\n", &[], false);
    }

    #[test]
    fn proxy_lines_name_own_names() {
        let config = "#@proxy Peering-Proxy.Tools.Example.com.\n#@proxy nlb.example\n\
                      #@proxy bad name\n#@route a.x h:443 api 1 Z\n";
        let names: Vec<String> = proxy_names(config).into_iter().collect();
        assert_eq!(names, ["nlb.example", "peering-proxy.tools.example.com"]);
    }

    #[test]
    fn a_host_at_an_own_address_or_name_is_a_loop() {
        let own = Own {
            addresses: [ip("10.0.0.5")].into(),
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
        check("nlb.example", "10.0.9.9", true);
        assert_eq!(
            own.looped("x.example", ip("10.0.0.5"), &resolved),
            Some("x.example resolves to this proxy (10.0.0.5): a loop, never routed".to_owned())
        );
    }

    #[test]
    fn local_addresses_are_the_local_leaves_and_if_inet6() {
        let trie = "Main:\n  +-- 0.0.0.0/0 3 0 5\n     |-- 0.0.0.0\n        /0 universe UNICAST\n\
                    Local:\n  +-- 10.0.0.0/24 2 0 2\n     |-- 10.0.0.0\n        /24 link UNICAST\n\
                    \x20    |-- 10.0.0.5\n        /32 host LOCAL\n     |-- 127.0.0.1\n\
                    \x20       /32 host LOCAL\n     |-- 10.0.0.255\n        /32 link BROADCAST\n";
        let got: Vec<Ipv4Addr> = local_ipv4(trie).into_iter().collect();
        assert_eq!(got, [Ipv4Addr::new(10, 0, 0, 5), Ipv4Addr::LOCALHOST]);
        let table = "00000000000000000000000000000001 01 80 10 80       lo\n\
                     fe800000000000000000000000000001 02 40 20 80     eth0\n";
        let got: Vec<Ipv6Addr> = local_ipv6(table).into_iter().collect();
        assert_eq!(got, [Ipv6Addr::LOCALHOST, "fe80::1".parse().unwrap()]);
    }
}
