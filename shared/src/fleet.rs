//! The fleet view: which generation each peering proxy runs, and for how long the ones behind
//! have been behind.
//!
//! Every apply writes one record per instance beside the config
//! (`haproxy/haproxy.cfg` → `haproxy/haproxy.fleet/<instance-id>.json`), overwritten on each
//! apply, so
//! the latest result of each instance survives the command's output. [`report`] compares them
//! with the config published last; it does no I/O, the configure function reads and writes
//! around it.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::settings::config_stem;

/// How an apply on one instance ended, as the apply document reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApplyResult {
    /// The new config was validated and HAProxy reloaded with it.
    Applied,
    /// The instance already ran this generation or a newer one.
    Skipped,
    /// `haproxy -c` refused the new config; the running one was kept.
    Rejected,
    /// The reload failed and the previous config was restored.
    RolledBack,
    /// Anything else that stopped the apply.
    Failed,
}

impl ApplyResult {
    pub fn as_str(self) -> &'static str {
        match self {
            ApplyResult::Applied => "applied",
            ApplyResult::Skipped => "skipped",
            ApplyResult::Rejected => "rejected",
            ApplyResult::RolledBack => "rolled_back",
            ApplyResult::Failed => "failed",
        }
    }
}

/// One instance's last apply, as the apply document writes it. Every field is always present
/// (empty strings rather than absent keys), so a record missing one does not parse; a field
/// added by a newer document is ignored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    pub instance_id: String,
    /// The generation HAProxy runs after the apply; 0 when it runs none.
    pub generation: u64,
    /// SHA-256 (hex) of the running config's body; empty when there is none.
    pub sha256: String,
    pub result: ApplyResult,
    /// The reason of the apply's `FAILED` line; empty when it did not fail.
    pub reason: String,
    /// The S3 version of the config applied or tried.
    pub version_id: String,
    /// When the apply ended, RFC 3339 UTC.
    pub at: String,
    /// sha256 of the autoproxy-agent binary that wrote the record: which agent the instance
    /// runs. Empty in records of older apply documents.
    #[serde(default)]
    pub agent: String,
}

/// Where the records live: `haproxy/haproxy.cfg` → `haproxy/haproxy.fleet/`.
pub fn prefix(config_key: &str) -> String {
    format!("{}.fleet/", config_stem(config_key))
}

/// One instance's record: `haproxy/haproxy.cfg`, `i-0abc` → `haproxy/haproxy.fleet/i-0abc.json`.
pub fn record_key(config_key: &str, instance_id: &str) -> String {
    format!("{}{instance_id}.json", prefix(config_key))
}

/// Where the report goes: beside the config and outside the records' prefix, so listing the
/// records never finds it (`haproxy/haproxy.cfg` → `haproxy/haproxy.fleet.json`).
pub fn report_key(config_key: &str) -> String {
    format!("{}.fleet.json", config_stem(config_key))
}

/// One instance in the report: its record and how it compares with the latest config.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Instance {
    #[serde(flatten)]
    pub record: Record,
    /// It runs the latest generation, or a newer one.
    pub current: bool,
    /// Its record is older than the silence limit (or its time does not parse): the instance
    /// stopped applying, most often because it was terminated. Never counted behind.
    pub silent: bool,
    /// 0 when current or silent; otherwise for how long a newer config has existed (since the
    /// latest one was published: a lower bound when it missed more than one).
    pub behind_seconds: u64,
}

/// What the records are compared with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Against {
    pub latest_generation: u64,
    pub latest_published_at_unix: u64,
    pub now_unix: u64,
    /// A record older than this is silent.
    pub silent_after_seconds: u64,
}

/// The whole fleet against the latest config.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FleetReport {
    pub latest_generation: u64,
    pub latest_published_at_unix: u64,
    pub now_unix: u64,
    /// Instances with a record that is not silent.
    pub instances: u64,
    /// Of those, the ones below the latest generation.
    pub behind: u64,
    pub max_behind_seconds: u64,
    /// Instances whose record is older than the silence limit (listed, not counted above).
    pub silent: u64,
    /// By instance id.
    pub fleet: Vec<Instance>,
    /// Records that could not be read or parsed, each naming its key; the reader fills them
    /// in, [`report`] leaves them empty.
    pub warnings: Vec<String>,
}

impl Record {
    /// When the apply ended, in Unix seconds; `None` when `at` is not RFC 3339.
    pub fn at_unix(&self) -> Option<u64> {
        use aws_sdk_s3::primitives::{DateTime, DateTimeFormat};
        DateTime::from_str(&self.at, DateTimeFormat::DateTime)
            .ok()
            .and_then(|t| u64::try_from(t.secs()).ok())
    }
}

/// Compares each instance's record with the latest config (its generation and when it was
/// published). A silent instance is listed but neither counted nor behind: a terminated
/// instance's last record stays in the bucket until the lifecycle rule expires it, and must
/// not hold the fleet "behind" meanwhile.
pub fn report(against: Against, mut records: Vec<Record>) -> FleetReport {
    records.sort_by(|a, b| a.instance_id.cmp(&b.instance_id));
    let fleet: Vec<Instance> = records
        .into_iter()
        .map(|record| {
            let silent = record.at_unix().is_none_or(|at| {
                against.now_unix.saturating_sub(at) > against.silent_after_seconds
            });
            // A newer generation than the latest object (a publish racing this report) is
            // not behind.
            let current = record.generation >= against.latest_generation;
            let behind_seconds = if current || silent {
                0
            } else {
                against
                    .now_unix
                    .saturating_sub(against.latest_published_at_unix)
            };
            Instance {
                record,
                current,
                silent,
                behind_seconds,
            }
        })
        .collect();
    let heard: Vec<&Instance> = fleet.iter().filter(|i| !i.silent).collect();
    let behind: Vec<&Instance> = heard.iter().copied().filter(|i| !i.current).collect();
    FleetReport {
        latest_generation: against.latest_generation,
        latest_published_at_unix: against.latest_published_at_unix,
        now_unix: against.now_unix,
        instances: heard.len() as u64,
        behind: behind.len() as u64,
        max_behind_seconds: behind.iter().map(|i| i.behind_seconds).max().unwrap_or(0),
        silent: (fleet.len() - heard.len()) as u64,
        fleet,
        warnings: Vec::new(),
    }
}

impl FleetReport {
    /// A text table, one line per instance after a header: instance, generation, current or
    /// behind (for how long), result, reason, when.
    pub fn table(&self) -> String {
        let header =
            ["INSTANCE", "GENERATION", "STATE", "RESULT", "REASON", "AT"].map(str::to_owned);
        let rows: Vec<[String; 6]> = self
            .fleet
            .iter()
            .map(|i| {
                let state = if i.silent {
                    "silent".to_owned()
                } else if i.current {
                    "current".to_owned()
                } else {
                    format!("behind {}", duration(i.behind_seconds))
                };
                [
                    i.record.instance_id.clone(),
                    i.record.generation.to_string(),
                    state,
                    i.record.result.as_str().to_owned(),
                    if i.record.reason.is_empty() {
                        "-".to_owned()
                    } else {
                        i.record.reason.clone()
                    },
                    i.record.at.clone(),
                ]
            })
            .collect();
        let mut widths = header.each_ref().map(|h| h.chars().count());
        for row in &rows {
            for (width, cell) in widths.iter_mut().zip(row) {
                *width = (*width).max(cell.chars().count());
            }
        }
        let mut out = String::new();
        for row in std::iter::once(&header).chain(&rows) {
            let mut line = String::new();
            for (column, (cell, width)) in row.iter().zip(widths).enumerate() {
                if column > 0 {
                    line.push_str("  ");
                }
                let _ = write!(line, "{cell:<width$}");
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

/// `59s`, `4m05s`, `3h07m`, `2d04h`: precise enough to read, short enough for a column.
fn duration(seconds: u64) -> String {
    let (m, s) = (seconds / 60, seconds % 60);
    let (h, d) = (seconds / 3_600, seconds / 86_400);
    match seconds {
        0..60 => format!("{s}s"),
        60..3_600 => format!("{m}m{s:02}s"),
        3_600..86_400 => format!("{h}h{:02}m", m % 60),
        _ => format!("{d}d{:02}h", h % 24),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(instance_id: &str, generation: u64) -> Record {
        Record {
            instance_id: instance_id.to_owned(),
            generation,
            sha256: String::new(),
            result: ApplyResult::Applied,
            reason: String::new(),
            version_id: "v1".to_owned(),
            at: "2026-11-23T03:14:02Z".to_owned(),
            agent: String::new(),
        }
    }

    const LATEST: u64 = 1_795_403_642;
    const PUBLISHED: u64 = 1_795_403_700;
    const NOW: u64 = 1_795_404_000;
    const SILENT_AFTER: u64 = 5_400;

    fn against(published: u64, now: u64) -> Against {
        Against {
            latest_generation: LATEST,
            latest_published_at_unix: published,
            now_unix: now,
            silent_after_seconds: SILENT_AFTER,
        }
    }

    /// One instance at `generation`: (current, behind_seconds).
    fn check(generation: u64, expected: (bool, u64)) {
        let report = report(against(PUBLISHED, NOW), vec![record("i-1", generation)]);
        let instance = &report.fleet[0];
        assert_eq!(
            (instance.current, instance.behind_seconds),
            expected,
            "generation {generation}"
        );
    }

    #[test]
    fn an_instance_is_current_at_or_above_the_latest_generation() {
        check(LATEST, (true, 0));
        check(LATEST + 1, (true, 0));
        check(LATEST - 1, (false, 300));
        check(0, (false, 300));
    }

    #[test]
    fn behind_never_goes_negative_when_clocks_disagree() {
        let report = report(against(NOW + 10, NOW), vec![record("i-1", 1)]);
        assert_eq!((report.behind, report.max_behind_seconds), (1, 0));
    }

    #[test]
    fn totals_count_the_fleet_and_the_ones_behind() {
        let report = report(
            against(PUBLISHED, NOW),
            vec![
                record("i-3", LATEST + 5),
                record("i-1", LATEST - 1),
                record("i-2", LATEST),
            ],
        );
        assert_eq!(
            (report.instances, report.behind, report.max_behind_seconds),
            (3, 1, 300)
        );
        let ids: Vec<&str> = report
            .fleet
            .iter()
            .map(|i| i.record.instance_id.as_str())
            .collect();
        assert_eq!(ids, ["i-1", "i-2", "i-3"]);
    }

    #[test]
    fn a_terminated_instance_goes_silent_and_stops_counting_behind() {
        let heard_at = LATEST;
        let old = record("i-0gone", LATEST - 1);
        let mut fresh = record("i-1", LATEST);
        fresh.at = "2026-11-23T05:00:00Z".to_owned();
        let mut garbled = record("i-0garbled", LATEST - 1);
        garbled.at = "yesterday".to_owned();
        // Just inside the limit it is behind; one second past it, silent.
        for (now, silent) in [
            (heard_at + SILENT_AFTER, false),
            (heard_at + SILENT_AFTER + 1, true),
        ] {
            let report = report(against(PUBLISHED, now), vec![old.clone(), fresh.clone()]);
            let gone = &report.fleet[0];
            assert_eq!(gone.silent, silent, "at {now}");
            let expected = if silent {
                (1, 0, 0, 1)
            } else {
                (2, 1, now - PUBLISHED, 0)
            };
            assert_eq!(
                (
                    report.instances,
                    report.behind,
                    report.max_behind_seconds,
                    report.silent
                ),
                expected,
                "at {now}"
            );
        }
        let report = report(against(PUBLISHED, NOW), vec![garbled]);
        assert_eq!((report.silent, report.behind), (1, 0));
    }

    #[test]
    fn an_empty_fleet_has_nobody_behind() {
        let report = report(against(PUBLISHED, NOW), Vec::new());
        assert_eq!(
            (report.instances, report.behind, report.max_behind_seconds),
            (0, 0, 0)
        );
        assert!(report.fleet.is_empty());
        assert_eq!(report.table().lines().count(), 1, "the header only");
    }

    #[test]
    fn keys_sit_beside_the_config() {
        for (config, prefix_, record_, report_) in [
            (
                "haproxy/haproxy.cfg",
                "haproxy/haproxy.fleet/",
                "haproxy/haproxy.fleet/i-0abc.json",
                "haproxy/haproxy.fleet.json",
            ),
            (
                "haproxy.cfg",
                "haproxy.fleet/",
                "haproxy.fleet/i-0abc.json",
                "haproxy.fleet.json",
            ),
            (
                "a/b/c.cfg",
                "a/b/c.fleet/",
                "a/b/c.fleet/i-0abc.json",
                "a/b/c.fleet.json",
            ),
        ] {
            assert_eq!(prefix(config), prefix_);
            assert_eq!(record_key(config, "i-0abc"), record_);
            assert_eq!(report_key(config), report_);
            assert!(!report_key(config).starts_with(&prefix(config)));
        }
    }

    #[test]
    fn a_record_parses_from_the_documented_json_and_refuses_gaps() {
        let text = r#"{"instance_id": "i-0abc", "generation": 1795403642, "sha256": "",
            "result": "rolled_back", "reason": "reload failed", "version_id": "v9",
            "at": "2026-11-23T03:14:02Z"}"#;
        let parsed: Record = serde_json::from_str(text).unwrap();
        assert_eq!(parsed.result, ApplyResult::RolledBack);
        assert_eq!(parsed.generation, LATEST);
        let round: Record = serde_json::from_value(serde_json::to_value(&parsed).unwrap()).unwrap();
        assert_eq!(round, parsed);
        for broken in [
            r#"{"instance_id": "i-0abc"}"#,
            &text.replace("rolled_back", "exploded"),
            &text.replace("1795403642", "\"1795403642\""),
        ] {
            assert!(serde_json::from_str::<Record>(broken).is_err(), "{broken}");
        }
    }

    #[test]
    fn the_table_has_a_line_per_instance() {
        let mut late = record("i-0late", LATEST - 1);
        late.result = ApplyResult::Rejected;
        late.reason = "haproxy -c refused the config".to_owned();
        let mut gone = record("i-0gone", LATEST - 1);
        gone.at = "2026-11-22T03:14:02Z".to_owned();
        let report = report(
            against(NOW - 4_000, NOW),
            vec![record("i-0ok", LATEST), late, gone],
        );
        let table = report.table();
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 4, "{table}");
        assert!(lines[0].starts_with("INSTANCE"), "{table}");
        assert!(
            lines[1].starts_with("i-0gone") && lines[1].contains("silent"),
            "{table}"
        );
        assert!(
            lines[2].starts_with("i-0late") && lines[2].contains("behind 1h06m"),
            "{table}"
        );
        assert!(lines[2].contains("rejected  haproxy -c refused"), "{table}");
        assert!(
            lines[3].contains("current") && lines[3].contains(" - "),
            "{table}"
        );
    }

    #[test]
    fn durations_read_at_a_glance() {
        for (seconds, text) in [
            (0, "0s"),
            (59, "59s"),
            (60, "1m00s"),
            (245, "4m05s"),
            (11_220, "3h07m"),
            (187_200, "2d04h"),
        ] {
            assert_eq!(duration(seconds), text);
        }
    }
}
