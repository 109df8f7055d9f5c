//! How each warning reads: one sentence naming the zone, what was found and what became of
//! the route.

use std::fmt;

use super::{EXAMPLE_BYTES, Warning};
use crate::model::ZoneKey;
use crate::names::{HostName, NameError};

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Warning::ZoneName { zone, error } => write!(f, "zone {zone} skipped: {error}"),
            Warning::RecordName {
                zone,
                zone_name,
                skipped,
                first,
            } => record_names(f, &format!("zone {zone_name} ({zone})"), *skipped, first),
            Warning::MissingBack {
                zone,
                front,
                back,
                expected,
            } => write!(
                f,
                "zone {zone}: {front} points at the peering proxy but {back} is not a \
                 {expected} record, so no route"
            ),
            Warning::BackTarget { zone, back, error } => write!(
                f,
                "zone {zone}: the target of {back}'s CNAME is the SNI clients send, and it is not \
                 a plain host name ({error}), so no route"
            ),
            Warning::NearProxy { zone, front, near } => write!(f, "zone {zone}: {front} {near}"),
            Warning::BackIsProxy { zone, back, proxy } => write!(
                f,
                "zone {zone}: back record {back} is or points at the peering proxy {proxy}: \
                 every connection would loop back into the proxy, so no route"
            ),
            Warning::BackAddress {
                zone,
                back,
                address,
                why,
            } => write!(
                f,
                "zone {zone}: back record {back} is an A record at {address}, {why}, so no route"
            ),
            Warning::PolicySet {
                zone,
                back,
                set_ids,
                routed,
            } => policy_set(f, zone, back, &set_ids.join(", "), *routed),
            Warning::SameSni { zone, sni, rules } => same_sni(f, zone, sni, &rules.join(" and ")),
            Warning::SniConflict { sni, kept, dropped } => sni_conflict(f, sni, kept, dropped),
        }
    }
}

/// The warning for `skipped` records of `zone` whose names are not host names, with the
/// first few errors.
fn record_names(
    f: &mut fmt::Formatter<'_>,
    zone: &str,
    skipped: usize,
    first: &[NameError],
) -> fmt::Result {
    let errors: Vec<String> = first
        .iter()
        .map(|error| crate::excerpt(&error.to_string(), EXAMPLE_BYTES))
        .collect();
    match (skipped, errors.as_slice()) {
        (1, [error]) => write!(f, "record in {zone} skipped: {error}"),
        _ => write!(
            f,
            "{skipped} records in {zone} skipped, their names not plain host names; the first \
             {}: {}",
            errors.len(),
            errors.join("; ")
        ),
    }
}

/// A back that is a routing-policy set: routed by name when its CNAMEs agree, else not.
fn policy_set(
    f: &mut fmt::Formatter<'_>,
    zone: &ZoneKey,
    back: &HostName,
    set_ids: &str,
    routed: bool,
) -> fmt::Result {
    if routed {
        write!(
            f,
            "zone {zone}: back record {back} is a routing-policy set (set identifiers {set_ids}): \
             the proxy resolves {back} by name, so it forwards to whichever value Route53 \
             answers it at each resolution"
        )
    } else {
        write!(
            f,
            "zone {zone}: back record {back} is a routing-policy set (set identifiers {set_ids}) \
             whose CNAMEs do not all point to one name: no single SNI to route, so no route"
        )
    }
}

/// Two rules of one zone that yield one SNI.
fn same_sni(f: &mut fmt::Formatter<'_>, zone: &ZoneKey, sni: &str, rules: &str) -> fmt::Result {
    write!(
        f,
        "zone {zone}: rules {rules} all yield SNI {sni}; only their order would decide which \
         serves, so none routes it (change one rule's front or back)"
    )
}

/// Two zones that claim one SNI, and the one that keeps it.
fn sni_conflict(
    f: &mut fmt::Formatter<'_>,
    sni: &str,
    kept: &ZoneKey,
    dropped: &ZoneKey,
) -> fmt::Result {
    write!(
        f,
        "SNI {sni} is claimed by zone {kept} and by zone {dropped}; routing to \
         {kept} (lowest account, then zone id). Ignore one zone (IGNORE_ZONES=<account>:<zone>) or \
         rename it"
    )
}
