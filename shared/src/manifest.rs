//! The manifest kept beside the config: per zone, what was last read and the routes it gave,
//! with provenance. It makes events incremental (re-read one zone, merge the rest) and keeps
//! an account's routes when a scan of it fails.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::accounts::AccountState;
use crate::model::{Route, Zone, ZoneKey};
use crate::names::{HostName, normalize};
use crate::networks::Networks;
use crate::rules::{Rule, StoredTarget};

mod stored_networks;

/// Current format; a manifest of another format is ignored (the next run is a full sweep).
pub const FORMAT: u32 = 1;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    pub format: u32,
    /// The config generation this manifest was written with.
    pub generation: u64,
    /// Every private zone read, keyed by `account/zone-id`.
    pub zones: BTreeMap<String, ZoneEntry>,
    /// Zones still to read in an unfinished sweep (see [`crate::discovery`]); empty when the
    /// last sweep finished.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub pending: BTreeSet<String>,
    /// Zones of `pending` never read yet: key → zone name as Route53 spells it. What lies
    /// inside them goes to nobody new until they are read.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub unread: BTreeMap<String, String>,
    /// Zones read while their account still had zones never read, keyed as `zones`: saved so
    /// they count as read, not in the config until the account's last zone is read (`zones`
    /// keeps that account's published entries meanwhile).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub progress: BTreeMap<String, ZoneEntry>,
    /// Normalised zone name → the zone that held it first (see [`crate::ownership`]).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub holders: BTreeMap<String, ZoneKey>,
    /// A name of `holders` whose holder's account no longer holds it with any zone → since
    /// when (Unix seconds): the account keeps it for `OWNERSHIP_GRACE_HOURS` after that.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub holders_absent_since: BTreeMap<String, u64>,
    /// An SNI outside every zone (a `back-target` rule's, such as an EKS endpoint's name) →
    /// the zone that holds it (see [`crate::ownership`]).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub outside_holders: BTreeMap<String, ZoneKey>,
    /// An SNI of `outside_holders` whose holder no longer claims it → since when (Unix
    /// seconds): the holder keeps it for `OWNERSHIP_GRACE_HOURS` after that.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub outside_absent_since: BTreeMap<String, u64>,
    /// Every account's state, since when and why (see [`crate::accounts`]), by account id.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub accounts: Vec<AccountState>,
    /// Each member's networks as its VPCs gave them at the last full sweep that could read
    /// them (see [`crate::networks::refreshed`]): what an event run judges backs with.
    #[serde(
        default,
        skip_serializing_if = "Networks::is_empty",
        with = "stored_networks"
    )]
    pub networks: Networks,
    /// How many stored routes were dropped on reading because the rule table no longer makes
    /// them (a `ROUTING_RULES` change): the run then reads every zone again. Never stored.
    #[serde(skip)]
    pub stale_routes: usize,
}

/// What one zone gave when it was last read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ZoneEntry {
    pub account: String,
    pub id: String,
    /// The zone name as Route53 returned it.
    pub name: String,
    /// Routes before cross-zone conflict resolution.
    pub routes: Vec<Route>,
    /// What the matcher warned about in this zone: one entry per kind, its count and first
    /// examples ([`crate::warnings::zone_lines`]). A manifest written before that, with one
    /// entry per refused record, reads as the same list and is compacted on reading.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

impl Default for Manifest {
    fn default() -> Self {
        Manifest {
            format: FORMAT,
            generation: 0,
            zones: BTreeMap::new(),
            pending: BTreeSet::new(),
            unread: BTreeMap::new(),
            progress: BTreeMap::new(),
            holders: BTreeMap::new(),
            holders_absent_since: BTreeMap::new(),
            outside_holders: BTreeMap::new(),
            outside_absent_since: BTreeMap::new(),
            accounts: Vec::new(),
            networks: Networks::default(),
            stale_routes: 0,
        }
    }
}

/// The manifest's key for a zone: `<account>/<zone id>`.
pub fn zone_key(key: &ZoneKey) -> String {
    format!("{}/{}", key.account, key.id)
}

/// The account of a manifest key ([`zone_key`]); `None` for a key that is not one.
pub fn key_account(key: &str) -> Option<&str> {
    key.split_once('/').map(|(account, _)| account)
}

/// Whether `key`, a manifest key ([`zone_key`]), is one of `account`'s zones.
pub fn is_accounts(key: &str, account: &str) -> bool {
    key_account(key) == Some(account)
}

impl ZoneEntry {
    /// The zone's account and id: its manifest key is [`zone_key`] of it.
    pub fn key(&self) -> ZoneKey {
        ZoneKey {
            account: self.account.clone(),
            id: self.id.clone(),
        }
    }

    /// What `rules` make of a zone's records, as a sweep stores it.
    pub fn matched(
        zone: &Zone,
        records: Vec<crate::model::RecordSet>,
        rules: &[Rule],
        proxies: &[HostName],
    ) -> Self {
        let zone_records = crate::model::ZoneRecords {
            unnamed_left: 0,
            zone: zone.clone(),
            records,
        };
        let outcome = crate::rules::zone_routes(rules, &zone_records, proxies);
        let warnings = outcome.warnings.iter().map(ToString::to_string).collect();
        ZoneEntry::new(zone, outcome.routes, warnings)
    }

    pub fn new(zone: &Zone, routes: Vec<Route>, warnings: Vec<String>) -> Self {
        ZoneEntry {
            account: zone.account.clone(),
            id: zone.id.clone(),
            name: zone.name.clone(),
            routes,
            warnings,
        }
    }
}

impl Manifest {
    /// The entries of one account.
    pub fn account_zones<'a>(&'a self, account: &'a str) -> impl Iterator<Item = &'a ZoneEntry> {
        self.zones
            .values()
            .filter(move |entry| entry.account == account)
    }

    /// Equal but for the generation stamp: nothing worth writing changed.
    pub fn same_content(&self, other: &Manifest) -> bool {
        self.zones == other.zones
            && self.pending == other.pending
            && self.unread == other.unread
            && self.progress == other.progress
            && self.holders == other.holders
            && self.holders_absent_since == other.holders_absent_since
            && self.outside_holders == other.outside_holders
            && self.outside_absent_since == other.outside_absent_since
            && self.accounts == other.accounts
            && self.networks == other.networks
            && self.format == other.format
    }

    /// The zones never read (`unread`), as entries without routes: their names count for who
    /// may route what (`crate::ownership`).
    pub fn unread_entries(&self) -> Vec<ZoneEntry> {
        self.unread
            .iter()
            .filter_map(|(key, name)| {
                let (account, id) = key.split_once('/')?;
                Some(ZoneEntry {
                    account: account.to_owned(),
                    id: id.to_owned(),
                    name: name.clone(),
                    routes: Vec::new(),
                    warnings: Vec::new(),
                })
            })
            .collect()
    }

    /// The zones as a sweep starts from: `zones` with the entries of `progress` over them
    /// (they were read, and are newer).
    pub fn with_progress(&self) -> std::borrow::Cow<'_, Manifest> {
        if self.progress.is_empty() {
            return std::borrow::Cow::Borrowed(self);
        }
        let mut merged = self.clone();
        merged.zones.extend(self.progress.clone());
        merged.progress.clear();
        std::borrow::Cow::Owned(merged)
    }

    /// Reads a stored manifest; `None` when it is of another format (or not a manifest).
    /// Each zone's warnings are kept within [`crate::warnings::compact_zone`]'s bounds.
    ///
    /// Every value is checked as if Route53 had just returned it: the bucket is not trusted
    /// more than Route53, and a manifest's routes reach the config without another read. A
    /// route must be exactly what its rule (of `rules`, the table this run matches with) makes
    /// of its zone's name; one that is not (after a change of `ROUTING_RULES`) is dropped and
    /// counted in [`Manifest::stale_routes`], so the run reads every zone again, while who
    /// holds each name is kept.
    pub fn from_json(text: &str, rules: &[Rule]) -> Result<Option<Manifest>, serde_json::Error> {
        let value: serde_json::Value = serde_json::from_str(text)?;
        if value.get("format").and_then(serde_json::Value::as_u64) != Some(u64::from(FORMAT)) {
            return Ok(None);
        }
        let mut manifest: Manifest = serde_json::from_value(value)?;
        // The next config is numbered from it: a generation the apply document cannot read
        // (or one whose successor overflows) is refused, not carried forward.
        if manifest.generation > crate::artifact::MAX_GENERATION {
            return Err(serde::de::Error::custom(format!(
                "generation {} is not {}",
                manifest.generation,
                crate::artifact::GENERATION_EXPECTED
            )));
        }
        manifest.validate().map_err(serde::de::Error::custom)?;
        manifest.drop_stale_routes(rules);
        for entry in manifest.zones.values_mut() {
            entry.warnings = crate::warnings::compact_zone(std::mem::take(&mut entry.warnings));
        }
        Ok(Some(manifest))
    }

    /// Keeps only the routes `rules` make of their zones, counting the others.
    fn drop_stale_routes(&mut self, rules: &[Rule]) {
        for entry in self.zones.values_mut().chain(self.progress.values_mut()) {
            let mut routes = std::mem::take(&mut entry.routes);
            let before = routes.len();
            routes.retain(|route| is_what_its_rule_makes(route, entry, rules));
            self.stale_routes += before - routes.len();
            entry.routes = routes;
        }
    }

    fn validate(&self) -> Result<(), String> {
        for (key, entry) in self.zones.iter().chain(&self.progress) {
            let zone = ZoneKey {
                account: entry.account.clone(),
                id: entry.id.clone(),
            };
            if !zone.is_well_formed() || *key != zone_key(&zone) {
                return Err(format!(
                    "zone entry {key:?}: expected the key <12-digit account>/<zone id> of its \
                     own account {:?} and id {:?}",
                    entry.account, entry.id
                ));
            }
        }
        for key in self.pending.iter().chain(self.unread.keys()) {
            let well_formed = key.split_once('/').is_some_and(|(account, id)| {
                crate::model::is_account_id(account) && crate::model::is_zone_id(id)
            });
            if !well_formed {
                return Err(format!(
                    "pending zone {key:?}: expected <12-digit account>/<zone id>"
                ));
            }
        }
        for state in &self.accounts {
            if !crate::model::is_account_id(&state.account)
                || crate::time::unix_seconds(&state.since).is_none()
            {
                return Err(format!(
                    "account state {:?} since {:?}: expected a 12-digit account and an RFC 3339 \
                     time",
                    state.account, state.since
                ));
            }
        }
        for (name, zone) in self.holders.iter().chain(&self.outside_holders) {
            let canonical = HostName::parse(name).is_ok_and(|host| host.as_str() == name);
            if !canonical || !zone.is_well_formed() {
                return Err(format!(
                    "holder of {name:?}: expected a lower-case zone name and a well-formed \
                     zone ({zone})"
                ));
            }
        }
        if let Some(name) = self
            .holders_absent_since
            .keys()
            .find(|name| !self.holders.contains_key(*name))
        {
            return Err(format!(
                "absent holder of {name:?}: expected a name of holders, got one that is not"
            ));
        }
        if let Some(sni) = self
            .outside_absent_since
            .keys()
            .find(|sni| !self.outside_holders.contains_key(*sni))
        {
            return Err(format!(
                "absent holder of {sni:?}: expected an SNI of outside_holders, got one that is not"
            ));
        }
        Ok(())
    }

    pub fn to_json(&self) -> String {
        // A manifest is plain data: serialising it cannot fail.
        serde_json::to_string_pretty(self).unwrap_or_default()
    }
}

/// The route `rules::zone_routes` would make with this rule from this zone: nothing in a
/// stored route may differ from it. A `back-target` rule's SNI came from a CNAME target, so
/// it must be a plain host name in its canonical spelling.
fn is_what_its_rule_makes(route: &Route, entry: &ZoneEntry, rules: &[Rule]) -> bool {
    let Some(rule) = rules.iter().find(|rule| rule.id == route.rule) else {
        return false;
    };
    let target = match rule.sni_mode.stored_target(&route.sni) {
        StoredTarget::NotRead => None,
        StoredTarget::Target(target) => Some(target),
        StoredTarget::Malformed => return false,
    };
    let Ok(zone_name) = normalize(&entry.name).to_host() else {
        return false;
    };
    let zone = ZoneKey {
        account: entry.account.clone(),
        id: entry.id.clone(),
    };
    rule.route(&zone, &zone_name, target.as_ref()).as_ref() == Some(route)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::DEFAULT_RULES;

    #[test]
    fn round_trips_and_ignores_other_formats() {
        let mut manifest = Manifest::default();
        let zone = Zone {
            account: "111111111111".into(),
            id: "Z1".into(),
            name: "a.internal.".into(),
            private: true,
        };
        manifest
            .zones
            .insert(zone_key(&zone.key()), ZoneEntry::new(&zone, vec![], vec![]));
        let text = manifest.to_json();
        assert_eq!(
            Manifest::from_json(&text, &DEFAULT_RULES).unwrap(),
            Some(manifest)
        );
        assert_eq!(
            Manifest::from_json("{\"format\": 99}", &DEFAULT_RULES).unwrap(),
            None
        );
        assert!(Manifest::from_json("not json", &DEFAULT_RULES).is_err());
    }

    #[test]
    fn an_older_manifest_with_a_warning_per_record_reads_compacted() {
        use crate::warnings::{LINE_BYTES, ZONE_LINES};
        let mut manifest = stored();
        let entry = manifest.zones.values_mut().next().unwrap();
        entry.warnings = (0..10_000)
            .map(|i| {
                format!(
                    "record r{i} in zone b.internal skipped: {}",
                    "\\043".repeat(200)
                )
            })
            .collect();
        let text = manifest.to_json();
        let read = Manifest::from_json(&text, &DEFAULT_RULES).unwrap().unwrap();
        let warnings = &read.zones["222222222222/Z0B"].warnings;
        assert_eq!(warnings.len(), ZONE_LINES + 1);
        assert!(
            warnings[0].starts_with("record r0 in zone"),
            "{}",
            warnings[0]
        );
        assert!(warnings.iter().all(|w| w.len() <= LINE_BYTES + 3));
        assert!(warnings[ZONE_LINES].starts_with("9984 more warning(s)"));
        // A manifest without warnings reads as before.
        assert_eq!(
            Manifest::from_json(&stored().to_json(), &DEFAULT_RULES).unwrap(),
            Some(stored())
        );
    }

    #[test]
    fn the_members_networks_round_trip_and_a_bad_one_is_refused() {
        let mut manifest = stored();
        for range in ["10.2.0.0/16", "2600:1f18:ab::/56"] {
            manifest
                .networks
                .insert("222222222222", range.parse().unwrap());
        }
        let text = manifest.to_json();
        assert!(text.contains("\"2600:1f18:ab::/56\""), "{text}");
        assert_eq!(
            Manifest::from_json(&text, &DEFAULT_RULES).unwrap(),
            Some(manifest)
        );
        for (from, to) in [
            ("\"10.2.0.0/16\"", "\"10.2.0.0/33\""),
            ("\"222222222222\": [", "\"2222\": ["),
        ] {
            let err = Manifest::from_json(&text.replace(from, to), &DEFAULT_RULES).unwrap_err();
            assert!(
                err.to_string().contains("expected a 12-digit account"),
                "{err}"
            );
        }
    }

    #[test]
    fn a_generation_beyond_what_the_fleet_reads_is_refused() {
        let manifest = Manifest {
            generation: crate::artifact::MAX_GENERATION,
            ..Manifest::default()
        };
        assert!(Manifest::from_json(&manifest.to_json(), &DEFAULT_RULES).is_ok());
        let text = manifest
            .to_json()
            .replace("999999999999999999", "18446744073709551615");
        let err = Manifest::from_json(&text, &DEFAULT_RULES)
            .unwrap_err()
            .to_string();
        assert!(err.contains("at most 18 digits"), "{err}");
    }

    /// A manifest as a run writes it: one zone with its api route, and its holder.
    fn stored() -> Manifest {
        use crate::model::{RecordSet, ZoneRecords};
        let zone = Zone {
            account: "222222222222".into(),
            id: "Z0B".into(),
            name: "b.internal.".into(),
            private: true,
        };
        let records = vec![
            RecordSet::new("api.b.internal.", "A", &["10.0.0.1"]),
            RecordSet::new(
                "proxy.api.b.internal.",
                "CNAME",
                &["proxy.tools.example.com"],
            ),
        ];
        let proxies = [HostName::parse("proxy.tools.example.com").unwrap()];
        let routes = crate::rules::zone_routes(
            &DEFAULT_RULES,
            &ZoneRecords {
                unnamed_left: 0,
                zone: zone.clone(),
                records,
            },
            &proxies,
        )
        .routes;
        assert_eq!(routes.len(), 1);
        let mut manifest = Manifest::default();
        manifest.holders.insert("b.internal".into(), zone.key());
        manifest
            .zones
            .insert(zone_key(&zone.key()), ZoneEntry::new(&zone, routes, vec![]));
        manifest
    }

    #[test]
    fn a_tampered_manifest_is_refused_with_what_was_wrong() {
        let text = stored().to_json();
        assert_eq!(
            Manifest::from_json(&text, &DEFAULT_RULES).unwrap(),
            Some(stored())
        );
        for (from, to, expected) in [
            // A pattern smuggled into the SNI (or a newline into the config).
            (
                "\"proxy.api.b.internal\"",
                "\"proxy.api.b.internal acl x\"",
                "is not what rule",
            ),
            (
                "\"sni\": \"proxy.api.b.internal\"",
                "\"sni\": \".internal\"",
                "is not what rule",
            ),
            // A back in someone else's zone.
            (
                "\"backend\": \"api.b.internal\"",
                "\"backend\": \"api.a.internal\"",
                "is not what rule",
            ),
            ("\"port\": 443", "\"port\": 22", "is not what rule"),
            (
                "\"rule\": \"api\"",
                "\"rule\": \"anything\"",
                "is not what rule",
            ),
            (
                "\"account\": \"222222222222\"",
                "\"account\": \"1\"",
                "12-digit account",
            ),
            ("\"b.internal\": {", "\"B.internal\": {", "holder of"),
        ] {
            assert!(text.contains(from), "{from} not in {text}");
            let tampered = text.replacen(from, to, 1);
            let loaded = Manifest::from_json(&tampered, &DEFAULT_RULES);
            if expected == "is not what rule" {
                // Not what the rules make: the route never reaches the config, the rest stays.
                let manifest = loaded.unwrap().unwrap();
                assert_eq!(manifest.stale_routes, 1, "{from} → {to}");
                assert!(manifest.zones["222222222222/Z0B"].routes.is_empty());
                assert_eq!(manifest.holders, stored().holders);
                continue;
            }
            let err = loaded.unwrap_err().to_string();
            assert!(err.contains(expected), "{from} → {to}: {err}");
        }
    }

    #[test]
    fn a_rules_change_drops_the_routes_it_no_longer_makes_and_keeps_the_holders() {
        let mut manifest = stored();
        manifest.outside_holders.insert(
            "abc.eks.amazonaws.com".into(),
            manifest.holders["b.internal"].clone(),
        );
        manifest
            .outside_absent_since
            .insert("abc.eks.amazonaws.com".into(), 1_795_403_642);
        manifest
            .holders_absent_since
            .insert("b.internal".into(), 1_795_403_000);
        let text = manifest.to_json();
        // The api rule's port changed.
        let mut rules = DEFAULT_RULES.clone();
        rules[0].port = 8443;
        let loaded = Manifest::from_json(&text, &rules).unwrap().unwrap();
        assert_eq!(loaded.stale_routes, 1);
        assert_eq!(
            (
                &loaded.holders,
                &loaded.holders_absent_since,
                &loaded.outside_holders,
                &loaded.outside_absent_since
            ),
            (
                &manifest.holders,
                &manifest.holders_absent_since,
                &manifest.outside_holders,
                &manifest.outside_absent_since
            )
        );
        // Unchanged rules: nothing stale.
        let same = Manifest::from_json(&text, &DEFAULT_RULES).unwrap().unwrap();
        assert_eq!((same.stale_routes, same), (0, manifest.clone()));
        // An absent holder that holds nothing is refused.
        let stray = text.replace(
            "\"abc.eks.amazonaws.com\": 1795403642",
            "\"other.eks.amazonaws.com\": 1795403642",
        );
        let err = Manifest::from_json(&stray, &DEFAULT_RULES).unwrap_err();
        assert!(err.to_string().contains("absent holder"), "{err}");
        let stray = text.replace("\"b.internal\": 1795403000", "\"c.internal\": 1795403000");
        let err = Manifest::from_json(&stray, &DEFAULT_RULES).unwrap_err();
        assert!(err.to_string().contains("a name of holders"), "{err}");
    }
}
