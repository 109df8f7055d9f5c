//! Nesting counts only what shadows: one line per case.

use super::*;

const PROXY_NAME: &str = PROXY;

/// A zone whose records are `(name, type, value)`, matched with the built-in rules.
fn zone(account: &str, id: &str, name: &str, records: &[(&str, &str, &str)]) -> ZoneEntry {
    let zone = Zone {
        account: account.to_owned(),
        id: id.to_owned(),
        name: name.to_owned(),
        private: true,
    };
    let records = records
        .iter()
        .map(|(name, kind, value)| RecordSet::new(name, kind, &[value]))
        .collect();
    let proxies = [HostName::parse(PROXY_NAME).unwrap()];
    ZoneEntry::matched(&zone, records, &DEFAULT_RULES, &proxies)
}

/// B's routed zone `v.internal` (SNI `proxy.api.v.internal`, an A back).
fn victim() -> ZoneEntry {
    entry(B, "ZV", "v.internal.", true)
}

/// C's empty zone `api.v.internal`, inside the victim's.
fn empty_inside() -> ZoneEntry {
    zone(C, "ZN", "api.v.internal.", &[])
}

/// A zone whose `api.k8s.w.internal` A and `proxy.api.k8s.w.internal` CNAME route that SNI:
/// by the api-k8s rule in `w.internal`, by the api rule in `k8s.w.internal`.
fn k8s(account: &str, id: &str, name: &str) -> ZoneEntry {
    let front = ("proxy.api.k8s.w.internal.", "CNAME", PROXY_NAME);
    zone(
        account,
        id,
        name,
        &[("api.k8s.w.internal.", "A", "10.0.0.1"), front],
    )
}

/// B's zone `w.internal` routing `proxy.api.k8s.w.internal`.
fn k8s_victim() -> ZoneEntry {
    k8s(B, "ZW", "w.internal.")
}

/// C's zone `k8s.w.internal` claiming the same SNI inside itself.
fn k8s_inside() -> ZoneEntry {
    k8s(C, "ZK", "k8s.w.internal.")
}

/// Zone ids routed, and every refusal's text, for zones, the associated ids (`None`:
/// first-holder mode), the remembered zone holders and outside holders (name → zone id).
fn nesting(
    entries: &[ZoneEntry],
    associated: Option<&[&str]>,
    holders: &[(&str, &str)],
    outside: &[(&str, &str)],
) -> (Vec<String>, Vec<String>) {
    let zk_of = |id: &str| {
        let entry = entries
            .iter()
            .find(|e| e.id == id)
            .expect("a zone of the case");
        zk(&entry.account, id)
    };
    let previous = Holders {
        zones: holders
            .iter()
            .map(|(n, id)| ((*n).to_owned(), zk_of(id)))
            .collect(),
        outside: outside
            .iter()
            .map(|(n, id)| ((*n).to_owned(), zk_of(id)))
            .collect(),
        ..Holders::default()
    };
    let associated: Option<BTreeSet<ZoneKey>> =
        associated.map(|ids| ids.iter().map(|id| zk_of(id)).collect());
    let mode = associated.as_ref().map_or(Mode::FirstHolder, Mode::Vpc);
    let owned = owned_routes(&zones(entries.to_vec()), &previous, mode);
    let routed = owned.candidates.iter().map(|r| r.zone_id.clone()).collect();
    (
        routed,
        owned.refusals.iter().map(ToString::to_string).collect(),
    )
}

/// A case: its name, zones, associated ids, holders, outside holders, routed, words.
type Case<'a> = (
    &'a str,
    Vec<ZoneEntry>,
    Option<&'a [&'a str]>,
    &'a [(&'a str, &'a str)],
    &'a [(&'a str, &'a str)],
    &'a [&'a str],
    &'a [&'a str],
);

#[test]
fn a_zone_inside_another_takes_a_name_only_when_it_can_shadow_it() {
    let none: &[(&str, &str)] = &[];
    let v_held = &[("v.internal", "ZV")][..];
    let both_held = &[("v.internal", "ZV"), ("api.v.internal", "ZN")][..];
    let w_held = &[("w.internal", "ZW")][..];
    let w_both = &[("w.internal", "ZW"), ("k8s.w.internal", "ZK")][..];
    let v_sni = &[("proxy.api.v.internal", "ZV")][..];
    let w_sni = &[("proxy.api.k8s.w.internal", "ZW")][..];
    let (vv, vn, wk) = (&["ZV"][..], &["ZV", "ZN"][..], &["ZW", "ZK"][..]);
    let (zv, zw, zk_, nobody) = (&["ZV"][..], &["ZW"][..], &["ZK"][..], &[][..]);
    // case, zones, associated, holders, outside holders, routed, words in the refusals
    #[rustfmt::skip]
    let cases: [Case; 11] = [
        ("vpc: empty, not associated", vec![victim(), empty_inside()], Some(vv), none, none, zv, &[]),
        ("vpc: empty, associated", vec![victim(), empty_inside()], Some(vn), none, none, nobody,
            &["ZV in account 222222222222", "ZN in account 333333333333", "its front record's name"]),
        ("vpc: routed inside, not associated", vec![k8s_victim(), k8s_inside()], Some(&["ZW"]), none, none, zw,
            &["ZK in account 333333333333", "PROXY_VPCS"]),
        ("first holder: new inside a held zone", vec![victim(), empty_inside()], None, v_held, none, zv, &[]),
        ("first holder: held since, name remembered", vec![victim(), empty_inside()], None, both_held, v_sni, zv, &[]),
        ("first holder: first sweep, the inner zone's", vec![victim(), empty_inside()], None, none, none, nobody,
            &["ZV in account 222222222222", "ZN in account 333333333333", "lies in zone api.v.internal"]),
        ("first holder: inner zone known first", vec![victim(), empty_inside()], None, both_held, none, nobody,
            &["ZN in account 333333333333"]),
        ("first holder: inner zone's own claim, new", vec![k8s_victim(), k8s_inside()], None, w_held, none, zw,
            &["ZK in account 333333333333", "ZW in account 222222222222", "routed that name first"]),
        ("first holder: inner zone's own claim, held since", vec![k8s_victim(), k8s_inside()], None, w_both, w_sni, zw,
            &["ZK in account 333333333333", "ZW in account 222222222222"]),
        ("first holder: first sweep, inner claim wins", vec![k8s_victim(), k8s_inside()], None, none, none, zk_,
            &["ZW in account 222222222222", "ZK in account 333333333333", "its front record's name"]),
        ("vpc: all associated, inner claim wins", vec![k8s_victim(), k8s_inside()], Some(wk), none, none, zk_,
            &["ZW in account 222222222222", "ZK in account 333333333333"]),
    ];
    for (case, entries, associated, holders, outside, routed, words) in cases {
        let (got, refusals) = nesting(&entries, associated, holders, outside);
        assert_eq!(got, routed, "{case}: {refusals:?}");
        for word in words {
            assert!(
                refusals.iter().any(|r| r.contains(word)),
                "{case}: {word:?} in {refusals:?}"
            );
        }
        if words.is_empty() {
            assert!(refusals.is_empty(), "{case}: {refusals:?}");
        }
        assert!(
            !refusals.iter().any(|r| r.contains("CNAME target")),
            "{case}: {refusals:?}"
        );
    }
}

#[test]
fn a_name_of_a_zone_never_read_goes_to_nobody_new() {
    let never = |id: &str, name: &str| zone(C, id, name, &[]);
    let claimant = || zones(vec![entry(A, "ZA", "shared.internal.", true), victim()]);
    let owned_beside = |unread: &[ZoneEntry], previous: &Holders| {
        owned_routes_beside(&claimant(), unread, previous, Mode::FirstHolder, GRACE)
    };
    // Same name, no holder remembered: refused, naming the zone not read yet.
    let owned = owned_beside(&[never("ZU", "shared.internal.")], &Holders::default());
    assert_eq!(routed(&owned), [B]);
    let [refusal @ Refusal::Unread { .. }] = &owned.refusals[..] else {
        panic!("{:?}", owned.refusals)
    };
    assert!(
        refusal.to_string().contains("ZU in account 333333333333"),
        "{refusal}"
    );
    // The holder remembered keeps it; a name inside the unread zone stays its holder's too.
    let remembered = held(BTreeMap::from([
        ("shared.internal".to_owned(), zk(A, "ZA")),
        ("v.internal".to_owned(), zk(B, "ZV")),
    ]));
    let unread = [
        never("ZU", "shared.internal."),
        never("ZN", "api.v.internal."),
    ];
    assert_eq!(routed(&owned_beside(&unread, &remembered)), [A, B]);
    // A first sweep: the name inside an unread zone goes to nobody yet.
    let owned = owned_beside(&unread[1..], &Holders::default());
    assert_eq!(routed(&owned), [A]);
}
