//! A run started by the Route53 event queue (docs/ARCHITECTURE.md, "Generator events"). The
//! event source mapping hands over at most ten events at once and invokes at once; the run
//! then takes everything else that waits in the queue, so a member's burst is read in a few
//! runs, each zone once per run. A lone event gives the queue [`BURST_WINDOW`] to show whether
//! more are coming; a burst (more than one event) that follows an event run's publish closely
//! first waits until [`PUBLISH_SPACING`] has passed since it: the events of that wait join the
//! run, and a burst costs the proxies a few applies, not one per event. A lone change, and the
//! first burst after a quiet spell or a scheduled, manual or deploy run, wait for no spacing.
//! Without a queue configured nothing can join a batch: it waits for nothing.

use std::time::{Duration, SystemTime};

use autoproxy::s3::{ConfigStore, LastPublish, StoreError};
use aws_config::SdkConfig;
use aws_sdk_sqs::types::DeleteMessageBatchRequestEntry;
use serde::Serialize;
use tracing::{info, warn};

use crate::batch::Batch;

/// The least time between two publishes of event runs of a burst: a burst's run within this
/// time of an event run's publish waits at most this long.
pub const PUBLISH_SPACING: Duration = Duration::from_secs(20);

/// How long a lone event waits for company before it is read alone. A burst's events come
/// tens of milliseconds apart (external-dns, Terraform and CloudFormation change records one
/// call after another); a person's next change, seconds later. Added to a lone event's
/// latency: half a second.
pub const BURST_WINDOW: Duration = Duration::from_millis(500);

/// The most messages one run receives from the queue besides its batch's records: the bound is
/// the run's, shared by all its takes (up to three: see [`gather`]), each message counted once
/// received, read or refused. A bound on the run's memory (SQS holds messages of up to 1 MiB;
/// CloudTrail events are a few KiB). The rest wait in the queue for the next run.
pub const DRAIN_LIMIT: usize = 2_000;

/// SQS's most messages per `ReceiveMessage` and per `DeleteMessageBatch`.
const SQS_BATCH: usize = 10;

/// The Route53 event queue (`EVENT_QUEUE_URL`).
#[derive(Debug, Clone)]
pub struct EventQueue {
    client: aws_sdk_sqs::Client,
    url: String,
    /// The most messages one run receives: [`DRAIN_LIMIT`], or a smaller one
    /// ([`EventQueue::with_drain_limit`]).
    limit: usize,
}

/// What a queue run did besides its run, for the summary.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct QueueRun {
    /// Records of the batch the mapping delivered.
    pub records: usize,
    /// Messages the run took from the queue itself.
    pub drained: usize,
    /// Records and messages that hold no Route53 event (left to SQS's retries).
    pub refused: usize,
    /// How long the run waited: the [`BURST_WINDOW`] of a lone event, or what was left of
    /// the [`PUBLISH_SPACING`] for a burst.
    pub waited_ms: u64,
}

/// Messages taken from the queue: their receipt handles, to delete once the run has written.
#[derive(Debug, Default)]
pub struct Drained {
    pub receipts: Vec<String>,
    pub messages: usize,
}

impl EventQueue {
    pub fn new(sdk: &SdkConfig, url: &str) -> EventQueue {
        EventQueue {
            client: aws_sdk_sqs::Client::new(sdk),
            url: url.to_owned(),
            limit: DRAIN_LIMIT,
        }
    }

    /// The same queue, of which a run receives at most `limit` messages instead of
    /// [`DRAIN_LIMIT`]: for tests, where SQS on moto takes minutes over thousands of messages.
    pub fn with_drain_limit(self, limit: usize) -> EventQueue {
        EventQueue { limit, ..self }
    }

    /// Takes what waits in the queue now, up to `budget` messages, each hidden from every
    /// other consumer for `hold` (in whole seconds, rounded up), and adds their events to
    /// `batch`. A message that holds no Route53 event is left: SQS shows it again after `hold`
    /// and, past the queue's `maxReceiveCount`, moves it to the dead-letter queue. A failed
    /// receive ends the drain: what was taken is read, the rest waits for the next run.
    pub async fn drain(&self, batch: &mut Batch, hold: Duration, budget: usize) -> Drained {
        let mut drained = Drained::default();
        let hold_secs = hold.as_secs() + u64::from(hold.subsec_nanos() > 0);
        let hold_secs = i32::try_from(hold_secs.clamp(1, 43_200)).unwrap_or(43_200);
        while drained.messages < budget {
            let want = (budget - drained.messages).min(SQS_BATCH);
            let received = self
                .client
                .receive_message()
                .queue_url(&self.url)
                .max_number_of_messages(i32::try_from(want).unwrap_or(10))
                .visibility_timeout(hold_secs)
                .wait_time_seconds(0)
                .send()
                .await;
            let messages = match received {
                Ok(out) => out.messages.unwrap_or_default(),
                Err(err) => {
                    warn!(error = %autoproxy::aws_error::reason(&err), "draining the event queue failed: reading what was taken");
                    break;
                }
            };
            if messages.is_empty() {
                break;
            }
            for message in messages {
                drained.messages += 1;
                let (Some(id), Some(receipt)) = (message.message_id(), message.receipt_handle())
                else {
                    continue;
                };
                let refused_before = batch.refused.len();
                batch.add(id, message.body().unwrap_or_default());
                if batch.refused.len() == refused_before {
                    drained.receipts.push(receipt.to_owned());
                }
            }
        }
        drained
    }

    /// Deletes the messages a run has read and written. One that fails to go is shown again
    /// after its hold and read again by a later run: its zone costs one more read, nothing else.
    /// Logs that they were deleted only when all were; else how many were not.
    pub async fn delete(&self, receipts: &[String]) {
        let mut deleted = 0;
        for (chunk_index, chunk) in receipts.chunks(SQS_BATCH).enumerate() {
            let entries = chunk.iter().enumerate().filter_map(|(i, receipt)| {
                DeleteMessageBatchRequestEntry::builder()
                    .id(format!("m{}", chunk_index * SQS_BATCH + i))
                    .receipt_handle(receipt)
                    .build()
                    .ok()
            });
            let answer = self
                .client
                .delete_message_batch()
                .queue_url(&self.url)
                .set_entries(Some(entries.collect()))
                .send()
                .await;
            match answer {
                Ok(out) => deleted += out.successful.len(),
                Err(err) => {
                    warn!(error = %autoproxy::aws_error::reason(&err), "deleting taken messages failed");
                }
            }
        }
        let left = receipts.len().saturating_sub(deleted);
        if left == 0 {
            info!(deleted, "deleted the messages taken from the event queue");
        } else {
            warn!(
                deleted,
                not_deleted = left,
                "some taken messages were not deleted: SQS shows them again after their hold"
            );
        }
    }
}

/// Takes what else waits in the queue for a batch (see the module's comment): a lone event
/// waits [`BURST_WINDOW`] and looks again; a burst within [`PUBLISH_SPACING`] of an event
/// run's publish waits out the rest of it, then takes what came meanwhile. The takes share
/// the queue's one drain limit ([`DRAIN_LIMIT`]): a later take gets what the earlier ones
/// left of it. `hold`: how long a taken message stays hidden, asked at each take. Returns
/// what was taken, and the time waited. Without a queue: nothing, at once.
pub async fn gather(
    queue: Option<&EventQueue>,
    store: &ConfigStore,
    batch: &mut Batch,
    hold: impl Fn() -> Duration,
) -> Result<(Drained, Duration), StoreError> {
    let mut drained = Drained::default();
    let Some(queue) = queue else {
        return Ok((drained, Duration::ZERO));
    };
    take(queue, &mut drained, batch, hold()).await;
    let mut waited = Duration::ZERO;
    if batch.changes.events() == 1 {
        tokio::time::sleep(BURST_WINDOW).await;
        waited += BURST_WINDOW;
        take(queue, &mut drained, batch, hold()).await;
    }
    if batch.changes.events() <= 1 {
        return Ok((drained, waited));
    }
    let last = store.last_publish().await?;
    let wait = spacing_wait(last.as_ref(), SystemTime::now());
    if !wait.is_zero() {
        info!(
            wait_ms = wait.as_millis(),
            events = batch.changes.events(),
            "a burst soon after an event run's publish: waiting out the spacing"
        );
        tokio::time::sleep(wait).await;
        waited += wait;
        take(queue, &mut drained, batch, hold()).await;
    }
    Ok((drained, waited))
}

/// One more take from the queue into `drained`: at most what the run's earlier takes left
/// of the drain limit.
async fn take(queue: &EventQueue, drained: &mut Drained, batch: &mut Batch, hold: Duration) {
    let budget = queue.limit.saturating_sub(drained.messages);
    if budget == 0 {
        return;
    }
    let more = queue.drain(batch, hold, budget).await;
    drained.messages += more.messages;
    drained.receipts.extend(more.receipts);
}

/// How long a queue run waits before it reads: what is left of [`PUBLISH_SPACING`] since the
/// last publish, when an event run made it (its trigger `route53:…`); nothing after any other
/// publish, or none. A time in the future (clocks apart) counts as now: the wait is never
/// longer than the spacing.
pub fn spacing_wait(last: Option<&LastPublish>, now: SystemTime) -> Duration {
    let Some(last) = last else {
        return Duration::ZERO;
    };
    if !last
        .trigger
        .as_deref()
        .is_some_and(|trigger| trigger.starts_with("route53:"))
    {
        return Duration::ZERO;
    }
    let since = now.duration_since(last.at).unwrap_or(Duration::ZERO);
    PUBLISH_SPACING.saturating_sub(since)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_waits_only_for_what_is_left_of_the_spacing_after_an_event_run() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_795_403_642);
        let by = |trigger: &str, at: SystemTime| LastPublish {
            at,
            trigger: Some(trigger.to_owned()),
        };
        let ago = |secs: u64| {
            by(
                "route53:ChangeResourceRecordSets",
                now - Duration::from_secs(secs),
            )
        };
        let wait = |last: LastPublish| spacing_wait(Some(&last), now);
        assert_eq!(spacing_wait(None, now), Duration::ZERO);
        let spacing = PUBLISH_SPACING.as_secs();
        assert_eq!(wait(ago(3600)), Duration::ZERO);
        assert_eq!(wait(ago(spacing)), Duration::ZERO);
        assert_eq!(wait(ago(spacing - 5)), Duration::from_secs(5));
        assert_eq!(wait(ago(0)), PUBLISH_SPACING);
        // After any other run's publish, the first event waits for nothing.
        for trigger in ["schedule", "manual", "manual-dry-run"] {
            assert_eq!(wait(by(trigger, now)), Duration::ZERO, "{trigger}");
        }
        let unknown = LastPublish {
            at: now,
            trigger: None,
        };
        assert_eq!(wait(unknown), Duration::ZERO);
        // A publish stamped in the future (clocks apart): no longer than the spacing.
        let ahead = by("route53:CreateHostedZone", now + Duration::from_secs(120));
        assert_eq!(wait(ahead), PUBLISH_SPACING);
    }
}
