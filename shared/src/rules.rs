//! The rule table and the matcher: which record pairs in a private zone call for a route.
//!
//! Rules are data. A row names the record that points clients at the peering proxy (the
//! *front*, always a CNAME whose target must be the proxy's hostname) and the record HAProxy
//! forwards to (the *back*), both relative to the zone. A new pattern is a new row.

use std::collections::{BTreeMap, HashMap};
use std::fmt;

use crate::model::{Route, SniMatch, ZoneKey, ZoneRecords};
use crate::names::{DomainName, HostName, NameError, normalize};
use crate::near_miss::{NearMiss, near_proxy};

/// One row of the rule table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rule {
    /// Short id, used in backend names and in the manifest.
    pub id: &'static str,
    /// The front record's name relative to the zone: a CNAME to the peering proxy.
    pub front: &'static str,
    /// The back record's name relative to the zone: HAProxy's backend server.
    pub back: &'static str,
    /// Record types the back record may have (`A` covers plain and alias A records).
    pub back_types: &'static [&'static str],
    /// How the SNI is matched: the front name exactly, or (for a `*.` front) its suffix.
    pub sni: SniMatch,
    /// The backend server's port.
    pub port: u16,
}

/// The record type the front record must have.
pub const FRONT_TYPE: &str = "CNAME";

/// The default rules (docs/ARCHITECTURE.md, "The two rules").
pub const DEFAULT_RULES: &[Rule] = &[
    Rule {
        id: "api",
        front: "proxy.api",
        back: "api",
        back_types: &["A"],
        sni: SniMatch::Exact,
        port: 443,
    },
    Rule {
        id: "api-k8s",
        front: "proxy.api.k8s",
        back: "api.k8s",
        back_types: &["A"],
        sni: SniMatch::Exact,
        port: 443,
    },
    Rule {
        id: "ingress-int",
        front: "*.int",
        back: "ingress-int",
        back_types: &["CNAME"],
        sni: SniMatch::Suffix,
        port: 443,
    },
];

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
        expected: &'static [&'static str],
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
                "zone {zone}: {front} points at the peering proxy but {back} is not a {} \
                 record, so no route",
                expected.join("/")
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
        let front = zone_name.with_prefix(rule.front);
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
        let back = zone_name.with_prefix(rule.back);
        let has_back = by_name.get(&back).is_some_and(|sets| {
            sets.iter()
                .any(|(rtype, _)| rule.back_types.contains(rtype))
        });
        if !has_back {
            outcome.warnings.push(Warning::MissingBackend {
                zone: key.clone(),
                front,
                back,
                expected: rule.back_types,
            });
            continue;
        }
        outcome.routes.push(rule.route(&key, &zone_name));
    }
    outcome
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

impl Rule {
    /// The route this rule makes for a zone whose records qualify. The manifest checks stored
    /// routes against it too.
    pub fn route(&self, zone: &ZoneKey, zone_name: &HostName) -> Route {
        let front = zone_name.with_prefix(self.front);
        let back = zone_name.with_prefix(self.back);
        let sni = match self.sni {
            SniMatch::Exact => front.as_str().to_owned(),
            SniMatch::Suffix => front
                .as_str()
                .strip_prefix('*')
                .unwrap_or(front.as_str())
                .to_owned(),
        };
        Route {
            rule: self.id.to_owned(),
            account: zone.account.clone(),
            zone_id: zone.id.clone(),
            zone_name: zone_name.clone(),
            sni,
            sni_match: self.sni,
            backend: back.clone(),
            port: self.port,
            records: vec![front, back],
        }
    }
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
mod tests {
    use super::*;
    use crate::model::{RecordSet, Zone};

    const PROXY: &str = "peering-proxy.tools.example.com";

    fn zone(account: &str, id: &str, name: &str, records: Vec<RecordSet>) -> ZoneRecords {
        ZoneRecords {
            zone: Zone {
                account: account.to_owned(),
                id: id.to_owned(),
                name: name.to_owned(),
                private: true,
            },
            records,
        }
    }

    fn api_pair(zone: &str) -> Vec<RecordSet> {
        vec![
            RecordSet::new(&format!("api.{zone}"), "A", &["10.0.0.1"]),
            RecordSet::new(&format!("proxy.api.{zone}"), "CNAME", &[PROXY]),
        ]
    }

    /// `api.example.internal` (A) and its front `proxy.api.example.internal`: a record of
    /// `rtype` pointing at `target`.
    fn api_front(rtype: &str, target: &str) -> Vec<RecordSet> {
        vec![
            RecordSet::new("api.example.internal.", "A", &["10.0.0.1"]),
            RecordSet::new("proxy.api.example.internal.", rtype, &[target]),
        ]
    }

    fn ingress_pair(zone: &str) -> Vec<RecordSet> {
        vec![
            RecordSet::new(&format!("\\052.int.{zone}"), "CNAME", &[PROXY]),
            RecordSet::new(
                &format!("ingress-int.{zone}"),
                "CNAME",
                &["internal-a.elb.amazonaws.com"],
            ),
        ]
    }

    /// Matches one zone and returns `rule sni -> backend` lines, plus warnings as text.
    fn matched(zone: &ZoneRecords) -> (Vec<String>, Vec<String>) {
        let proxies = [HostName::parse(PROXY).unwrap()];
        let outcome = zone_routes(DEFAULT_RULES, zone, &proxies);
        let routes = outcome
            .routes
            .iter()
            .map(|r| format!("{} {} -> {}:{}", r.rule, r.sni, r.backend, r.port))
            .collect();
        let warnings = outcome.warnings.iter().map(ToString::to_string).collect();
        (routes, warnings)
    }

    fn check(records: Vec<RecordSet>, expected: &[&str]) {
        let (routes, _) = matched(&zone("111111111111", "Z1", "example.internal.", records));
        assert_eq!(routes, expected);
    }

    #[test]
    fn both_rules_in_one_zone() {
        let mut records = api_pair("example.internal.");
        records.extend(ingress_pair("example.internal."));
        check(
            records,
            &[
                "api proxy.api.example.internal -> api.example.internal:443",
                "ingress-int .int.example.internal -> ingress-int.example.internal:443",
            ],
        );
    }

    #[test]
    fn api_via_alias_record() {
        check(
            vec![
                RecordSet::alias("api.example.internal.", "A", "nlb.elb.amazonaws.com."),
                RecordSet::new("proxy.api.example.internal.", "CNAME", &[PROXY]),
            ],
            &["api proxy.api.example.internal -> api.example.internal:443"],
        );
    }

    #[test]
    fn k8s_variant_of_the_api_pair() {
        check(
            vec![
                RecordSet::new("api.k8s.example.internal.", "A", &["10.0.0.1"]),
                RecordSet::new("proxy.api.k8s.example.internal.", "CNAME", &[PROXY]),
            ],
            &["api-k8s proxy.api.k8s.example.internal -> api.k8s.example.internal:443"],
        );
    }

    #[test]
    fn literal_and_escaped_wildcards_both_match() {
        check(
            vec![
                RecordSet::new("*.int.example.internal", "CNAME", &[PROXY]),
                RecordSet::new("ingress-int.example.internal", "CNAME", &["elb"]),
            ],
            &["ingress-int .int.example.internal -> ingress-int.example.internal:443"],
        );
        check(
            ingress_pair("example.internal."),
            &["ingress-int .int.example.internal -> ingress-int.example.internal:443"],
        );
    }

    #[test]
    fn case_and_trailing_dots_are_ignored_in_names_and_targets() {
        check(
            vec![
                RecordSet::new("API.Example.Internal.", "A", &["10.0.0.1"]),
                RecordSet::new(
                    "Proxy.API.example.internal",
                    "CNAME",
                    &["PEERING-PROXY.tools.example.com."],
                ),
            ],
            &["api proxy.api.example.internal -> api.example.internal:443"],
        );
    }

    #[test]
    fn the_cname_target_must_be_the_proxy() {
        check(api_front("CNAME", "other.example.com"), &[]);
        // A suffix of the proxy's name is not the proxy.
        check(api_front("CNAME", "tools.example.com"), &[]);
    }

    #[test]
    fn record_types_are_checked() {
        // The front must be a CNAME, not an A record with the proxy's address.
        check(api_front("A", PROXY), &[]);
        // The API back must be an A record; a CNAME or AAAA is not the rule.
        check(
            vec![
                RecordSet::new("api.example.internal.", "CNAME", &["x.example.com"]),
                RecordSet::new("proxy.api.example.internal.", "CNAME", &[PROXY]),
            ],
            &[],
        );
        // The ingress back must be a CNAME.
        check(
            vec![
                RecordSet::new("*.int.example.internal", "CNAME", &[PROXY]),
                RecordSet::new("ingress-int.example.internal", "A", &["10.0.0.9"]),
            ],
            &[],
        );
    }

    #[test]
    fn half_pairs_warn() {
        let (routes, warnings) = matched(&zone(
            "111111111111",
            "Z1",
            "example.internal",
            vec![RecordSet::new(
                "proxy.api.example.internal.",
                "CNAME",
                &[PROXY],
            )],
        ));
        assert!(routes.is_empty());
        assert_eq!(warnings.len(), 1);
        assert!(warnings[0].contains("api.example.internal is not a A record"));
    }

    #[test]
    fn any_configured_proxy_name_counts() {
        let z = zone(
            "1",
            "Z1",
            "z",
            vec![
                RecordSet::new("api.z", "A", &["10.0.0.1"]),
                RecordSet::new("proxy.api.z", "CNAME", &["proxy-b.example.com"]),
            ],
        );
        let proxies = [
            HostName::parse("proxy-a.example.com").unwrap(),
            HostName::parse("Proxy-B.example.com.").unwrap(),
        ];
        assert_eq!(zone_routes(DEFAULT_RULES, &z, &proxies).routes.len(), 1);
    }

    #[test]
    fn public_zones_are_skipped() {
        let mut z = zone("1", "Z1", "example.com", api_pair("example.com"));
        z.zone.private = false;
        assert_eq!(matched(&z), (vec![], vec![]));
    }

    #[test]
    fn hostile_zone_names_never_route() {
        for name in [
            "ex\\040ample.internal",
            "ex\\043x.internal",
            "a\\056b.internal",
        ] {
            let z = zone("1", "Z1", name, api_pair(name));
            let (routes, warnings) = matched(&z);
            assert!(routes.is_empty(), "{name}");
            assert_eq!(warnings.len(), 1, "{name}: {warnings:?}");
            assert!(
                warnings[0].starts_with("zone Z1 in account 1 skipped"),
                "{warnings:?}"
            );
        }
    }

    #[test]
    fn hostile_record_names_are_skipped_with_a_warning() {
        let mut records = api_pair("z");
        records.push(RecordSet::new("evil\\012name.z", "CNAME", &[PROXY]));
        let (routes, warnings) = matched(&zone("1", "Z1", "z", records));
        assert_eq!(routes.len(), 1);
        assert_eq!(warnings.len(), 1);
        assert!(warnings[0].contains("U+000A"), "{warnings:?}");
    }

    #[test]
    fn same_zone_name_in_two_accounts_resolves_deterministically() {
        let proxies = [HostName::parse(PROXY).unwrap()];
        let a = zone(
            "222222222222",
            "ZB",
            "shared.internal",
            api_pair("shared.internal"),
        );
        let b = zone(
            "111111111111",
            "ZA",
            "shared.internal",
            api_pair("shared.internal"),
        );
        for order in [[&a, &b], [&b, &a]] {
            let candidates = order
                .iter()
                .flat_map(|z| zone_routes(DEFAULT_RULES, z, &proxies).routes)
                .collect();
            let (routes, warnings) = resolve(candidates);
            assert_eq!(routes.len(), 1);
            assert_eq!(routes[0].account, "111111111111");
            assert_eq!(warnings.len(), 1);
            let text = warnings[0].to_string();
            assert!(text.contains("ZA in account 111111111111"), "{text}");
            assert!(text.contains("ZB in account 222222222222"), "{text}");
        }
    }

    #[test]
    fn resolved_order_is_exact_first_then_longest_suffix() {
        let proxies = [HostName::parse(PROXY).unwrap()];
        let mut candidates = Vec::new();
        for (id, name) in [
            ("Z1", "b.internal"),
            ("Z2", "a.b.internal"),
            ("Z3", "c.internal"),
        ] {
            let mut records = ingress_pair(name);
            records.extend(api_pair(name));
            candidates
                .extend(zone_routes(DEFAULT_RULES, &zone("1", id, name, records), &proxies).routes);
        }
        let (routes, _) = resolve(candidates);
        let order: Vec<&str> = routes.iter().map(|r| r.sni.as_str()).collect();
        assert_eq!(
            order,
            [
                "proxy.api.a.b.internal",
                "proxy.api.b.internal",
                "proxy.api.c.internal",
                ".int.a.b.internal",
                ".int.b.internal",
                ".int.c.internal",
            ]
        );
    }
}
