//! Who may route a zone name (docs/ARCHITECTURE.md, "Who may route a zone name").
//!
//! A route's back is a record *name* that the proxy resolves in its own VPC, so the zone
//! that opted in must be the zone the proxy will resolve. Otherwise an account could create
//! a private zone with another account's zone name, opt in, and have the proxy route to the
//! other account's service. Two ways to decide, both pure:
//!
//! * [`Mode::Vpc`]: only zones associated with the proxy's VPC(s) count. Route53 itself refuses
//!   two same-named zones on one VPC, so this is exactly the zone the proxy resolves.
//! * [`Mode::FirstHolder`]: a zone name held by more than one zone routes only from the zone
//!   that held it first (remembered in the manifest); with no such memory, only when every
//!   holder opted in. A newcomer's zone never adds to or moves an existing route.
//!
//! A `back-target` rule routes an SNI that is not its zone's name at all: the target of a
//! CNAME, usually outside every zone (an EKS endpoint's name). No zone association settles who
//! may claim it, so it has an owner of its own, in both modes
//! (docs/ARCHITECTURE.md, "Who may route a name outside every zone"): the zone that held it in
//! the last manifest keeps it and a newcomer is refused; two newcomers in one run are both
//! refused; and a name inside another zone is that zone's, never claimed from outside it.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use crate::manifest::{Manifest, ZoneEntry};
use crate::model::{Route, ZoneKey};
use crate::names::{HostName, normalize};

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
    /// An SNI outside the claiming zone lies inside another zone: that zone's to route.
    InAnotherZone {
        sni: String,
        zone: ZoneKey,
        zone_name: String,
    },
    /// An SNI outside every zone, held by another zone since an earlier run.
    OutsideHeld {
        sni: String,
        zone: ZoneKey,
        holder: ZoneKey,
    },
    /// An SNI outside every zone whose holder's record disappeared less than the grace
    /// period ago (`OWNERSHIP_GRACE_HOURS`): it is still the holder's.
    OutsideInGrace {
        sni: String,
        zone: ZoneKey,
        holder: ZoneKey,
        /// Unix seconds when the grace ends.
        until: u64,
    },
    /// A zone name held by zones associated with more than one of the proxy VPCs: proxies in
    /// different VPCs would resolve different zones.
    SeveralVpcs {
        name: String,
        zone: ZoneKey,
        others: Vec<ZoneKey>,
    },
    /// An SNI outside every zone that several zones claim for the first time in one run.
    OutsideUnsettled {
        sni: String,
        zone: ZoneKey,
        others: Vec<ZoneKey>,
    },
}

impl Refusal {
    /// The zone refused.
    pub fn zone(&self) -> &ZoneKey {
        match self {
            Refusal::NotInVpc { zone, .. }
            | Refusal::HeldByAnother { zone, .. }
            | Refusal::Unsettled { zone, .. }
            | Refusal::InAnotherZone { zone, .. }
            | Refusal::OutsideHeld { zone, .. }
            | Refusal::OutsideInGrace { zone, .. }
            | Refusal::SeveralVpcs { zone, .. }
            | Refusal::OutsideUnsettled { zone, .. } => zone,
        }
    }

    /// The name refused: a zone's name, or an SNI outside the zone.
    pub fn name(&self) -> &str {
        match self {
            Refusal::NotInVpc { name, .. }
            | Refusal::HeldByAnother { name, .. }
            | Refusal::Unsettled { name, .. }
            | Refusal::SeveralVpcs { name, .. } => name,
            Refusal::InAnotherZone { sni, .. }
            | Refusal::OutsideHeld { sni, .. }
            | Refusal::OutsideInGrace { sni, .. }
            | Refusal::OutsideUnsettled { sni, .. } => sni,
        }
    }
}

fn joined(zones: &[ZoneKey]) -> String {
    zones
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
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
                joined(others)
            ),
            Refusal::InAnotherZone {
                sni,
                zone,
                zone_name,
            } => write!(
                f,
                "zone {zone} claims SNI {sni} (its back record's CNAME target), which lies in \
                 zone {zone_name}: only that zone's own rules route it, so no route"
            ),
            Refusal::OutsideHeld { sni, zone, holder } => write!(
                f,
                "SNI {sni} (outside every zone) is held by zone {holder}, which claimed it \
                 first; zone {zone} claims it too and gets no route. If the newcomer is the \
                 rightful owner, remove the other zone's record or ignore that zone \
                 (IGNORE_ZONES=<account>:<zone>)"
            ),
            Refusal::OutsideInGrace {
                sni,
                zone,
                holder,
                until,
            } => write!(
                f,
                "SNI {sni} (outside every zone) is held by zone {holder}, whose record for it \
                 disappeared; it keeps the name until {} (OWNERSHIP_GRACE_HOURS), so zone {zone} \
                 gets no route before then, and none at all if the holder's record returns",
                crate::accounts::rfc3339(*until)
            ),
            Refusal::SeveralVpcs { name, zone, others } => write!(
                f,
                "zone {name} ({zone}) opted in, but zones of the same name are associated with \
                 other proxy VPCs too ({}): proxies in different VPCs would resolve different \
                 zones, so none routes it (associate one zone of the name only)",
                joined(others)
            ),
            Refusal::OutsideUnsettled { sni, zone, others } => write!(
                f,
                "SNI {sni} (outside every zone) is claimed for the first time by zone {zone} \
                 and by {} in the same run: none routes it until only one claims it",
                joined(others)
            ),
        }
    }
}

/// Who holds which name: the manifest's memory, from one run to the next.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Holders {
    /// Normalised zone name → the zone that holds it.
    pub zones: BTreeMap<String, ZoneKey>,
    /// An SNI outside every zone → the zone that holds it.
    pub outside: BTreeMap<String, ZoneKey>,
    /// An SNI of `outside` whose holder no longer claims it → since when (Unix seconds): the
    /// holder keeps it for the grace period.
    pub outside_absent: BTreeMap<String, u64>,
}

/// The run's time and how long an absent holder keeps an SNI outside every zone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grace {
    /// Unix seconds.
    pub now: u64,
    pub seconds: u64,
}

impl Grace {
    /// At `now` (Unix seconds), a grace of `hours` (`OWNERSHIP_GRACE_HOURS`).
    pub fn hours(now: u64, hours: u64) -> Grace {
        Grace {
            now,
            seconds: hours.saturating_mul(3600),
        }
    }
}

impl Holders {
    /// What a manifest remembers.
    pub fn of(manifest: &Manifest) -> Self {
        Holders {
            zones: manifest.holders.clone(),
            outside: manifest.outside_holders.clone(),
            outside_absent: manifest.outside_absent_since.clone(),
        }
    }

    /// Stores them into the manifest to write.
    pub fn store(self, manifest: &mut Manifest) {
        manifest.holders = self.zones;
        manifest.outside_holders = self.outside;
        manifest.outside_absent_since = self.outside_absent;
    }
}

/// The routes allowed through, the holders to remember, and what was refused.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Owned {
    pub candidates: Vec<Route>,
    /// The manifest's memory for next time.
    pub holders: Holders,
    pub refusals: Vec<Refusal>,
}

/// Decides, for every zone name in `zones` (the manifest's entries), which zone may route it,
/// then which zone may route each SNI outside its own zone. `previous` is what the last
/// manifest remembered.
pub fn owned_routes(
    zones: &BTreeMap<String, ZoneEntry>,
    previous: &Holders,
    mode: Mode<'_>,
    grace: Grace,
) -> Owned {
    let mut by_name: BTreeMap<HostName, Vec<&ZoneEntry>> = BTreeMap::new();
    for entry in zones.values() {
        // A name that is not a host name gave no routes; it holds nothing.
        if let Ok(name) = normalize(&entry.name).to_host() {
            by_name.entry(name).or_default().push(entry);
        }
    }
    let zone_names: BTreeSet<String> = by_name.keys().map(|n| n.as_str().to_owned()).collect();
    let mut owned = Owned::default();
    for (name, mut group) in by_name {
        group.sort_by_key(|entry| key(entry));
        let name = name.as_str().to_owned();
        let holder = first_holder(&group, previous.zones.get(&name));
        if let Some(holder) = &holder {
            owned.holders.zones.insert(name.clone(), holder.clone());
        }
        for entry in group.iter().filter(|entry| !entry.routes.is_empty()) {
            match zone_refusal(&name, &group, key(entry), holder.as_ref(), mode) {
                None => owned.candidates.extend(entry.routes.iter().cloned()),
                Some(refusal) => owned.refusals.push(refusal),
            }
        }
    }
    outside_names(&mut owned, previous, &zone_names, grace);
    owned
}

/// Why `zone`, one of `group` (the zones named `name`), may not route its name, if it may not.
fn zone_refusal(
    name: &str,
    group: &[&ZoneEntry],
    zone: ZoneKey,
    holder: Option<&ZoneKey>,
    mode: Mode<'_>,
) -> Option<Refusal> {
    let others = |zone: &ZoneKey, keep: &dyn Fn(&ZoneKey) -> bool| -> Vec<ZoneKey> {
        group
            .iter()
            .map(|other| key(other))
            .filter(|other| other != zone && keep(other))
            .collect()
    };
    let name = name.to_owned();
    match mode {
        // Route53 refuses two zones of one name on one VPC: two associated ones are on two.
        Mode::Vpc(associated) if associated.contains(&zone) => {
            let others = others(&zone, &|other| associated.contains(other));
            (!others.is_empty()).then_some(Refusal::SeveralVpcs { name, zone, others })
        }
        Mode::Vpc(_) => Some(Refusal::NotInVpc { name, zone }),
        Mode::FirstHolder => match holder {
            Some(holder) if *holder == zone => None,
            Some(holder) => Some(Refusal::HeldByAnother {
                name,
                zone,
                holder: holder.clone(),
            }),
            None => Some(Refusal::Unsettled {
                name,
                others: others(&zone, &|_| true),
                zone,
            }),
        },
    }
}

/// Settles the SNIs that lie outside their own zone (docs/ARCHITECTURE.md, "Who may route a
/// name outside every zone"), among the routes the zone names let through. Any route whose SNI
/// lies inside a deeper zone than its own (a child zone, another account's) is that zone's.
fn outside_names(
    owned: &mut Owned,
    previous: &Holders,
    zone_names: &BTreeSet<String>,
    grace: Grace,
) {
    let mut claims: BTreeMap<String, BTreeSet<ZoneKey>> = BTreeMap::new();
    let mut refused: BTreeMap<(String, ZoneKey), Refusal> = BTreeMap::new();
    for route in &owned.candidates {
        let zone = route.zone_key();
        match inside_zone(route, zone_names) {
            Some(inside) if inside != route.zone_name.as_str() => {
                refused.insert(
                    (route.sni.clone(), zone.clone()),
                    Refusal::InAnotherZone {
                        sni: route.sni.clone(),
                        zone,
                        zone_name: inside.to_owned(),
                    },
                );
            }
            Some(_) => {}
            None => {
                claims.entry(route.sni.clone()).or_default().insert(zone);
            }
        }
    }
    // A holder that claims nothing this run still holds its SNI through the grace.
    for sni in previous.outside.keys() {
        claims.entry(sni.clone()).or_default();
    }
    for (sni, claimants) in claims {
        let held = settle_outside(&sni, &claimants, previous, grace);
        for refusal in held.refusals {
            refused.insert((sni.clone(), refusal.zone().clone()), refusal);
        }
        if let Some(holder) = held.holder {
            owned.holders.outside.insert(sni.clone(), holder);
        }
        if let Some(since) = held.absent_since {
            owned.holders.outside_absent.insert(sni, since);
        }
    }
    owned
        .candidates
        .retain(|route| !refused.contains_key(&(route.sni.clone(), route.zone_key())));
    owned.refusals.extend(refused.into_values());
}

/// Who holds one SNI outside every zone, and whom that refuses.
struct Settled {
    holder: Option<ZoneKey>,
    /// When the holder stopped claiming it, while it is in its grace.
    absent_since: Option<u64>,
    refusals: Vec<Refusal>,
}

/// The holder of `sni` among `claimants`: the remembered holder while it claims it, or for
/// the grace after it stopped; else a sole claimant; else nobody.
fn settle_outside(
    sni: &str,
    claimants: &BTreeSet<ZoneKey>,
    previous: &Holders,
    grace: Grace,
) -> Settled {
    let remembered = previous.outside.get(sni);
    let absent = remembered.filter(|holder| !claimants.contains(*holder));
    let since = absent.map(|_| {
        previous
            .outside_absent
            .get(sni)
            .copied()
            .unwrap_or(grace.now)
    });
    let until = since.map(|since| since.saturating_add(grace.seconds));
    if let (Some(holder), Some(until)) = (absent, until.filter(|until| grace.now < *until)) {
        let refusals = claimants
            .iter()
            .map(|zone| Refusal::OutsideInGrace {
                sni: sni.to_owned(),
                zone: zone.clone(),
                holder: holder.clone(),
                until,
            })
            .collect();
        return Settled {
            holder: Some(holder.clone()),
            absent_since: since,
            refusals,
        };
    }
    let holder = match (remembered.filter(|_| absent.is_none()), claimants.len()) {
        (Some(holder), _) => Some(holder.clone()),
        (None, 1) => claimants.first().cloned(),
        (None, _) => None,
    };
    let refusals = claimants
        .iter()
        .filter(|zone| holder.as_ref() != Some(*zone))
        .map(|zone| match &holder {
            Some(holder) => Refusal::OutsideHeld {
                sni: sni.to_owned(),
                zone: zone.clone(),
                holder: holder.clone(),
            },
            None => Refusal::OutsideUnsettled {
                sni: sni.to_owned(),
                zone: zone.clone(),
                others: claimants.iter().filter(|o| *o != zone).cloned().collect(),
            },
        })
        .collect();
    Settled {
        holder,
        absent_since: None,
        refusals,
    }
}

/// The name a route's SNI stands for: the exact name, or the suffix without its leading dot.
fn sni_name(route: &Route) -> Option<HostName> {
    HostName::parse(route.sni.strip_prefix('.').unwrap_or(&route.sni)).ok()
}

/// A route whose SNI is not its own zone's name nor under it (a `back-target` rule's).
pub fn is_outside(route: &Route) -> bool {
    sni_name(route).is_none_or(|sni| !sni.is_within(&route.zone_name))
}

/// The deepest zone name (of those known) that the route's SNI equals or lies under, if any.
fn inside_zone<'a>(route: &Route, zone_names: &'a BTreeSet<String>) -> Option<&'a str> {
    let sni = sni_name(route)?;
    sni.ancestors()
        .find_map(|name| zone_names.get(name))
        .map(String::as_str)
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
mod tests;
