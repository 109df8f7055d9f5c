//! Address ranges ([`IpNet`]: an address and a prefix length, as the kernel's routes give
//! them). The proxy's own addresses are ranges, not a list of addresses: the kernel delivers
//! all of 127.0.0.0/8 locally through one route, and an AnyIP route (`ip route add local
//! 10.9.0.0/16 dev lo`) makes a whole range this host's. A membership test is a walk over a
//! handful of ranges; it needs no index.

use std::collections::BTreeSet;
use std::net::IpAddr;

pub use autoproxy::networks::IpNet;

/// `address/prefix`, its host bits cleared; `None` for a prefix longer than the family's
/// width (no such range).
pub fn net(address: IpAddr, prefix: u8) -> Option<IpNet> {
    IpNet::new(address, prefix).ok().map(|net| net.trunc())
}

/// Whether the range is a single address (`/32`, `/128`).
pub fn is_host(net: &IpNet) -> bool {
    net.prefix_len() == net.max_prefix_len()
}

/// A set of ranges.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Nets(BTreeSet<IpNet>);

impl Nets {
    pub fn insert(&mut self, net: IpNet) {
        self.0.insert(net);
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = &IpNet> {
        self.0.iter()
    }

    /// Whether a range holds `address` or, for an IPv4-mapped (`::ffff:a.b.c.d`) or
    /// IPv4-compatible (`::a.b.c.d`) IPv6 address, the IPv4 address it reaches: a connection
    /// to `::ffff:127.0.0.2` goes to 127.0.0.2. A range holds addresses of its own family
    /// only.
    pub fn contains(&self, address: IpAddr) -> bool {
        let as_v4 = as_ipv4(address);
        self.0
            .iter()
            .any(|net| net.contains(&address) || as_v4.is_some_and(|v4| net.contains(&v4)))
    }
}

impl FromIterator<IpNet> for Nets {
    fn from_iter<I: IntoIterator<Item = IpNet>>(iter: I) -> Nets {
        Nets(iter.into_iter().collect())
    }
}

impl Extend<IpNet> for Nets {
    fn extend<I: IntoIterator<Item = IpNet>>(&mut self, iter: I) {
        self.0.extend(iter);
    }
}

/// The IPv4 address an IPv6 one stands for: `::ffff:a.b.c.d` (mapped) and `::a.b.c.d`
/// (compatible, `::` and `::1` included, as 0.0.0.0 and 0.0.0.1, both in 0.0.0.0/8).
fn as_ipv4(address: IpAddr) -> Option<IpAddr> {
    match address {
        IpAddr::V6(v6) => v6.to_ipv4().map(IpAddr::V4),
        IpAddr::V4(_) => None,
    }
}

/// `address`, or the IPv4 address it stands for ([`as_ipv4`]): two spellings of one
/// destination compare equal.
pub fn canonical(address: IpAddr) -> IpAddr {
    as_ipv4(address).unwrap_or(address)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range(text: &str) -> Option<IpNet> {
        let (address, prefix) = text.split_once('/').expect("a range");
        net(
            address.parse().expect("an address"),
            prefix.parse().expect("a prefix"),
        )
    }

    #[test]
    fn ranges_hold_what_their_prefix_covers_with_mapped_forms_as_ipv4() {
        let nets: Nets = [
            "127.0.0.0/8",
            "0.0.0.0/8",
            "10.0.0.5/32",
            "fd00::/64",
            "::/128",
        ]
        .into_iter()
        .filter_map(range)
        .collect();
        let check = |address: &str, held: bool| {
            let ip: IpAddr = address.parse().expect("an address");
            assert_eq!(nets.contains(ip), held, "{address}");
        };
        check("127.0.0.1", true);
        check("127.0.0.2", true);
        check("127.255.255.254", true);
        check("0.0.0.0", true);
        check("0.1.2.3", true);
        check("10.0.0.5", true);
        check("10.0.0.6", false);
        check("128.0.0.1", false);
        check("::ffff:127.0.0.2", true);
        check("::ffff:10.0.0.5", true);
        check("::ffff:10.0.0.6", false);
        check("::127.0.0.2", true);
        check("::", true);
        check("::1", true);
        check("fd00::1234", true);
        check("fd00:0:0:1::1", false);
        check("fe80::1", false);
    }

    #[test]
    fn a_range_keeps_only_its_network_bits_and_a_prefix_past_its_width_is_none() {
        let shown = |text: &str| range(text).map(|net| net.to_string());
        assert_eq!(shown("127.0.0.1/8").as_deref(), Some("127.0.0.0/8"));
        assert_eq!(shown("10.1.2.3/0").as_deref(), Some("0.0.0.0/0"));
        assert_eq!(shown("fd00::1/64").as_deref(), Some("fd00::/64"));
        assert_eq!(shown("10.1.2.3/32").as_deref(), Some("10.1.2.3/32"));
        // Wider than the family: no range (the kernel writes none such).
        assert_eq!(shown("10.1.2.3/33"), None);
        assert_eq!(shown("fd00::1/129"), None);
        let everything = range("0.0.0.0/0").expect("a range");
        assert!(everything.contains(&"8.8.8.8".parse::<IpAddr>().expect("an address")));
        assert!(is_host(&IpNet::from(
            "10.0.0.5".parse::<IpAddr>().expect("an address")
        )));
        assert!(!is_host(&range("127.0.0.0/8").expect("a range")));
    }
}
