//! autoproxy-configure: on the S3 put of a new config, run the apply document on every tagged
//! peering proxy, one at a time, and fail loudly when an instance does. On `{"fleet": true}`
//! (by hand or on a schedule), report which generation each instance runs, from the records
//! the apply document leaves in the bucket.

use std::time::Duration;

use autoproxy::artifact::META_GENERATION;
use autoproxy::fleet::{self, FleetReport, Record};
use autoproxy::metrics::Metrics;
use autoproxy::settings::ConfigureSettings;
use aws_lambda_events::s3::S3Event;
use aws_sdk_ssm::error::DisplayErrorContext;
use aws_sdk_ssm::types::{CloudWatchOutputConfig, CommandInvocationStatus, CommandStatus, Target};
use lambda_runtime::{Diagnostic, LambdaEvent};
use serde::Serialize;
use serde_json::Value;
use tokio::time::Instant;
use tracing::{error, info, warn};

/// Everything a run needs, built once per cold start.
#[derive(Debug, Clone)]
pub struct Deps {
    pub settings: ConfigureSettings,
    pub s3: aws_sdk_s3::Client,
    pub ssm: aws_sdk_ssm::Client,
    /// How often the command's status is read while following it.
    pub poll_every: Duration,
}

/// One config version to roll out, from one S3 record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dispatch {
    pub bucket: String,
    pub key: String,
    pub version_id: String,
}

/// Why an invocation failed. Each names what was expected and what arrived, or which
/// instance failed and why.
#[derive(Debug, thiserror::Error)]
pub enum ConfigureError {
    #[error(
        "expected an S3 event notification ({{\"Records\": [{{\"eventName\": \"ObjectCreated:…\", \
         \"s3\": {{\"bucket\": {{\"name\"}}, \"object\": {{\"key\", \"versionId\"}}}}}}]}}) \
         or {{\"fleet\": true}}; got {got}; nothing was sent"
    )]
    Malformed { got: String },
    #[error("{{\"fleet\": true}} needs {variable} ({what}), which is not set; nothing was read")]
    MissingSetting {
        variable: &'static str,
        what: &'static str,
    },
    #[error("s3://{bucket}/{key}: {operation} failed: {message}")]
    Store {
        operation: &'static str,
        bucket: String,
        key: String,
        message: String,
    },
    #[error(
        "s3://{bucket}/{key}: expected a whole number in its {META_GENERATION:?} metadata, \
         got {got:?}"
    )]
    NoGeneration {
        bucket: String,
        key: String,
        got: Option<String>,
    },
    #[error("s3://{bucket}/{key} version {version_id}: {operation} failed: {message}")]
    Aws {
        operation: &'static str,
        bucket: String,
        key: String,
        version_id: String,
        message: String,
    },
    #[error(
        "rollout of generation {generation} reached no instance: command {command_id} targeted \
         none tagged {tag_key}={tag_value} in this region (a tag typo, or a fleet elsewhere?)"
    )]
    NoTargets {
        generation: String,
        command_id: String,
        tag_key: String,
        tag_value: String,
    },
    #[error("rollout of generation {generation} failed: {failures}")]
    Rollout {
        generation: String,
        failures: String,
    },
}

impl From<ConfigureError> for Diagnostic {
    fn from(err: ConfigureError) -> Self {
        let kind = match &err {
            ConfigureError::Malformed { .. } => "InvalidEvent",
            ConfigureError::MissingSetting { .. } => "MissingSetting",
            ConfigureError::Aws { .. } | ConfigureError::Store { .. } => "AwsError",
            ConfigureError::NoGeneration { .. } => "InvalidConfigObject",
            ConfigureError::NoTargets { .. } => "NoTargets",
            ConfigureError::Rollout { .. } => "RolloutFailed",
        };
        Diagnostic {
            error_type: kind.to_owned(),
            error_message: err.to_string(),
        }
    }
}

/// What one invocation did, returned as JSON. Untagged: each kind serialises exactly as its
/// own type, so a rollout answers as it always has.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum Reply {
    /// For an S3 event notification.
    Rollout(Outcome),
    /// For `{"fleet": true}`.
    Fleet(FleetReport),
}

/// What a rollout did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Outcome {
    pub dispatched: Vec<Rollout>,
    pub ignored: Vec<String>,
}

/// One command sent and how it ended (or where it was when time ran out).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Rollout {
    pub command_id: String,
    /// False when a command for this version was already under way (a Lambda retry, a
    /// duplicate event): it was followed instead of sending another.
    pub sent: bool,
    /// Instances the command targeted (known once SSM has resolved the tag).
    pub targets: i32,
    pub generation: String,
    pub version_id: String,
    /// As SSM spells it in the reply (`Success`, `Failed`, …).
    #[serde(serialize_with = "command_status")]
    pub status: CommandStatus,
    pub instances: Vec<InstanceResult>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct InstanceResult {
    pub instance_id: String,
    /// `None` when SSM gave no status.
    #[serde(serialize_with = "invocation_status")]
    pub status: Option<CommandInvocationStatus>,
    pub detail: String,
}

fn command_status<S: serde::Serializer>(status: &CommandStatus, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(status.as_str())
}

fn invocation_status<S: serde::Serializer>(
    status: &Option<CommandInvocationStatus>,
    s: S,
) -> Result<S::Ok, S::Error> {
    s.serialize_str(
        status
            .as_ref()
            .map_or("Unknown", CommandInvocationStatus::as_str),
    )
}

impl InstanceResult {
    fn status_str(&self) -> &str {
        self.status
            .as_ref()
            .map_or("Unknown", CommandInvocationStatus::as_str)
    }
}

/// `{"fleet": true}` and nothing else: a payload that also carries S3 records is neither.
pub fn is_fleet_request(payload: &Value) -> bool {
    payload
        .as_object()
        .is_some_and(|object| object.len() == 1 && object.get("fleet") == Some(&Value::Bool(true)))
}

/// Picks the records that concern the config key; the others are returned as ignored keys.
pub fn dispatches(
    payload: &Value,
    config_key: &str,
) -> Result<(Vec<Dispatch>, Vec<String>), ConfigureError> {
    let malformed = || ConfigureError::Malformed {
        got: truncate(&payload.to_string(), QUOTED_PAYLOAD_CHARS),
    };
    let event: S3Event = serde_json::from_value(payload.clone()).map_err(|_| malformed())?;
    if event.records.is_empty() {
        return Err(malformed());
    }
    let mut wanted = Vec::new();
    let mut ignored = Vec::new();
    for record in event.records {
        let created = record
            .event_name
            .as_deref()
            .is_some_and(|name| name.starts_with("ObjectCreated:"));
        let (Some(bucket), Some(raw_key)) = (record.s3.bucket.name, record.s3.object.key) else {
            return Err(malformed());
        };
        let key = decode_key(&raw_key);
        if !created || key != config_key {
            info!(bucket, key, event = ?record.event_name, "not the config key or not a put: ignored");
            ignored.push(key);
            continue;
        }
        // The bucket is versioned: without a version the fleet could fetch a newer object
        // than the one this event announced.
        let Some(version_id) = record.s3.object.version_id.filter(|v| !v.is_empty()) else {
            return Err(malformed());
        };
        let dispatch = Dispatch {
            bucket,
            key,
            version_id,
        };
        // S3 may deliver the same event twice: one command per version is enough (a second
        // would be harmless anyway: the document skips a generation already installed).
        if !wanted.contains(&dispatch) {
            wanted.push(dispatch);
        }
    }
    Ok((wanted, ignored))
}

/// S3 event keys are form-URL-encoded.
fn decode_key(raw: &str) -> String {
    let spaced = raw.replace('+', " ");
    percent_encoding::percent_decode_str(&spaced)
        .decode_utf8_lossy()
        .into_owned()
}

/// How much of a refused payload an error quotes.
const QUOTED_PAYLOAD_CHARS: usize = 300;
/// SSM's limit on a command's comment.
const SSM_COMMENT_MAX_CHARS: usize = 100;

fn truncate(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// The Lambda entry point: follows the command until the function's deadline nears.
pub async fn function_handler(
    deps: &Deps,
    event: LambdaEvent<Value>,
) -> Result<Reply, ConfigureError> {
    let follow_for = follow_budget(event.context.deadline(), std::time::SystemTime::now());
    handle(deps, &event.payload, Instant::now() + follow_for).await
}

/// Kept back from the deadline to report after following the command.
const REPORT_RESERVE: Duration = Duration::from_secs(10);

/// How long to follow a command when the invocation carries no usable deadline: the
/// function's timeout (900 s in template.yaml) less the reserve.
const FOLLOW_WITHOUT_DEADLINE: Duration = Duration::from_secs(890);

/// How long this invocation may follow its command. A deadline already past is not one Lambda
/// sends: `cargo lambda watch` sends the timeout itself, which reads as a time in 1970; under
/// it the command would be followed for no time at all.
fn follow_budget(deadline: std::time::SystemTime, now: std::time::SystemTime) -> Duration {
    match deadline.duration_since(now) {
        Ok(remaining) => remaining.saturating_sub(REPORT_RESERVE),
        Err(_) => {
            warn!(
                "the invocation's deadline has already passed (a local emulator?): following \
                 the command for up to {} s",
                FOLLOW_WITHOUT_DEADLINE.as_secs()
            );
            FOLLOW_WITHOUT_DEADLINE
        }
    }
}

/// One invocation, callable from tests: the fleet report for `{"fleet": true}`, a rollout
/// for anything else (which must then be an S3 event notification).
pub async fn handle(
    deps: &Deps,
    payload: &Value,
    follow_until: Instant,
) -> Result<Reply, ConfigureError> {
    if is_fleet_request(payload) {
        return fleet_report(deps).await.map(Reply::Fleet);
    }
    roll_out(deps, payload, follow_until)
        .await
        .map(Reply::Rollout)
}

/// Rolls out each config version the S3 event announces.
pub async fn roll_out(
    deps: &Deps,
    payload: &Value,
    follow_until: Instant,
) -> Result<Outcome, ConfigureError> {
    let (wanted, ignored) = dispatches(payload, &deps.settings.config_key)?;
    let mut outcome = Outcome {
        dispatched: Vec::new(),
        ignored,
    };
    let mut failures = Vec::new();
    for dispatch in wanted {
        let rollout = dispatch_one(deps, &dispatch, follow_until).await?;
        let failed: Vec<&InstanceResult> = rollout
            .instances
            .iter()
            .filter(|i| i.status != Some(CommandInvocationStatus::Success))
            .collect();
        let succeeded = rollout.instances.len() - failed.len();
        let no_targets = rollout.targets == 0 && !is_running(&rollout.status);
        Metrics::new("configure")
            .count("Dispatched", u64::from(rollout.sent))
            .count("NoTargets", u64::from(no_targets))
            .count("InstancesSucceeded", succeeded as u64)
            .count("InstancesFailed", failed.len() as u64)
            .emit();
        if no_targets {
            error!(command_id = %rollout.command_id, "the rollout reached no instance");
            return Err(ConfigureError::NoTargets {
                generation: rollout.generation,
                command_id: rollout.command_id,
                tag_key: deps.settings.target_tag_key.clone(),
                tag_value: deps.settings.target_tag_value.clone(),
            });
        }
        if is_failure(&rollout.status) || !failed.is_empty() {
            let detail = if failed.is_empty() {
                format!(
                    "command {} ended {}",
                    rollout.command_id,
                    rollout.status.as_str()
                )
            } else {
                failed
                    .iter()
                    .map(|i| format!("{} {}: {}", i.instance_id, i.status_str(), i.detail))
                    .collect::<Vec<_>>()
                    .join("; ")
            };
            failures.push((rollout.generation.clone(), detail));
        }
        outcome.dispatched.push(rollout);
    }
    if let Some((generation, _)) = failures.first() {
        let failures = failures
            .iter()
            .map(|(_, detail)| detail.as_str())
            .collect::<Vec<_>>()
            .join(" | ");
        error!(generation, failures, "rollout failed");
        return Err(ConfigureError::Rollout {
            generation: generation.clone(),
            failures,
        });
    }
    Ok(outcome)
}

/// Reads the latest config's generation and every instance's record, writes the report beside
/// the config, emits the fleet metrics and returns the report. A record that cannot be read or
/// parsed is a warning naming its key: one bad record must not hide the rest of the fleet.
pub async fn fleet_report(deps: &Deps) -> Result<FleetReport, ConfigureError> {
    let bucket = deps
        .settings
        .config_bucket
        .as_deref()
        .ok_or(ConfigureError::MissingSetting {
            variable: "CONFIG_BUCKET",
            what: "the config bucket's name",
        })?;
    let config_key = deps.settings.config_key.as_str();
    let now_unix = unix_now();
    let (latest_generation, published_at) = latest_config(deps, bucket, config_key).await?;
    let keys = record_keys(deps, bucket, &fleet::prefix(config_key)).await?;
    let (records, warnings) = read_records(deps, bucket, config_key, keys).await;
    let against = fleet::Against {
        latest_generation,
        // S3 always sends LastModified; without it nobody counts as behind for long.
        latest_published_at_unix: published_at.unwrap_or(now_unix),
        now_unix,
        silent_after_seconds: deps.settings.fleet_silent_after_seconds,
    };
    let mut report = fleet::report(against, records);
    report.warnings = warnings;
    let report_key = fleet::report_key(config_key);
    put_report(deps, bucket, &report_key, &report).await?;
    Metrics::new("configure")
        .count("InstancesReporting", report.instances)
        .count("InstancesBehind", report.behind)
        .seconds("MaxBehindSeconds", report.max_behind_seconds)
        .count("InstancesSilent", report.silent)
        .count("FleetRecordsUnreadable", report.warnings.len() as u64)
        .emit();
    info!(
        latest_generation,
        instances = report.instances,
        behind = report.behind,
        max_behind_seconds = report.max_behind_seconds,
        silent = report.silent,
        warnings = report.warnings.len(),
        key = report_key,
        "fleet report written\n{}",
        report.table()
    );
    Ok(report)
}

fn store_error(
    operation: &'static str,
    bucket: &str,
    key: &str,
    message: String,
) -> ConfigureError {
    ConfigureError::Store {
        operation,
        bucket: bucket.to_owned(),
        key: key.to_owned(),
        message,
    }
}

/// The latest config's generation (its metadata) and when it was published.
async fn latest_config(
    deps: &Deps,
    bucket: &str,
    key: &str,
) -> Result<(u64, Option<u64>), ConfigureError> {
    let head = deps
        .s3
        .head_object()
        .bucket(bucket)
        .key(key)
        .send()
        .await
        .map_err(|err| {
            store_error(
                "HeadObject",
                bucket,
                key,
                DisplayErrorContext(err).to_string(),
            )
        })?;
    let raw = head
        .metadata()
        .and_then(|m| m.get(META_GENERATION))
        .cloned();
    let generation = raw
        .as_deref()
        .and_then(|raw| raw.parse::<u64>().ok())
        .ok_or_else(|| ConfigureError::NoGeneration {
            bucket: bucket.to_owned(),
            key: key.to_owned(),
            got: raw.clone(),
        })?;
    let published_at = head
        .last_modified()
        .and_then(|t| u64::try_from(t.secs()).ok());
    Ok((generation, published_at))
}

/// Every object under the records' prefix.
async fn record_keys(
    deps: &Deps,
    bucket: &str,
    prefix: &str,
) -> Result<Vec<String>, ConfigureError> {
    let mut keys = Vec::new();
    let mut pages = deps
        .s3
        .list_objects_v2()
        .bucket(bucket)
        .prefix(prefix)
        .into_paginator()
        .send();
    while let Some(page) = pages.next().await {
        let page = page.map_err(|err| {
            store_error(
                "ListObjectsV2",
                bucket,
                prefix,
                DisplayErrorContext(err).to_string(),
            )
        })?;
        keys.extend(
            page.contents()
                .iter()
                .filter_map(|object| object.key())
                .filter(|key| !key.ends_with('/'))
                .map(str::to_owned),
        );
    }
    Ok(keys)
}

/// The records that read and parse, each at its own instance's key; a warning per other key.
async fn read_records(
    deps: &Deps,
    bucket: &str,
    config_key: &str,
    keys: Vec<String>,
) -> (Vec<Record>, Vec<String>) {
    let mut records = Vec::new();
    let mut warnings = Vec::new();
    for key in keys {
        match read_record(deps, bucket, &key).await {
            Ok(record) if fleet::record_key(config_key, &record.instance_id) == key => {
                records.push(record);
            }
            Ok(record) => warnings.push(format!(
                "{key}: holds the record of {}, which belongs at {}",
                record.instance_id,
                fleet::record_key(config_key, &record.instance_id)
            )),
            Err(reason) => warnings.push(format!("{key}: {reason}")),
        }
    }
    for warning in &warnings {
        warn!(warning, "fleet record skipped");
    }
    (records, warnings)
}

/// Writes the report as JSON beside the config.
async fn put_report(
    deps: &Deps,
    bucket: &str,
    key: &str,
    report: &FleetReport,
) -> Result<(), ConfigureError> {
    let body = serde_json::to_vec_pretty(report)
        .map_err(|err| store_error("PutObject", bucket, key, err.to_string()))?;
    deps.s3
        .put_object()
        .bucket(bucket)
        .key(key)
        .content_type("application/json")
        .body(body.into())
        .send()
        .await
        .map_err(|err| {
            store_error(
                "PutObject",
                bucket,
                key,
                DisplayErrorContext(err).to_string(),
            )
        })?;
    Ok(())
}

/// One record, or why it could not be had.
async fn read_record(deps: &Deps, bucket: &str, key: &str) -> Result<Record, String> {
    let object = deps
        .s3
        .get_object()
        .bucket(bucket)
        .key(key)
        .send()
        .await
        .map_err(|err| format!("GetObject failed: {}", DisplayErrorContext(err)))?;
    let body = object
        .body
        .collect()
        .await
        .map_err(|err| format!("reading the body failed: {err}"))?
        .into_bytes();
    serde_json::from_slice(&body).map_err(|err| format!("not a fleet record ({err})"))
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn is_failure(status: &CommandStatus) -> bool {
    matches!(
        status,
        CommandStatus::Failed
            | CommandStatus::TimedOut
            | CommandStatus::Cancelled
            | CommandStatus::Cancelling
    )
}

fn is_running(status: &CommandStatus) -> bool {
    matches!(status, CommandStatus::Pending | CommandStatus::InProgress)
}

/// How far back a command for the same version counts as this rollout.
const SAME_ROLLOUT_WITHIN: Duration = Duration::from_secs(3_600);

/// A command of the apply document for exactly this version, sent within the last hour and
/// not failed: pending, running or done. A Lambda retry after a timeout, or S3 delivering the
/// event twice, follows it instead of sending a second command that would meet the first
/// one's lock on every instance. A failed one is sent again (the retry is the point).
async fn earlier_command(
    deps: &Deps,
    dispatch: &Dispatch,
) -> Result<Option<(String, i32)>, String> {
    use aws_sdk_ssm::primitives::{DateTime, DateTimeFormat};
    use aws_sdk_ssm::types::{CommandFilter, CommandFilterKey};
    let since = std::time::SystemTime::now()
        .checked_sub(SAME_ROLLOUT_WITHIN)
        .unwrap_or(std::time::UNIX_EPOCH);
    let since = DateTime::from(since);
    let filter = |key: CommandFilterKey, value: String| {
        CommandFilter::builder()
            .key(key)
            .value(value)
            .build()
            .map_err(|err| err.to_string())
    };
    let mut pages = deps
        .ssm
        .list_commands()
        .filters(filter(
            CommandFilterKey::DocumentName,
            deps.settings.apply_document.clone(),
        )?)
        .filters(filter(
            CommandFilterKey::InvokedAfter,
            since
                .fmt(DateTimeFormat::DateTime)
                .map_err(|err| err.to_string())?,
        )?)
        .into_paginator()
        .send();
    let param = |command: &aws_sdk_ssm::types::Command, name: &str| -> Option<String> {
        command.parameters()?.get(name)?.first().cloned()
    };
    while let Some(page) = pages.next().await {
        let page = page.map_err(|err| DisplayErrorContext(err).to_string())?;
        // Newest first as SSM lists them; the filters are checked here too.
        let found = page.commands().iter().find(|command| {
            command.document_name() == Some(deps.settings.apply_document.as_str())
                && command.requested_date_time().is_some_and(|t| *t >= since)
                && param(command, "ConfigBucket").as_deref() == Some(dispatch.bucket.as_str())
                && param(command, "ConfigKey").as_deref() == Some(dispatch.key.as_str())
                && param(command, "ConfigVersion").as_deref() == Some(dispatch.version_id.as_str())
                && !command.status().is_some_and(is_failure)
        });
        if let Some(command) = found {
            return Ok(Some((
                command.command_id().unwrap_or_default().to_owned(),
                command.target_count(),
            )));
        }
    }
    Ok(None)
}

async fn dispatch_one(
    deps: &Deps,
    dispatch: &Dispatch,
    follow_until: Instant,
) -> Result<Rollout, ConfigureError> {
    let aws_error = |operation: &'static str, message: String| ConfigureError::Aws {
        operation,
        bucket: dispatch.bucket.clone(),
        key: dispatch.key.clone(),
        version_id: dispatch.version_id.clone(),
        message,
    };
    let head = deps
        .s3
        .head_object()
        .bucket(&dispatch.bucket)
        .key(&dispatch.key)
        .version_id(&dispatch.version_id)
        .send()
        .await
        .map_err(|err| aws_error("HeadObject", DisplayErrorContext(err).to_string()))?;
    let generation = head
        .metadata()
        .and_then(|m| m.get(META_GENERATION))
        .cloned()
        .unwrap_or_else(|| "unknown".to_owned());
    let earlier = earlier_command(deps, dispatch)
        .await
        .map_err(|message| aws_error("ListCommands", message))?;
    let sent = earlier.is_none();
    let command_id = match earlier {
        Some((command_id, _)) => {
            info!(
                command_id,
                generation,
                version_id = %dispatch.version_id,
                "a command for this version is already under way or done: following it, not sending another"
            );
            command_id
        }
        None => send(deps, dispatch, &generation)
            .await
            .map_err(|message| aws_error("SendCommand", message))?,
    };

    let (status, targets) = follow(deps, &command_id, follow_until)
        .await
        .map_err(|message| aws_error("ListCommands", message))?;
    let instances = instance_results(deps, &command_id).await;
    for instance in &instances {
        info!(
            command_id,
            instance_id = %instance.instance_id,
            status = instance.status_str(),
            detail = %instance.detail,
            "instance result"
        );
    }
    Ok(Rollout {
        command_id,
        sent,
        targets,
        generation,
        version_id: dispatch.version_id.clone(),
        status,
        instances,
    })
}

/// Sends the apply document to the tagged fleet; the command's id.
async fn send(deps: &Deps, dispatch: &Dispatch, generation: &str) -> Result<String, String> {
    let settings = &deps.settings;
    let mut output = CloudWatchOutputConfig::builder().cloud_watch_output_enabled(true);
    if let Some(group) = &settings.command_log_group {
        output = output.cloud_watch_log_group_name(group);
    }
    let sent = deps
        .ssm
        .send_command()
        .document_name(&settings.apply_document)
        .targets(
            Target::builder()
                .key(format!("tag:{}", settings.target_tag_key))
                .values(&settings.target_tag_value)
                .build(),
        )
        .parameters("ConfigBucket", vec![dispatch.bucket.clone()])
        .parameters("ConfigKey", vec![dispatch.key.clone()])
        .parameters("ConfigVersion", vec![dispatch.version_id.clone()])
        .max_concurrency(&settings.max_concurrency)
        .max_errors(&settings.max_errors)
        .comment(truncate(
            &format!(
                "autoproxy generation {generation} (version {})",
                dispatch.version_id
            ),
            SSM_COMMENT_MAX_CHARS,
        ))
        .cloud_watch_output_config(output.build())
        .send()
        .await
        .map_err(|err| DisplayErrorContext(err).to_string())?;
    let command_id = sent
        .command()
        .and_then(|c| c.command_id())
        .unwrap_or_default()
        .to_owned();
    info!(command_id, generation, version_id = %dispatch.version_id, "command sent");
    Ok(command_id)
}

/// Polls the command until it ends or time runs out; returns its last status and how many
/// instances it targeted.
async fn follow(
    deps: &Deps,
    command_id: &str,
    until: Instant,
) -> Result<(CommandStatus, i32), String> {
    loop {
        let listed = deps
            .ssm
            .list_commands()
            .command_id(command_id)
            .send()
            .await
            .map_err(|err| DisplayErrorContext(err).to_string())?;
        let command = listed.commands().first();
        let status = command
            .and_then(|c| c.status())
            .cloned()
            .unwrap_or(CommandStatus::Pending);
        let targets = command.map_or(0, |c| c.target_count());
        if !is_running(&status) {
            return Ok((status, targets));
        }
        if Instant::now() + deps.poll_every > until {
            warn!(
                command_id,
                status = status.as_str(),
                "still running when this invocation must end; SSM carries on and the \
                 command's own output and alarms report the end"
            );
            return Ok((status, targets));
        }
        tokio::time::sleep(deps.poll_every).await;
    }
}

/// Per-instance results. This is the one call moto does not implement; without it the
/// command's own status still decides success or failure.
async fn instance_results(deps: &Deps, command_id: &str) -> Vec<InstanceResult> {
    let mut results = Vec::new();
    let mut pages = deps
        .ssm
        .list_command_invocations()
        .command_id(command_id)
        .details(true)
        .into_paginator()
        .send();
    while let Some(page) = pages.next().await {
        match page {
            Ok(page) => results.extend(page.command_invocations().iter().map(|inv| {
                let output = inv
                    .command_plugins()
                    .iter()
                    .filter_map(|p| p.output())
                    .collect::<Vec<_>>()
                    .join(" ");
                let last_line = output
                    .lines()
                    .rev()
                    .find(|l| !l.trim().is_empty())
                    .unwrap_or("");
                InstanceResult {
                    instance_id: inv.instance_id().unwrap_or_default().to_owned(),
                    status: inv.status().cloned(),
                    detail: format!(
                        "{}{}",
                        inv.status_details().unwrap_or_default(),
                        if last_line.is_empty() {
                            String::new()
                        } else {
                            format!(": {last_line}")
                        }
                    ),
                }
            })),
            Err(err) => {
                warn!(command_id, error = %DisplayErrorContext(err), "per-instance results unavailable");
                break;
            }
        }
    }
    results
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn event(records: &[(&str, &str, &str, Option<&str>)]) -> Value {
        json!({"Records": records.iter().map(|(name, bucket, key, version)| json!({
            "eventVersion": "2.1", "eventSource": "aws:s3", "awsRegion": "us-east-1",
            "eventTime": "2026-11-23T03:14:03.000Z", "eventName": name,
            "userIdentity": {"principalId": "AWS:AROAEXAMPLE"},
            "requestParameters": {"sourceIPAddress": "10.0.0.1"},
            "responseElements": {},
            "s3": {"s3SchemaVersion": "1.0", "configurationId": "config",
                   "bucket": {"name": bucket, "arn": format!("arn:aws:s3:::{bucket}")},
                   "object": {"key": key, "size": 10, "versionId": version, "sequencer": "0A"}}
        })).collect::<Vec<_>>()})
    }

    #[test]
    fn only_created_config_keys_dispatch() {
        let payload = event(&[
            ("ObjectCreated:Put", "b", "haproxy/haproxy.cfg", Some("v1")),
            (
                "ObjectCreated:Put",
                "b",
                "haproxy/haproxy.manifest.json",
                Some("v2"),
            ),
            (
                "ObjectRemoved:Delete",
                "b",
                "haproxy/haproxy.cfg",
                Some("v3"),
            ),
            ("ObjectCreated:Put", "b", "haproxy/haproxy.cfg", Some("v1")),
        ]);
        let (wanted, ignored) = dispatches(&payload, "haproxy/haproxy.cfg").unwrap();
        assert_eq!(
            wanted,
            [Dispatch {
                bucket: "b".into(),
                key: "haproxy/haproxy.cfg".into(),
                version_id: "v1".into()
            }]
        );
        assert_eq!(ignored.len(), 2);
    }

    #[test]
    fn keys_are_url_decoded() {
        let payload = event(&[("ObjectCreated:Put", "b", "my+dir/haproxy%2Ecfg", Some("v1"))]);
        let (wanted, _) = dispatches(&payload, "my dir/haproxy.cfg").unwrap();
        assert_eq!(wanted.len(), 1);
    }

    #[test]
    fn malformed_events_are_refused() {
        for payload in [
            json!({}),
            json!({"Records": []}),
            json!({"dry_run": true}),
            json!({"fleet": false}),
            json!({"fleet": "yes"}),
            json!("text"),
            event(&[("ObjectCreated:Put", "b", "haproxy/haproxy.cfg", None)]),
        ] {
            let err = dispatches(&payload, "haproxy/haproxy.cfg").unwrap_err();
            assert!(
                err.to_string()
                    .contains("expected an S3 event notification"),
                "{err}"
            );
            assert!(err.to_string().contains(r#"or {"fleet": true}"#), "{err}");
        }
    }

    #[test]
    fn a_deadline_in_the_past_still_follows_the_command() {
        use std::time::{SystemTime, UNIX_EPOCH};
        let now = SystemTime::now();
        assert_eq!(
            follow_budget(now + Duration::from_secs(900), now),
            Duration::from_secs(890)
        );
        assert_eq!(
            follow_budget(now + Duration::from_secs(5), now),
            Duration::ZERO
        );
        // What cargo lambda watch sends: the 900 s timeout as a deadline, in 1970.
        let watch = UNIX_EPOCH + Duration::from_millis(900_000);
        assert_eq!(follow_budget(watch, now), FOLLOW_WITHOUT_DEADLINE);
    }

    #[test]
    fn only_exactly_fleet_true_asks_for_the_report() {
        for (payload, fleet) in [
            (json!({"fleet": true}), true),
            (json!({"fleet": false}), false),
            (json!({"fleet": "true"}), false),
            (json!({"fleet": true, "Records": []}), false),
            (json!([{"fleet": true}]), false),
            (json!({}), false),
        ] {
            assert_eq!(is_fleet_request(&payload), fleet, "{payload}");
        }
    }
}
