//! EventBridge on moto: rules, cross-account and cross-region bus targets and events, driven
//! through boto3 (`tests/data/eventbridge.py`), with SQS queues standing in for the rules' final
//! targets. The workspace has no EventBridge or SQS SDK, and moto 5.2.5 does not implement
//! `TestEventPattern` (it answers with an empty body): a pattern is tested by the rule that
//! holds it, in moto's own matcher, against events put on a bus.

use std::collections::BTreeMap;
use std::io::Write;
use std::process::{Command, Stdio};

use serde::Serialize;
use serde_json::{Value, json};

use crate::moto::{Moto, tools_bin};

/// What to set up and put, in order: queues, rules, events.
#[derive(Debug, Default, Serialize)]
pub struct Plan {
    pub queues: Vec<Place>,
    pub rules: Vec<Rule>,
    pub events: Vec<Put>,
}

/// A named thing in an account and region (a queue).
#[derive(Debug, Clone, Serialize)]
pub struct Place {
    pub account: String,
    pub region: String,
    pub name: String,
}

impl Place {
    pub fn new(account: &str, region: &str, name: &str) -> Place {
        Place {
            account: account.to_owned(),
            region: region.to_owned(),
            name: name.to_owned(),
        }
    }

    /// The queue's ARN, as a rule's target.
    pub fn queue_arn(&self) -> String {
        format!("arn:aws:sqs:{}:{}:{}", self.region, self.account, self.name)
    }
}

/// A rule on an account's default bus in a region: `targets` as `PutTargets` takes them
/// (`{"Id", "Arn", "RoleArn"}`).
#[derive(Debug, Clone, Serialize)]
pub struct Rule {
    pub account: String,
    pub region: String,
    pub name: String,
    pub pattern: Value,
    pub targets: Vec<Value>,
}

/// One `PutEvents` entry, put in an account and region.
#[derive(Debug, Clone, Serialize)]
pub struct Put {
    pub account: String,
    pub region: String,
    pub entry: Value,
}

impl Put {
    /// `event` (an EventBridge event, as `events/` holds them) put as its account would put it
    /// in `region`: the entry carries its source, detail-type, detail and resources; the
    /// account and region are the caller's.
    pub fn event(account: &str, region: &str, event: &Value) -> Put {
        Put {
            account: account.to_owned(),
            region: region.to_owned(),
            entry: json!({
                "Source": event["source"],
                "DetailType": event["detail-type"],
                "Detail": event["detail"].to_string(),
                "Resources": event["resources"],
            }),
        }
    }
}

/// Why the plan could not be carried out.
#[derive(Debug, thiserror::Error)]
#[error("eventbridge.py: {0}")]
pub struct EventBridgeError(String);

/// Carries out `plan` on `moto`; answers the events each queue received, by queue name.
pub fn deliver(moto: &Moto, plan: &Plan) -> Result<BTreeMap<String, Vec<Value>>, EventBridgeError> {
    let python = tools_bin().parent().map_or_else(
        || "python3".into(),
        |cache| cache.join("venv-moto/bin/python"),
    );
    let mut child = Command::new(&python)
        .arg(crate::root().join("tests/data/eventbridge.py"))
        .arg(moto.endpoint())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|err| {
            EventBridgeError(format!(
                "cannot run {} ({err}); run .ci/tools.sh for moto's venv",
                python.display()
            ))
        })?;
    let input = serde_json::to_vec(plan).map_err(|err| EventBridgeError(err.to_string()))?;
    child
        .stdin
        .take()
        .ok_or_else(|| EventBridgeError("no stdin".to_owned()))?
        .write_all(&input)
        .map_err(|err| EventBridgeError(format!("writing the plan: {err}")))?;
    let out = child
        .wait_with_output()
        .map_err(|err| EventBridgeError(format!("waiting: {err}")))?;
    if !out.status.success() {
        return Err(EventBridgeError(format!(
            "{}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    serde_json::from_slice(&out.stdout).map_err(|err| {
        EventBridgeError(format!(
            "expected {{queue: [event]}} as JSON ({err}); got {}",
            String::from_utf8_lossy(&out.stdout)
        ))
    })
}
