//! The manifest kept beside the config: per zone, what was last read and the routes it gave,
//! with provenance. It makes events incremental (re-read one zone, merge the rest) and keeps
//! an account's routes when a scan of it fails.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::model::{Route, Zone, ZoneKey};

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
    /// What the matcher warned about in this zone.
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
        }
    }
}

/// The manifest's key for a zone.
pub fn zone_key(key: &ZoneKey) -> String {
    format!("{}/{}", key.account, key.id)
}

impl ZoneEntry {
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
    /// Every zone's routes, before conflict resolution.
    pub fn candidate_routes(&self) -> Vec<Route> {
        self.zones
            .values()
            .flat_map(|entry| entry.routes.iter().cloned())
            .collect()
    }

    /// The entries of one account.
    pub fn account_zones<'a>(&'a self, account: &'a str) -> impl Iterator<Item = &'a ZoneEntry> {
        self.zones
            .values()
            .filter(move |entry| entry.account == account)
    }

    /// Equal but for the generation stamp: nothing worth writing changed.
    pub fn same_content(&self, other: &Manifest) -> bool {
        self.zones == other.zones && self.pending == other.pending && self.format == other.format
    }

    /// Reads a stored manifest; `None` when it is of another format (or not a manifest).
    pub fn from_json(text: &str) -> Result<Option<Manifest>, serde_json::Error> {
        let value: serde_json::Value = serde_json::from_str(text)?;
        if value.get("format").and_then(serde_json::Value::as_u64) != Some(u64::from(FORMAT)) {
            return Ok(None);
        }
        let manifest: Manifest = serde_json::from_value(value)?;
        // The next config is numbered from it: a generation the apply document cannot read
        // (or one whose successor overflows) is refused, not carried forward.
        if manifest.generation > crate::artifact::MAX_GENERATION {
            return Err(serde::de::Error::custom(format!(
                "generation {} is not {}",
                manifest.generation,
                crate::artifact::GENERATION_EXPECTED
            )));
        }
        Ok(Some(manifest))
    }

    pub fn to_json(&self) -> String {
        // A manifest is plain data: serialising it cannot fail.
        serde_json::to_string_pretty(self).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_ignores_other_formats() {
        let mut manifest = Manifest::default();
        let zone = Zone {
            account: "1".into(),
            id: "Z1".into(),
            name: "a.internal.".into(),
            private: true,
        };
        manifest
            .zones
            .insert(zone_key(&zone.key()), ZoneEntry::new(&zone, vec![], vec![]));
        let text = manifest.to_json();
        assert_eq!(Manifest::from_json(&text).unwrap(), Some(manifest));
        assert_eq!(Manifest::from_json("{\"format\": 99}").unwrap(), None);
        assert!(Manifest::from_json("not json").is_err());
    }

    #[test]
    fn a_generation_beyond_what_the_fleet_reads_is_refused() {
        let manifest = Manifest {
            generation: crate::artifact::MAX_GENERATION,
            ..Manifest::default()
        };
        assert!(Manifest::from_json(&manifest.to_json()).is_ok());
        let text = manifest
            .to_json()
            .replace("999999999999999999", "18446744073709551615");
        let err = Manifest::from_json(&text).unwrap_err().to_string();
        assert!(err.contains("at most 18 digits"), "{err}");
    }
}
