//! Why a zone that opted in gets no route: each refusal names both sides.

use std::fmt;

use crate::model::ZoneKey;

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
    /// The holder's account deleted its zone of the name less than the grace period ago
    /// (`OWNERSHIP_GRACE_HOURS`): the name is still that account's, should it recreate it.
    HeldInGrace {
        name: String,
        zone: ZoneKey,
        holder: ZoneKey,
        /// Unix seconds when the grace ends.
        until: u64,
    },
    /// Several zones hold the name, not all opted in, and none is known to have held it first:
    /// nobody can tell which one the proxy resolves.
    Unsettled {
        name: String,
        zone: ZoneKey,
        others: Vec<ZoneKey>,
    },
    /// An SNI lies inside another zone than the claiming one (deeper, or elsewhere): that
    /// zone's to route.
    InAnotherZone {
        sni: String,
        /// What the SNI is to the claiming zone ("its front record's name", ...).
        what: &'static str,
        zone: ZoneKey,
        zone_name: String,
        /// The zone(s) of that name.
        inside: Vec<ZoneKey>,
    },
    /// A zone claims a name inside itself that a zone it lies inside routed first: that zone
    /// keeps it (first-holder mode).
    NestedHeld {
        sni: String,
        zone: ZoneKey,
        zone_name: String,
        holder: ZoneKey,
    },
    /// A zone name also held by a zone never read yet, with no holder remembered: nothing new
    /// routes it until that zone is read.
    Unread {
        name: String,
        zone: ZoneKey,
        unread: Vec<ZoneKey>,
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
    /// A zone named under a domain AWS owns, in first-holder mode: it holds no name, blocks
    /// none inside it and routes nothing.
    AwsDomain {
        name: String,
        zone: ZoneKey,
        domain: &'static str,
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
            | Refusal::HeldInGrace { zone, .. }
            | Refusal::Unsettled { zone, .. }
            | Refusal::InAnotherZone { zone, .. }
            | Refusal::OutsideHeld { zone, .. }
            | Refusal::OutsideInGrace { zone, .. }
            | Refusal::SeveralVpcs { zone, .. }
            | Refusal::OutsideUnsettled { zone, .. }
            | Refusal::NestedHeld { zone, .. }
            | Refusal::AwsDomain { zone, .. }
            | Refusal::Unread { zone, .. } => zone,
        }
    }

    /// The name refused: a zone's name, or an SNI outside the zone.
    pub fn name(&self) -> &str {
        match self {
            // Nesting: an SNI inside a zone.
            Refusal::InAnotherZone { sni, .. } | Refusal::NestedHeld { sni, .. } => sni,
            Refusal::NotInVpc { name, .. }
            | Refusal::HeldByAnother { name, .. }
            | Refusal::HeldInGrace { name, .. }
            | Refusal::Unsettled { name, .. }
            | Refusal::SeveralVpcs { name, .. }
            | Refusal::AwsDomain { name, .. }
            | Refusal::Unread { name, .. } => name,
            Refusal::OutsideHeld { sni, .. }
            | Refusal::OutsideInGrace { sni, .. }
            | Refusal::OutsideUnsettled { sni, .. } => sni,
        }
    }
}

impl Refusal {
    /// The refusals for a name inside a zone, of a zone not read yet, or of a zone that may
    /// hold no name.
    fn fmt_nesting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::InAnotherZone {
                sni,
                what,
                zone,
                zone_name,
                inside,
            } => write!(
                f,
                "zone {zone} claims SNI {sni} ({what}), which lies in zone {zone_name} ({}): \
                 only that zone's own rules route it, so no route",
                joined(inside)
            ),
            Refusal::NestedHeld {
                sni,
                zone,
                zone_name,
                holder,
            } => write!(
                f,
                "zone {zone_name} ({zone}) claims SNI {sni} inside itself, but zone {holder} \
                 routed that name first and keeps it (first holder, through \
                 OWNERSHIP_GRACE_HOURS once its record goes): no route from account {}",
                zone.account
            ),
            Refusal::Unread { name, zone, unread } => write!(
                f,
                "zone {name} ({zone}) opted in, but the name is also held by {}, not read yet, \
                 and no zone is known to have held it first: nothing new routes it until that \
                 zone is read",
                joined(unread)
            ),
            Refusal::AwsDomain { name, zone, domain } => write!(
                f,
                "zone {name} ({zone}) is named under {domain}, a domain AWS owns: without \
                 PROXY_VPCS nothing shows it shadows the proxies' view, so it holds no name, \
                 blocks no route to a name inside it and routes nothing itself (set PROXY_VPCS \
                 to count the zones the proxies resolve, or delete the zone in account {})",
                zone.account
            ),
            _ => Ok(()),
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
            Refusal::HeldInGrace {
                name,
                zone,
                holder,
                until,
            } => write!(
                f,
                "zone {name} ({zone}) opted in, but account {} held the name (zone {holder}, \
                 gone now) and keeps it until {} (OWNERSHIP_GRACE_HOURS) in case it recreates \
                 the zone: no route from account {} before then, none if it does",
                holder.account,
                crate::time::rfc3339(*until),
                zone.account
            ),
            Refusal::Unsettled { name, zone, others } => write!(
                f,
                "zone {name} ({zone}) opted in, but the name is also held by {}, not all of \
                 which opted in, and none is known to have held it first: no route until one \
                 zone remains or all opt in (or IGNORE_ZONES=<account>:{name} drops one)",
                joined(others)
            ),
            Refusal::InAnotherZone { .. }
            | Refusal::NestedHeld { .. }
            | Refusal::Unread { .. }
            | Refusal::AwsDomain { .. } => self.fmt_nesting(f),
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
                crate::time::rfc3339(*until)
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
