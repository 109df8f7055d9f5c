//! The fleet report (the peers' source and the fleet alarms' data) runs on time whatever the
//! rollout backlog: its schedule invokes a function of its own, which no rollout occupies, with
//! an execution reserved for it, a timeout inside its period, and a role that may read the
//! fleet and write the report but send no command. And a rollout followed without a deadline (an
//! emulator's invocation) stops within the template's timeout.

use serde_yaml::Value;

use super::stack::{stack, statements_in};
use super::template;

/// The period of the report's schedule, in seconds.
const PERIOD: u64 = 300;

/// Every function with an event of `kind` (`S3`, `Schedule`, …) matching `wanted`, by name.
fn invoked_by(template: &Value, kind: &str, wanted: impl Fn(&Value) -> bool) -> Vec<String> {
    let mut functions = Vec::new();
    for (name, resource) in template["Resources"].as_mapping().unwrap() {
        if resource["Type"].as_str() != Some("AWS::Serverless::Function") {
            continue;
        }
        let events = resource["Properties"]["Events"].as_mapping();
        let hit = events
            .into_iter()
            .flatten()
            .any(|(_, event)| event["Type"].as_str() == Some(kind) && wanted(&event["Properties"]));
        if hit {
            functions.push(name.as_str().unwrap().to_owned());
        }
    }
    functions
}

fn asks_for_the_report(properties: &Value) -> bool {
    properties["Input"]
        .as_str()
        .and_then(|input| serde_json::from_str::<serde_json::Value>(input).ok())
        == Some(serde_json::json!({"fleet": true}))
}

#[test]
fn the_fleet_report_has_a_schedule_and_an_execution_no_rollout_can_take() {
    let template = template();
    let reporters = invoked_by(&template, "Schedule", asks_for_the_report);
    let [reporter] = &reporters[..] else {
        panic!("one function on the report's schedule, got {reporters:?}");
    };
    let schedule = invoked_by(&template, "Schedule", |p| {
        asks_for_the_report(p) && p["Schedule"].as_str() == Some("rate(5 minutes)")
    });
    assert_eq!(&schedule, &reporters, "the report runs every 5 minutes");

    let rollouts = invoked_by(&template, "S3", |_| true);
    assert_eq!(rollouts, ["ConfigureFunction"], "the rollout's trigger");
    assert!(
        !rollouts.contains(reporter),
        "the fleet report's schedule invokes {reporter}, which every published config also \
         invokes (reserved concurrency 1, a rollout followed up to 900 s): a rollout in flight, \
         or a backlog of them, holds the report back"
    );

    let properties = &template["Resources"][reporter.as_str()]["Properties"];
    assert_eq!(
        properties["ReservedConcurrentExecutions"].as_u64(),
        Some(1),
        "{reporter}: an execution reserved for the report (no other function's burst takes it), \
         and one report at a time"
    );
    let timeout = properties["Timeout"].as_u64().expect("a timeout");
    assert!(
        timeout < PERIOD,
        "{reporter}: a report that hangs must end ({timeout} s) before the next one is due"
    );
    // The same code as the rollout, built from the same binary.
    assert_eq!(
        template["Resources"][reporter.as_str()]["Metadata"]["BuildProperties"],
        template["Resources"]["ConfigureFunction"]["Metadata"]["BuildProperties"]
    );

    // Each function's role holds only its own part.
    let stack = stack(&template);
    let actions = |function: &str| -> Vec<String> {
        statements_in(&template, function, &stack)
            .iter()
            .flat_map(|s| super::grants::grant(s).0)
            .collect()
    };
    let report = actions(reporter);
    assert!(
        !report.iter().any(|a| a.starts_with("ssm:SendCommand")),
        "{reporter} may send commands: {report:?}"
    );
    for needed in [
        "s3:ListBucket",
        "s3:GetObject",
        "s3:PutObject",
        "ssm:DescribeInstanceInformation",
    ] {
        assert!(
            report.iter().any(|a| a == needed),
            "{reporter} lacks {needed}"
        );
    }
    let rollout = actions("ConfigureFunction");
    for report_only in [
        "s3:PutObject",
        "s3:ListBucket",
        "ssm:DescribeInstanceInformation",
    ] {
        assert!(
            !rollout.iter().any(|a| a == report_only),
            "ConfigureFunction keeps the report's {report_only}"
        );
    }
}

/// Under an emulator that sends no usable deadline, a rollout is followed for the function's
/// timeout less what reporting needs: the handler's constant must be the template's timeout.
#[test]
fn a_rollout_without_a_deadline_is_followed_for_the_templates_timeout_less_the_reserve() {
    let template = template();
    let rollout_timeout =
        template["Resources"]["ConfigureFunction"]["Properties"]["Timeout"].as_u64();
    let follow = autoproxy_configure::handler::FOLLOW_WITHOUT_DEADLINE
        + autoproxy_configure::handler::REPORT_RESERVE;
    assert_eq!(
        rollout_timeout,
        Some(follow.as_secs()),
        "ConfigureFunction's Timeout against the handler's FOLLOW_WITHOUT_DEADLINE + REPORT_RESERVE"
    );
}
