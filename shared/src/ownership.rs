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
//!
//! Nesting counts only what shadows: in [`Mode::Vpc`] only a zone associated with a proxy VPC
//! is "another zone" for a name inside it; in [`Mode::FirstHolder`] a zone that appears inside
//! a routed zone does not take a name its holder routed first (see [`nested`]).

use std::collections::{BTreeMap, BTreeSet};

use crate::manifest::{Manifest, ZoneEntry};
use crate::model::{Route, ZoneKey};
use crate::names::{HostName, normalize};

mod aws;
mod held;
mod nested;
mod refusal;
pub use aws::{AWS_DOMAINS, aws_domain};
pub use refusal::Refusal;

/// How ownership is decided.
#[derive(Debug, Clone, Copy)]
pub enum Mode<'a> {
    /// Only these zones (every zone associated with the proxy VPCs, whatever account owns it).
    Vpc(&'a BTreeSet<ZoneKey>),
    /// The first holder of a name, as remembered.
    FirstHolder,
}

/// Who holds which name: the manifest's memory, from one run to the next.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Holders {
    /// Normalised zone name → the zone that holds it.
    pub zones: BTreeMap<String, ZoneKey>,
    /// A name of `zones` that no zone of its holder's account holds any more → since when
    /// (Unix seconds): the account keeps it for the grace period.
    pub zones_absent: BTreeMap<String, u64>,
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
            zones_absent: manifest.holders_absent_since.clone(),
            outside: manifest.outside_holders.clone(),
            outside_absent: manifest.outside_absent_since.clone(),
        }
    }

    /// Stores them into the manifest to write.
    pub fn store(self, manifest: &mut Manifest) {
        manifest.holders = self.zones;
        manifest.holders_absent_since = self.zones_absent;
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
    owned_routes_beside(zones, &[], previous, mode, grace)
}

/// [`owned_routes`] beside `unread`, the zones listed but never read: they have no routes, but
/// their names count, so nothing inside them goes to anybody new.
pub fn owned_routes_beside(
    zones: &BTreeMap<String, ZoneEntry>,
    unread: &[ZoneEntry],
    previous: &Holders,
    mode: Mode<'_>,
    grace: Grace,
) -> Owned {
    let mut by_name: BTreeMap<HostName, Vec<&ZoneEntry>> = BTreeMap::new();
    let mut aws_zones = Vec::new();
    for entry in zones.values().chain(unread) {
        // A name that is not a host name gave no routes; it holds nothing.
        let Ok(name) = normalize(&entry.name).to_host() else {
            continue;
        };
        match (mode, aws_domain(&name)) {
            (Mode::FirstHolder, Some(domain)) => aws_zones.push(aws::AwsZone {
                name,
                entry,
                domain,
            }),
            _ => by_name.entry(name).or_default().push(entry),
        }
    }
    let unread: BTreeSet<ZoneKey> = unread.iter().map(key).collect();
    let known = nested::Known::of(&by_name, mode);
    let mut owned = Owned::default();
    for (name, holder, since) in held::gone(previous, &by_name, grace) {
        owned.holders.zones_absent.insert(name.clone(), since);
        owned.holders.zones.insert(name, holder);
    }
    for (name, mut group) in by_name {
        group.sort_by_key(|entry| key(entry));
        let name = name.as_str().to_owned();
        let hold = held::settle(&group, &name, previous, grace);
        if let Some(holder) = &hold.holder {
            owned.holders.zones.insert(name.clone(), holder.clone());
        }
        if let Some(since) = hold.absent_since {
            owned.holders.zones_absent.insert(name.clone(), since);
        }
        let group = Group {
            name: &name,
            zones: &group,
            unread: &unread,
        };
        for entry in group.zones.iter().filter(|entry| !entry.routes.is_empty()) {
            match zone_refusal(&group, key(entry), &hold, mode) {
                None => owned.candidates.extend(entry.routes.iter().cloned()),
                Some(refusal) => owned.refusals.push(refusal),
            }
        }
    }
    outside_names(&mut owned, previous, &known, grace);
    let set_aside = aws::refusals(&aws_zones, &owned.candidates);
    owned.refusals.extend(set_aside);
    owned
}

/// The zones of one name, and which zones of the estate are not read yet.
struct Group<'a> {
    name: &'a str,
    zones: &'a [&'a ZoneEntry],
    unread: &'a BTreeSet<ZoneKey>,
}

impl Group<'_> {
    /// The other zones of the name that `keep` keeps.
    fn others(&self, zone: &ZoneKey, keep: &dyn Fn(&ZoneKey) -> bool) -> Vec<ZoneKey> {
        self.zones
            .iter()
            .map(|other| key(other))
            .filter(|other| other != zone && keep(other))
            .collect()
    }
}

/// Why `zone`, one of `group`, may not route its name, if it may not.
fn zone_refusal(
    group: &Group<'_>,
    zone: ZoneKey,
    hold: &held::Hold,
    mode: Mode<'_>,
) -> Option<Refusal> {
    let name = group.name.to_owned();
    match mode {
        // Route53 refuses two zones of one name on one VPC: two associated ones are on two.
        Mode::Vpc(associated) if associated.contains(&zone) => {
            let others = group.others(&zone, &|other| associated.contains(other));
            (!others.is_empty()).then_some(Refusal::SeveralVpcs { name, zone, others })
        }
        Mode::Vpc(_) => Some(Refusal::NotInVpc { name, zone }),
        Mode::FirstHolder => match (&hold.holder, hold.until) {
            (Some(holder), _) if *holder == zone => None,
            (Some(holder), Some(until)) => Some(Refusal::HeldInGrace {
                name,
                zone,
                holder: holder.clone(),
                until,
            }),
            (Some(holder), None) => Some(Refusal::HeldByAnother {
                name,
                zone,
                holder: holder.clone(),
            }),
            // A zone not read yet may be the one that held the name: nothing new routes it.
            (None, _) => match group.others(&zone, &|other| group.unread.contains(other)) {
                unread if !unread.is_empty() => Some(Refusal::Unread { name, zone, unread }),
                _ => Some(Refusal::Unsettled {
                    name,
                    others: group.others(&zone, &|_| true),
                    zone,
                }),
            },
        },
    }
}

/// Settles the SNIs that lie outside their own zone (docs/ARCHITECTURE.md, "Who may route a
/// name outside every zone"), among the routes the zone names let through. A route whose SNI
/// lies inside a deeper zone than its own (a child zone, another account's) is that zone's,
/// unless [`nested::Known::first_holds`] says the claiming zone held it first.
fn outside_names(owned: &mut Owned, previous: &Holders, known: &nested::Known, grace: Grace) {
    let mut claims: BTreeMap<String, BTreeSet<ZoneKey>> = BTreeMap::new();
    let mut refused: BTreeMap<(String, ZoneKey), Refusal> = BTreeMap::new();
    let mut own_names = Vec::new();
    for route in &owned.candidates {
        let zone = route.zone_key();
        match known.inside(route) {
            Some(inside) if inside.name != route.zone_name.as_str() => {
                if known.first_holds(route, inside.name, previous) {
                    claims.entry(route.sni.clone()).or_default().insert(zone);
                } else {
                    let refusal = inside.refusal(route);
                    refused.insert((route.sni.clone(), zone), refusal);
                }
            }
            Some(_) => own_names.push(route),
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
    // A zone's claim to a name inside itself that another zone held first.
    for refusal in nested::held_inside(&own_names, &owned.holders.outside) {
        refused.insert((refusal.name().to_owned(), refusal.zone().clone()), refusal);
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

fn key(entry: &ZoneEntry) -> ZoneKey {
    ZoneKey {
        account: entry.account.clone(),
        id: entry.id.clone(),
    }
}

#[cfg(test)]
mod tests;
