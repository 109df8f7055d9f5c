//! Address ranges: an address and a prefix length, as the kernel's routes give them. The
//! proxy's own addresses are ranges, not a list of addresses: the kernel delivers all of
//! 127.0.0.0/8 locally through one route, and an AnyIP route (`ip route add local
//! 10.9.0.0/16 dev lo`) makes a whole range this host's. A membership test is a walk over a
//! handful of ranges; it needs no index.

use std::collections::BTreeSet;
use std::fmt;
use std::net::IpAddr;

/// `address/prefix`, its host bits zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Net {
    address: IpAddr,
    prefix: u8,
}

impl Net {
    /// `address/prefix`, the host bits cleared; a prefix wider than the family is its width.
    pub fn new(address: IpAddr, prefix: u8) -> Net {
        match address {
            IpAddr::V4(v4) => {
                let prefix = prefix.min(32);
                let bits = u32::from(v4) & mask32(prefix);
                Net {
                    address: IpAddr::V4(bits.into()),
                    prefix,
                }
            }
            IpAddr::V6(v6) => {
                let prefix = prefix.min(128);
                let bits = u128::from(v6) & mask128(prefix);
                Net {
                    address: IpAddr::V6(bits.into()),
                    prefix,
                }
            }
        }
    }

    /// `address` alone (`/32`, `/128`).
    pub fn host(address: IpAddr) -> Net {
        Net::new(address, if address.is_ipv4() { 32 } else { 128 })
    }

    /// Whether `address`, of the same family, lies in the range (no mapping between families:
    /// [`Nets::contains`] does that).
    pub fn contains(&self, address: IpAddr) -> bool {
        match (self.address, address) {
            (IpAddr::V4(net), IpAddr::V4(a)) => {
                u32::from(a) & mask32(self.prefix) == u32::from(net)
            }
            (IpAddr::V6(net), IpAddr::V6(a)) => {
                u128::from(a) & mask128(self.prefix) == u128::from(net)
            }
            _ => false,
        }
    }

    /// Whether the range is a single address.
    pub fn is_host(&self) -> bool {
        self.prefix == if self.address.is_ipv4() { 32 } else { 128 }
    }

    pub fn address(&self) -> IpAddr {
        self.address
    }
}

impl fmt::Display for Net {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.address, self.prefix)
    }
}

fn mask32(prefix: u8) -> u32 {
    u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0)
}

fn mask128(prefix: u8) -> u128 {
    u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0)
}

/// A set of ranges.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Nets(BTreeSet<Net>);

impl Nets {
    pub fn insert(&mut self, net: Net) {
        self.0.insert(net);
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = &Net> {
        self.0.iter()
    }

    /// Whether a range holds `address` or, for an IPv4-mapped (`::ffff:a.b.c.d`) or
    /// IPv4-compatible (`::a.b.c.d`) IPv6 address, the IPv4 address it reaches: a connection
    /// to `::ffff:127.0.0.2` goes to 127.0.0.2.
    pub fn contains(&self, address: IpAddr) -> bool {
        let as_v4 = as_ipv4(address);
        self.0
            .iter()
            .any(|net| net.contains(address) || as_v4.is_some_and(|v4| net.contains(v4)))
    }
}

impl FromIterator<Net> for Nets {
    fn from_iter<I: IntoIterator<Item = Net>>(iter: I) -> Nets {
        Nets(iter.into_iter().collect())
    }
}

impl Extend<Net> for Nets {
    fn extend<I: IntoIterator<Item = Net>>(&mut self, iter: I) {
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

    fn net(text: &str) -> Net {
        let (address, prefix) = text.split_once('/').expect("a range");
        Net::new(
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
        .map(net)
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
    fn a_range_keeps_only_its_network_bits() {
        assert_eq!(net("127.0.0.1/8").to_string(), "127.0.0.0/8");
        assert_eq!(net("10.1.2.3/40").to_string(), "10.1.2.3/32");
        assert_eq!(net("10.1.2.3/0").to_string(), "0.0.0.0/0");
        assert_eq!(net("fd00::1/64").to_string(), "fd00::/64");
        assert!(net("0.0.0.0/0").contains("8.8.8.8".parse().expect("an address")));
        assert!(Net::host("10.0.0.5".parse().expect("an address")).is_host());
        assert!(!net("127.0.0.0/8").is_host());
    }
}
