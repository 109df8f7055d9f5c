//! Where the kernel delivers connections locally: its `LOCAL` routes, with their prefix
//! lengths (`/proc/net/fib_trie` for IPv4, `/proc/net/ipv6_route` for IPv6), and the
//! interfaces' IPv6 addresses (`/proc/net/if_inet6`), as [`crate::proc::net`] reads them.
//! Read once per apply and once per change of the installed config; none that cannot be read,
//! and no line that does not hold a range (a prefix longer than its family's width among them).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::nets::{self, IpNet, Nets};

/// `RTF_LOCAL` of `/proc/net/ipv6_route`'s flags (`include/uapi/linux/ipv6_route.h`).
const RTF_LOCAL: u32 = 0x8000_0000;

/// Every range the kernel delivers locally.
pub fn nets() -> Nets {
    let mut nets = Nets::default();
    nets.extend(ipv4_local(&crate::proc::net("fib_trie")));
    nets.extend(ipv6_local(&crate::proc::net("ipv6_route")));
    nets.extend(ipv6_addresses(&crate::proc::net("if_inet6")));
    nets
}

/// This instance's addresses as another proxy of the fleet sees them: the single addresses
/// the kernel delivers locally, but loopback, link-local and unspecified ones (every host has
/// those; they say nothing about this one).
pub fn instance_addresses() -> Vec<IpAddr> {
    nets()
        .iter()
        .filter(|net| nets::is_host(net))
        .map(IpNet::addr)
        .filter(|address| match address {
            IpAddr::V4(v4) => !(v4.is_loopback() || v4.is_link_local() || v4.is_unspecified()),
            IpAddr::V6(v6) => {
                !(v6.is_loopback() || v6.is_unspecified() || v6.is_unicast_link_local())
                    && v6.to_ipv4().is_none()
            }
        })
        .collect()
}

/// The `LOCAL` entries of `/proc/net/fib_trie` (`|-- <address>` then `/<prefix> <scope>
/// LOCAL`): the interfaces' addresses as `/32`, 127.0.0.0 as `/8`, an AnyIP range as its own.
fn ipv4_local(trie: &str) -> Vec<IpNet> {
    let mut out = Vec::new();
    let mut leaf: Option<Ipv4Addr> = None;
    for line in trie.lines() {
        let line = line.trim_start();
        if let Some(rest) = line.strip_prefix("|-- ") {
            leaf = rest.trim().parse().ok();
            continue;
        }
        let mut words = line.split_whitespace();
        let (Some(prefix), Some(_scope), Some("LOCAL"), Some(address)) =
            (words.next(), words.next(), words.next(), leaf)
        else {
            continue;
        };
        if let Some(Ok(prefix)) = prefix.strip_prefix('/').map(str::parse::<u8>) {
            out.extend(nets::net(IpAddr::V4(address), prefix));
        }
    }
    out
}

/// The `RTF_LOCAL` rows of `/proc/net/ipv6_route` (destination, prefix length in hex, ...,
/// flags in the ninth column).
fn ipv6_local(routes: &str) -> Vec<IpNet> {
    routes
        .lines()
        .filter_map(|line| {
            let words: Vec<&str> = line.split_whitespace().collect();
            let destination = u128::from_str_radix(words.first()?, 16).ok()?;
            let prefix = u8::from_str_radix(words.get(1)?, 16).ok()?;
            let flags = u32::from_str_radix(words.get(8)?, 16).ok()?;
            let destination = IpAddr::V6(Ipv6Addr::from(destination));
            (flags & RTF_LOCAL != 0).then(|| nets::net(destination, prefix))?
        })
        .collect()
}

/// The addresses of `/proc/net/if_inet6` (32 hex digits first on each line), each alone.
fn ipv6_addresses(table: &str) -> Vec<IpNet> {
    table
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .filter_map(|hex| u128::from_str_radix(hex, 16).ok())
        .map(|bits| IpNet::from(IpAddr::V6(Ipv6Addr::from(bits))))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shown(nets: &[IpNet]) -> Vec<String> {
        nets.iter().map(IpNet::to_string).collect()
    }

    #[test]
    fn ipv4_local_routes_keep_their_prefix() {
        // As this kernel shows it: 127.0.0.0/8 is one LOCAL route; links and broadcasts are not.
        let trie = "Main:\n  +-- 0.0.0.0/0 3 0 5\n     |-- 0.0.0.0\n        /0 universe UNICAST\n\
                    \x20    +-- 127.0.0.0/8 2 0 2\n        +-- 127.0.0.0/31 1 0 0\n\
                    \x20          |-- 127.0.0.0\n              /8 host LOCAL\n\
                    \x20          |-- 127.0.0.1\n              /32 host LOCAL\n\
                    \x20       |-- 127.255.255.255\n           /32 link BROADCAST\n\
                    \x20    +-- 10.0.0.0/24 2 0 2\n           |-- 10.0.0.0\n\
                    \x20             /24 link UNICAST\n           |-- 10.0.0.5\n\
                    \x20             /32 host LOCAL\n           |-- 10.9.0.0\n\
                    \x20             /16 host LOCAL\n";
        assert_eq!(
            shown(&ipv4_local(trie)),
            ["127.0.0.0/8", "127.0.0.1/32", "10.0.0.5/32", "10.9.0.0/16"]
        );
    }

    #[test]
    fn ipv6_local_routes_and_addresses() {
        let routes = "fd000000000000000000000000000000 40 00000000000000000000000000000000 00 00000000000000000000000000000000 00000100 00000001 00000000 00000001     eth0\n\
                      00000000000000000000000000000001 80 00000000000000000000000000000000 00 00000000000000000000000000000000 00000000 00000002 00000000 80200001       lo\n\
                      fd000000000000000000000000000002 80 00000000000000000000000000000000 00 00000000000000000000000000000000 00000000 00000003 00000000 80200001     eth0\n\
                      fd090000000000000000000000000000 40 00000000000000000000000000000000 00 00000000000000000000000000000000 00000000 00000003 00000000 80200001       lo\n";
        assert_eq!(
            shown(&ipv6_local(routes)),
            ["::1/128", "fd00::2/128", "fd09::/64"]
        );
        let table = "00000000000000000000000000000001 01 80 10 80       lo\n\
                     fe800000000000000000000000000001 02 40 20 80     eth0\n";
        assert_eq!(shown(&ipv6_addresses(table)), ["::1/128", "fe80::1/128"]);
    }

    /// A line that holds no range is skipped, the others kept: a prefix that is not a number
    /// or is longer than its family's width, an address that does not parse.
    #[test]
    fn a_line_without_a_range_is_skipped() {
        let trie = "|-- 10.0.0.5\n/40 host LOCAL\n|-- 10.0.0.6\n/x host LOCAL\n\
                    |-- 10.0.0.x\n/32 host LOCAL\n|-- 10.0.0.7\n/32 host LOCAL\n";
        assert_eq!(shown(&ipv4_local(trie)), ["10.0.0.7/32"]);
        let route = |destination: &str, prefix: &str| {
            format!("{destination} {prefix} 0 00 0 00000000 00000003 00000000 80200001 lo\n")
        };
        let routes = [
            route("fd000000000000000000000000000002", "81"),
            route("fd000000000000000000000000000003", "zz"),
            route("fd00000000000000000000000000000x", "80"),
            route("fd000000000000000000000000000004", "80"),
        ]
        .concat();
        assert_eq!(shown(&ipv6_local(&routes)), ["fd00::4/128"]);
        let table =
            "fe80000000000000000000000000000x 02 40 20 80 eth0\nfe800000000000000000000000000001\n";
        assert_eq!(shown(&ipv6_addresses(table)), ["fe80::1/128"]);
    }
}
