//! The fleet view: which generation each peering proxy runs, for how long the ones behind
//! have been behind, and which proxies SSM manages that are not applying at all.
//!
//! Every apply writes one record per instance beside the config
//! (`haproxy/haproxy.cfg` → `haproxy/haproxy.fleet/<instance ARN>.json`), overwritten on each
//! apply, so the latest result of each instance survives the command's output. A proxy that
//! never applies writes none, so the records alone cannot see it: [`report`] joins them with
//! the instances SSM manages under the target tag ([`Listing`]) and compares both with the
//! config published last. It does no I/O; the configure function reads and writes around it.

use std::collections::BTreeMap;

use aws_sdk_ssm::types::PingStatus;
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
    /// Names the apply that wrote the record (its log lines carry it too). Empty in records
    /// of older agents.
    #[serde(default)]
    pub apply_id: String,
    /// How the apply brought its generation to HAProxy: `runtime` (no reload) or `reload`;
    /// empty when it brought none (skipped, rejected, failed before).
    #[serde(default)]
    pub path: String,
    /// Why it took that path.
    #[serde(default)]
    pub path_reason: String,
    /// Empty when HAProxy itself reported `generation` at the end of the apply; else why it
    /// did not (a busy worker), and `generation` is what it reported last during the apply.
    #[serde(default)]
    pub unconfirmed: String,
    /// Routes of the installed config whose host has no address yet: they do not serve
    /// until the address service resolves their host.
    #[serde(default)]
    pub unresolved_routes: u64,
    /// The instance's own addresses (not loopback nor link-local): the other proxies hold a
    /// back at one of them as a loop, as this one does. Empty in records of older agents.
    #[serde(default)]
    pub addresses: Vec<std::net::IpAddr>,
}

/// Where the records live: `haproxy/haproxy.cfg` → `haproxy/haproxy.fleet/`.
pub fn prefix(config_key: &str) -> String {
    format!("{}.fleet/", config_stem(config_key))
}

/// One instance's record, keyed by its instance ARN (what IAM's `ec2:SourceInstanceARN` names
/// the instance whose role credentials sign a request, so the instances' policy lets each write
/// its own record only): `haproxy/haproxy.cfg`, `arn:aws:ec2:us-east-1:123456789012:instance/`,
/// `i-0abc` → `haproxy/haproxy.fleet/arn:aws:ec2:us-east-1:123456789012:instance/i-0abc.json`.
pub fn record_key(config_key: &str, instance_arn_prefix: &str, instance_id: &str) -> String {
    format!(
        "{}{instance_arn_prefix}{instance_id}.json",
        prefix(config_key)
    )
}

/// Whether `prefix` is an instance ARN without its id, `arn:<partition>:ec2:<region>:<account>:instance/`.
pub fn is_instance_arn_prefix(prefix: &str) -> bool {
    let Some(head) = prefix.strip_suffix(":instance/") else {
        return false;
    };
    let parts: Vec<&str> = head.split(':').collect();
    let word = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
    matches!(parts[..], ["arn", partition, "ec2", region, account]
        if word(partition) && word(region)
            && account.len() == 12 && account.bytes().all(|b| b.is_ascii_digit()))
}

/// The instance whose record `key` is by its key alone: the id after an instance ARN under the
/// records' prefix (see [`record_key`]); `None` for any other key (the id-only keys older agents
/// wrote, which no instance may write any more).
pub fn key_instance<'k>(config_key: &str, key: &'k str) -> Option<&'k str> {
    let arn = key
        .strip_prefix(prefix(config_key).as_str())?
        .strip_suffix(".json")?;
    let at = arn.rfind(":instance/")? + ":instance/".len();
    let (head, id) = arn.split_at(at);
    (is_instance_arn_prefix(head) && !id.is_empty() && !id.contains('/')).then_some(id)
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
    /// stopped applying. Never counted behind.
    pub silent: bool,
    /// 0 when current, silent or gone; otherwise for how long a newer config has existed
    /// (since the latest one was published: a lower bound when it missed more than one).
    pub behind_seconds: u64,
    pub state: State,
    /// The SSM agent's `PingStatus` as SSM spells it (`Online`, `ConnectionLost`, …); empty
    /// when SSM does not list the instance or the list is missing.
    pub ping_status: String,
    /// For how long it has been unhealthy (see [`State::is_unhealthy`]); 0 when it is not;
    /// `None` when SSM gives no time to count from.
    pub unhealthy_seconds: Option<u64>,
}

/// An instance SSM manages under the target tag that has written no record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Unrecorded {
    pub instance_id: String,
    /// [`State::NeverReported`], or [`State::Unreachable`] when its agent is not online.
    pub state: State,
    pub ping_status: String,
    /// As in [`Instance`].
    pub unhealthy_seconds: Option<u64>,
}

/// Where an instance stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum State {
    /// It runs the latest generation or a newer one.
    Current,
    /// It runs an older one.
    Behind,
    /// Its last apply never heard HAProxy answer (a busy or frozen worker): which generation
    /// runs is unknown. Counted behind, never current.
    Unknown,
    /// Its record is older than the silence limit and the instance list is missing, so
    /// whether SSM still manages it is unknown: listed, not counted.
    Silent,
    /// SSM manages it, its agent is online, and it has written no record.
    NeverReported,
    /// SSM manages it, its agent is online, and its record is older than the silence limit.
    Stale,
    /// SSM manages it and its agent is not online (`ConnectionLost`, …), record or not.
    Unreachable,
    /// It has a record but SSM does not list it under the tag: terminated (or untagged).
    /// Listed, not counted.
    Gone,
}

impl State {
    /// Never reported, stale or unreachable: a proxy that is not taking new configs.
    pub fn is_unhealthy(self) -> bool {
        matches!(
            self,
            State::NeverReported | State::Stale | State::Unreachable
        )
    }

    /// As the report and the table spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            State::Current => "current",
            State::Behind => "behind",
            State::Unknown => "unknown",
            State::Silent => "silent",
            State::NeverReported => "never reported",
            State::Stale => "stale",
            State::Unreachable => "unreachable",
            State::Gone => "gone",
        }
    }
}

/// What SSM says of one instance it manages under the target tag
/// (`DescribeInstanceInformation`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Managed {
    pub instance_id: String,
    /// `None` when SSM gave none: not online either.
    pub ping_status: Option<PingStatus>,
    /// When its agent last reached SSM.
    pub last_ping_unix: Option<u64>,
    /// When it registered with SSM, when SSM says.
    pub registered_unix: Option<u64>,
    /// When the association last ran on it.
    pub last_association_unix: Option<u64>,
}

impl Managed {
    fn online(&self) -> bool {
        self.ping_status == Some(PingStatus::Online)
    }

    fn ping_str(&self) -> String {
        self.ping_status
            .as_ref()
            .map_or_else(String::new, |p| p.as_str().to_owned())
    }
}

/// The instances SSM manages under the target tag, or why they could not be listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Listing {
    Listed(Vec<Managed>),
    /// The records are reported alone, as [`Join::Missing`].
    Failed(String),
}

/// Whether the report joined the records with SSM's list of instances.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum Join {
    /// `managed` instances under the target tag.
    Joined { managed: u64 },
    /// The list could not be had (the reason): never reported, stale, unreachable and gone
    /// are unknown, and old records are `silent`, as the records alone tell.
    Missing { reason: String },
}

/// What the records are compared with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Against {
    pub latest_generation: u64,
    pub latest_published_at_unix: u64,
    pub now_unix: u64,
    /// A record older than this is silent (or stale); an instance unhealthy for longer
    /// counts in [`FleetReport::unhealthy_past_limit`].
    pub silent_after_seconds: u64,
}

/// The whole fleet against the latest config.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FleetReport {
    pub latest_generation: u64,
    pub latest_published_at_unix: u64,
    pub now_unix: u64,
    /// Instances with a record that is not silent, of an instance SSM manages (any, when the
    /// list is missing).
    pub instances: u64,
    /// Of those, the ones below the latest generation.
    pub behind: u64,
    pub max_behind_seconds: u64,
    /// Records older than the silence limit (listed, not counted above).
    pub silent: u64,
    /// Instances SSM manages, online, without a record.
    pub never_reported: u64,
    /// Instances SSM manages, online, whose record is older than the silence limit.
    pub stale: u64,
    /// Instances SSM manages whose agent is not online.
    pub unreachable: u64,
    /// Instances unhealthy (the three above) for longer than the silence limit, or for a
    /// time SSM does not tell: what the alarm watches.
    pub unhealthy_past_limit: u64,
    /// Whether the records were joined with SSM's list of instances.
    pub join: Join,
    /// By instance id: every record.
    pub fleet: Vec<Instance>,
    /// By instance id: instances SSM manages that have no record.
    pub without_record: Vec<Unrecorded>,
    /// Records that could not be read or parsed, each naming its key; the reader fills them
    /// in, [`report`] leaves them empty.
    pub warnings: Vec<String>,
    /// The estate beside the fleet: every member account's state, since when and why, as the
    /// generator's last manifest has them (the reader fills them in; empty without one).
    #[serde(default)]
    pub accounts: Vec<crate::accounts::AccountState>,
}

impl Record {
    /// When the apply ended, in Unix seconds; `None` when `at` is not RFC 3339.
    pub fn at_unix(&self) -> Option<u64> {
        crate::time::unix_seconds(&self.at)
    }
}

/// Compares each instance's record with the latest config (its generation and when it was
/// published), and joins the records with the instances SSM manages under the target tag.
/// A record whose instance SSM no longer lists (terminated) is `gone`; an old record is
/// `silent` when the list is missing: both are listed but neither counted nor behind, so a
/// terminated instance's last record, kept until the lifecycle rule expires it, never holds
/// the fleet "behind". An instance SSM lists without a record is `never reported`.
pub fn report(against: Against, mut records: Vec<Record>, listing: Listing) -> FleetReport {
    records.sort_by(|a, b| a.instance_id.cmp(&b.instance_id));
    let (managed, join) = match listing {
        Listing::Listed(list) => {
            let managed: BTreeMap<String, Managed> = list
                .into_iter()
                .map(|m| (m.instance_id.clone(), m))
                .collect();
            let join = Join::Joined {
                managed: managed.len() as u64,
            };
            (Some(managed), join)
        }
        Listing::Failed(reason) => (None, Join::Missing { reason }),
    };
    let fleet: Vec<Instance> = records
        .into_iter()
        .map(|record| {
            let listed = managed.as_ref().map(|m| m.get(&record.instance_id));
            judge_record(&against, record, listed)
        })
        .collect();
    let without_record: Vec<Unrecorded> = managed
        .iter()
        .flat_map(BTreeMap::values)
        .filter(|m| {
            fleet
                .binary_search_by(|i| i.record.instance_id.as_str().cmp(&m.instance_id))
                .is_err()
        })
        .map(|m| judge_unrecorded(&against, m))
        .collect();
    totals(against, join, fleet, without_record)
}

/// One record against the latest config and, when the list is there, SSM's view of its
/// instance: `listed` is `None` without the list, `Some(None)` when SSM does not list it.
fn judge_record(against: &Against, record: Record, listed: Option<Option<&Managed>>) -> Instance {
    let at = record.at_unix();
    let silent = at.is_none_or(|at| past(against, at));
    // A newer generation than the latest object (a publish racing this report) is not behind.
    let current = record.generation >= against.latest_generation;
    let (state, ping_status, since) = match listed {
        None if silent => (State::Silent, String::new(), None),
        Some(None) => (State::Gone, String::new(), None),
        Some(Some(m)) if !m.online() => (State::Unreachable, m.ping_str(), m.last_ping_unix.or(at)),
        Some(Some(m)) if silent => (State::Stale, m.ping_str(), at),
        listed => {
            let ping = listed.flatten().map_or_else(String::new, Managed::ping_str);
            let state = if current {
                State::Current
            } else if record.generation == 0 && !record.unconfirmed.is_empty() {
                State::Unknown
            } else {
                State::Behind
            };
            (state, ping, None)
        }
    };
    let behind_seconds = if current || silent || state == State::Gone {
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
        state,
        ping_status,
        unhealthy_seconds: unhealthy_seconds(against, state, since),
    }
}

/// An instance SSM manages that wrote no record: unhealthy since the association last ran
/// there, or since it registered, whichever SSM tells and is earlier.
fn judge_unrecorded(against: &Against, managed: &Managed) -> Unrecorded {
    let (state, since) = if managed.online() {
        let since = [managed.registered_unix, managed.last_association_unix]
            .into_iter()
            .flatten()
            .min();
        (State::NeverReported, since)
    } else {
        (State::Unreachable, managed.last_ping_unix)
    };
    Unrecorded {
        instance_id: managed.instance_id.clone(),
        state,
        ping_status: managed.ping_str(),
        unhealthy_seconds: unhealthy_seconds(against, state, since),
    }
}

/// 0 when healthy; else for how long since `since`, `None` when that is unknown.
fn unhealthy_seconds(against: &Against, state: State, since: Option<u64>) -> Option<u64> {
    if !state.is_unhealthy() {
        return Some(0);
    }
    since.map(|since| against.now_unix.saturating_sub(since))
}

/// Whether `at` is longer ago than the silence limit.
fn past(against: &Against, at: u64) -> bool {
    against.now_unix.saturating_sub(at) > against.silent_after_seconds
}

fn totals(
    against: Against,
    join: Join,
    fleet: Vec<Instance>,
    without_record: Vec<Unrecorded>,
) -> FleetReport {
    let counted: Vec<&Instance> = fleet
        .iter()
        .filter(|i| !i.silent && i.state != State::Gone)
        .collect();
    let behind: Vec<&Instance> = counted.iter().copied().filter(|i| !i.current).collect();
    let states = fleet.iter().map(|i| (i.state, i.unhealthy_seconds)).chain(
        without_record
            .iter()
            .map(|u| (u.state, u.unhealthy_seconds)),
    );
    let (mut never_reported, mut stale, mut unreachable, mut past_limit) = (0, 0, 0, 0);
    for (state, seconds) in states {
        match state {
            State::NeverReported => never_reported += 1,
            State::Stale => stale += 1,
            State::Unreachable => unreachable += 1,
            _ => continue,
        }
        if seconds.is_none_or(|s| s > against.silent_after_seconds) {
            past_limit += 1;
        }
    }
    FleetReport {
        latest_generation: against.latest_generation,
        latest_published_at_unix: against.latest_published_at_unix,
        now_unix: against.now_unix,
        instances: counted.len() as u64,
        behind: behind.len() as u64,
        max_behind_seconds: behind.iter().map(|i| i.behind_seconds).max().unwrap_or(0),
        silent: fleet.iter().filter(|i| i.silent).count() as u64,
        never_reported,
        stale,
        unreachable,
        unhealthy_past_limit: past_limit,
        join,
        fleet,
        without_record,
        warnings: Vec::new(),
        accounts: Vec::new(),
    }
}

mod table;

#[cfg(test)]
mod tests;
