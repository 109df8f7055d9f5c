//! autoproxy-configure: on the S3 put of a new config, run the apply document on every tagged
//! peering proxy, one at a time, and fail loudly when an instance does. On `{"fleet": true}`
//! (by hand or on a schedule), report which generation each instance runs, from the records
//! the apply document leaves in the bucket, joined with the instances SSM manages under the
//! target tag (which sees the proxies that never apply).

use std::time::Duration;

use autoproxy::artifact::{GENERATION_EXPECTED, META_GENERATION};
use autoproxy::aws_error;
use autoproxy::fleet::{self, FleetReport, Record};
use autoproxy::metrics::Metrics;
use autoproxy::settings::ConfigureSettings;
use aws_lambda_events::s3::S3Event;
use aws_sdk_ssm::types::{CloudWatchOutputConfig, CommandInvocationStatus, CommandStatus, Target};
use lambda_runtime::{Diagnostic, LambdaEvent};
use serde::Serialize;
use serde_json::Value;
use tokio::time::Instant;
use tracing::{error, info, warn};

mod current;
mod event;
mod report;
mod rollout;

pub use current::{Superseded, replaced_by};
pub use event::{dispatches, is_fleet_request};
pub use report::fleet_report;
pub use rollout::roll_out;

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
        "s3://{bucket}/{key}: expected {GENERATION_EXPECTED} in its {META_GENERATION:?} metadata, \
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
    /// Versions not rolled out: a later one had replaced them by the time they were read.
    pub superseded: Vec<Superseded>,
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

/// The Lambda entry point: follows the command until the function's deadline nears.
pub async fn function_handler(
    deps: &Deps,
    event: LambdaEvent<Value>,
) -> Result<Reply, ConfigureError> {
    let follow_for = follow_budget(event.context.deadline(), std::time::SystemTime::now());
    handle(deps, &event.payload, Instant::now() + follow_for).await
}

/// Kept back from the deadline to report after following the command.
pub const REPORT_RESERVE: Duration = Duration::from_secs(10);

/// How long to follow a command when the invocation carries no usable deadline: the
/// function's timeout (`ConfigureFunction`'s `Timeout` in template.yaml, which a template
/// test holds to this plus [`REPORT_RESERVE`]) less the reserve.
pub const FOLLOW_WITHOUT_DEADLINE: Duration = Duration::from_secs(890);

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
    fn the_sample_s3_event_dispatches_its_version() {
        let event: Value =
            serde_json::from_str(include_str!("../../../events/s3-put.json")).unwrap();
        let (wanted, ignored) = dispatches(&event, "haproxy/haproxy.cfg").unwrap();
        assert!(ignored.is_empty());
        assert_eq!(
            wanted,
            [Dispatch {
                bucket: "autoproxy-config-demo".into(),
                key: "haproxy/haproxy.cfg".into(),
                version_id: "replace-with-a-version-of-the-config".into(),
            }]
        );
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
