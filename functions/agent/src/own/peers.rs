//! The fleet's other proxies. Each apply's fleet record carries the addresses of the instance
//! that wrote it; the configure function's fleet report (`<ConfigKey without .cfg>.fleet.json`,
//! every 5 minutes) joins the records with the instances SSM manages, and marks `gone` those
//! it no longer lists. Each apply reads that one object at its end, beside writing its own
//! record, and leaves the other proxies' addresses in [`FILE`] beside the maps, where the next
//! apply and the address service read them (docs/ARCHITECTURE.md, "Never into itself").

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::path::Path;

use autoproxy::fleet::State;
use serde::Deserialize;

use super::nets::{IpNet, Nets};

/// Where the other proxies' addresses stay, relative to the config's directory: one address a
/// line.
pub const FILE: &str = "autoproxy/peers";

/// The part of the fleet report ([`autoproxy::fleet::FleetReport`]) this reads; the rest is
/// ignored.
#[derive(Deserialize)]
struct Report {
    fleet: Vec<Entry>,
}

/// The part of one instance of the report this reads. Its addresses are read one by one, and
/// a state this agent does not know (a newer configure function's) is no state, so neither
/// refuses the whole report.
#[derive(Deserialize)]
struct Entry {
    instance_id: String,
    #[serde(deserialize_with = "known_state")]
    state: Option<State>,
    #[serde(default)]
    addresses: Vec<String>,
}

/// The state, when it is one of [`State`]'s.
fn known_state<'de, D: serde::Deserializer<'de>>(value: D) -> Result<Option<State>, D::Error> {
    let value = serde_json::Value::deserialize(value)?;
    Ok(State::deserialize(value).ok())
}

/// The fleet report's text is not JSON with a `fleet` list.
#[derive(Debug, thiserror::Error)]
#[error("expected a fleet report (JSON with a \"fleet\" list), got: {0}")]
pub struct NotAReport(#[from] serde_json::Error);

/// The other proxies' addresses in a fleet report: every record's but `instance_id`'s own and
/// the `gone` instances'. An address that does not parse is skipped.
pub fn of_report(report: &str, instance_id: &str) -> Result<BTreeSet<IpAddr>, NotAReport> {
    let report: Report = serde_json::from_str(report)?;
    Ok(report
        .fleet
        .iter()
        .filter(|entry| entry.instance_id != instance_id && entry.state != Some(State::Gone))
        .flat_map(|entry| entry.addresses.iter())
        .filter_map(|address| address.parse().ok())
        .collect())
}

/// How long the read of the fleet report may take (it runs beside the record's upload, which
/// has the same bound).
pub const FETCH_TIMEOUT: std::time::Duration = crate::record::RECORD_TIMEOUT;

/// The largest fleet report read: a bound on the apply's memory (a record is under 1 KB, so
/// this is thousands of proxies).
pub const MAX_REPORT_BYTES: usize = 16 * 1024 * 1024;

/// The fleet report's text, a failure as one line.
pub async fn fetch(s3: &aws_sdk_s3::Client, bucket: &str, key: &str) -> Result<String, String> {
    let got = tokio::time::timeout(
        FETCH_TIMEOUT,
        autoproxy::s3::get_bytes(s3, bucket, key, None, MAX_REPORT_BYTES),
    )
    .await
    .map_err(|_| format!("no answer within {} s", FETCH_TIMEOUT.as_secs()))?;
    let (bytes, _version) = got?;
    String::from_utf8(bytes).map_err(|_| "not UTF-8 text".to_owned())
}

/// The addresses [`FILE`] in `config_dir` holds; none when there is no such file.
pub fn read(config_dir: &Path) -> Nets {
    std::fs::read_to_string(config_dir.join(FILE))
        .unwrap_or_default()
        .lines()
        .filter_map(|line| line.trim().parse::<IpAddr>().ok())
        .map(IpNet::from)
        .collect()
}

/// Leaves `peers` in [`FILE`] (written aside and renamed into place); unchanged text is not
/// written again, so the address service, which watches the file, is not woken for nothing.
pub fn write(config_dir: &Path, peers: &BTreeSet<IpAddr>) -> std::io::Result<()> {
    let path = config_dir.join(FILE);
    let text: String = peers.iter().map(|address| format!("{address}\n")).collect();
    if std::fs::read_to_string(&path).is_ok_and(|old| old == text) {
        return Ok(());
    }
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    crate::files::replace(&path, text.as_bytes(), 0o644)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peers_are_the_other_instances_that_are_not_gone() {
        let report = r#"{"latest_generation": 3, "fleet": [
            {"instance_id": "i-self", "state": "current", "addresses": ["10.0.1.5"]},
            {"instance_id": "i-peer", "state": "behind", "addresses": ["10.0.2.7", "fd00::7", "nope"]},
            {"instance_id": "i-old", "state": "gone", "addresses": ["10.0.3.9"]},
            {"instance_id": "i-older-agent", "state": "stale"},
            {"instance_id": "i-newer", "state": "a state of tomorrow", "addresses": ["10.0.4.4"]}
        ]}"#;
        let peers: Vec<String> = of_report(report, "i-self")
            .expect("a report")
            .iter()
            .map(IpAddr::to_string)
            .collect();
        assert_eq!(peers, ["10.0.2.7", "10.0.4.4", "fd00::7"]);
        let err = of_report("{}", "i-self").expect_err("no fleet");
        assert!(
            err.to_string()
                .starts_with("expected a fleet report (JSON with a \"fleet\" list), got: "),
            "{err}"
        );
    }

    #[test]
    fn the_file_reads_back() {
        let dir = tempfile::tempdir().expect("temp dir");
        assert!(read(dir.path()).is_empty());
        let peers: BTreeSet<IpAddr> = ["10.0.2.7".parse().expect("ip")].into();
        write(dir.path(), &peers).expect("written");
        assert!(read(dir.path()).contains("::ffff:10.0.2.7".parse().expect("ip")));
        assert!(!read(dir.path()).contains("10.0.2.8".parse().expect("ip")));
    }
}
