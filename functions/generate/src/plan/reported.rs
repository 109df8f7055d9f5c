//! The run's warnings as its summary reports them: its own first, then every zone's, within
//! the bound of a run ([`autoproxy::warnings::bound_run`]).

use autoproxy::manifest::Manifest;
use autoproxy::warnings::{RUN_BYTES, bound_run};

/// A run's warnings as its summary reports them: its own, then every zone's in `manifest`,
/// within [`RUN_BYTES`] ([`bound_run`]). The zones' come last so that, when there are more
/// than a run may report, its own (failures, holds, refusals, the guard) are kept and the
/// zones' are cut; the last line points at the manifest, which lives beside the config at
/// `config_location`.
pub fn reported(own: Vec<String>, manifest: &Manifest, config_location: &str) -> Vec<String> {
    let mut warnings = own;
    let zones = manifest.zones.values().flat_map(|entry| &entry.warnings);
    warnings.extend(zones.cloned());
    let at = autoproxy::settings::manifest_key(config_location);
    bound_run(warnings, RUN_BYTES, &at)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_reports_its_own_warnings_before_the_zones() {
        use autoproxy::manifest::{ZoneEntry, zone_key};
        use autoproxy::model::Zone;
        let mut manifest = Manifest::default();
        for (id, lines) in [("Z1", 2_000), ("Z2", 1)] {
            let zone = Zone {
                account: "111111111111".into(),
                id: id.into(),
                name: format!("{id}.internal."),
                private: true,
            };
            let warnings = (0..lines).map(|i| format!("{id} {i} {}", "x".repeat(500)));
            let entry = ZoneEntry::new(&zone, vec![], warnings.collect());
            manifest.zones.insert(zone_key(&zone.key()), entry);
        }
        let own = vec!["account 2 held".to_owned()];
        let lines = reported(own, &manifest, "s3://b/haproxy/haproxy.cfg");
        assert_eq!(lines[0], "account 2 held");
        assert!(lines[1].starts_with("Z1 0 "), "{}", lines[1]);
        assert!(serde_json::to_string(&lines).unwrap().len() <= RUN_BYTES);
        let last = lines.last().unwrap();
        assert!(
            last.contains("s3://b/haproxy/haproxy.manifest.json"),
            "{last}"
        );
        // Small enough: all of them, in order.
        manifest.zones.retain(|key, _| key.ends_with("Z2"));
        let lines = reported(vec!["own".to_owned()], &manifest, "s3://b/k.cfg");
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert!(lines[1].starts_with("Z2 0 "), "{lines:?}");
    }
}
