//! A batch of the Route53 event queue, as the SQS event source mapping delivers it
//! (docs/ARCHITECTURE.md, "Generator events"): `Records` whose `eventSource` is `aws:sqs`, each
//! `body` one EventBridge event. The batch is one run: the zones its events name are read once
//! each, however many events name them. A record whose body is no Route53 event is reported
//! back on its own (`batchItemFailures`), so SQS retries only it and, past the queue's
//! `maxReceiveCount`, moves it to the dead-letter queue.

use autoproxy::{QUOTED_CHARS, excerpt};
use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent};
use serde::Deserialize;
use serde_json::Value;

use crate::trigger::{Changes, TriggerError, route53_change};

/// What a batch asks for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Batch {
    /// The changes of every record that holds a Route53 event.
    pub changes: Changes,
    /// The records that hold none: their message ids and why.
    pub refused: Vec<Refused>,
}

/// A record (or a message) whose body is no Route53 event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    pub message_id: String,
    pub error: TriggerError,
}

/// A batch that cannot be answered record by record: nothing was read or written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BatchError {
    /// A record without its message id or body: SQS could not be told which to keep.
    #[error(
        "expected an SQS batch whose every record has a \"messageId\" and a \"body\" string; \
         got {got}"
    )]
    Unnamed { got: String },
    /// A field of the SQS event of another type than SQS sends.
    #[error("expected an SQS batch as the event source mapping sends it ({why}); got {got}")]
    Shape { why: String, got: String },
}

/// `Some` when `payload` is an SQS batch: any record of `Records` with `eventSource`
/// `aws:sqs`. Anything else is no batch (`None`) and is judged as an event of its own. The
/// records are read as `aws_lambda_events`' `SqsEvent`.
pub fn parse(payload: &Value) -> Option<Result<Batch, BatchError>> {
    let records = payload.get("Records")?.as_array()?;
    let from_sqs = |record: &Value| record["eventSource"].as_str() == Some("aws:sqs");
    if !records.iter().any(from_sqs) {
        return None;
    }
    let event = match SqsEvent::deserialize(payload) {
        Ok(event) => event,
        Err(err) => {
            return Some(Err(BatchError::Shape {
                why: err.to_string(),
                got: excerpt(&payload.to_string(), QUOTED_CHARS),
            }));
        }
    };
    let mut batch = Batch::default();
    for (record, raw) in event.records.iter().zip(records) {
        let (Some(message_id), Some(body)) = (&record.message_id, &record.body) else {
            return Some(Err(BatchError::Unnamed {
                got: excerpt(&raw.to_string(), QUOTED_CHARS),
            }));
        };
        batch.add(message_id, body);
    }
    Some(Ok(batch))
}

impl Batch {
    /// Adds one message: its changes, or its refusal.
    pub fn add(&mut self, message_id: &str, body: &str) {
        match body_changes(body) {
            Ok(changes) => self.changes.add(changes),
            Err(error) => self.refused.push(Refused {
                message_id: message_id.to_owned(),
                error,
            }),
        }
    }

    /// The batch's answer to SQS: the records it must keep, those refused.
    pub fn failures(&self) -> SqsBatchResponse {
        let mut response = SqsBatchResponse::default();
        response.set_failures(self.refused.iter().map(|refused| &refused.message_id));
        response
    }
}

/// A message body: one EventBridge event of a Route53 call.
pub fn body_changes(body: &str) -> Result<Changes, TriggerError> {
    let event: Value = serde_json::from_str(body).map_err(|_| TriggerError::Unrecognised {
        got: excerpt(body, QUOTED_CHARS),
    })?;
    route53_change(&event)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trigger::tests::event_file as sample;
    use autoproxy::model::ZoneKey;
    use serde_json::json;

    fn record(id: &str, body: &Value) -> Value {
        json!({"messageId": id, "eventSource": "aws:sqs", "body": body.to_string()})
    }

    /// The sample batch, as AWS delivers it: two records naming one zone, one naming another
    /// (a zone created), read as two zones.
    #[test]
    fn the_sample_batch_names_each_zone_once() {
        let batch = parse(&sample("sqs-batch.json")).unwrap().unwrap();
        assert_eq!(batch.refused, vec![]);
        assert_eq!(batch.changes.events(), 3);
        let zones: Vec<&str> = batch.changes.zones.iter().map(|z| z.id.as_str()).collect();
        assert_eq!(zones, ["Z0123456789ABCDEFGHIJ", "Z0NEWZONE0000000000001"]);
        assert_eq!(
            batch.changes.calls.keys().collect::<Vec<_>>(),
            ["ChangeResourceRecordSets", "CreateHostedZone"]
        );
    }

    #[test]
    fn a_batch_of_many_events_reads_each_zone_once() {
        let event = sample("change-resource-record-sets.json");
        let records: Vec<Value> = (0..500)
            .map(|i| {
                let mut event = event.clone();
                event["detail"]["requestParameters"]["hostedZoneId"] =
                    json!(format!("Z{:020}", i % 20));
                record(&format!("m{i}"), &event)
            })
            .collect();
        let batch = parse(&json!({ "Records": records })).unwrap().unwrap();
        assert_eq!(batch.changes.events(), 500);
        assert_eq!(batch.changes.zones.len(), 20);
        assert!(
            batch
                .changes
                .zones
                .iter()
                .all(|ZoneKey { account, .. }| account == "123456789012")
        );
        assert_eq!(batch.failures().batch_item_failures, vec![]);
    }

    /// A record that holds no Route53 event fails alone; the others are read.
    #[test]
    fn a_record_without_a_route53_event_fails_alone() {
        let change = sample("change-resource-record-sets.json");
        let payload = json!({"Records": [
            record("good", &change),
            record("schedule", &sample("schedule.json")),
            {"messageId": "not-json", "eventSource": "aws:sqs", "body": "{not json"},
        ]});
        let batch = parse(&payload).unwrap().unwrap();
        assert_eq!(batch.changes.events(), 1);
        let failed: Vec<String> = batch
            .failures()
            .batch_item_failures
            .into_iter()
            .map(|f| f.item_identifier)
            .collect();
        assert_eq!(failed, ["schedule", "not-json"]);
        let answer = serde_json::to_value(batch.failures()).unwrap();
        assert_eq!(
            answer,
            json!({"batchItemFailures": [{"itemIdentifier": "schedule"}, {"itemIdentifier": "not-json"}]})
        );
        assert!(batch.refused[1].error.to_string().contains("{not json"));
    }

    /// A record whose event names an account other than its envelope's fails alone, with why;
    /// the batch's other records are read.
    #[test]
    fn a_record_naming_another_account_fails_alone() {
        let change = sample("change-resource-record-sets.json");
        let mut other = sample("forwarded-change-resource-record-sets.json");
        other["detail"]["recipientAccountId"] = json!("123456789012");
        let payload = json!({"Records": [record("good", &change), record("other", &other)]});
        let batch = parse(&payload).unwrap().unwrap();
        assert_eq!(batch.changes.events(), 1);
        assert!(
            batch
                .changes
                .zones
                .iter()
                .all(|zone| zone.account == "123456789012" && zone.id == "Z0123456789ABCDEFGHIJ")
        );
        assert_eq!(
            serde_json::to_value(batch.failures()).unwrap(),
            json!({"batchItemFailures": [{"itemIdentifier": "other"}]})
        );
        let why = batch.refused[0].error.to_string();
        assert!(why.contains("recipientAccountId"), "{why}");
    }

    #[test]
    fn only_sqs_records_are_a_batch() {
        assert_eq!(parse(&sample("s3-put.json")), None);
        assert_eq!(parse(&sample("schedule.json")), None);
        assert_eq!(parse(&json!({"Records": "x"})), None);
        let unnamed = json!({"Records": [{"eventSource": "aws:sqs", "body": "{}"}]});
        let err = parse(&unnamed).unwrap().unwrap_err();
        assert!(matches!(err, BatchError::Unnamed { .. }), "{err:?}");
        assert!(err.to_string().contains("messageId"), "{err}");
        // A record beside the SQS ones that is not SQS's has no message id either.
        let mixed = json!({"Records": [
            {"messageId": "m1", "eventSource": "aws:sqs", "body": "{}"},
            {"eventSource": "aws:s3", "s3": {}},
        ]});
        let err = parse(&mixed).unwrap().unwrap_err();
        assert!(matches!(err, BatchError::Unnamed { .. }), "{err:?}");
        assert!(err.to_string().contains("aws:s3"), "{err}");
    }

    /// A field of another type than SQS sends refuses the whole batch, naming the field's
    /// problem: SQS could not be told which record to keep.
    #[test]
    fn a_batch_of_another_shape_is_refused_whole() {
        for (record, why) in [
            (
                json!({"messageId": 7, "eventSource": "aws:sqs", "body": "{}"}),
                "invalid type: integer `7`, expected a string",
            ),
            (
                json!({"messageId": "m1", "eventSource": "aws:sqs", "body": {"detail": {}}}),
                "invalid type: map, expected a string",
            ),
            (
                json!({"messageId": "m1", "eventSource": "aws:sqs", "body": "{}", "attributes": {"ApproximateReceiveCount": 1}}),
                "invalid type: integer `1`, expected a string",
            ),
        ] {
            let err = parse(&json!({ "Records": [record] })).unwrap().unwrap_err();
            assert!(matches!(err, BatchError::Shape { .. }), "{err:?}");
            let text = err.to_string();
            assert!(text.contains(why) && text.contains("\"Records\""), "{text}");
        }
        // SQS's own null for a map it has nothing in is read as empty.
        let nulls = json!({"Records": [{"messageId": "m1", "eventSource": "aws:sqs", "body": "{}", "attributes": null, "messageAttributes": null}]});
        let batch = parse(&nulls).unwrap().unwrap();
        assert_eq!(batch.refused.len(), 1);
    }
}
