//! The rule table and the matcher: which record pairs in a private zone call for a route.
//!
//! Rules are data (docs/ARCHITECTURE.md, "The rules"): the built-in table, or the operator's
//! own from `ROUTING_RULES` ([`parse_rules`]). A row names the record that points clients at
//! the peering proxy (the *front*, always a CNAME whose target must be the proxy's hostname),
//! the record HAProxy forwards to (the *back*), both relative to the zone, and which name a
//! client sends ([`SniMode`]). A new pattern is a new row.

use std::collections::{BTreeMap, HashMap};

use crate::model::{Route, SniMatch, ZoneKey, ZoneRecords};
use crate::names::{DomainName, HostName, normalize};
use crate::near_miss::near_proxy;
use crate::networks::Borders;
use crate::warnings::{EXAMPLES, Warning};

mod mode;
mod parse;
mod sieve;
mod table;

pub use crate::networks::{NeverBackend, never_backend};
pub use mode::{BackType, SniMode, StoredTarget, TargetError};
pub use parse::{FIELDS, MAX_RULES, RuleRef, RulesError, parse_rules};
pub use sieve::Sieve;
pub use table::{DEFAULT_RULES, FRONT_TYPE, Rule};

/// What matching one zone produced.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ZoneOutcome {
    pub routes: Vec<Route>,
    pub warnings: Vec<Warning>,
}

/// One record set at a name, as the matcher reads it.
struct Set<'a> {
    rtype: &'a str,
    /// The record's value as a name (a CNAME's target, an alias record's target), decoded.
    target: Option<DomainName>,
    /// A routing-policy set's identifier (weighted, failover, …).
    set_id: Option<&'a str>,
    /// The record's values as Route53 returned them (an A record's addresses; none for an
    /// alias record, whose target is a name).
    values: &'a [String],
}

/// A zone's record sets by decoded name.
type Index<'a> = HashMap<HostName, Vec<Set<'a>>>;

/// Matches the rule table against one zone, its A backs judged only against the addresses
/// that are never a backend ([`Borders::unjudged`]). The generator matches with its borders
/// ([`zone_routes_within`]).
pub fn zone_routes(rules: &[Rule], zone: &ZoneRecords, proxies: &[HostName]) -> ZoneOutcome {
    zone_routes_within(rules, zone, proxies, &Borders::unjudged())
}

/// Matches the rule table against one zone; an A back's addresses must be within `borders`
/// for the zone's account. Public zones produce nothing: the proxy only serves private names.
pub fn zone_routes_within(
    rules: &[Rule],
    zone: &ZoneRecords,
    proxies: &[HostName],
    borders: &Borders,
) -> ZoneOutcome {
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
    let by_name = index(zone, &key, &zone_name, &mut outcome.warnings);
    let matcher = Matcher {
        zone: &key,
        zone_name: &zone_name,
        by_name: &by_name,
        proxies,
        proxy_names: proxies.iter().map(HostName::to_domain).collect(),
        borders,
    };
    for rule in rules {
        let (route, warnings) = matcher.rule(rule);
        outcome.routes.extend(route);
        outcome.warnings.extend(warnings);
    }
    refuse_shared_snis(&key, &mut outcome);
    outcome
}

/// Indexes the record sets by decoded name; a name that is not a plain host name never
/// reaches the config, but a person is told about it: one warning for the zone, counting
/// them and keeping the first few errors as they come (never one per record, so refused
/// records cost no memory beyond their own reading).
fn index<'a>(
    zone: &'a ZoneRecords,
    key: &ZoneKey,
    zone_name: &HostName,
    warnings: &mut Vec<Warning>,
) -> Index<'a> {
    let mut by_name: Index<'a> = HashMap::new();
    let mut skipped = zone.unnamed_left;
    let mut first = Vec::new();
    for record in &zone.records {
        match normalize(&record.name).to_host() {
            Ok(name) => by_name.entry(name).or_default().push(Set {
                rtype: record.rtype.as_str(),
                target: record.target().map(normalize),
                set_id: record.set_identifier.as_deref(),
                values: &record.values,
            }),
            Err(error) => {
                skipped += 1;
                if first.len() < EXAMPLES {
                    first.push(error);
                }
            }
        }
    }
    if skipped > 0 {
        warnings.push(Warning::RecordName {
            zone: key.clone(),
            zone_name: zone_name.clone(),
            skipped,
            first,
        });
    }
    by_name
}

/// One zone's records, ready to be matched rule by rule.
struct Matcher<'a> {
    zone: &'a ZoneKey,
    zone_name: &'a HostName,
    by_name: &'a Index<'a>,
    proxies: &'a [HostName],
    proxy_names: Vec<DomainName>,
    borders: &'a Borders,
}

impl<'a> Matcher<'a> {
    /// The route `rule` makes of the zone, if any, and what is worth a warning.
    fn rule(&self, rule: &Rule) -> (Option<Route>, Vec<Warning>) {
        let front = self.zone_name.with_prefix(&rule.front);
        if !self.points_at_proxy(&front) {
            return (
                None,
                near_misses(self.zone, &front, self.by_name, self.proxies),
            );
        }
        let back = self.zone_name.with_prefix(&rule.back);
        let backs = match self.backs(rule, front, &back) {
            Ok(backs) => backs,
            Err(warnings) => return (None, warnings),
        };
        let set_ids: Vec<String> = backs
            .iter()
            .filter_map(|set| set.set_id.map(str::to_owned))
            .collect();
        let policy_set = |routed| Warning::PolicySet {
            zone: self.zone.clone(),
            back: back.clone(),
            set_ids: set_ids.clone(),
            routed,
        };
        let targets = backs.iter().filter_map(|set| set.target.as_ref());
        let target = match rule.sni_mode.back_target(targets) {
            Ok(target) => target,
            Err(TargetError::NotOne) => return (None, vec![policy_set(false)]),
            Err(TargetError::NotAHost(error)) => {
                let zone = self.zone.clone();
                return (None, vec![Warning::BackTarget { zone, back, error }]);
            }
        };
        let route = rule.route(self.zone, self.zone_name, target.as_ref());
        let warnings = match set_ids.is_empty() {
            true => Vec::new(),
            false => vec![policy_set(true)],
        };
        (route, warnings)
    }

    /// The back record sets at `back` of a type `rule` accepts; or, when there is none, the
    /// back is or points at a proxy name (each connection would loop into the proxy), or an A
    /// back holds an address that is never a backend, the warnings that say so.
    fn backs(
        &self,
        rule: &Rule,
        front: HostName,
        back: &HostName,
    ) -> Result<Vec<&'a Set<'a>>, Vec<Warning>> {
        let backs: Vec<&Set> = self.by_name.get(back).map_or_else(Vec::new, |sets| {
            sets.iter()
                .filter(|set| rule.accepts_back(set.rtype))
                .collect()
        });
        if backs.is_empty() {
            return Err(vec![Warning::MissingBack {
                zone: self.zone.clone(),
                front,
                back: back.clone(),
                expected: rule.back_types_text(),
            }]);
        }
        let looped = std::iter::once(back.to_domain())
            .chain(backs.iter().filter_map(|set| set.target.clone()))
            .find(|name| self.proxy_names.contains(name));
        if let Some(proxy) = looped {
            return Err(vec![Warning::BackIsProxy {
                zone: self.zone.clone(),
                back: back.clone(),
                proxy: proxy.to_string(),
            }]);
        }
        // Any one such address refuses the whole back: the proxy resolves the back by name
        // and may take any of its addresses for any connection, so a route at one good and
        // one loopback address still loops a share of them (and a good address beside it
        // would hide the loop, or the crossing, from whoever tests the route).
        let never = backs
            .iter()
            .filter(|set| set.rtype == BackType::A.as_str())
            .flat_map(|set| set.values.iter())
            .find_map(|value| {
                let address = value.parse().ok()?;
                let why = self.borders.judge(address, &self.zone.account).err()?;
                Some((value, why))
            });
        match never {
            Some((address, why)) => Err(vec![Warning::BackAddress {
                zone: self.zone.clone(),
                back: back.clone(),
                address: address.clone(),
                why,
            }]),
            None => Ok(backs),
        }
    }

    /// Whether `front` is a CNAME to one of the proxy names.
    fn points_at_proxy(&self, front: &HostName) -> bool {
        self.by_name.get(front).is_some_and(|sets| {
            sets.iter().any(|set| {
                set.rtype == FRONT_TYPE
                    && set
                        .target
                        .as_ref()
                        .is_some_and(|t| self.proxy_names.contains(t))
            })
        })
    }
}

/// Two rules of one zone that yield one SNI: neither routes it, since only the order of the
/// rules would decide which port serves.
fn refuse_shared_snis(zone: &ZoneKey, outcome: &mut ZoneOutcome) {
    let mut rules_by_sni: BTreeMap<(SniMatch, &str), Vec<String>> = BTreeMap::new();
    for route in &outcome.routes {
        rules_by_sni
            .entry((route.sni_match, route.sni.as_str()))
            .or_default()
            .push(route.rule.clone());
    }
    let shared: Vec<(String, Vec<String>)> = rules_by_sni
        .into_iter()
        .filter(|(_, rules)| rules.len() > 1)
        .map(|((_, sni), rules)| (sni.to_owned(), rules))
        .collect();
    for (sni, rules) in shared {
        outcome.routes.retain(|route| route.sni != sni);
        outcome.warnings.push(Warning::SameSni {
            zone: zone.clone(),
            sni,
            rules,
        });
    }
}

/// A warning for each CNAME at `front` whose target nearly names a proxy.
fn near_misses(
    zone: &ZoneKey,
    front: &HostName,
    by_name: &Index<'_>,
    proxies: &[HostName],
) -> Vec<Warning> {
    let sets = by_name.get(front).map_or(&[][..], Vec::as_slice);
    sets.iter()
        .filter(|set| set.rtype == FRONT_TYPE)
        .filter_map(|set| set.target.as_ref()?.to_host().ok())
        .filter_map(|target| near_proxy(&target, proxies))
        .map(|near| Warning::NearProxy {
            zone: zone.clone(),
            front: front.clone(),
            near,
        })
        .collect()
}

/// Merges the claims of every zone (their routes, after ownership) into the final,
/// conflict-free, sorted table.
///
/// The same SNI claimed twice (the same private zone name in two accounts) is resolved the
/// same way every time: the lowest account id, then the lowest zone id, wins. The order is
/// the one HAProxy evaluates: exact names first, then suffixes longest first, so a more
/// specific suffix is never shadowed by a shorter one.
pub fn merge_claims(candidates: Vec<Route>) -> (Vec<Route>, Vec<Warning>) {
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
