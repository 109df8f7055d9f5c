use super::*;

const A: &str = "111111111111";
const B: &str = "222222222222";
const C: &str = "333333333333";

/// A's VPC 10.1.0.0/16 and IPv6 range, B's 10.2.0.0/16 and 100.64.0.0/16 (a secondary range),
/// and 10.9.0.0/16 in both (a VPC shared with both, or one range reused); C's public range.
fn networks() -> Networks {
    let mut networks = Networks::default();
    for (account, range) in [
        (A, "10.1.0.0/16"),
        (A, "2600:1f18:1::/56"),
        (A, "10.9.0.0/16"),
        (B, "10.2.0.0/16"),
        (B, "100.64.0.0/16"),
        (B, "10.9.0.0/16"),
        (B, "10.1.200.0/24"),
        (C, "52.95.0.0/24"),
    ] {
        networks.insert(account, range.parse().unwrap());
    }
    networks
}

fn member(account: &str, network: &str) -> Border {
    Border::Member {
        account: account.into(),
        network: network.parse().unwrap(),
    }
}

/// One line per case: the address, the route's account, the verdict with public backs
/// refused (the default) and with them allowed.
fn check(address: &str, account: &str, refused: Result<(), Border>, allowed: Result<(), Border>) {
    let parsed: IpAddr = address.parse().unwrap();
    for (public, expected) in [
        (PublicBacks::Refused, refused),
        (PublicBacks::Allowed, allowed),
    ] {
        let borders = Borders::new(networks(), public);
        assert_eq!(
            borders.judge(parsed, account),
            expected,
            "{address} for {account}, public backs {public:?}"
        );
    }
}

#[test]
fn a_back_may_point_only_into_its_own_accounts_networks_or_a_private_unknown_one() {
    use NeverBackend::*;
    let never = |why| Err(Border::Never(why));
    // Its own network, and a network in its own and another's (the route's own).
    check("10.1.2.3", A, Ok(()), Ok(()));
    check("10.9.0.5", A, Ok(()), Ok(()));
    check("10.9.0.5", B, Ok(()), Ok(()));
    check("2600:1f18:1:ff::10", A, Ok(()), Ok(()));
    // Another member's network, its secondary range, and its range inside A's wider one.
    check(
        "10.2.0.10",
        A,
        Err(member(B, "10.2.0.0/16")),
        Err(member(B, "10.2.0.0/16")),
    );
    check(
        "::ffff:10.2.0.10",
        A,
        Err(member(B, "10.2.0.0/16")),
        Err(member(B, "10.2.0.0/16")),
    );
    check(
        "100.64.3.4",
        A,
        Err(member(B, "100.64.0.0/16")),
        Err(member(B, "100.64.0.0/16")),
    );
    check(
        "10.1.2.3",
        B,
        Err(member(A, "10.1.0.0/16")),
        Err(member(A, "10.1.0.0/16")),
    );
    check("10.1.200.1", A, Ok(()), Ok(()));
    check(
        "10.1.200.1",
        C,
        Err(member(A, "10.1.0.0/16")),
        Err(member(A, "10.1.0.0/16")),
    );
    check(
        "2600:1f18:1::1",
        B,
        Err(member(A, "2600:1f18:1::/56")),
        Err(member(A, "2600:1f18:1::/56")),
    );
    // A member's public range is that member's: its own, another's, never the internet's.
    check("52.95.0.7", C, Ok(()), Ok(()));
    check(
        "52.95.0.7",
        A,
        Err(member(C, "52.95.0.0/24")),
        Err(member(C, "52.95.0.0/24")),
    );
    // A private address of no member's network (the proxies' VPC, a transit gateway's).
    check("10.200.0.1", A, Ok(()), Ok(()));
    check("172.31.0.2", A, Ok(()), Ok(()));
    check("192.168.4.4", A, Ok(()), Ok(()));
    check("fd12:3456::1", A, Ok(()), Ok(()));
    check("100.127.0.1", A, Ok(()), Ok(()));
    // Never a backend, whoever's route and whatever the setting: the link-local range
    // (metadata service, VPC resolver), multicast, broadcast, loopback.
    for address in [
        "169.254.169.254",
        "169.254.10.2",
        "::ffff:169.254.169.254",
        "fe80::1",
    ] {
        check(address, A, never(LinkLocal), never(LinkLocal));
    }
    check("64:ff9b::a9fe:a9fe", A, never(LinkLocal), never(LinkLocal));
    check("224.0.0.251", A, never(Multicast), never(Multicast));
    check("ff05::2", A, never(Multicast), never(Multicast));
    check("255.255.255.255", A, never(Broadcast), never(Broadcast));
    check("127.0.0.1", A, never(Loopback), never(Loopback));
    // Globally routable: refused unless allowed. Never sent any traffic: judged here only.
    for address in [
        "8.8.8.8",
        "1.1.1.1",
        "52.94.76.10",
        "3.5.140.2",
        "198.20.0.1",
        "100.128.0.1",
        "172.32.0.1",
        "2600:1f18:2::1",
        "2001:4860:4860::8888",
        "64:ff9b::808:808",
        "::ffff:8.8.4.4",
    ] {
        check(address, A, Err(Border::Public), Ok(()));
    }
    // Special ranges that are not the internet.
    for address in [
        "192.0.2.1",
        "198.51.100.1",
        "203.0.113.9",
        "198.18.0.1",
        "240.0.0.1",
    ] {
        check(address, A, Ok(()), Ok(()));
    }
    for address in ["2001:db8::1", "100::1", "64:ff9b:1::1", "fec0::1"] {
        check(address, A, Ok(()), Ok(()));
    }
}

#[test]
fn of_several_other_members_the_lowest_account_and_its_narrowest_network_is_named() {
    let mut networks = networks();
    networks.insert(C, "10.2.0.0/24".parse().unwrap());
    networks.insert(C, "10.2.0.0/20".parse().unwrap());
    let borders = Borders::new(networks, PublicBacks::Refused);
    let address = "10.2.0.1".parse().unwrap();
    assert_eq!(borders.judge(address, A), Err(member(B, "10.2.0.0/16")));
    assert_eq!(borders.judge(address, B), Ok(()));
    assert_eq!(
        borders.judge(address, "444444444444"),
        Err(member(B, "10.2.0.0/16"))
    );
    assert_eq!(
        borders.judge("10.2.0.1".parse().unwrap(), B),
        Ok(()),
        "B's own, although inside C's too"
    );
}

#[test]
fn a_range_with_host_bits_set_is_stored_as_its_network() {
    let mut networks = Networks::default();
    networks.insert(A, "10.1.2.3/16".parse().unwrap());
    assert_eq!(
        networks.ranges()[A]
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>(),
        ["10.1.0.0/16"]
    );
}

#[test]
fn unjudged_borders_refuse_only_what_is_never_a_backend() {
    let borders = Borders::unjudged();
    assert_eq!(borders.judge("8.8.8.8".parse().unwrap(), A), Ok(()));
    assert_eq!(
        borders.judge("169.254.169.254".parse().unwrap(), A),
        Err(Border::Never(NeverBackend::LinkLocal))
    );
}
