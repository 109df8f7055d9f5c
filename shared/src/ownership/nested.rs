//! Nesting: the zone a route's SNI lies inside, and when the zone that claims it keeps it all
//! the same (docs/ARCHITECTURE.md, "Who may route a zone name").
//!
//! A zone counts as "another zone" for a name inside it only when it can shadow that name for
//! the proxies: in [`Mode::Vpc`], when it is associated with a proxy VPC; in
//! [`Mode::FirstHolder`], where nobody knows what the proxies resolve, every zone counts, but
//! the first holder keeps a name: a zone that appears inside a routed zone does not take what
//! that zone routed, and its own claims to that name are refused.

use std::collections::BTreeMap;

use super::{Holders, Mode, Refusal, key, sni_name};
use crate::manifest::ZoneEntry;
use crate::model::{Route, SniMatch, ZoneKey};
use crate::names::HostName;

/// The zone names that count as "another zone" for a name inside them, with their zones.
pub(super) struct Known {
    names: BTreeMap<String, Vec<ZoneKey>>,
    first_holder: bool,
}

/// The deepest known zone name a route's SNI lies in, and the zones of that name.
pub(super) struct Inside<'a> {
    pub name: &'a str,
    zones: &'a [ZoneKey],
}

impl Known {
    /// From the zones by name: in [`Mode::Vpc`] only those associated with a proxy VPC.
    pub fn of(by_name: &BTreeMap<HostName, Vec<&ZoneEntry>>, mode: Mode<'_>) -> Known {
        let counts = |zone: &ZoneKey| match mode {
            Mode::Vpc(associated) => associated.contains(zone),
            Mode::FirstHolder => true,
        };
        let names = by_name
            .iter()
            .filter_map(|(name, group)| {
                let zones: Vec<ZoneKey> = group.iter().map(|e| key(e)).filter(counts).collect();
                (!zones.is_empty()).then(|| (name.as_str().to_owned(), zones))
            })
            .collect();
        Known {
            names,
            first_holder: matches!(mode, Mode::FirstHolder),
        }
    }

    /// The deepest known zone name the route's SNI equals or lies under, if any.
    pub fn inside(&self, route: &Route) -> Option<Inside<'_>> {
        let sni = sni_name(route)?;
        sni.ancestors()
            .find_map(|name| self.names.get_key_value(name))
            .map(|(name, zones)| Inside { name, zones })
    }

    /// Whether, in first-holder mode, the route's zone keeps its SNI although it lies inside
    /// the zone(s) named `inside`: it held the SNI in the last manifest, or `inside` is new
    /// this run and lies inside the route's own zone, which held its name before.
    pub fn first_holds(&self, route: &Route, inside: &str, previous: &Holders) -> bool {
        if !self.first_holder {
            return false;
        }
        let zone = route.zone_key();
        if previous.outside.get(&route.sni) == Some(&zone) {
            return true;
        }
        let nested = HostName::parse(inside).is_ok_and(|name| name.is_within(&route.zone_name));
        nested
            && !previous.zones.contains_key(inside)
            && previous.zones.get(route.zone_name.as_str()) == Some(&zone)
    }
}

impl Inside<'_> {
    /// The refusal of a route whose SNI lies here, naming both zones.
    pub fn refusal(&self, route: &Route) -> Refusal {
        Refusal::InAnotherZone {
            sni: route.sni.clone(),
            what: what(route),
            zone: route.zone_key(),
            zone_name: self.name.to_owned(),
            inside: self.zones.to_vec(),
        }
    }
}

/// What a route's SNI is to its zone, as a person reads it.
fn what(route: &Route) -> &'static str {
    let front = route.records.first().map(HostName::as_str);
    if route.sni_match == SniMatch::Suffix {
        "every name under its front record"
    } else if route.sni == route.back.as_str() {
        "its back record's name"
    } else if front == Some(route.sni.as_str()) {
        "its front record's name"
    } else {
        "its back record's CNAME target"
    }
}

/// The refusals of routes claiming a name inside their own zone that another zone holds
/// (`outside`, as settled this run): it held the name first.
pub(super) fn held_inside(routes: &[&Route], outside: &BTreeMap<String, ZoneKey>) -> Vec<Refusal> {
    routes
        .iter()
        .filter_map(|route| {
            let holder = outside.get(&route.sni)?;
            let zone = route.zone_key();
            (*holder != zone).then(|| Refusal::NestedHeld {
                sni: route.sni.clone(),
                zone,
                zone_name: route.zone_name.as_str().to_owned(),
                holder: holder.clone(),
            })
        })
        .collect()
}
