//! What a back record's values and a zone's refused names give: the address judgment, and one
//! warning for every refused name of a zone.

use super::*;

/// The `api` pair of zone `z.` whose A back holds `values`.
fn api_at(values: &[&str]) -> Vec<RecordSet> {
    vec![
        RecordSet::new("api.z.", "A", values),
        RecordSet::new("proxy.api.z.", "CNAME", &[PROXY]),
    ]
}

#[test]
fn a_back_at_an_address_that_is_never_a_backend_gives_no_route() {
    const ROUTED: &[&str] = &["api proxy.api.z -> api.z:443"];
    // (the back's values, routed, the warning's fragment)
    for (values, routes, warns) in [
        (&["10.0.0.1"][..], ROUTED, &[][..]),
        (&["10.0.0.1", "10.0.0.2"], ROUTED, &[]),
        (&["127.0.0.1"], &[], &["at 127.0.0.1, a loopback"][..]),
        (&["127.0.0.2"], &[], &["at 127.0.0.2, a loopback"]),
        (&["0.0.0.0"], &[], &["at 0.0.0.0, an unspecified"]),
        (&["169.254.169.254"], &[], &["a link-local"]),
        (&["224.0.0.251"], &[], &["at 224.0.0.251, a multicast"]),
        // One such value among good ones refuses the back: the proxy may take any of them.
        (&["10.0.0.1", "127.0.0.2"], &[], &["at 127.0.0.2"]),
        // A value Route53 would not hold is not judged here.
        (&["not-an-address"], ROUTED, &[]),
    ] {
        check_modes(api_at(values), routes, warns);
    }
    // The warning names the record and its zone.
    let (_, warnings) = matched(&zone("1", "Z1", "z.", api_at(&["127.0.0.2"])));
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].starts_with("zone Z1 in account 1: back record api.z is an A record"),
        "{warnings:?}"
    );
    // An alias A back has no values (its target is a name): it routes as before
    // (`sni_back_routes_the_back_name_on_its_port`).
    // A CNAME back's value is a name, not an address: the built-in ingress rule routes it.
    let mut records = ingress_pair("z.");
    records[1] = RecordSet::new("ingress-int.z.", "CNAME", &["lb.example.com"]);
    let (routes, warnings) = matched(&zone("1", "Z1", "z.", records));
    assert_eq!((routes.len(), warnings.len()), (1, 0), "{warnings:?}");
}

#[test]
fn refused_record_names_are_one_warning_however_many() {
    for (refused, first) in [(1, 1), (2, 2), (3, 3), (10_000, 3)] {
        let mut records = api_pair("z.");
        records.extend(
            (0..refused).map(|i| RecordSet::new(&format!("r{i}\\043x.z."), "A", &["10.0.0.1"])),
        );
        let outcome = zone_routes(
            &DEFAULT_RULES,
            &zone("1", "Z1", "z.", records),
            &[HostName::parse(PROXY).unwrap()],
        );
        assert_eq!(outcome.routes.len(), 1);
        let [
            Warning::RecordName {
                skipped,
                first: kept,
                ..
            },
        ] = outcome.warnings.as_slice()
        else {
            panic!("one warning expected: {:?}", outcome.warnings);
        };
        assert_eq!((*skipped, kept.len()), (refused, first));
        let text = outcome.warnings[0].to_string();
        if refused == 1 {
            assert!(
                text.starts_with("record in zone z (Z1 in account 1) skipped: "),
                "{text}"
            );
        } else {
            assert!(
                text.starts_with(&format!("{refused} records in zone z (Z1 in account 1)")),
                "{text}"
            );
            assert!(
                text.contains("r0\\043x.z") && !text.contains("r3\\043x.z"),
                "{text}"
            );
        }
    }
}

#[test]
fn a_back_reaches_only_its_own_accounts_networks_and_never_the_internet() {
    use crate::networks::{Networks, PublicBacks};
    let (a, b) = ("111111111111", "222222222222");
    let mut networks = Networks::default();
    networks.insert(a, "10.1.0.0/16".parse().unwrap());
    networks.insert(b, "10.2.0.0/16".parse().unwrap());
    let proxies = [HostName::parse(PROXY).unwrap()];
    // (the back's values, the public setting, routed, the warning's fragment)
    for (values, public, routed, warns) in [
        (&["10.1.0.5"][..], PublicBacks::Refused, true, ""),
        (&["10.30.0.5"], PublicBacks::Refused, true, ""),
        (
            &["10.2.0.5"],
            PublicBacks::Refused,
            false,
            "zone Z1 in account 111111111111: back record api.z is an A record at 10.2.0.5, \
             inside account 222222222222's network 10.2.0.0/16, another member's",
        ),
        (
            &["10.1.0.5", "10.2.0.5"],
            PublicBacks::Allowed,
            false,
            "at 10.2.0.5, inside account 222222222222's",
        ),
        (
            &["52.94.76.10"],
            PublicBacks::Refused,
            false,
            "at 52.94.76.10, a globally routable address",
        ),
        (&["52.94.76.10"], PublicBacks::Allowed, true, ""),
        (
            &["169.254.169.254"],
            PublicBacks::Allowed,
            false,
            "a link-local address",
        ),
    ] {
        let borders = Borders::new(networks.clone(), public);
        let outcome = zone_routes_within(
            &DEFAULT_RULES,
            &zone(a, "Z1", "z.", api_at(values)),
            &proxies,
            &borders,
        );
        assert_eq!(
            outcome.routes.len(),
            usize::from(routed),
            "{values:?} {public:?}: {:?}",
            outcome.warnings
        );
        let warnings: Vec<String> = outcome.warnings.iter().map(ToString::to_string).collect();
        match warns {
            "" => assert!(warnings.is_empty(), "{warnings:?}"),
            fragment => assert!(
                warnings.len() == 1 && warnings[0].contains(fragment),
                "{values:?}: {warnings:?}"
            ),
        }
    }
}
