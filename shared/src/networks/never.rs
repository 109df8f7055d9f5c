//! Addresses a back record may never hold (docs/ARCHITECTURE.md, "The rules"): whatever
//! listens there is the proxy itself or something only the instance may reach, never a
//! member's backend.
//!
//! A back at a loopback or unspecified address sends each connection back into the proxy
//! (the kernel delivers all of 127.0.0.0/8 and 0.0.0.0 locally, not only the addresses the
//! proxy binds), so one client connection makes sessions until `maxconn`. Link-local holds the
//! instance metadata service and the VPC resolver; multicast and the limited broadcast
//! address are no single host at all.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Why an address can never be a backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NeverBackend {
    /// 127.0.0.0/8, `::1`.
    Loopback,
    /// 0.0.0.0/8 ("this host"), `::`.
    Unspecified,
    /// 169.254.0.0/16, fe80::/10.
    LinkLocal,
    /// 224.0.0.0/4, ff00::/8.
    Multicast,
    /// 255.255.255.255, the limited broadcast address.
    Broadcast,
}

impl fmt::Display for NeverBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            NeverBackend::Loopback => "a loopback address: the proxy itself",
            NeverBackend::Unspecified => "an unspecified address: this host, the proxy itself",
            NeverBackend::LinkLocal => {
                "a link-local address: the instance's own (metadata service, VPC resolver)"
            }
            NeverBackend::Multicast => "a multicast address: no single host",
            NeverBackend::Broadcast => "the broadcast address: no single host",
        })
    }
}

/// Why `address` can never be a backend, or `None` when it may be one. An IPv4-mapped
/// (`::ffff:a.b.c.d`) or IPv4-compatible (`::a.b.c.d`) IPv6 address is judged as its IPv4
/// address: that is where a connection to it goes.
pub fn never_backend(address: IpAddr) -> Option<NeverBackend> {
    match address {
        IpAddr::V4(v4) => never_backend_v4(v4),
        IpAddr::V6(v6) => never_backend_v6(v6),
    }
}

fn never_backend_v4(address: Ipv4Addr) -> Option<NeverBackend> {
    let [first, ..] = address.octets();
    if address.is_loopback() {
        Some(NeverBackend::Loopback)
    } else if first == 0 {
        Some(NeverBackend::Unspecified)
    } else if address.is_link_local() {
        Some(NeverBackend::LinkLocal)
    } else if address.is_multicast() {
        Some(NeverBackend::Multicast)
    } else if address.is_broadcast() {
        Some(NeverBackend::Broadcast)
    } else {
        None
    }
}

fn never_backend_v6(address: Ipv6Addr) -> Option<NeverBackend> {
    // `::` and `::1` first: as IPv4-compatible forms they would read as 0.0.0.0 and 0.0.0.1.
    if address.is_unspecified() {
        return Some(NeverBackend::Unspecified);
    }
    if address.is_loopback() {
        return Some(NeverBackend::Loopback);
    }
    if let Some(v4) = address.to_ipv4() {
        return never_backend_v4(v4);
    }
    if address.is_unicast_link_local() {
        Some(NeverBackend::LinkLocal)
    } else if address.is_multicast() {
        Some(NeverBackend::Multicast)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_unspecified_link_local_and_multicast_are_never_backends() {
        use NeverBackend::*;
        // IPv4-mapped and IPv4-compatible forms are judged as their IPv4 address.
        for (expected, addresses) in [
            (
                Some(Loopback),
                &["127.0.0.1", "127.0.0.2", "127.255.255.255", "::1"][..],
            ),
            (Some(Loopback), &["::ffff:127.0.0.2", "::127.0.0.2"]),
            (
                Some(Unspecified),
                &["0.0.0.0", "0.1.2.3", "::", "::ffff:0.0.0.0"],
            ),
            (
                Some(LinkLocal),
                &["169.254.169.254", "169.254.169.253", "fe80::1", "febf::1"],
            ),
            (Some(LinkLocal), &["::ffff:169.254.169.254"]),
            (
                Some(Multicast),
                &["224.0.0.1", "239.255.255.250", "ff02::1"],
            ),
            (
                Some(Broadcast),
                &["255.255.255.255", "::ffff:255.255.255.255"],
            ),
            (
                None,
                &[
                    "10.0.0.1",
                    "172.16.0.1",
                    "192.168.1.1",
                    "128.0.0.1",
                    "1.0.0.0",
                ],
            ),
            (
                None,
                &[
                    "169.255.0.1",
                    "::ffff:10.0.0.1",
                    "2001:db8::1",
                    "fd00:ec2::254",
                    "fec0::1",
                ],
            ),
        ] {
            for address in addresses {
                let parsed: IpAddr = address.parse().unwrap();
                assert_eq!(never_backend(parsed), expected, "{address}");
            }
        }
    }
}
