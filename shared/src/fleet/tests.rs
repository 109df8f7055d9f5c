use super::table::duration;
use super::*;
use aws_sdk_ssm::types::PingStatus;

fn record(instance_id: &str, generation: u64) -> Record {
    Record {
        instance_id: instance_id.to_owned(),
        generation,
        sha256: String::new(),
        result: ApplyResult::Applied,
        reason: String::new(),
        version_id: "v1".to_owned(),
        at: "2026-11-23T03:14:02Z".to_owned(),
        agent: String::new(),
        apply_id: String::new(),
        path: String::new(),
        path_reason: String::new(),
        unconfirmed: String::new(),
        unresolved_routes: 0,
        addresses: Vec::new(),
    }
}

const LATEST: u64 = 1_795_403_642;
const PUBLISHED: u64 = 1_795_403_700;
const NOW: u64 = 1_795_404_000;
const SILENT_AFTER: u64 = 5_400;

fn against(published: u64, now: u64) -> Against {
    Against {
        latest_generation: LATEST,
        latest_published_at_unix: published,
        now_unix: now,
        silent_after_seconds: SILENT_AFTER,
    }
}

/// The report from the records alone, as when SSM's instance list is missing.
fn records_only(against: Against, records: Vec<Record>) -> FleetReport {
    report(against, records, Listing::Failed("not listed".to_owned()))
}

/// One instance at `generation`: (current, behind_seconds).
fn check(generation: u64, expected: (bool, u64)) {
    let report = records_only(against(PUBLISHED, NOW), vec![record("i-1", generation)]);
    let instance = &report.fleet[0];
    assert_eq!(
        (instance.current, instance.behind_seconds),
        expected,
        "generation {generation}"
    );
}

#[test]
fn an_instance_is_current_at_or_above_the_latest_generation() {
    check(LATEST, (true, 0));
    check(LATEST + 1, (true, 0));
    check(LATEST - 1, (false, 300));
    check(0, (false, 300));
}

#[test]
fn an_apply_that_never_heard_haproxy_is_unknown_and_counted_behind_never_current() {
    let mut silent = record("i-1", 0);
    silent.unconfirmed = "HAProxy did not answer during this run".to_owned();
    let report = records_only(
        against(PUBLISHED, NOW),
        vec![silent, record("i-2", 0), record("i-3", LATEST)],
    );
    let states: Vec<&str> = report.fleet.iter().map(|i| i.state.as_str()).collect();
    // A record of generation 0 without a reason is an instance that runs none: behind.
    assert_eq!(states, ["unknown", "behind", "current"]);
    assert_eq!((report.instances, report.behind), (3, 2));
    assert!(report.table().contains("unknown 5m"), "{}", report.table());
}

#[test]
fn behind_never_goes_negative_when_clocks_disagree() {
    let report = records_only(against(NOW + 10, NOW), vec![record("i-1", 1)]);
    assert_eq!((report.behind, report.max_behind_seconds), (1, 0));
}

#[test]
fn totals_count_the_fleet_and_the_ones_behind() {
    let report = records_only(
        against(PUBLISHED, NOW),
        vec![
            record("i-3", LATEST + 5),
            record("i-1", LATEST - 1),
            record("i-2", LATEST),
        ],
    );
    assert_eq!(
        (report.instances, report.behind, report.max_behind_seconds),
        (3, 1, 300)
    );
    let ids: Vec<&str> = report
        .fleet
        .iter()
        .map(|i| i.record.instance_id.as_str())
        .collect();
    assert_eq!(ids, ["i-1", "i-2", "i-3"]);
}

#[test]
fn a_terminated_instance_goes_silent_and_stops_counting_behind() {
    let heard_at = LATEST;
    let old = record("i-0gone", LATEST - 1);
    let mut fresh = record("i-1", LATEST);
    fresh.at = "2026-11-23T05:00:00Z".to_owned();
    let mut garbled = record("i-0garbled", LATEST - 1);
    garbled.at = "yesterday".to_owned();
    // Just inside the limit it is behind; one second past it, silent.
    for (now, silent) in [
        (heard_at + SILENT_AFTER, false),
        (heard_at + SILENT_AFTER + 1, true),
    ] {
        let report = records_only(against(PUBLISHED, now), vec![old.clone(), fresh.clone()]);
        let gone = &report.fleet[0];
        assert_eq!(gone.silent, silent, "at {now}");
        let expected = if silent {
            (1, 0, 0, 1)
        } else {
            (2, 1, now - PUBLISHED, 0)
        };
        assert_eq!(
            (
                report.instances,
                report.behind,
                report.max_behind_seconds,
                report.silent
            ),
            expected,
            "at {now}"
        );
    }
    let report = records_only(against(PUBLISHED, NOW), vec![garbled]);
    assert_eq!((report.silent, report.behind), (1, 0));
}

#[test]
fn an_empty_fleet_has_nobody_behind() {
    let report = report(
        against(PUBLISHED, NOW),
        Vec::new(),
        Listing::Listed(Vec::new()),
    );
    assert_eq!(
        (report.instances, report.behind, report.max_behind_seconds),
        (0, 0, 0)
    );
    assert!(report.fleet.is_empty());
    assert_eq!(report.join, Join::Joined { managed: 0 });
    assert_eq!(report.table().lines().count(), 1, "the header only");
}

const ARN: &str = "arn:aws:ec2:us-east-1:123456789012:instance/";

#[test]
fn keys_sit_beside_the_config() {
    for (config, prefix_, record_, report_) in [
        (
            "haproxy/haproxy.cfg",
            "haproxy/haproxy.fleet/",
            "haproxy/haproxy.fleet/arn:aws:ec2:us-east-1:123456789012:instance/i-0abc.json",
            "haproxy/haproxy.fleet.json",
        ),
        (
            "haproxy.cfg",
            "haproxy.fleet/",
            "haproxy.fleet/arn:aws:ec2:us-east-1:123456789012:instance/i-0abc.json",
            "haproxy.fleet.json",
        ),
        (
            "a/b/c.cfg",
            "a/b/c.fleet/",
            "a/b/c.fleet/arn:aws:ec2:us-east-1:123456789012:instance/i-0abc.json",
            "a/b/c.fleet.json",
        ),
    ] {
        assert_eq!(prefix(config), prefix_);
        assert_eq!(record_key(config, ARN, "i-0abc"), record_);
        assert_eq!(key_instance(config, record_), Some("i-0abc"));
        assert_eq!(report_key(config), report_);
        assert!(!report_key(config).starts_with(&prefix(config)));
    }
}

#[test]
fn a_record_parses_from_the_documented_json_and_refuses_gaps() {
    let text = r#"{"instance_id": "i-0abc", "generation": 1795403642, "sha256": "",
        "result": "rolled_back", "reason": "reload failed", "version_id": "v9",
        "at": "2026-11-23T03:14:02Z"}"#;
    let parsed: Record = serde_json::from_str(text).unwrap();
    assert_eq!(parsed.result, ApplyResult::RolledBack);
    assert_eq!(parsed.generation, LATEST);
    let round: Record = serde_json::from_value(serde_json::to_value(&parsed).unwrap()).unwrap();
    assert_eq!(round, parsed);
    for broken in [
        r#"{"instance_id": "i-0abc"}"#,
        &text.replace("rolled_back", "exploded"),
        &text.replace("1795403642", "\"1795403642\""),
    ] {
        assert!(serde_json::from_str::<Record>(broken).is_err(), "{broken}");
    }
}

#[test]
fn the_table_has_a_line_per_instance() {
    let mut late = record("i-0late", LATEST - 1);
    late.result = ApplyResult::Rejected;
    late.reason = "haproxy -c refused the config".to_owned();
    let mut gone = record("i-0gone", LATEST - 1);
    gone.at = "2026-11-22T03:14:02Z".to_owned();
    let report = records_only(
        against(NOW - 4_000, NOW),
        vec![
            Record {
                unresolved_routes: 3,
                addresses: Vec::new(),
                ..record("i-0ok", LATEST)
            },
            late,
            gone,
        ],
    );
    let table = report.table();
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 5, "{table}");
    assert!(
        lines[4].starts_with("instance list missing (not listed): the records alone"),
        "{table}"
    );
    assert!(lines[0].starts_with("INSTANCE"), "{table}");
    assert!(lines[0].contains("UNRESOLVED"), "{table}");
    assert!(
        lines[3].split_whitespace().collect::<Vec<_>>()[..5]
            == ["i-0ok", "1795403642", "current", "applied", "3"],
        "routes held until their host resolves: {table}"
    );
    assert!(
        lines[1].starts_with("i-0gone") && lines[1].contains("silent"),
        "{table}"
    );
    assert!(
        lines[2].starts_with("i-0late") && lines[2].contains("behind 1h06m"),
        "{table}"
    );
    assert!(
        lines[2].contains("rejected") && lines[2].contains("  haproxy -c refused"),
        "{table}"
    );
    assert!(
        lines[3].contains("current") && lines[3].contains(" - "),
        "{table}"
    );
}

#[test]
fn durations_read_at_a_glance() {
    for (seconds, text) in [
        (0, "0s"),
        (59, "59s"),
        (60, "1m00s"),
        (245, "4m05s"),
        (11_220, "3h07m"),
        (187_200, "2d04h"),
    ] {
        assert_eq!(duration(seconds), text);
    }
}

/// SSM's view of `id`: its ping status and when it last pinged, `ago` seconds before [`NOW`].
fn managed(id: &str, ping: Option<PingStatus>, ago: Option<u64>) -> Managed {
    Managed {
        instance_id: id.to_owned(),
        ping_status: ping,
        last_ping_unix: ago.map(|ago| NOW - ago),
        registered_unix: None,
        last_association_unix: None,
    }
}

fn online(id: &str) -> Managed {
    managed(id, Some(PingStatus::Online), Some(30))
}

/// A record of `id` at `generation`, written `age` seconds before [`NOW`].
fn aged(id: &str, generation: u64, age: u64) -> Record {
    let at = aws_sdk_s3::primitives::DateTime::from_secs(i64::try_from(NOW - age).unwrap());
    let mut record = record(id, generation);
    record.at = at
        .fmt(aws_sdk_s3::primitives::DateTimeFormat::DateTime)
        .unwrap();
    record
}

/// One instance `i-1` through the join: its record (if any), SSM's list (`None`: the listing
/// failed; `Some(None)`: SSM does not list it) → its state, for how long it has been
/// unhealthy, and whether it counts in `instances` and in `unhealthy_past_limit`.
fn check_join(
    record: Option<Record>,
    listed: Option<Option<Managed>>,
    expected: (State, Option<u64>, u64, u64),
) {
    let case = format!("{record:?} listed as {listed:?}");
    let listing = match listed {
        None => Listing::Failed("AccessDeniedException".to_owned()),
        Some(managed) => Listing::Listed(managed.into_iter().collect()),
    };
    let report = report(
        against(PUBLISHED, NOW),
        record.into_iter().collect(),
        listing,
    );
    let (state, seconds) = match (report.fleet.first(), report.without_record.first()) {
        (Some(i), None) => (i.state, i.unhealthy_seconds),
        (None, Some(u)) => (u.state, u.unhealthy_seconds),
        rows => panic!("one row expected: {rows:?}"),
    };
    assert_eq!(
        (
            state,
            seconds,
            report.instances,
            report.unhealthy_past_limit
        ),
        expected,
        "{case}"
    );
}

#[test]
fn each_instance_gets_its_state_from_its_record_and_ssms_list() {
    use PingStatus as P;
    use State as S;
    let lost = |ago| Some(Some(managed("i-1", Some(P::ConnectionLost), Some(ago))));
    let listed = Some(Some(online("i-1")));
    let old = SILENT_AFTER + 100;
    // Healthy: a fresh record of an instance SSM manages, online.
    check_join(
        Some(aged("i-1", LATEST, 60)),
        listed.clone(),
        (S::Current, Some(0), 1, 0),
    );
    check_join(
        Some(aged("i-1", 1, 60)),
        listed.clone(),
        (S::Behind, Some(0), 1, 0),
    );
    // No record: never reported, for as long as SSM can tell, past the limit when it cannot.
    let mut registered = online("i-1");
    registered.registered_unix = Some(NOW - 600);
    check_join(
        None,
        Some(Some(registered.clone())),
        (S::NeverReported, Some(600), 0, 0),
    );
    registered.last_association_unix = Some(NOW - SILENT_AFTER - 1);
    let past = Some(SILENT_AFTER + 1);
    check_join(None, Some(Some(registered)), (S::NeverReported, past, 0, 1));
    check_join(None, listed.clone(), (S::NeverReported, None, 0, 1));
    // A record older than the limit of an instance SSM still manages: stale.
    check_join(
        Some(aged("i-1", LATEST, old)),
        listed.clone(),
        (S::Stale, Some(old), 0, 1),
    );
    // The agent not online: unreachable since its last ping, record or not.
    check_join(
        Some(aged("i-1", LATEST, 60)),
        lost(300),
        (S::Unreachable, Some(300), 1, 0),
    );
    let gone_quiet = SILENT_AFTER + 1;
    check_join(
        Some(aged("i-1", LATEST, old)),
        lost(gone_quiet),
        (S::Unreachable, past, 0, 1),
    );
    check_join(None, lost(60), (S::Unreachable, Some(60), 0, 0));
    let no_ping = Some(Some(managed("i-1", None, None)));
    check_join(
        Some(aged("i-1", LATEST, 60)),
        no_ping,
        (S::Unreachable, Some(60), 1, 0),
    );
    // Terminated: SSM no longer lists it; its record is listed, never counted.
    check_join(
        Some(aged("i-1", LATEST, old)),
        Some(None),
        (S::Gone, Some(0), 0, 0),
    );
    check_join(
        Some(aged("i-1", 1, 60)),
        Some(None),
        (S::Gone, Some(0), 0, 0),
    );
    // The listing failed: the records alone, as before the join.
    check_join(
        Some(aged("i-1", LATEST, old)),
        None,
        (S::Silent, Some(0), 0, 0),
    );
    check_join(Some(aged("i-1", 1, 60)), None, (S::Behind, Some(0), 1, 0));
}

#[test]
fn the_join_counts_each_state_and_lists_instances_without_a_record() {
    let report = report(
        against(PUBLISHED, NOW),
        vec![
            aged("i-2stale", LATEST, SILENT_AFTER + 1),
            aged("i-1current", LATEST, 60),
            aged("i-4gone", LATEST - 1, 60),
            aged("i-3behind", LATEST - 1, 60),
        ],
        Listing::Listed(vec![
            online("i-1current"),
            online("i-2stale"),
            online("i-3behind"),
            online("i-5new"),
            managed("i-6lost", Some(PingStatus::ConnectionLost), Some(120)),
        ]),
    );
    assert_eq!(report.join, Join::Joined { managed: 5 });
    assert_eq!(
        (
            report.instances,
            report.behind,
            report.max_behind_seconds,
            report.silent,
        ),
        (2, 1, NOW - PUBLISHED, 1),
        "{report:#?}"
    );
    assert_eq!(
        (
            report.never_reported,
            report.stale,
            report.unreachable,
            report.unhealthy_past_limit
        ),
        (1, 1, 1, 2),
        "{report:#?}"
    );
    let ids: Vec<&str> = report
        .without_record
        .iter()
        .map(|u| u.instance_id.as_str())
        .collect();
    assert_eq!(ids, ["i-5new", "i-6lost"]);
    let table = report.table();
    let states: Vec<(&str, &str)> = table
        .lines()
        .skip(1)
        .map(|line| {
            let cells: Vec<&str> = line.split("  ").filter(|c| !c.is_empty()).collect();
            (cells[0].trim(), cells[2].trim())
        })
        .collect();
    assert_eq!(
        states,
        [
            ("i-1current", "current"),
            ("i-2stale", "stale 1h30m"),
            ("i-3behind", "behind 5m00s"),
            ("i-4gone", "gone"),
            ("i-5new", "never reported"),
            ("i-6lost", "unreachable 2m00s"),
        ],
        "{table}"
    );
    assert!(table.contains("SSM agent ConnectionLost"), "{table}");
}

#[test]
fn a_report_reads_back_from_its_json() {
    let report = report(
        against(PUBLISHED, NOW),
        vec![aged("i-1", LATEST, 60)],
        Listing::Listed(vec![online("i-1"), online("i-2")]),
    );
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(
        json["join"],
        serde_json::json!({"status": "joined", "managed": 2})
    );
    assert_eq!(json["fleet"][0]["state"], "current");
    assert_eq!(json["without_record"][0]["state"], "never_reported");
    let back: FleetReport = serde_json::from_value(json).unwrap();
    assert_eq!(back, report);
    let missing = records_only(against(PUBLISHED, NOW), Vec::new());
    assert_eq!(
        serde_json::to_value(&missing).unwrap()["join"],
        serde_json::json!({"status": "missing", "reason": "not listed"})
    );
}

#[test]
fn the_table_ends_with_the_member_accounts_and_names_each_that_is_not_ok() {
    use crate::accounts::{AccountState, State as Account};
    let mut report = records_only(against(PUBLISHED, NOW), vec![record("i-1", LATEST)]);
    let account = |id: &str, state, reason: &str| AccountState {
        account: id.to_owned(),
        state,
        since: "2026-11-25T10:00:00Z".to_owned(),
        reason: reason.to_owned(),
    };
    report.accounts = vec![
        account("111111111111", Account::Ok, ""),
        account(
            "222222222222",
            Account::Failing,
            "AccessDenied on ListHostedZones",
        ),
        account("333333333333", Account::NotOnboarded, "no role"),
        account("444444444444", Account::Ok, ""),
    ];
    let table = report.table();
    assert!(
        table.contains("member accounts: 2 ok, 1 failing, 1 not onboarded, 0 held\n"),
        "{table}"
    );
    assert!(
        table.contains(
            "  222222222222  failing since 2026-11-25T10:00:00Z: AccessDenied on ListHostedZones\n"
        ),
        "{table}"
    );
    assert!(
        table.contains("  333333333333  not_onboarded since"),
        "{table}"
    );
    assert!(!table.contains("111111111111"), "{table}");
    // Without a manifest's accounts, nothing is said of them.
    report.accounts.clear();
    assert!(!report.table().contains("member accounts"));
}

#[test]
fn only_an_instance_arn_under_the_prefix_names_an_instance() {
    let config = "haproxy/haproxy.cfg";
    for (key, instance) in [
        (
            "haproxy/haproxy.fleet/arn:aws-cn:ec2:cn-north-1:123456789012:instance/i-1.json",
            Some("i-1"),
        ),
        // What older agents wrote: no instance may write it any more.
        ("haproxy/haproxy.fleet/i-0abc.json", None),
        (
            "haproxy/haproxy.fleet/arn:aws:ec2:us-east-1:1234:instance/i-1.json",
            None,
        ),
        (
            "haproxy/haproxy.fleet/arn:aws:s3:us-east-1:123456789012:instance/i-1.json",
            None,
        ),
        (
            "haproxy/haproxy.fleet/arn:aws:ec2:us-east-1:123456789012:instance/.json",
            None,
        ),
        (
            "haproxy/haproxy.fleet/x/arn:aws:ec2:us-east-1:123456789012:instance/i-1.json",
            None,
        ),
        (
            "other/arn:aws:ec2:us-east-1:123456789012:instance/i-1.json",
            None,
        ),
    ] {
        assert_eq!(key_instance(config, key), instance, "{key}");
    }
    assert!(is_instance_arn_prefix(ARN));
    for bad in [
        "",
        "arn:aws:ec2:us-east-1:123456789012:instance",
        "arn:aws:ec2::123456789012:instance/",
    ] {
        assert!(!is_instance_arn_prefix(bad), "{bad}");
    }
}
