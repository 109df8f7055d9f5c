//! Which addresses are globally routable: the IANA special-purpose registries
//! (RFC 6890 and its updates) turned around. The standard library's `is_global` is not
//! stable yet.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Whether `address` is reachable on the internet: none of the private, shared, reserved,
/// documentation, benchmarking, loopback, link-local, multicast or broadcast ranges. An
/// IPv4-mapped address is judged as its IPv4 address.
pub fn is_global(address: IpAddr) -> bool {
    match super::destination(address) {
        IpAddr::V4(v4) => is_global_v4(v4),
        IpAddr::V6(v6) => is_global_v6(v6),
    }
}

fn is_global_v4(address: Ipv4Addr) -> bool {
    let [a, b, c, _] = address.octets();
    let special = a == 0
        || address.is_private()
        || address.is_loopback()
        || address.is_link_local()
        || address.is_multicast()
        || address.is_broadcast()
        || address.is_documentation()
        // 100.64.0.0/10, shared address space (carrier-grade NAT; a VPC may use it).
        || (a == 100 && (64..128).contains(&b))
        // 192.0.0.0/24, IETF protocol assignments.
        || (a == 192 && b == 0 && c == 0)
        // 198.18.0.0/15, benchmarking (a VPC may use 198.19.0.0/16).
        || (a == 198 && (b == 18 || b == 19))
        // 240.0.0.0/4, reserved.
        || a >= 240;
    !special
}

fn is_global_v6(address: Ipv6Addr) -> bool {
    let [first, second, third, ..] = address.segments();
    let special = address.is_unspecified()
        || address.is_loopback()
        || address.is_multicast()
        || address.is_unique_local()
        || address.is_unicast_link_local()
        // fec0::/10, the deprecated site-local range.
        || (first & 0xffc0) == 0xfec0
        // 2001:db8::/32, documentation.
        || (first == 0x2001 && second == 0x0db8)
        // 100::/64, discard-only.
        || (first == 0x0100 && second == 0 && third == 0 && address.segments()[3] == 0)
        // 64:ff9b:1::/48, local-use IPv4/IPv6 translation.
        || (first == 0x0064 && second == 0xff9b && third == 1);
    !special
}
