//! What one invocation asks, read once from its payload (docs/ARCHITECTURE.md, "Generator
//! events"): the handler matches on it once.

use autoproxy::names::HostName;
use serde_json::Value;

use crate::batch::{self, Batch, BatchError};
use crate::explain::{self, ExplainError};
use crate::trigger::{self, Trigger, TriggerError};

/// An invocation, by what it asks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Invocation {
    /// `{"explain": "<name>"}`: why a name is or is not routed. Reads; writes nothing.
    Explain(HostName),
    /// A batch of the Route53 event queue, as the SQS event source mapping delivers it: the
    /// stack's one path for Route53's CloudTrail events.
    Batch(Batch),
    /// Any other run: the EventBridge schedule, a manual payload, or one CloudTrail event of a
    /// Route53 call invoked directly (by hand only: the stack's rule sends them to the queue).
    Run(Trigger),
}

/// A payload that is none of the accepted shapes. Nothing is read or written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvocationError {
    #[error(transparent)]
    Trigger(#[from] TriggerError),
    #[error(transparent)]
    Batch(#[from] BatchError),
    #[error(transparent)]
    Explain(#[from] ExplainError),
}

impl Invocation {
    /// Classifies a payload: `explain` first (that field alone), then an SQS batch (`Records`
    /// from `aws:sqs`), then a run's trigger, whose error names every accepted shape.
    pub fn parse(payload: &Value) -> Result<Invocation, InvocationError> {
        if let Some(request) = explain::request(payload) {
            return Ok(Invocation::Explain(request?));
        }
        if let Some(batch) = batch::parse(payload) {
            return Ok(Invocation::Batch(batch?));
        }
        Ok(Invocation::Run(trigger::parse(payload)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trigger::tests::event_file as sample;
    use serde_json::json;

    /// Each sample payload is the invocation it is named for; a payload of none of the shapes
    /// is refused by the trigger's parse, which names them all.
    #[test]
    fn each_payload_is_one_invocation() {
        let kind = |payload: &Value| match Invocation::parse(payload) {
            Ok(Invocation::Explain(_)) => "explain",
            Ok(Invocation::Batch(_)) => "batch",
            Ok(Invocation::Run(Trigger::Schedule)) => "schedule",
            Ok(Invocation::Run(Trigger::Manual { .. })) => "manual",
            Ok(Invocation::Run(Trigger::Route53(_))) => "event",
            Err(InvocationError::Trigger(_)) => "refused as a trigger",
            Err(InvocationError::Batch(_)) => "refused as a batch",
            Err(InvocationError::Explain(_)) => "refused as explain",
        };
        let cases = [
            (json!({"explain": "api.example.internal"}), "explain"),
            (json!({"explain": 1}), "refused as explain"),
            (
                json!({"explain": "a.b", "dry_run": true}),
                "refused as explain",
            ),
            (sample("sqs-batch.json"), "batch"),
            (
                json!({"Records": [{"eventSource": "aws:sqs", "body": "{}"}]}),
                "refused as a batch",
            ),
            (sample("schedule.json"), "schedule"),
            (sample("manual-dry-run.json"), "manual"),
            (json!({}), "manual"),
            (sample("change-resource-record-sets.json"), "event"),
            (sample("s3-put.json"), "refused as a trigger"),
            (json!("schedule"), "refused as a trigger"),
        ];
        for (payload, expected) in cases {
            assert_eq!(kind(&payload), expected, "{payload}");
        }
    }
}
