use super::*;
use crate::manifest::zone_key;
use crate::model::{RecordSet, Zone, ZoneRecords};
use crate::names::HostName;
use crate::rules::{DEFAULT_RULES, zone_routes};

const PROXY: &str = "peering-proxy.tools.example.com";
const A: &str = "111111111111";
const B: &str = "222222222222";
const C: &str = "333333333333";

/// A zone entry as a sweep leaves it: with the api pair when it opted in, none otherwise.
fn entry(account: &str, id: &str, name: &str, opted_in: bool) -> ZoneEntry {
    let zone = Zone {
        account: account.to_owned(),
        id: id.to_owned(),
        name: name.to_owned(),
        private: true,
    };
    let records = if opted_in {
        vec![
            RecordSet::new(&format!("api.{name}"), "A", &["10.0.0.1"]),
            RecordSet::new(&format!("proxy.api.{name}"), "CNAME", &[PROXY]),
        ]
    } else {
        vec![RecordSet::new(&format!("api.{name}"), "A", &["10.0.0.1"])]
    };
    let proxies = [HostName::parse(PROXY).unwrap()];
    let zone_records = ZoneRecords {
        unnamed_left: 0,
        zone: zone.clone(),
        records,
    };
    let routes = zone_routes(&DEFAULT_RULES, &zone_records, &proxies).routes;
    assert_eq!(routes.is_empty(), !opted_in);
    ZoneEntry::new(&zone, routes, vec![])
}

fn zones(entries: Vec<ZoneEntry>) -> BTreeMap<String, ZoneEntry> {
    entries
        .into_iter()
        .map(|e| (zone_key(&key(&e)), e))
        .collect()
}

fn held(zones: BTreeMap<String, ZoneKey>) -> Holders {
    Holders {
        zones,
        ..Holders::default()
    }
}

/// The run's time in these tests, and the default grace of a day.
const NOW: u64 = 1_795_403_642;
const GRACE: Grace = Grace {
    now: NOW,
    seconds: 24 * 3600,
};

/// [`super::owned_routes`] at [`NOW`] with the default grace.
fn owned_routes(zones: &BTreeMap<String, ZoneEntry>, previous: &Holders, mode: Mode<'_>) -> Owned {
    super::owned_routes(zones, previous, mode, GRACE)
}

fn zk(account: &str, id: &str) -> ZoneKey {
    ZoneKey {
        account: account.to_owned(),
        id: id.to_owned(),
    }
}

/// Accounts whose routes got through.
fn routed(owned: &Owned) -> Vec<&str> {
    owned
        .candidates
        .iter()
        .map(|route| route.account.as_str())
        .collect()
}

#[test]
fn a_sole_holder_routes_and_is_remembered() {
    let owned = owned_routes(
        &zones(vec![entry(B, "ZB", "shared.internal.", true)]),
        &Holders::default(),
        Mode::FirstHolder,
    );
    assert_eq!(routed(&owned), [B]);
    assert_eq!(owned.holders.zones["shared.internal"], zk(B, "ZB"));
    assert!(owned.refusals.is_empty());
}

#[test]
fn an_opt_in_on_a_name_another_account_holds_without_opting_in_gets_no_route() {
    // B has held the name (no opt-in) since an earlier sweep; A creates it and opts in.
    let remembered = BTreeMap::from([("shared.internal".to_owned(), zk(B, "ZB"))]);
    let state = zones(vec![
        entry(B, "ZB", "shared.internal.", false),
        entry(A, "ZA", "shared.internal.", true),
    ]);
    let owned = owned_routes(&state, &held(remembered.clone()), Mode::FirstHolder);
    assert!(routed(&owned).is_empty());
    assert_eq!(owned.holders.zones["shared.internal"], zk(B, "ZB"));
    let [refusal] = &owned.refusals[..] else {
        panic!("{:?}", owned.refusals)
    };
    let text = refusal.to_string();
    assert!(text.contains(A) && text.contains(B), "{text}");
    // On a first sweep (no memory), the same state routes nobody either.
    let owned = owned_routes(&state, &Holders::default(), Mode::FirstHolder);
    assert!(routed(&owned).is_empty());
    assert!(!owned.holders.zones.contains_key("shared.internal"));
    assert!(matches!(owned.refusals[..], [Refusal::Unsettled { .. }]));
    assert!(owned.refusals[0].to_string().contains(B));
}

#[test]
fn a_newcomer_never_adds_to_or_moves_an_existing_route() {
    // B routes the name; A (a lower account id, which used to win ties) arrives with the
    // same name, opted in for the same and for another rule.
    let remembered = BTreeMap::from([("shared.internal".to_owned(), zk(B, "ZB"))]);
    let mut newcomer = entry(A, "ZA", "shared.internal.", true);
    let ingress = {
        let zone = Zone {
            account: A.to_owned(),
            id: "ZA".to_owned(),
            name: "shared.internal.".to_owned(),
            private: true,
        };
        let records = vec![
            RecordSet::new("*.int.shared.internal.", "CNAME", &[PROXY]),
            RecordSet::new(
                "ingress-int.shared.internal.",
                "CNAME",
                &["elb.example.com"],
            ),
        ];
        let proxies = [HostName::parse(PROXY).unwrap()];
        zone_routes(
            &DEFAULT_RULES,
            &ZoneRecords {
                unnamed_left: 0,
                zone,
                records,
            },
            &proxies,
        )
        .routes
    };
    assert_eq!(ingress.len(), 1);
    newcomer.routes.extend(ingress);
    let state = zones(vec![entry(B, "ZB", "shared.internal.", true), newcomer]);
    let owned = owned_routes(&state, &held(remembered.clone()), Mode::FirstHolder);
    assert_eq!(routed(&owned), [B]);
    assert_eq!(owned.candidates.len(), 1, "{:?}", owned.candidates);
    assert!(matches!(
        &owned.refusals[..],
        [Refusal::HeldByAnother { zone, holder, .. }] if zone.account == A && holder.account == B
    ));
}

#[test]
fn when_every_holder_opted_in_the_lowest_is_chosen_and_then_kept() {
    let state = zones(vec![
        entry(B, "ZB", "shared.internal.", true),
        entry(A, "ZA", "shared.internal.", true),
    ]);
    let owned = owned_routes(&state, &Holders::default(), Mode::FirstHolder);
    assert_eq!(routed(&owned), [A]);
    assert_eq!(owned.holders.zones["shared.internal"], zk(A, "ZA"));
    // A third account arriving later changes nothing.
    let mut more = state.clone();
    let c = entry(C, "ZC", "shared.internal.", true);
    more.insert(zone_key(&key(&c)), c);
    let owned = owned_routes(&more, &owned.holders, Mode::FirstHolder);
    assert_eq!(routed(&owned), [A]);
}

#[test]
fn names_match_in_any_spelling() {
    let remembered = BTreeMap::from([("shared.internal".to_owned(), zk(B, "ZB"))]);
    let state = zones(vec![
        entry(B, "ZB", "shared.internal.", false),
        entry(A, "ZA", "Shared.INTERNAL", true),
    ]);
    assert!(
        routed(&owned_routes(
            &state,
            &held(remembered.clone()),
            Mode::FirstHolder
        ))
        .is_empty()
    );
}

#[test]
fn with_proxy_vpcs_only_associated_zones_route_whoever_held_the_name() {
    let state = zones(vec![
        entry(B, "ZB", "shared.internal.", true),
        entry(A, "ZA", "shared.internal.", true),
        entry(C, "ZC", "other.internal.", true),
    ]);
    // The VPC answer names zones of several accounts (as Route53's does for the VPC's
    // owner): B's zone and none of C's.
    let associated = BTreeSet::from([zk(B, "ZB"), zk(A, "ZUNRELATED")]);
    let remembered = BTreeMap::from([("shared.internal".to_owned(), zk(A, "ZA"))]);
    let owned = owned_routes(&state, &held(remembered.clone()), Mode::Vpc(&associated));
    assert_eq!(routed(&owned), [B]);
    let refused: Vec<&ZoneKey> = owned
        .refusals
        .iter()
        .map(|r| match r {
            Refusal::NotInVpc { zone, .. } => zone,
            other => panic!("{other:?}"),
        })
        .collect();
    // By name: other.internal, then shared.internal.
    assert_eq!(refused, [&zk(C, "ZC"), &zk(A, "ZA")]);
    assert!(owned.refusals[1].to_string().contains("PROXY_VPCS"));
}

const ENDPOINT: &str = "abc123.gr7.us-east-1.eks.amazonaws.com";

/// A zone that claims `sni` through a `back-target` rule: `eks.<name>` CNAME → `sni`.
fn eks_entry(account: &str, id: &str, name: &str, sni: &str) -> ZoneEntry {
    let rules = crate::rules::parse_rules(
        r#"[{"id": "eks", "front": "proxy.eks", "back": "eks", "back_types": ["CNAME"], "sni": "back-target"}]"#,
    )
    .unwrap();
    let zone = Zone {
        account: account.to_owned(),
        id: id.to_owned(),
        name: name.to_owned(),
        private: true,
    };
    let records = vec![
        RecordSet::new(&format!("eks.{name}"), "CNAME", &[sni]),
        RecordSet::new(&format!("proxy.eks.{name}"), "CNAME", &[PROXY]),
    ];
    let proxies = [HostName::parse(PROXY).unwrap()];
    let zone_records = ZoneRecords {
        unnamed_left: 0,
        zone: zone.clone(),
        records,
    };
    let routes = zone_routes(&rules, &zone_records, &proxies).routes;
    assert_eq!(routes.len(), 1);
    ZoneEntry::new(&zone, routes, vec![])
}

fn outside(sni: &str, holder: ZoneKey) -> Holders {
    Holders {
        outside: BTreeMap::from([(sni.to_owned(), holder)]),
        ..Holders::default()
    }
}

#[test]
fn an_outside_name_is_held_by_its_first_claimant_and_a_newcomer_is_refused() {
    let first = owned_routes(
        &zones(vec![eks_entry(B, "ZB", "b.internal.", ENDPOINT)]),
        &Holders::default(),
        Mode::FirstHolder,
    );
    assert_eq!(routed(&first), [B]);
    assert_eq!(first.holders.outside[ENDPOINT], zk(B, "ZB"));
    // Another account's zone (another name) claims the same endpoint later.
    let state = zones(vec![
        eks_entry(B, "ZB", "b.internal.", ENDPOINT),
        eks_entry(A, "ZA", "a.internal.", ENDPOINT),
    ]);
    for mode in [
        Mode::FirstHolder,
        Mode::Vpc(&BTreeSet::from([zk(A, "ZA"), zk(B, "ZB")])),
    ] {
        let owned = owned_routes(&state, &first.holders, mode);
        assert_eq!(routed(&owned), [B]);
        assert_eq!(owned.holders.outside[ENDPOINT], zk(B, "ZB"));
        let [refusal] = &owned.refusals[..] else {
            panic!("{:?}", owned.refusals)
        };
        let text = refusal.to_string();
        assert!(
            text.contains(ENDPOINT)
                && text.contains("ZA in account")
                && text.contains("ZB in account"),
            "{text}"
        );
        assert_eq!(refusal.zone(), &zk(A, "ZA"));
    }
}

#[test]
fn two_new_claimants_of_an_outside_name_in_one_run_both_get_no_route() {
    let state = zones(vec![
        eks_entry(B, "ZB", "b.internal.", ENDPOINT),
        eks_entry(A, "ZA", "a.internal.", ENDPOINT),
    ]);
    let owned = owned_routes(&state, &Holders::default(), Mode::FirstHolder);
    assert!(routed(&owned).is_empty());
    assert!(owned.holders.outside.is_empty());
    assert_eq!(owned.refusals.len(), 2);
    for refusal in &owned.refusals {
        assert!(matches!(refusal, Refusal::OutsideUnsettled { .. }));
        assert!(refusal.to_string().contains(ENDPOINT), "{refusal}");
    }
    // When the remembered holder stopped claiming more than the grace ago, the sole
    // claimant left takes it.
    let state = zones(vec![eks_entry(A, "ZA", "a.internal.", ENDPOINT)]);
    let mut gone = outside(ENDPOINT, zk(B, "ZB"));
    gone.outside_absent
        .insert(ENDPOINT.to_owned(), NOW - GRACE.seconds);
    let owned = owned_routes(&state, &gone, Mode::FirstHolder);
    assert_eq!(routed(&owned), [A]);
    assert_eq!(owned.holders.outside[ENDPOINT], zk(A, "ZA"));
    assert!(owned.holders.outside_absent.is_empty());
}

#[test]
fn an_absent_holder_keeps_an_outside_name_through_the_grace_and_routes_again() {
    let holder = eks_entry(B, "ZB", "b.internal.", ENDPOINT);
    let claimant = eks_entry(A, "ZA", "a.internal.", ENDPOINT);
    let mut quiet = holder.clone();
    quiet.routes.clear();
    let first = owned_routes(
        &zones(vec![holder.clone()]),
        &Holders::default(),
        Mode::FirstHolder,
    );
    // The holder's record is gone for one run: the claimant is refused, naming both zones.
    let absent = owned_routes(
        &zones(vec![quiet.clone(), claimant.clone()]),
        &first.holders,
        Mode::FirstHolder,
    );
    assert!(routed(&absent).is_empty());
    assert_eq!(absent.holders.outside[ENDPOINT], zk(B, "ZB"));
    assert_eq!(absent.holders.outside_absent[ENDPOINT], NOW);
    let [refusal @ Refusal::OutsideInGrace { .. }] = &absent.refusals[..] else {
        panic!("{:?}", absent.refusals)
    };
    let text = refusal.to_string();
    for part in [
        ENDPOINT,
        "ZB in account",
        "ZA in account",
        "2026-11-24T03:14:02Z",
    ] {
        assert!(text.contains(part), "{part} not in {text}");
    }
    // Still absent an hour later, and nobody claims it: still held, since the first absence.
    let later = Grace {
        now: NOW + 3600,
        ..GRACE
    };
    let alone = super::owned_routes(
        &zones(vec![quiet.clone()]),
        &absent.holders,
        Mode::FirstHolder,
        later,
    );
    assert_eq!(alone.holders.outside_absent[ENDPOINT], NOW);
    // Back within the grace: the holder routes again, the claimant is refused.
    let back = super::owned_routes(
        &zones(vec![holder, claimant.clone()]),
        &alone.holders,
        Mode::FirstHolder,
        later,
    );
    assert_eq!(routed(&back), [B]);
    assert!(back.holders.outside_absent.is_empty());
    assert!(matches!(&back.refusals[..], [Refusal::OutsideHeld { .. }]));
    // Never back: once the grace is over, the claimant takes the name.
    let over = Grace {
        now: NOW + GRACE.seconds,
        ..GRACE
    };
    let taken = super::owned_routes(
        &zones(vec![quiet, claimant]),
        &absent.holders,
        Mode::FirstHolder,
        over,
    );
    assert_eq!(routed(&taken), [A]);
}

#[test]
fn a_name_inside_a_child_zone_is_the_child_zones_in_every_mode() {
    // The parent a.internal (account A) reaches into b.a.internal (account B).
    let child = entry(B, "ZB", "b.a.internal.", true);
    let by_target = eks_entry(A, "ZA", "a.internal.", "cluster.b.a.internal");
    let rules = crate::rules::parse_rules(
        r#"[{"id": "k8s", "front": "proxy.k8s.b", "back": "k8s.b", "back_types": ["A"], "sni": "back"}]"#,
    )
    .unwrap();
    let zone = Zone {
        account: A.to_owned(),
        id: "ZP".to_owned(),
        name: "p.internal.".to_owned(),
        private: true,
    };
    let records = vec![
        RecordSet::new("k8s.b.p.internal.", "A", &["10.0.0.2"]),
        RecordSet::new("proxy.k8s.b.p.internal.", "CNAME", &[PROXY]),
    ];
    let proxies = [HostName::parse(PROXY).unwrap()];
    let by_name = ZoneEntry::new(
        &zone,
        zone_routes(
            &rules,
            &ZoneRecords {
                unnamed_left: 0,
                zone: zone.clone(),
                records,
            },
            &proxies,
        )
        .routes,
        vec![],
    );
    let child_p = entry(B, "ZC", "b.p.internal.", false);
    let state = zones(vec![child, by_target, by_name, child_p]);
    let associated = BTreeSet::from([zk(A, "ZA"), zk(B, "ZB"), zk(A, "ZP"), zk(B, "ZC")]);
    for mode in [Mode::FirstHolder, Mode::Vpc(&associated)] {
        let owned = owned_routes(&state, &Holders::default(), mode);
        assert_eq!(routed(&owned), [B], "{:?}", owned.refusals);
        let inside: Vec<&str> = owned
            .refusals
            .iter()
            .filter_map(|r| match r {
                Refusal::InAnotherZone { zone_name, .. } => Some(zone_name.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(
            inside,
            ["b.a.internal", "b.p.internal"],
            "{:?}",
            owned.refusals
        );
    }
}

#[test]
fn a_name_held_by_zones_of_two_proxy_vpcs_routes_from_neither() {
    let state = zones(vec![
        entry(B, "ZB", "shared.internal.", true),
        entry(A, "ZA", "shared.internal.", false),
        entry(C, "ZC", "other.internal.", true),
    ]);
    let associated = BTreeSet::from([zk(A, "ZA"), zk(B, "ZB"), zk(C, "ZC")]);
    let owned = owned_routes(&state, &Holders::default(), Mode::Vpc(&associated));
    assert_eq!(routed(&owned), [C]);
    let [refusal @ Refusal::SeveralVpcs { zone, others, .. }] = &owned.refusals[..] else {
        panic!("{:?}", owned.refusals)
    };
    assert_eq!((zone, &others[..]), (&zk(B, "ZB"), &[zk(A, "ZA")][..]));
    assert!(
        refusal.to_string().contains("other proxy VPCs"),
        "{refusal}"
    );
}

#[test]
fn a_back_target_inside_another_zone_is_that_zones_alone() {
    // A claims B's api name through its own CNAME: never.
    let state = zones(vec![
        entry(B, "ZB", "b.internal.", true),
        eks_entry(A, "ZA", "a.internal.", "proxy.api.b.internal"),
    ]);
    let owned = owned_routes(&state, &Holders::default(), Mode::FirstHolder);
    assert_eq!(routed(&owned), [B]);
    assert!(matches!(
        &owned.refusals[..],
        [Refusal::InAnotherZone { zone_name, .. }] if zone_name == "b.internal"
    ));
    // A target inside the claiming zone itself is that zone's name: no outside owner.
    let own = zones(vec![eks_entry(
        A,
        "ZA",
        "a.internal.",
        "cluster.a.internal",
    )]);
    let owned = owned_routes(&own, &Holders::default(), Mode::FirstHolder);
    assert_eq!(routed(&owned), [A]);
    assert!(owned.holders.outside.is_empty());
}
mod names;
mod nesting;
