//! Which record sets of a zone the rules can read, decided while its pages come in: a zone's
//! memory is what its rules look at, not its size.
//!
//! The matcher ([`super::zone_routes_within`]) looks a zone up only at each rule's front and
//! back name, and only at `A` and `CNAME` sets; `explain` reads the same names. Every other
//! set is never looked at, except to count the names that are not plain host names for the
//! zone's warning ([`super::Warning::RecordName`]): the first few of those are kept (their
//! errors are the warning's examples), the rest only counted.

use std::collections::HashSet;

use super::Rule;
use crate::model::{RecordSet, Zone, ZoneRecords};
use crate::names::{HostName, normalize};
use crate::warnings::EXAMPLES;

/// The record types a rule can read: the front's CNAME and the backs' A or CNAME.
const READ_TYPES: [&str; 2] = ["A", "CNAME"];

/// What a read keeps of one zone (see the module's comment).
#[derive(Debug, Clone)]
pub struct Sieve {
    zone: Zone,
    /// Every rule's front and back name in this zone; none when the zone name is not a
    /// host name (the matcher then reads no record) or the zone is public.
    wanted: HashSet<HostName>,
    records: Vec<RecordSet>,
    /// Sets of a read type whose names are not plain host names, kept or not.
    unnamed: usize,
}

impl Sieve {
    pub fn new(rules: &[Rule], zone: &Zone) -> Sieve {
        let zone_name = normalize(&zone.name)
            .to_host()
            .ok()
            .filter(|_| zone.private);
        let wanted = zone_name.map_or_else(HashSet::new, |zone_name| {
            rules
                .iter()
                .flat_map(|rule| [&rule.front, &rule.back])
                .map(|relative| zone_name.with_prefix(relative))
                .collect()
        });
        Sieve {
            zone: zone.clone(),
            wanted,
            records: Vec::new(),
            unnamed: 0,
        }
    }

    /// Whether a set named `name` (as Route53 spells it) of type `rtype` is to be kept: call
    /// it once per set, in the order read, and [`Sieve::keep`] the set when it says so.
    pub fn wants(&mut self, name: &str, rtype: &str) -> bool {
        if !READ_TYPES.contains(&rtype) {
            return false;
        }
        match normalize(name).to_host() {
            Ok(host) => self.wanted.contains(&host),
            Err(_) => {
                self.unnamed += 1;
                self.unnamed <= EXAMPLES
            }
        }
    }

    pub fn keep(&mut self, set: RecordSet) {
        self.records.push(set);
    }

    /// The zone's sets that were kept, and the count of the unnamed ones that were not.
    pub fn finish(self) -> ZoneRecords {
        ZoneRecords {
            zone: self.zone,
            records: self.records,
            unnamed_left: self.unnamed.saturating_sub(EXAMPLES),
        }
    }

    /// Keeps of `records` what the rules can read (for records not read from Route53).
    pub fn sift(mut self, records: impl IntoIterator<Item = RecordSet>) -> ZoneRecords {
        for set in records {
            if self.wants(&set.name, &set.rtype) {
                self.keep(set);
            }
        }
        self.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::names::HostName;
    use crate::rules::{DEFAULT_RULES, parse_rules, zone_routes};

    const PROXY: &str = "peering-proxy.tools.example.com";

    fn zone(name: &str) -> Zone {
        Zone {
            account: "111111111111".to_owned(),
            id: "Z1".to_owned(),
            name: name.to_owned(),
            private: true,
        }
    }

    /// Every rule's pair, in both spellings and in upper case, beside what no rule reads: a
    /// thousand other A records, names that are not host names (DKIM-style `_` labels), other
    /// types at the rules' names, a routing-policy back, a looping and a near-miss front.
    fn busy_zone(z: &str) -> Vec<RecordSet> {
        let mut records = vec![
            RecordSet::new(&format!("API.{z}"), "A", &["10.0.0.1"]),
            RecordSet::new(&format!("proxy.api.{z}"), "CNAME", &[PROXY]),
            RecordSet::new(&format!("proxy.api.{z}"), "TXT", &["\"owner\""]),
            RecordSet::new(&format!("\\052.int.{z}"), "CNAME", &[PROXY]),
            RecordSet::alias(&format!("ingress-int.{z}"), "A", "lb.elb.amazonaws.com."),
            RecordSet::new(
                &format!("proxy.api.k8s.{z}"),
                "CNAME",
                &[&format!("{PROXY}x")],
            ),
            RecordSet::new(&format!("api.k8s.{z}"), "AAAA", &["fd00::1"]),
            RecordSet::new(&format!("proxy.eks.{z}"), "CNAME", &[PROXY]),
            RecordSet::new(&format!("eks.{z}"), "CNAME", &[&format!("a.eks.{z}")]),
            RecordSet::new(&format!("proxy.loop.{z}"), "CNAME", &[PROXY]),
            RecordSet::new(&format!("loop.{z}"), "CNAME", &[PROXY]),
        ];
        let mut weighted = RecordSet::new(&format!("eks.{z}"), "CNAME", &[&format!("b.eks.{z}")]);
        weighted.set_identifier = Some("blue".to_owned());
        records.push(weighted);
        for i in 0..1000 {
            records.push(RecordSet::new(&format!("a{i}.{z}"), "A", &["10.1.0.1"]));
        }
        for i in 0..7 {
            records.push(RecordSet::new(
                &format!("s{i}._domainkey.{z}"),
                "CNAME",
                &["k.x."],
            ));
        }
        records
    }

    #[test]
    fn what_the_sieve_keeps_gives_what_the_whole_zone_gives() {
        let custom = parse_rules(
            r#"[{"id": "eks", "front": "proxy.eks", "back": "eks", "back_types": ["CNAME"], "sni": "back-target"},
                {"id": "loop", "front": "proxy.loop", "back": "loop", "back_types": ["CNAME"], "sni": "front"},
                {"id": "api", "front": "proxy.api", "back": "api", "back_types": ["A"], "sni": "front"}]"#,
        )
        .unwrap();
        let proxies = [HostName::parse(PROXY).unwrap()];
        for rules in [&DEFAULT_RULES[..], &custom[..]] {
            for name in [
                "example.internal.",
                "Example.Internal",
                "bad_zone.internal.",
            ] {
                let whole = ZoneRecords::whole(zone(name), busy_zone(name));
                let sieved = Sieve::new(rules, &whole.zone).sift(whole.records.clone());
                let expected = zone_routes(rules, &whole, &proxies);
                assert_eq!(zone_routes(rules, &sieved, &proxies), expected, "{name}");
                // Kept: the rules' names and the first unnamed examples, nothing else.
                assert!(sieved.records.len() <= 12, "{name}: {:?}", sieved.records);
                assert!(!expected.warnings.is_empty(), "{name}");
            }
        }
    }

    #[test]
    fn a_public_zone_keeps_nothing() {
        let mut public = zone("example.internal.");
        public.private = false;
        let sieved = Sieve::new(&DEFAULT_RULES, &public).sift(busy_zone("example.internal."));
        assert_eq!(sieved.records, vec![]);
    }
}
