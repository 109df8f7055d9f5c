//! Who may route a zone name (docs/ARCHITECTURE.md, "Who may route a zone name").
//!
//! A route's backend is a record *name* that the proxy resolves in its own VPC, so the zone
//! that opted in must be the zone the proxy will resolve. Otherwise an account could create
//! a private zone with another account's zone name, opt in, and have the proxy route to the
//! other account's service. Two ways to decide, both pure:
//!
//! * [`Mode::Vpc`]: only zones associated with the proxy's VPC(s) count. Route53 itself refuses
//!   two same-named zones on one VPC, so this is exactly the zone the proxy resolves.
//! * [`Mode::FirstHolder`]: a zone name held by more than one zone routes only from the zone
//!   that held it first (remembered in the manifest); with no such memory, only when every
//!   holder opted in. A newcomer's zone never adds to or moves an existing route.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use crate::manifest::ZoneEntry;
use crate::model::{Route, ZoneKey};
use crate::names::normalize;

/// How ownership is decided.
#[derive(Debug, Clone, Copy)]
pub enum Mode<'a> {
    /// Only these zones (every zone associated with the proxy VPCs, whatever account owns it).
    Vpc(&'a BTreeSet<ZoneKey>),
    /// The first holder of a name, as remembered.
    FirstHolder,
}

/// A zone that opted in and gets no route, and why. Each names both sides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The zone is not associated with any proxy VPC: the proxy never resolves it.
    NotInVpc { name: String, zone: ZoneKey },
    /// Another zone held the name first; its routes (if any) stand.
    HeldByAnother {
        name: String,
        zone: ZoneKey,
        holder: ZoneKey,
    },
    /// Several zones hold the name, not all opted in, and none is known to have held it first:
    /// nobody can tell which one the proxy resolves.
    Unsettled {
        name: String,
        zone: ZoneKey,
        others: Vec<ZoneKey>,
    },
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::NotInVpc { name, zone } => write!(
                f,
                "zone {name} ({zone}) opted in but is not associated with the proxy VPC(s) \
                 (PROXY_VPCS): the proxy would resolve another zone's names, so no route"
            ),
            Refusal::HeldByAnother { name, zone, holder } => write!(
                f,
                "zone {name} ({zone}) opted in, but account {} held the name first ({holder}): \
                 no route from account {}. If the newcomer is the rightful owner, drop the \
                 other zone or ignore it (IGNORE_ZONES={}:{name})",
                holder.account, zone.account, holder.account
            ),
            Refusal::Unsettled { name, zone, others } => write!(
                f,
                "zone {name} ({zone}) opted in, but the name is also held by {}, not all of \
                 which opted in, and none is known to have held it first: no route until one \
                 zone remains or all opt in (or IGNORE_ZONES=<account>:{name} drops one)",
                others
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    }
}

/// The routes allowed through, the holders to remember, and what was refused.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Owned {
    pub candidates: Vec<Route>,
    /// Normalised zone name → the zone that holds it: the manifest's memory for next time.
    pub holders: BTreeMap<String, ZoneKey>,
    pub refusals: Vec<Refusal>,
}

/// Decides, for every zone name in `zones` (the manifest's entries), which zone may route it.
/// `previous` is the holders the last manifest remembered.
pub fn owned_routes(
    zones: &BTreeMap<String, ZoneEntry>,
    previous: &BTreeMap<String, ZoneKey>,
    mode: Mode<'_>,
) -> Owned {
    let mut by_name: BTreeMap<String, Vec<&ZoneEntry>> = BTreeMap::new();
    for entry in zones.values() {
        // A name that is not a host name gave no routes; it holds nothing.
        if let Ok(name) = normalize(&entry.name).to_host() {
            by_name
                .entry(name.as_str().to_owned())
                .or_default()
                .push(entry);
        }
    }
    let mut owned = Owned::default();
    for (name, mut group) in by_name {
        group.sort_by_key(|entry| key(entry));
        let holder = first_holder(&group, previous.get(&name));
        if let Some(holder) = &holder {
            owned.holders.insert(name.clone(), holder.clone());
        }
        for entry in group.iter().filter(|entry| !entry.routes.is_empty()) {
            let zone = key(entry);
            let refusal = match mode {
                Mode::Vpc(associated) if associated.contains(&zone) => None,
                Mode::Vpc(_) => Some(Refusal::NotInVpc {
                    name: name.clone(),
                    zone,
                }),
                Mode::FirstHolder => match &holder {
                    Some(holder) if *holder == zone => None,
                    Some(holder) => Some(Refusal::HeldByAnother {
                        name: name.clone(),
                        zone,
                        holder: holder.clone(),
                    }),
                    None => Some(Refusal::Unsettled {
                        name: name.clone(),
                        others: group
                            .iter()
                            .map(|other| key(other))
                            .filter(|other| *other != zone)
                            .collect(),
                        zone,
                    }),
                },
            };
            match refusal {
                None => owned.candidates.extend(entry.routes.iter().cloned()),
                Some(refusal) => owned.refusals.push(refusal),
            }
        }
    }
    owned
}

/// The zone that holds a name: the only one; else the one remembered, if still there; else,
/// when every holder opted in, the lowest (the same every time); else nobody.
fn first_holder(group: &[&ZoneEntry], remembered: Option<&ZoneKey>) -> Option<ZoneKey> {
    if let [only] = group {
        return Some(key(only));
    }
    if let Some(remembered) = remembered.filter(|r| group.iter().any(|e| key(e) == **r)) {
        return Some(remembered.clone());
    }
    if group.iter().all(|entry| !entry.routes.is_empty()) {
        return group.first().map(|entry| key(entry));
    }
    None
}

fn key(entry: &ZoneEntry) -> ZoneKey {
    ZoneKey {
        account: entry.account.clone(),
        id: entry.id.clone(),
    }
}

#[cfg(test)]
mod tests {
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
            zone: zone.clone(),
            records,
        };
        let routes = zone_routes(DEFAULT_RULES, &zone_records, &proxies).routes;
        assert_eq!(routes.is_empty(), !opted_in);
        ZoneEntry::new(&zone, routes, vec![])
    }

    fn zones(entries: Vec<ZoneEntry>) -> BTreeMap<String, ZoneEntry> {
        entries
            .into_iter()
            .map(|e| (zone_key(&key(&e)), e))
            .collect()
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
            &BTreeMap::new(),
            Mode::FirstHolder,
        );
        assert_eq!(routed(&owned), [B]);
        assert_eq!(owned.holders["shared.internal"], zk(B, "ZB"));
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
        let owned = owned_routes(&state, &remembered, Mode::FirstHolder);
        assert!(routed(&owned).is_empty());
        assert_eq!(owned.holders["shared.internal"], zk(B, "ZB"));
        let [refusal] = &owned.refusals[..] else {
            panic!("{:?}", owned.refusals)
        };
        let text = refusal.to_string();
        assert!(text.contains(A) && text.contains(B), "{text}");
        // On a first sweep (no memory), the same state routes nobody either.
        let owned = owned_routes(&state, &BTreeMap::new(), Mode::FirstHolder);
        assert!(routed(&owned).is_empty());
        assert!(!owned.holders.contains_key("shared.internal"));
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
            zone_routes(DEFAULT_RULES, &ZoneRecords { zone, records }, &proxies).routes
        };
        assert_eq!(ingress.len(), 1);
        newcomer.routes.extend(ingress);
        let state = zones(vec![entry(B, "ZB", "shared.internal.", true), newcomer]);
        let owned = owned_routes(&state, &remembered, Mode::FirstHolder);
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
        let owned = owned_routes(&state, &BTreeMap::new(), Mode::FirstHolder);
        assert_eq!(routed(&owned), [A]);
        assert_eq!(owned.holders["shared.internal"], zk(A, "ZA"));
        // A third account arriving later changes nothing.
        let mut more = state.clone();
        let c = entry(C, "ZC", "shared.internal.", true);
        more.insert(zone_key(&key(&c)), c);
        let owned = owned_routes(&more, &owned.holders, Mode::FirstHolder);
        assert_eq!(routed(&owned), [A]);
    }

    #[test]
    fn when_the_first_holder_leaves_the_name_passes_only_to_a_sole_survivor() {
        let remembered = BTreeMap::from([("shared.internal".to_owned(), zk(B, "ZB"))]);
        let owned = owned_routes(
            &zones(vec![entry(A, "ZA", "shared.internal.", true)]),
            &remembered,
            Mode::FirstHolder,
        );
        assert_eq!(routed(&owned), [A]);
        assert_eq!(owned.holders["shared.internal"], zk(A, "ZA"));
    }

    #[test]
    fn names_match_in_any_spelling() {
        let remembered = BTreeMap::from([("shared.internal".to_owned(), zk(B, "ZB"))]);
        let state = zones(vec![
            entry(B, "ZB", "shared.internal.", false),
            entry(A, "ZA", "Shared.INTERNAL", true),
        ]);
        assert!(routed(&owned_routes(&state, &remembered, Mode::FirstHolder)).is_empty());
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
        let owned = owned_routes(&state, &remembered, Mode::Vpc(&associated));
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
}
