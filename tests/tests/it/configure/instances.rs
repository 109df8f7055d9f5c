//! The fleet report joined with the instances SSM manages under the target tag.
//!
//! moto does not implement `DescribeInstanceInformation` (it answers HTTP 500), so SSM here is
//! `aws-smithy-mocks`, the SDK's own test tool: an interceptor that answers the real client's
//! calls with the modelled output, or with an HTTP error the SDK's own deserialiser reads, so
//! the paginator, the filter the function sends and its error handling all run as they would
//! against AWS. The records are real objects in moto's S3, read by the function itself.

use autoproxy_tests::timed_fleet::ssm_answering;
use aws_sdk_ssm::operation::describe_instance_information::DescribeInstanceInformationOutput;
use aws_sdk_ssm::primitives::DateTime;
use aws_sdk_ssm::types::{InstanceInformation, PingStatus};
use aws_smithy_mocks::{Rule, mock};

use super::*;
use autoproxy::fleet::{FleetReport, State};

/// Whether a request lists the target tag's instances: `tag:Role` = `peering-proxy`.
fn filters_on_the_tag(
    input: &aws_sdk_ssm::operation::describe_instance_information::DescribeInstanceInformationInput,
) -> bool {
    input
        .filters()
        .iter()
        .any(|f| f.key() == "tag:Role" && f.values() == ["peering-proxy"])
}

/// Page `token` of the listing (`None`: the first), answered with `instances` and a token to
/// `next` when there is one.
fn page(token: Option<&str>, instances: Vec<InstanceInformation>, next: Option<&str>) -> Rule {
    let token = token.map(str::to_owned);
    let next = next.map(str::to_owned);
    mock!(aws_sdk_ssm::Client::describe_instance_information)
        .match_requests(move |input| {
            filters_on_the_tag(input) && input.next_token() == token.as_deref()
        })
        .then_output(move || {
            DescribeInstanceInformationOutput::builder()
                .set_instance_information_list(Some(instances.clone()))
                .set_next_token(next.clone())
                .build()
        })
}

/// Page `token` answered with an HTTP error whose body names `error` as AWS spells it.
fn failing_page(token: Option<&str>, status: u16, error: &str) -> Rule {
    let token = token.map(str::to_owned);
    let body = json!({"__type": error, "message": format!("{error} (a test)")}).to_string();
    mock!(aws_sdk_ssm::Client::describe_instance_information)
        .match_requests(move |input| input.next_token() == token.as_deref())
        .sequence()
        .http_status(status, Some(body))
        .build()
}

/// What SSM says of one instance, last pinged `ago` seconds ago.
fn instance(id: &str, ping: PingStatus, ago: u64) -> InstanceInformation {
    let now = std::time::SystemTime::now();
    let pinged = now - Duration::from_secs(ago);
    InstanceInformation::builder()
        .instance_id(id)
        .ping_status(ping)
        .last_ping_date_time(DateTime::from(pinged))
        .build()
}

/// Records in moto's S3 (`at` as written; `None`: now), the latest config at generation 8,
/// then the report with SSM answered by `rules`.
async fn report_with(records: &[(&str, u64, Option<&str>)], rules: &[&Rule]) -> FleetReport {
    let fx = fixture(&[("CONFIG_BUCKET", BUCKET)]).await;
    put_config(&fx, KEY, 8).await;
    for (id, generation, at) in records {
        let record = match at {
            Some(at) => fleet_record_at(id, *generation, "applied", "", at),
            None => fleet_record(id, *generation, "applied", ""),
        };
        put_text(&fx, &record_key(id), record).await;
    }
    let deps = Deps {
        ssm: ssm_answering(rules),
        ..fx.deps.clone()
    };
    let reply = handler::handle(&deps, &fleet_request(), soon())
        .await
        .unwrap();
    let Reply::Fleet(report) = reply else {
        panic!("not a fleet report: {reply:?}");
    };
    // What the function wrote beside the config is what it returned.
    let written: FleetReport = written_report(&fx.deps).await;
    assert_eq!(written, report);
    report
}

/// The state of each instance, records and instances without one, by instance id.
fn states(report: &FleetReport) -> Vec<(String, State)> {
    let mut states: Vec<(String, State)> = report
        .fleet
        .iter()
        .map(|i| (i.record.instance_id.clone(), i.state))
        .chain(
            report
                .without_record
                .iter()
                .map(|u| (u.instance_id.clone(), u.state)),
        )
        .collect();
    states.sort_by(|a, b| a.0.cmp(&b.0));
    states
}

fn owned(states: &[(&str, State)]) -> Vec<(String, State)> {
    states
        .iter()
        .map(|(id, s)| ((*id).to_owned(), *s))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn an_instance_ssm_manages_that_wrote_no_record_is_never_reported() {
    // Over two pages: the paginator follows SSM's token.
    let first = page(
        None,
        vec![instance("i-0applied", PingStatus::Online, 30)],
        Some("page-2"),
    );
    let second = page(
        Some("page-2"),
        vec![instance("i-0silent", PingStatus::Online, 30)],
        None,
    );
    let report = report_with(&[("i-0applied", 8, None)], &[&first, &second]).await;
    assert_eq!(report.join, Join::Joined { managed: 2 });
    assert_eq!(
        states(&report),
        owned(&[
            ("i-0applied", State::Current),
            ("i-0silent", State::NeverReported)
        ])
    );
    assert_eq!(report.without_record[0].ping_status, "Online");
    // SSM tells no registration or association time: counted past the limit.
    assert_eq!(report.without_record[0].unhealthy_seconds, None);
    assert_eq!(
        (
            report.instances,
            report.never_reported,
            report.unhealthy_past_limit
        ),
        (1, 1, 1)
    );
    assert!(
        report.table().contains("never reported"),
        "{}",
        report.table()
    );
    assert_eq!((first.num_calls(), second.num_calls()), (1, 1));
}

#[tokio::test(flavor = "multi_thread")]
async fn an_old_record_of_an_instance_ssm_still_manages_is_stale() {
    let listed = page(
        None,
        vec![
            instance("i-0stale", PingStatus::Online, 30),
            instance("i-0fresh", PingStatus::Online, 30),
        ],
        None,
    );
    let report = report_with(
        &[
            ("i-0stale", 7, Some("2020-01-01T00:00:00Z")),
            ("i-0fresh", 8, None),
        ],
        &[&listed],
    )
    .await;
    assert_eq!(
        states(&report),
        owned(&[("i-0fresh", State::Current), ("i-0stale", State::Stale)])
    );
    assert_eq!(
        (report.instances, report.behind, report.silent, report.stale),
        (1, 0, 1, 1)
    );
    assert_eq!(report.unhealthy_past_limit, 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_instance_whose_agent_is_offline_is_unreachable() {
    let listed = page(
        None,
        vec![
            instance("i-0lost", PingStatus::ConnectionLost, 7_200),
            instance("i-0lostnew", PingStatus::ConnectionLost, 120),
        ],
        None,
    );
    let report = report_with(&[("i-0lost", 7, None)], &[&listed]).await;
    assert_eq!(
        states(&report),
        owned(&[
            ("i-0lost", State::Unreachable),
            ("i-0lostnew", State::Unreachable)
        ])
    );
    assert_eq!(report.fleet[0].ping_status, "ConnectionLost");
    let lost_for = report.fleet[0].unhealthy_seconds.unwrap();
    assert!((7_200..7_260).contains(&lost_for), "{lost_for}");
    // Two unreachable; only the one silent for longer than 90 minutes is past the limit.
    assert_eq!((report.unreachable, report.unhealthy_past_limit), (2, 1));
    // Its record is fresh: it still counts, behind.
    assert_eq!((report.instances, report.behind), (1, 1));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_terminated_instance_that_still_has_a_record_is_not_counted() {
    let listed = page(
        None,
        vec![instance("i-0alive", PingStatus::Online, 30)],
        None,
    );
    let report = report_with(
        &[
            ("i-0alive", 8, None),
            ("i-0terminated", 7, None),
            ("i-0longgone", 6, Some("2020-01-01T00:00:00Z")),
        ],
        &[&listed],
    )
    .await;
    assert_eq!(
        states(&report),
        owned(&[
            ("i-0alive", State::Current),
            ("i-0longgone", State::Gone),
            ("i-0terminated", State::Gone)
        ])
    );
    assert_eq!(
        (
            report.instances,
            report.behind,
            report.max_behind_seconds,
            report.unhealthy_past_limit
        ),
        (1, 0, 0, 0)
    );
    assert!(report.without_record.is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failing_listing_leaves_the_records_and_says_the_join_is_missing() {
    let records = [
        ("i-0current", 8, None),
        ("i-0old", 6, Some("2020-01-01T00:00:00Z")),
    ];
    let denied = failing_page(None, 400, "AccessDeniedException");
    let throttled = failing_page(None, 400, "ThrottlingException");
    // A second page that fails: a list cut short is no list (the rest would read as gone).
    let first = page(
        None,
        vec![instance("i-0current", PingStatus::Online, 30)],
        Some("page-2"),
    );
    let second = failing_page(Some("page-2"), 500, "InternalServerError");
    for (rules, error) in [
        (vec![&denied], "AccessDeniedException"),
        (vec![&throttled], "ThrottlingException"),
        (vec![&first, &second], "InternalServerError"),
    ] {
        let report = report_with(&records, &rules).await;
        let Join::Missing { reason } = &report.join else {
            panic!("the join is there: {report:?}");
        };
        assert!(
            reason.starts_with("DescribeInstanceInformation failed") && reason.contains(error),
            "{reason}"
        );
        // The records alone, as before the join.
        assert_eq!(
            states(&report),
            owned(&[("i-0current", State::Current), ("i-0old", State::Silent)])
        );
        assert_eq!(
            (
                report.instances,
                report.silent,
                report.never_reported + report.stale + report.unreachable
            ),
            (1, 1, 0)
        );
        assert!(
            report
                .table()
                .contains("instance list missing (DescribeInstanceInformation"),
            "{}",
            report.table()
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_report_shows_the_member_accounts_from_the_generators_manifest() {
    let fx = fixture(&[("CONFIG_BUCKET", BUCKET)]).await;
    put_config(&fx, KEY, 8).await;
    put_text(
        &fx,
        &record_key("i-0applied"),
        fleet_record("i-0applied", 8, "applied", ""),
    )
    .await;
    let manifest = serde_json::json!({
        "format": 1,
        "zones": {},
        "accounts": [
            {"account": "111111111111", "state": "ok", "since": "2026-11-25T09:00:00Z", "reason": ""},
            {"account": "222222222222", "state": "failing", "since": "2026-11-25T10:00:00Z",
             "reason": "AccessDenied: not authorized to perform route53:ListHostedZones"},
        ],
    });
    put_text(&fx, "haproxy/haproxy.manifest.json", manifest.to_string()).await;
    let rules = [page(
        None,
        vec![instance("i-0applied", PingStatus::Online, 30)],
        None,
    )];
    let deps = Deps {
        ssm: ssm_answering(&[&rules[0]]),
        ..fx.deps.clone()
    };
    let Reply::Fleet(report) = handler::handle(&deps, &fleet_request(), soon())
        .await
        .unwrap()
    else {
        panic!("not a fleet report");
    };
    let accounts: Vec<(&str, &str)> = report
        .accounts
        .iter()
        .map(|a| (a.account.as_str(), a.state.as_str()))
        .collect();
    assert_eq!(
        accounts,
        [("111111111111", "ok"), ("222222222222", "failing")]
    );
    let table = report.table();
    assert!(
        table.contains("member accounts: 1 ok, 1 failing, 0 not onboarded, 0 held"),
        "{table}"
    );
    assert!(
        table.contains("222222222222  failing since 2026-11-25T10:00:00Z: AccessDenied"),
        "{table}"
    );
    assert!(report.warnings.is_empty(), "{:?}", report.warnings);

    // A manifest that does not read is a warning; the fleet is reported all the same.
    put_text(&fx, "haproxy/haproxy.manifest.json", "not json".to_owned()).await;
    let Reply::Fleet(report) = handler::handle(&deps, &fleet_request(), soon())
        .await
        .unwrap()
    else {
        panic!("not a fleet report");
    };
    assert!(report.accounts.is_empty());
    assert_eq!(report.instances, 1);
    assert!(
        report
            .warnings
            .iter()
            .any(|w| w.contains("haproxy/haproxy.manifest.json: not a manifest")),
        "{:?}",
        report.warnings
    );
}
