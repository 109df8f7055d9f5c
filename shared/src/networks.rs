//! Where a member's back may point: the members' networks, and the judgment of one address
//! against them (docs/ARCHITECTURE.md, "Where a back may point").
//!
//! The proxies connect from the proxy subnets, which every member admits for its own routes:
//! a back at another member's address would carry one member's clients into another's
//! network, and a back at a public address would carry them to the internet through the
//! central NAT. So an address is refused when it is
//! * never a backend ([`never_backend`]: loopback, unspecified, link-local, multicast,
//!   broadcast), whoever's route it is;
//! * inside another member's networks and not inside the route's own account's: a range in
//!   both (a VPC shared with the route's account, or two members' VPCs of one range) is the
//!   route's own, since nothing here can tell the two apart (the proxy VPC's route tables
//!   decide where such an address goes);
//! * globally routable, unless the operator allows public backs ([`PublicBacks`]).
//!
//! Anything else (a private address of no member's network: the proxies' own VPC, a network
//! reached through a transit gateway) is allowed. The judgment is pure and costs a handful of
//! hash lookups per address (one per distinct prefix length), whatever the number of members.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::net::{IpAddr, Ipv4Addr};

pub use ipnet::IpNet;

mod never;
pub use never::{NeverBackend, never_backend};
mod public;
pub use public::is_global;
mod vpcs;
pub use vpcs::{VpcRead, refreshed};

/// Whether a back may be at a globally routable address (`ALLOW_PUBLIC_BACKS`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum PublicBacks {
    /// The default: no route reaches the internet.
    #[default]
    Refused,
    Allowed,
}

/// Each member account's networks (its VPCs' ranges, and the operator's extra ranges).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Networks {
    ranges: BTreeMap<String, BTreeSet<IpNet>>,
}

impl Networks {
    /// Adds `network` (its host bits cleared) to `account`'s networks.
    pub fn insert(&mut self, account: &str, network: IpNet) {
        self.ranges
            .entry(account.to_owned())
            .or_default()
            .insert(network.trunc());
    }

    /// Every account's networks.
    pub fn ranges(&self) -> &BTreeMap<String, BTreeSet<IpNet>> {
        &self.ranges
    }

    /// Adds every network of `other`.
    pub fn extend(&mut self, other: &Networks) {
        for (account, networks) in &other.ranges {
            for network in networks {
                self.insert(account, *network);
            }
        }
    }

    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }
}

/// Why an address is refused as a back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Border {
    /// Never a backend, whoever's route it is.
    Never(NeverBackend),
    /// Inside another member's network (the lowest such account, its narrowest network).
    Member { account: String, network: IpNet },
    /// Globally routable, and public backs are not allowed.
    Public,
}

impl fmt::Display for Border {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Border::Never(why) => write!(f, "{why}: never a backend"),
            Border::Member { account, network } => write!(
                f,
                "inside account {account}'s network {network}, another member's: a route may \
                 only reach its own account's networks"
            ),
            Border::Public => f.write_str(
                "a globally routable address, the internet: public backs are not allowed \
                 (ALLOW_PUBLIC_BACKS)",
            ),
        }
    }
}

/// The members' networks, indexed, and whether public backs are allowed: what judges an
/// address.
#[derive(Debug, Clone, Default)]
pub struct Borders {
    networks: Networks,
    public: PublicBacks,
    /// Every network, its host bits cleared → the accounts it belongs to.
    by_network: HashMap<IpNet, Vec<String>>,
    /// The distinct prefix lengths of `by_network`, per family (false: IPv4).
    lengths: BTreeSet<(bool, u8)>,
}

impl Borders {
    pub fn new(networks: Networks, public: PublicBacks) -> Self {
        let mut by_network: HashMap<IpNet, Vec<String>> = HashMap::new();
        let mut lengths = BTreeSet::new();
        for (account, ranges) in &networks.ranges {
            for network in ranges {
                lengths.insert((matches!(network, IpNet::V6(_)), network.prefix_len()));
                by_network
                    .entry(*network)
                    .or_default()
                    .push(account.clone());
            }
        }
        Borders {
            networks,
            public,
            by_network,
            lengths,
        }
    }

    /// No member's networks and public backs allowed: only the never-a-backend ranges are
    /// refused (what the matcher judges where no borders are given).
    pub fn unjudged() -> Self {
        Borders::new(Networks::default(), PublicBacks::Allowed)
    }

    pub fn networks(&self) -> &Networks {
        &self.networks
    }

    pub fn public(&self) -> PublicBacks {
        self.public
    }

    /// Whether a route of `account` may forward to `address`, and if not, why.
    pub fn judge(&self, address: IpAddr, account: &str) -> Result<(), Border> {
        let address = destination(address);
        if let Some(why) = never_backend(address) {
            return Err(Border::Never(why));
        }
        let mut other: Option<(&str, IpNet)> = None;
        for (network, accounts) in self.containing(address) {
            for holder in accounts {
                if holder == account {
                    return Ok(());
                }
                let narrower = other.is_none_or(|(held, seen)| {
                    (holder.as_str(), std::cmp::Reverse(network.prefix_len()))
                        < (held, std::cmp::Reverse(seen.prefix_len()))
                });
                if narrower {
                    other = Some((holder, network));
                }
            }
        }
        if let Some((account, network)) = other {
            return Err(Border::Member {
                account: account.to_owned(),
                network,
            });
        }
        if self.public == PublicBacks::Refused && is_global(address) {
            return Err(Border::Public);
        }
        Ok(())
    }

    /// The networks that hold `address`, with their accounts.
    fn containing(&self, address: IpAddr) -> impl Iterator<Item = (IpNet, &Vec<String>)> {
        let v6 = address.is_ipv6();
        self.lengths
            .iter()
            .filter(move |(family, _)| *family == v6)
            .filter_map(move |(_, length)| {
                let network = IpNet::new(address, *length).ok()?.trunc();
                Some((network, self.by_network.get(&network)?))
            })
    }
}

/// Where a connection to `address` goes: an IPv4-mapped or IPv4-compatible address is its
/// IPv4 address, and so is an address of the NAT64 well-known prefix (64:ff9b::/96), which a
/// NAT64 gateway forwards to the IPv4 address it embeds.
pub fn destination(address: IpAddr) -> IpAddr {
    let IpAddr::V6(v6) = address else {
        return address;
    };
    if v6.is_unspecified() || v6.is_loopback() {
        return address;
    }
    if let Some(v4) = v6.to_ipv4() {
        return IpAddr::V4(v4);
    }
    let [a, b, c, d, e, f, _, _] = v6.segments();
    if [a, b, c, d, e, f] == [0x64, 0xff9b, 0, 0, 0, 0] {
        let [.., w, x, y, z] = v6.octets();
        return IpAddr::V4(Ipv4Addr::new(w, x, y, z));
    }
    address
}

#[cfg(test)]
mod tests;
