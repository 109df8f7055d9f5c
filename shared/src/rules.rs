//! The rule table and the matcher: which record pairs in a private zone call for a route.
//!
//! Rules are data (docs/ARCHITECTURE.md, "The rules"): the built-in table, or the operator's
//! own from `ROUTING_RULES` ([`parse_rules`]). A row names the record that points clients at
//! the peering proxy (the *front*, always a CNAME whose target must be the proxy's hostname),
//! the record HAProxy forwards to (the *back*), both relative to the zone, and which name a
//! client sends ([`SniMode`]). A new pattern is a new row.

use std::collections::{BTreeMap, HashMap};
use std::fmt;

use crate::model::{Route, SniMatch, ZoneKey, ZoneRecords};
use crate::names::{DomainName, HostName, NameError, normalize};
use crate::near_miss::{NearMiss, near_proxy};

mod parse;
mod table;

pub use parse::{FIELDS, MAX_RULES, RuleRef, RulesError, parse_rules};
pub use table::{BackType, DEFAULT_RULES, FRONT_TYPE, Rule, SniMode};

/// Something the matcher skipped or decided, worth a person's attention.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Warning {
    /// A zone whose name is not a plain host name: none of its records can be routed.
    ZoneName { zone: ZoneKey, error: NameError },
    /// A record whose name is not a plain host name: skipped.
    RecordName {
        zone: ZoneKey,
        zone_name: HostName,
        error: NameError,
    },
    /// The front record points at the proxy but the back record is missing or of the wrong
    /// type, so clients are sent to the proxy for a name it cannot route.
    MissingBackend {
        zone: ZoneKey,
        front: HostName,
        back: HostName,
        expected: String,
    },
    /// The back record of a `back-target` rule is a CNAME to a name that is not a plain host
    /// name: no SNI to route.
    BackTarget {
        zone: ZoneKey,
        back: HostName,
        error: NameError,
    },
    /// The front record is a CNAME to a name that is almost the proxy's (see
    /// [`crate::near_miss`]): the zone meant to opt in and gets no route.
    NearProxy {
        zone: ZoneKey,
        front: HostName,
        near: NearMiss,
    },
    /// Two zones claim the same SNI (the same zone name in two accounts): one wins.
    SniConflict {
        sni: String,
        kept: ZoneKey,
        dropped: ZoneKey,
    },
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Warning::ZoneName { zone, error } => {
                write!(f, "zone {zone} skipped: {error}")
            }
            Warning::RecordName {
                zone,
                zone_name,
                error,
            } => write!(f, "record in zone {zone_name} ({zone}) skipped: {error}"),
            Warning::MissingBackend {
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
            Warning::SniConflict { sni, kept, dropped } => write!(
                f,
                "SNI {sni} is claimed by zone {kept} and by zone {dropped}; routing to \
                 {kept} (lowest account, then zone id). Ignore one zone (IGNORE_ZONES=<account>:<zone>) or \
                 rename it"
            ),
        }
    }
}

/// What matching one zone produced.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ZoneOutcome {
    pub routes: Vec<Route>,
    pub warnings: Vec<Warning>,
}

/// Matches the rule table against one zone. Public zones produce nothing: the proxy only
/// serves private names.
pub fn zone_routes(rules: &[Rule], zone: &ZoneRecords, proxies: &[HostName]) -> ZoneOutcome {
    let mut outcome = ZoneOutcome::default();
    if !zone.zone.private {
        return outcome;
    }
    let key = zone.zone.key();
    let zone_name = match normalize(&zone.zone.name).to_host() {
        Ok(name) => name,
        Err(error) => {
            outcome
                .warnings
                .push(Warning::ZoneName { zone: key, error });
            return outcome;
        }
    };
    let proxy_names: Vec<DomainName> = proxies.iter().map(|p| normalize(p.as_str())).collect();

    // Index the record sets by decoded name; a name that is not a plain host name never
    // reaches the config, but a person is told about it.
    let mut by_name: HashMap<HostName, Vec<(&str, Option<DomainName>)>> = HashMap::new();
    for record in &zone.records {
        let name = match normalize(&record.name).to_host() {
            Ok(name) => name,
            Err(error) => {
                outcome.warnings.push(Warning::RecordName {
                    zone: key.clone(),
                    zone_name: zone_name.clone(),
                    error,
                });
                continue;
            }
        };
        let target = record.values.first().map(|v| normalize(v));
        by_name
            .entry(name)
            .or_default()
            .push((record.rtype.as_str(), target));
    }

    for rule in rules {
        let front = zone_name.with_prefix(&rule.front);
        let points_at_proxy = by_name.get(&front).is_some_and(|sets| {
            sets.iter().any(|(rtype, target)| {
                *rtype == FRONT_TYPE && target.as_ref().is_some_and(|t| proxy_names.contains(t))
            })
        });
        if !points_at_proxy {
            outcome
                .warnings
                .extend(near_misses(&key, &front, &by_name, proxies));
            continue;
        }
        let back = zone_name.with_prefix(&rule.back);
        let backs: Vec<&(&str, Option<DomainName>)> = by_name
            .get(&back)
            .map(|sets| {
                sets.iter()
                    .filter(|(rtype, _)| rule.accepts_back(rtype))
                    .collect()
            })
            .unwrap_or_default();
        if backs.is_empty() {
            outcome.warnings.push(Warning::MissingBackend {
                zone: key.clone(),
                front,
                back,
                expected: rule.back_types_text(),
            });
            continue;
        }
        let target = match rule.sni {
            SniMode::BackTarget => match back_target(&backs) {
                Ok(target) => Some(target),
                Err(error) => {
                    outcome.warnings.push(Warning::BackTarget {
                        zone: key.clone(),
                        back,
                        error,
                    });
                    continue;
                }
            },
            _ => None,
        };
        outcome
            .routes
            .extend(rule.route(&key, &zone_name, target.as_ref()));
    }
    outcome
}

/// The SNI of a `back-target` rule: the back CNAME's target, a plain host name without a
/// wildcard (an EKS endpoint's name, lower-cased as every name is).
fn back_target(backs: &[&(&str, Option<DomainName>)]) -> Result<HostName, NameError> {
    let target = backs
        .iter()
        .find_map(|(_, target)| target.as_ref())
        .ok_or(NameError::Empty)?;
    let host = target.to_host()?;
    if host.as_str().starts_with('*') {
        return Err(NameError::MisplacedWildcard {
            name: host.as_str().to_owned(),
        });
    }
    Ok(host)
}

/// A warning for each CNAME at `front` whose target nearly names a proxy.
fn near_misses(
    zone: &ZoneKey,
    front: &HostName,
    by_name: &HashMap<HostName, Vec<(&str, Option<DomainName>)>>,
    proxies: &[HostName],
) -> Vec<Warning> {
    let sets = by_name.get(front).map_or(&[][..], Vec::as_slice);
    sets.iter()
        .filter(|(rtype, _)| *rtype == FRONT_TYPE)
        .filter_map(|(_, target)| target.as_ref()?.to_host().ok())
        .filter_map(|target| near_proxy(&target, proxies))
        .map(|near| Warning::NearProxy {
            zone: zone.clone(),
            front: front.clone(),
            near,
        })
        .collect()
}

/// Merges the routes of every zone into the final, conflict-free, sorted table.
///
/// The same SNI claimed twice (the same private zone name in two accounts) is resolved the
/// same way every time: the lowest account id, then the lowest zone id, wins. The order is
/// the one HAProxy evaluates: exact names first, then suffixes longest first, so a more
/// specific suffix is never shadowed by a shorter one.
pub fn resolve(candidates: Vec<Route>) -> (Vec<Route>, Vec<Warning>) {
    let mut by_sni: BTreeMap<(SniMatch, String), Vec<Route>> = BTreeMap::new();
    for route in candidates {
        by_sni
            .entry((route.sni_match, route.sni.clone()))
            .or_default()
            .push(route);
    }
    let mut warnings = Vec::new();
    let mut routes = Vec::with_capacity(by_sni.len());
    for ((_, sni), mut claims) in by_sni {
        claims.sort_by(|a, b| a.zone_key().cmp(&b.zone_key()).then(a.rule.cmp(&b.rule)));
        let mut claims = claims.into_iter();
        let Some(kept) = claims.next() else { continue };
        for dropped in claims {
            warnings.push(Warning::SniConflict {
                sni: sni.clone(),
                kept: kept.zone_key(),
                dropped: dropped.zone_key(),
            });
        }
        routes.push(kept);
    }
    routes.sort_by(|a, b| route_order(a).cmp(&route_order(b)));
    (routes, warnings)
}

fn route_order(route: &Route) -> (SniMatch, std::cmp::Reverse<usize>, &str) {
    let specificity = match route.sni_match {
        SniMatch::Exact => 0,
        SniMatch::Suffix => route.sni.len(),
    };
    (route.sni_match, std::cmp::Reverse(specificity), &route.sni)
}

#[cfg(test)]
mod tests;
