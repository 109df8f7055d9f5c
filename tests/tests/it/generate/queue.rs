//! The Route53 event queue on moto (SQS, Route53, S3) with the real generator: one batch is
//! one run that reads each named zone once and publishes once, and a member's burst, delivered
//! by the event source mapping as AWS documents it, costs a few runs and publishes while
//! another account's change still goes out within a minute.

use std::sync::{Arc, Mutex};

use autoproxy_generate::handler::{Invocation, Reply, handle};
use autoproxy_generate::queue::{BURST_WINDOW, DRAIN_LIMIT, PUBLISH_SPACING};
use aws_sdk_sqs::types::{
    DeleteMessageBatchRequestEntry, QueueAttributeName, SendMessageBatchRequestEntry,
};

use super::*;

/// The ingress zones of the burst, each its own cluster's.
const ZONES: usize = 20;

/// Round `round` of a burst in `zone`: even rounds give the zone its API route, odd ones take
/// it away (its front record deleted), so whether a zone routes its API in the final config
/// tells whether its last change was read.
async fn change(account: &Account, zone: &Seeded, round: usize) {
    let pair = api_pair(&zone.name, PROXY);
    if round.is_multiple_of(2) {
        account.upsert(&zone.id, &pair).await.unwrap();
    } else {
        account.delete_records(&zone.id, &pair[1..]).await.unwrap();
    }
}

/// `ZONES` ingress zones in the own account (the bursting member), one empty zone in member A
/// (its cluster comes during the burst).
async fn burst_estate() -> (Estate, Vec<Seeded>, Seeded) {
    let estate = Estate::start().await;
    let specs = (0..ZONES)
        .map(|i| {
            let name = format!("c{i:02}.burst.example.internal");
            let records = ingress_pair(&name, PROXY, Wildcard::Literal);
            ZoneSpec::private(name, records)
        })
        .collect();
    let zones = estate.own.seed(specs, DEFAULT_PARALLELISM).await.unwrap();
    let other = estate
        .a
        .seed_zone(ZoneSpec::private("quiet.example.internal", vec![]))
        .await
        .unwrap();
    (estate, zones, other)
}

/// A record change event of `zone`, as an SQS record of the mapping's batch.
fn record(message_id: &str, account: &str, zone_id: &str) -> Value {
    let body = event("change-resource-record-sets.json", account, zone_id);
    json!({"messageId": message_id, "eventSource": "aws:sqs", "body": body.to_string()})
}

async fn batch_run(deps: &Deps, payload: &Value) -> autoproxy_generate::handler::BatchReply {
    let invocation = Invocation::parse(payload).unwrap();
    match handle(deps, invocation, None).await {
        Ok(Reply::Batch(reply)) => *reply,
        Ok(other) => panic!("a batch answered as another kind: {other:?}"),
        Err(err) => panic!("the batch failed: {err}"),
    }
}

/// Changes each zone of `group` and runs the batch of their events (message ids `m{n}-…`).
async fn changes_run(estate: &Estate, deps: &Deps, n: usize, group: &[Seeded]) -> Summary {
    let mut records = Vec::new();
    for zone in group {
        change(&estate.own, zone, 0).await;
        records.push(record(&format!("m{n}-{}", zone.id), OWN_ACCOUNT, &zone.id));
    }
    batch_run(deps, &json!({ "Records": records }))
        .await
        .summary
}

/// One batch of 500 records naming 20 zones: one run, one Route53 read per zone (no listing),
/// one publish, and every zone's last change in it.
#[tokio::test]
async fn one_batch_of_500_records_is_one_run() {
    let (estate, zones, _) = burst_estate().await;
    let deps = estate.deps(&[]).await;
    run(&deps, &json!({}), AT).await;
    let versions_before = estate.versions(KEY).await;
    for zone in &zones {
        change(&estate.own, zone, 0).await;
    }
    let records: Vec<Value> = (0..500)
        .map(|i| record(&format!("m{i}"), OWN_ACCOUNT, &zones[i % ZONES].id))
        .collect();
    let calls_before = calls(&deps);
    let reply = batch_run(&deps, &json!({ "Records": records })).await;

    let summary = &reply.summary;
    assert_eq!(reply.response.batch_item_failures, vec![]);
    let queue = summary.queue.clone().unwrap();
    assert_eq!((queue.records, queue.refused), (500, 0));
    assert_eq!(summary.zones_scanned, ZONES);
    assert_eq!(
        calls(&deps) - calls_before,
        ZONES as u64,
        "one read per zone"
    );
    assert!(summary.published, "{summary:?}");
    assert_eq!(
        estate.versions(KEY).await,
        versions_before + 1,
        "one publish"
    );
    // The run before was a manual one: the first event run after it waits for nothing.
    assert_eq!(queue.waited_ms, 0);
    assert_every_api_routed(&estate, &zones).await;
}

/// A lone change waits only for the burst window, even right after an event run's publish; a
/// burst right after one waits out the rest of the spacing, then publishes.
#[tokio::test]
async fn a_lone_change_waits_for_no_spacing_a_burst_does() {
    let (estate, zones, _) = burst_estate().await;
    let url = queue(&estate).await;
    let deps = estate.deps(&[("EVENT_QUEUE_URL", url.as_str())]).await;
    run(&deps, &json!({}), AT).await;
    let mut waits = Vec::new();
    for (n, group) in [&zones[0..1], &zones[1..2], &zones[2..4]]
        .into_iter()
        .enumerate()
    {
        let summary = changes_run(&estate, &deps, n, group).await;
        assert!(summary.published, "{summary:?}");
        let routed = snis(&estate.artifact().await.text);
        assert!(
            group
                .iter()
                .all(|zone| routed.contains(&api_sni(&zone.name)))
        );
        waits.push(Duration::from_millis(summary.queue.unwrap().waited_ms));
    }
    // Two lone changes: the window each, no spacing; then a burst of two: the spacing.
    assert_eq!(waits[..2], [BURST_WINDOW, BURST_WINDOW], "{waits:?}");
    let burst = waits[2];
    assert!(
        burst > PUBLISH_SPACING - Duration::from_secs(5) && burst <= PUBLISH_SPACING,
        "{waits:?}"
    );
}

/// Without a queue (`EVENT_QUEUE_URL` empty) nothing can join a batch: a burst right after
/// an event run's publish is read at once, with no spacing to wait out.
#[tokio::test]
async fn without_a_queue_a_burst_waits_for_nothing() {
    let (estate, zones, _) = burst_estate().await;
    let deps = estate.deps(&[]).await;
    run(&deps, &json!({}), AT).await;
    for (n, group) in zones[..4].chunks(2).enumerate() {
        let summary = changes_run(&estate, &deps, n, group).await;
        assert!(summary.published, "{summary:?}");
        let waited = summary.queue.unwrap().waited_ms;
        assert_eq!(waited, 0, "burst {n} waited {waited} ms");
    }
}

/// A run takes at most its drain limit ([`DRAIN_LIMIT`]; here 20, as SQS on moto is slow over
/// thousands of messages) from the queue in all, however many takes it makes: a burst right
/// after an event run's publish takes what waits, waits out the spacing and takes again, and
/// the second take gets only what is left of the limit. What it did not take stays in the
/// queue for the next run.
#[tokio::test]
async fn a_run_takes_at_most_the_drain_limit_across_its_takes() {
    let (estate, zones, _) = burst_estate().await;
    let sqs = aws_sdk_sqs::Client::new(&estate.sdk);
    let url = queue(&estate).await;
    let mut deps = estate.deps(&[("EVENT_QUEUE_URL", url.as_str())]).await;
    let limit = 20;
    assert!(limit < DRAIN_LIMIT);
    deps.queue = deps.queue.map(|queue| queue.with_drain_limit(limit));
    run(&deps, &json!({}), AT).await;
    // An event run's publish: the burst below waits out the spacing, then takes again.
    change(&estate.own, &zones[0], 0).await;
    let lone = record("lone", OWN_ACCOUNT, &zones[0].id);
    let summary = batch_run(&deps, &json!({ "Records": [lone] }))
        .await
        .summary;
    assert!(summary.published, "{summary:?}");
    let waiting = limit + 10;
    let body = event(
        "change-resource-record-sets.json",
        OWN_ACCOUNT,
        &zones[1].id,
    )
    .to_string();
    for chunk in 0..waiting.div_ceil(10) {
        let entries = (chunk * 10..waiting.min(chunk * 10 + 10)).map(|i| {
            SendMessageBatchRequestEntry::builder()
                .id(format!("e{i}"))
                .message_body(&body)
                .build()
                .unwrap()
        });
        sqs.send_message_batch()
            .queue_url(&url)
            .set_entries(Some(entries.collect()))
            .send()
            .await
            .unwrap();
    }
    let burst: Vec<Value> = (1..3)
        .map(|i| record(&format!("b{i}"), OWN_ACCOUNT, &zones[i].id))
        .collect();
    let reply = batch_run(&deps, &json!({ "Records": burst })).await;

    let queue = reply.summary.queue.clone().unwrap();
    assert!(queue.waited_ms > 0, "{queue:?}: no second take");
    assert!(
        queue.drained <= limit,
        "a run took {} messages, more than its drain limit ({limit})",
        queue.drained
    );
    let left = sqs
        .get_queue_attributes()
        .queue_url(&url)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
        .send()
        .await
        .unwrap();
    let left = left
        .attributes()
        .and_then(|a| a.get(&QueueAttributeName::ApproximateNumberOfMessages))
        .cloned()
        .unwrap_or_default();
    assert_eq!(left, (waiting - queue.drained).to_string(), "{queue:?}");
}

/// A queue for the generator to drain, as the stack's `Route53EventsQueue`.
async fn queue(estate: &Estate) -> String {
    aws_sdk_sqs::Client::new(&estate.sdk)
        .create_queue()
        .queue_name("route53-events")
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap()
}

/// What the harness's event source mapping saw of one run.
#[derive(Debug, Clone)]
struct Run {
    started: Instant,
    ended: Instant,
    published: bool,
    events: usize,
}

/// The SQS event source mapping as AWS documents it for this queue's settings (template.yaml:
/// `BatchSize` 10, no batching window, `MaximumConcurrency` 2, `ReportBatchItemFailures`):
/// two pollers each receive up to ten messages with long polling and invoke at once; the
/// function's one reserved execution throttles the second, which the mapping retries until
/// the first run ends (here: it waits on the same lock). A record the function reports as
/// failed is left in the queue; the others are deleted.
async fn poller(deps: Arc<Deps>, sqs: aws_sdk_sqs::Client, url: String, state: Arc<Polling>) {
    while !state.stop.load(std::sync::atomic::Ordering::SeqCst) {
        let received = sqs
            .receive_message()
            .queue_url(&url)
            .max_number_of_messages(10)
            .wait_time_seconds(1)
            .visibility_timeout(5400)
            .send()
            .await;
        // A mapping's poller retries a failed receive. moto, under concurrent calls, now and
        // then answers one with a 500 of its own ("Set changed size during iteration").
        let received = match received {
            Ok(received) => received,
            Err(err) => {
                eprintln!(
                    "poller: receive failed, again: {}",
                    autoproxy::aws_error::reason(&err)
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let messages = received.messages.unwrap_or_default();
        if messages.is_empty() {
            continue;
        }
        let records: Vec<Value> = messages
            .iter()
            .map(|m| {
                json!({"messageId": m.message_id(), "receiptHandle": m.receipt_handle(),
                       "eventSource": "aws:sqs", "body": m.body()})
            })
            .collect();
        let _execution = state.reserved.lock().await;
        let started = Instant::now();
        let reply = batch_run(&deps, &json!({ "Records": records })).await;
        let ended = Instant::now();
        let failed: Vec<&str> = reply
            .response
            .batch_item_failures
            .iter()
            .map(|f| f.item_identifier.as_str())
            .collect();
        let entries: Vec<DeleteMessageBatchRequestEntry> = messages
            .iter()
            .filter(|m| !failed.contains(&m.message_id().unwrap_or_default()))
            .enumerate()
            .map(|(i, m)| {
                DeleteMessageBatchRequestEntry::builder()
                    .id(format!("d{i}"))
                    .receipt_handle(m.receipt_handle().unwrap())
                    .build()
                    .unwrap()
            })
            .collect();
        if !entries.is_empty() {
            sqs.delete_message_batch()
                .queue_url(&url)
                .set_entries(Some(entries))
                .send()
                .await
                .unwrap();
        }
        let queue = reply.summary.queue.clone().unwrap_or_default();
        state.runs.lock().unwrap().push(Run {
            started,
            ended,
            published: reply.summary.published,
            events: queue.records + queue.drained,
        });
    }
}

#[derive(Debug, Default)]
struct Polling {
    stop: std::sync::atomic::AtomicBool,
    /// The function's one reserved execution.
    reserved: tokio::sync::Mutex<()>,
    runs: Mutex<Vec<Run>>,
}

/// What EventBridge puts in the queue for a change of `zone_id`.
async fn send_event(sqs: &aws_sdk_sqs::Client, url: &str, account: &str, zone_id: &str) {
    let body = event("change-resource-record-sets.json", account, zone_id);
    sqs.send_message()
        .queue_url(url)
        .message_body(body.to_string())
        .send()
        .await
        .unwrap();
}

/// A burst of 500 changes in 60 s across one member's 20 zones, and one change of another
/// member in the middle of it: the other change publishes within 60 s, the burst costs at most
/// 20 runs and 5 publishes, and every zone's last change is in the final config.
#[tokio::test]
async fn a_members_burst_costs_a_few_runs_and_others_wait_little() {
    let (estate, zones, other) = burst_estate().await;
    let sqs = aws_sdk_sqs::Client::new(&estate.sdk);
    let url = queue(&estate).await;
    // Half the routes come and go at once: not what the mass-deletion guard is for here.
    let settings = [
        ("EVENT_QUEUE_URL", url.as_str()),
        ("MAX_RULE_DROP_PERCENT", "100"),
    ];
    let deps = Arc::new(estate.deps(&settings).await);
    run(&deps, &json!({}), AT).await;
    let versions_before = estate.versions(KEY).await;
    let state = Arc::new(Polling::default());
    let pollers: Vec<_> = (0..2)
        .map(|_| {
            let (deps, sqs, url, state) = (deps.clone(), sqs.clone(), url.clone(), state.clone());
            tokio::spawn(poller(deps, sqs, url, state))
        })
        .collect();

    let start = Instant::now();
    let mut other_sent = start;
    for i in 0..500 {
        tokio::time::sleep_until((start + Duration::from_millis(120 * i as u64)).into()).await;
        let zone = &zones[i % ZONES];
        change(&estate.own, zone, i / ZONES).await;
        send_event(&sqs, &url, OWN_ACCOUNT, &zone.id).await;
        if i == 250 {
            let cluster = api_pair(&other.name, PROXY);
            estate.a.upsert(&other.id, &cluster).await.unwrap();
            send_event(&sqs, &url, MEMBER_A, &other.id).await;
            other_sent = Instant::now();
        }
    }
    let burst_ms = start.elapsed().as_millis();
    let other_published = settle(&estate, &zones, &api_sni(&other.name), &state).await;
    state.stop.store(true, std::sync::atomic::Ordering::SeqCst);
    for poller in pollers {
        poller.await.unwrap();
    }
    let runs = state.runs.lock().unwrap().clone();
    let publishes = estate.versions(KEY).await - versions_before;
    let events: usize = runs.iter().map(|r| r.events).sum();
    let other_latency = other_published.map(|at| at - other_sent);
    report(burst_ms, &runs, publishes, other_latency);
    let other_latency = other_latency.expect("the other account's change never published");
    assert!(
        other_latency <= Duration::from_secs(60),
        "{other_latency:?}"
    );
    assert!(runs.len() <= 20, "{} runs", runs.len());
    assert!(publishes <= 5, "{publishes} publishes");
    assert_eq!(events, 501, "every event taken once");
    // The last round gives every zone its API route.
    assert_every_api_routed(&estate, &zones).await;
}

/// The published config routes the API of each of `zones`: its last change was read.
async fn assert_every_api_routed(estate: &Estate, zones: &[Seeded]) {
    let routed = snis(&estate.artifact().await.text);
    for zone in zones {
        let sni = api_sni(&zone.name);
        assert!(
            routed.contains(&sni),
            "{}: its last change is missing",
            zone.name
        );
    }
}

/// Waits (a minute at most) until the config routes every burst zone's last change and the
/// other account's name, and no run is going on; when the other name was first served.
async fn settle(
    estate: &Estate,
    zones: &[Seeded],
    other_sni: &str,
    state: &Polling,
) -> Option<Instant> {
    let mut other_published = None;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let routed = snis(&estate.artifact().await.text);
        let done = zones
            .iter()
            .all(|zone| routed.contains(&api_sni(&zone.name)));
        if other_published.is_none() && routed.iter().any(|sni| sni == other_sni) {
            other_published = Some(Instant::now());
        }
        let idle = state.reserved.try_lock().is_ok();
        if (done && idle && other_published.is_some()) || Instant::now() > deadline {
            return other_published;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The burst's figures, printed.
fn report(burst_ms: u128, runs: &[Run], publishes: usize, other: Option<Duration>) {
    let events: usize = runs.iter().map(|r| r.events).sum();
    let busiest = runs.iter().map(|r| r.events).max().unwrap_or(0);
    let longest = runs
        .iter()
        .map(|r| r.ended - r.started)
        .max()
        .unwrap_or_default();
    println!(
        "burst: 500 events in {burst_ms} ms; {} runs ({} publishing), {publishes} publishes, \
         {events} events taken, at most {busiest} in a run, longest run {longest:?}; the other \
         account's change served {other:?} after its event",
        runs.len(),
        runs.iter().filter(|r| r.published).count()
    );
}
