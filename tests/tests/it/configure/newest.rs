//! Only the newest config is rolled out: an event for a version a later publish replaced sends
//! no command, and a trickle of publishes costs the fleet one rollout per rollout's duration.

use std::sync::Arc;

use autoproxy_tests::timed_fleet::TimedFleet;

use super::*;

#[tokio::test(flavor = "multi_thread")]
async fn an_event_for_a_replaced_version_sends_no_command() {
    let fx = fixture(&[]).await;
    let replaced = put_config(&fx, KEY, 1).await;
    let current = put_config(&fx, KEY, 2).await;
    let outcome = roll_out(&fx, &s3_event(KEY, &replaced)).await.unwrap();
    let sent = commands(&fx).await;
    assert!(
        sent.is_empty(),
        "a command was sent for a version a later one replaced: {sent:?}"
    );
    let reply = serde_json::to_value(&outcome).unwrap();
    assert_eq!(reply["dispatched"], json!([]), "{reply}");
    assert_eq!(
        reply["superseded"],
        json!([{"version_id": replaced, "generation": "1", "current_version_id": current}]),
        "{reply}"
    );

    // The current version's own event rolls it out.
    let outcome = roll_out(&fx, &s3_event(KEY, &current)).await.unwrap();
    assert_eq!(outcome.dispatched.len(), 1, "{outcome:?}");
    assert_eq!(outcome.dispatched[0].version_id, current);
    assert_eq!(commands(&fx).await.len(), 1);
}

/// Publishes this many configs, one lone change after another.
const CHANGES: u32 = 20;
/// Between two publishes: 3 s in production, compressed tenfold. Only its ratio to a rollout's
/// duration counts: the function compares versions, it keeps no timer.
const SPACING: Duration = Duration::from_millis(300);
/// One instance's apply (two instances: a rollout of 0.8 s, longer than the spacing).
const APPLY: Duration = Duration::from_millis(400);

/// 20 publishes 0.3 s apart, each announced to one configure execution at a time (reserved
/// concurrency 1: events wait their turn, as Lambda's async queue holds them), against a fleet
/// whose rollout takes 0.8 s: every command is sent after the one before has ended, so at most
/// one per rollout's duration of the trickle, plus the first and the last; and every instance
/// ends on the newest version.
#[tokio::test(flavor = "multi_thread")]
async fn a_trickle_of_changes_costs_a_bounded_number_of_rollouts() {
    let fx = fixture(&[]).await;
    let fleet = TimedFleet::new(&["i-0aaaaaaaaaaaaaaa1", "i-0aaaaaaaaaaaaaaa2"], APPLY);
    let deps = Arc::new(Deps {
        ssm: fleet.client(),
        ..fx.deps.clone()
    });
    let (events, mut waiting) = tokio::sync::mpsc::unbounded_channel::<Value>();
    let worker = {
        let deps = deps.clone();
        tokio::spawn(async move {
            let mut replies = Vec::new();
            while let Some(event) = waiting.recv().await {
                let until = tokio::time::Instant::now() + Duration::from_secs(60);
                replies.push(handler::handle(&deps, &event, until).await);
            }
            replies
        })
    };
    let mut versions = Vec::new();
    for generation in 1..=CHANGES {
        let version = put_config(&fx, KEY, u64::from(generation)).await;
        events.send(s3_event(KEY, &version)).unwrap();
        versions.push(version);
        tokio::time::sleep(SPACING).await;
    }
    drop(events);
    let replies = worker.await.unwrap();
    for reply in &replies {
        assert!(reply.is_ok(), "{reply:?}");
    }

    let trickle = SPACING * (CHANGES - 1);
    let bound = 2 + trickle.as_millis().div_ceil(fleet.rollout().as_millis());
    let sent = fleet.commands();
    assert!(
        sent as u128 <= bound,
        "{sent} rollouts for {CHANGES} changes {SPACING:?} apart; at most {bound} expected \
         (one per {:?} rollout of the {trickle:?} trickle, the first and the last)",
        fleet.rollout()
    );
    // One instance applies at a time, across commands too.
    let mut applies = fleet.applies();
    applies.sort_by_key(|a| a.start);
    for pair in applies.windows(2) {
        assert!(
            pair[1].start >= pair[0].end,
            "overlapping applies: {pair:?}"
        );
    }
    let newest = versions.last().unwrap().clone();
    let rank = |version: &str| versions.iter().position(|v| v == version).unwrap_or(0);
    let installed = fleet.installed(rank);
    assert_eq!(installed.len(), 2, "{installed:?}");
    for (instance, version) in &installed {
        assert_eq!(
            version, &newest,
            "{instance} did not end on the newest version"
        );
    }
    eprintln!("{sent} rollouts for {CHANGES} changes {SPACING:?} apart (bound {bound})");
}
