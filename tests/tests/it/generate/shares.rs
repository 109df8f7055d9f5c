//! Each account's share of an event run, against moto with the real generator: a run of the
//! event queue ends within its deadline, reads at most a bounded number of one account's
//! zones, and what it did not read is kept pending in the manifest and read first by the next
//! run, so one member's mass change delays another's change by no more than one run and loses
//! nothing (docs/ARCHITECTURE.md, "Generator events").

use autoproxy_generate::handler::{BatchReply, Invocation, Reply, function_handler, handle};
use futures_util::StreamExt;
use lambda_runtime::{Context, LambdaEvent};

use super::*;

/// The mass change: zones of member A changed by one apply.
const MASS: usize = 150;
/// The Lambda deadline of the run that takes the mass change.
const DEADLINE: Duration = Duration::from_secs(40);

/// A record change event of `zone`, as an SQS record of the mapping's batch.
fn record(message_id: &str, account: &str, zone_id: &str) -> Value {
    let body = event("change-resource-record-sets.json", account, zone_id);
    json!({"messageId": message_id, "eventSource": "aws:sqs", "body": body.to_string()})
}

/// `count` empty zones of `account`, known to the manifest after a first (fast) sweep.
async fn empty_zones(account: &Account, count: usize, label: &str) -> Vec<Seeded> {
    let specs = (0..count)
        .map(|i| ZoneSpec::private(format!("c{i:03}.{label}.internal"), vec![]))
        .collect();
    account.seed(specs, DEFAULT_PARALLELISM).await.unwrap()
}

/// Gives every zone its API pair, as one apply over them would.
async fn route_all(account: &Account, zones: &[Seeded]) {
    let changes = zones.iter().map(|zone| async move {
        let pair = api_pair(&zone.name, PROXY);
        account.upsert(&zone.id, &pair).await
    });
    let changed = futures_util::stream::iter(changes)
        .buffer_unordered(DEFAULT_PARALLELISM)
        .collect::<Vec<_>>()
        .await;
    for result in changed {
        result.unwrap();
    }
}

/// The zones the stored manifest keeps pending.
async fn pending(deps: &Deps) -> Vec<String> {
    let manifest = deps.store.manifest(&deps.settings.routing_rules).await;
    let manifest = manifest.unwrap().expect("a stored manifest");
    manifest.pending.into_iter().collect()
}

fn batch_reply(reply: Reply) -> BatchReply {
    match reply {
        Reply::Batch(reply) => *reply,
        other => panic!("a batch answered as another kind: {other:?}"),
    }
}

/// Runs the event queue's next batches (one change of member B each, fast pacing) until the
/// manifest keeps nothing pending: how many runs that took.
async fn replay(deps: &Deps, b_zone: &Seeded) -> usize {
    for runs in 1..=5 {
        let payload = json!({"Records": [record(&format!("next-{runs}"), MEMBER_B, &b_zone.id)]});
        let invocation = Invocation::parse(&payload).unwrap();
        let reply = batch_reply(handle(deps, invocation, None).await.unwrap());
        assert_eq!(reply.response.batch_item_failures, vec![]);
        if pending(deps).await.is_empty() {
            return runs;
        }
    }
    panic!("still pending after 5 runs: {:?}", pending(deps).await);
}

/// One apply changes 150 zones of member A; member B changes one. Their 151 events arrive in
/// one batch, Route53 answers 2 calls a second, and the invocation has 40 s: the run answers
/// in time, B's change is published in it, and A's zones the run did not reach are pending,
/// read by the next runs until every route of A is published.
#[tokio::test(flavor = "multi_thread")]
async fn a_mass_change_of_one_account_delays_another_by_no_run() {
    let estate = Estate::start().await;
    let a_zones = empty_zones(&estate.a, MASS, "mass").await;
    let b_zone = empty_zones(&estate.b, 1, "other").await.remove(0);
    let fast = estate.deps(&[]).await;
    run(&fast, &json!({}), AT).await;
    route_all(&estate.a, &a_zones).await;
    route_all(&estate.b, std::slice::from_ref(&b_zone)).await;

    let slow = estate.deps(&[("ROUTE53_REQUESTS_PER_SECOND", "2")]).await;
    let mut records: Vec<Value> = a_zones
        .iter()
        .enumerate()
        .map(|(i, zone)| record(&format!("a{i}"), MEMBER_A, &zone.id))
        .collect();
    records.push(record("b", MEMBER_B, &b_zone.id));
    let mut context = Context::default();
    let deadline = std::time::SystemTime::now() + DEADLINE;
    context.deadline = u64::try_from(
        deadline
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap();
    let started = Instant::now();
    let invocation = LambdaEvent::new(json!({ "Records": records }), context);
    let answer = tokio::time::timeout(DEADLINE, function_handler(&slow, invocation)).await;
    let took = started.elapsed();
    let reply = batch_reply(
        answer
            .unwrap_or_else(|_| panic!("the run did not answer within its {DEADLINE:?} deadline"))
            .unwrap(),
    );
    println!(
        "{MASS} zones of one account and one of another at 2 calls/s: answered in {took:?}, \
         {} zone(s) read",
        reply.summary.zones_scanned
    );
    assert_eq!(reply.response.batch_item_failures, vec![]);
    assert!(reply.summary.published, "{:#?}", reply.summary);
    let routed = snis(&estate.artifact().await.text);
    assert!(
        routed.contains(&api_sni(&b_zone.name)),
        "B's change is not in the run's config: {routed:?}"
    );
    let left = pending(&slow).await;
    println!("{} zone(s) of A left pending", left.len());
    assert!(!left.is_empty() && left.iter().all(|key| key.starts_with(MEMBER_A)));

    let runs = replay(&fast, &b_zone).await;
    let routed = snis(&estate.artifact().await.text);
    for zone in &a_zones {
        assert!(
            routed.contains(&api_sni(&zone.name)),
            "{} lost after {runs} more run(s)",
            zone.name
        );
    }
    assert_eq!(routed.len(), MASS + 1, "{routed:?}");
}

/// An event run under a time budget stops reading when it runs out, publishes what it read,
/// and keeps the rest pending for the next run.
#[tokio::test(flavor = "multi_thread")]
async fn an_event_run_stops_reading_at_its_budget() {
    let estate = Estate::start().await;
    let zones = empty_zones(&estate.a, 24, "budget").await;
    let fast = estate.deps(&[]).await;
    run(&fast, &json!({}), AT).await;
    route_all(&estate.a, &zones).await;
    // 20 calls a second: one known zone costs one call, so 0.5 s reads about ten.
    let paced = estate.deps(&[("ROUTE53_REQUESTS_PER_SECOND", "20")]).await;
    let records: Vec<Value> = zones
        .iter()
        .enumerate()
        .map(|(i, zone)| record(&format!("m{i}"), MEMBER_A, &zone.id))
        .collect();
    let budget = tokio::time::Instant::now() + Duration::from_millis(500);
    let started = Instant::now();
    let payload = json!({ "Records": records });
    let invocation = Invocation::parse(&payload).unwrap();
    let reply = batch_reply(handle(&paced, invocation, Some(budget)).await.unwrap());
    let took = started.elapsed();
    let read = reply.summary.zones_scanned;
    let left = pending(&paced).await;
    println!(
        "a 0.5 s budget: {read} zone(s) read in {took:?}, {} pending",
        left.len()
    );
    assert!(took < Duration::from_secs(3), "{took:?}");
    assert!(read > 0 && read < zones.len(), "{read} read");
    assert_eq!(read + left.len(), zones.len(), "{left:?}");
    assert!(reply.summary.published);

    let b_zone = empty_zones(&estate.b, 1, "other").await.remove(0);
    replay(&fast, &b_zone).await;
    let routed = snis(&estate.artifact().await.text);
    assert_eq!(routed.len(), zones.len(), "{routed:?}");
}
