//! What the rules read (zones and their record sets, as Route53 returns them) and what they
//! produce (routes). Plain data: the Route53 module fills it, the manifest stores it.

use serde::{Deserialize, Serialize};

use crate::names::HostName;

/// A hosted zone, keyed by account and id: the same private zone name can exist in several
/// accounts, so the name is never a key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Zone {
    pub account: String,
    /// The bare id (`Z123…`), without Route53's `/hostedzone/` prefix.
    pub id: String,
    /// The name exactly as Route53 returned it (escaped, any case, trailing dot).
    pub name: String,
    pub private: bool,
}

impl Zone {
    pub fn key(&self) -> ZoneKey {
        ZoneKey {
            account: self.account.clone(),
            id: self.id.clone(),
        }
    }
}

/// A 12-digit AWS account id.
pub fn is_account_id(raw: &str) -> bool {
    raw.len() == 12 && raw.bytes().all(|b| b.is_ascii_digit())
}

/// A bare hosted zone id as Route53 issues them: upper-case letters and digits, at most 32.
pub fn is_zone_id(raw: &str) -> bool {
    !raw.is_empty()
        && raw.len() <= 32
        && raw
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit())
}

/// Identity of a zone across accounts.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ZoneKey {
    pub account: String,
    pub id: String,
}

impl ZoneKey {
    /// Both parts have the shape AWS gives them.
    pub fn is_well_formed(&self) -> bool {
        is_account_id(&self.account) && is_zone_id(&self.id)
    }
}

impl std::fmt::Display for ZoneKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} in account {}", self.id, self.account)
    }
}

/// One record set, reduced to what the rules look at.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordSet {
    /// The name exactly as Route53 returned it.
    pub name: String,
    /// `A`, `CNAME`, … as Route53 spells it.
    #[serde(rename = "type")]
    pub rtype: String,
    /// Resource record values (for a CNAME: its target). Empty for an alias record.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<String>,
    /// The alias target's DNS name, for alias records.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alias_target: Option<String>,
    /// The set identifier of a weighted, failover, latency or other routing-policy set:
    /// several sets then share one name and type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub set_identifier: Option<String>,
}

impl RecordSet {
    /// The record's value as a name: a CNAME's target, or an alias record's target.
    pub fn target(&self) -> Option<&str> {
        self.values
            .first()
            .or(self.alias_target.as_ref())
            .map(String::as_str)
    }

    pub fn new(name: &str, rtype: &str, values: &[&str]) -> Self {
        RecordSet {
            name: name.to_owned(),
            rtype: rtype.to_owned(),
            values: values.iter().map(|v| (*v).to_owned()).collect(),
            alias_target: None,
            set_identifier: None,
        }
    }

    pub fn alias(name: &str, rtype: &str, target: &str) -> Self {
        RecordSet {
            name: name.to_owned(),
            rtype: rtype.to_owned(),
            values: Vec::new(),
            alias_target: Some(target.to_owned()),
            set_identifier: None,
        }
    }
}

/// A zone with the record sets read from it: every one, or those the rules can read
/// ([`crate::rules::Sieve`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ZoneRecords {
    pub zone: Zone,
    pub records: Vec<RecordSet>,
    /// A or CNAME sets read whose names are not plain host names and that were left out of
    /// `records` (a sieve keeps the first few): counted in the zone's warning all the same.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub unnamed_left: usize,
}

impl ZoneRecords {
    /// A zone with every record set of `records`.
    pub fn whole(zone: Zone, records: Vec<RecordSet>) -> ZoneRecords {
        ZoneRecords {
            zone,
            records,
            unnamed_left: 0,
        }
    }
}

fn is_zero(count: &usize) -> bool {
    *count == 0
}

/// How HAProxy matches the TLS SNI of a route.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SniMatch {
    /// The SNI equals the name.
    Exact,
    /// The SNI ends with the name (which starts with a dot).
    Suffix,
}

/// One proxy rule instance: TLS with this SNI goes to this back (the host the route forwards
/// to).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Route {
    /// The rule-table row that produced it (`api`, `api-k8s`, `ingress-int`).
    pub rule: String,
    pub account: String,
    pub zone_id: String,
    pub zone_name: HostName,
    /// For [`SniMatch::Exact`] the full name, for [`SniMatch::Suffix`] the suffix with its
    /// leading dot (`.int.example.com`).
    pub sni: String,
    pub sni_match: SniMatch,
    /// The back: the host the route forwards to, by record name, resolved on the proxy at
    /// run time. Stored in the manifest as `backend`, the key it has always had.
    #[serde(rename = "backend")]
    pub back: HostName,
    pub port: u16,
    /// The record names that made this route, for the manifest's provenance.
    pub records: Vec<HostName>,
}

impl Route {
    pub fn zone_key(&self) -> ZoneKey {
        ZoneKey {
            account: self.account.clone(),
            id: self.zone_id.clone(),
        }
    }
}
