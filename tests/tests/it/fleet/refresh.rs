//! The instance-refresh custom resource (`ProxyInstanceRefreshFunction`'s inline Python, as
//! `template.yaml` holds it) run with python3 (`autoproxy_tests::inline_function`) against a
//! stand-in for the two AWS clients it uses: Auto Scaling and CloudFormation. moto's Auto
//! Scaling cannot hold a refresh in `Cancelling`, nor its CloudFormation a stack in
//! `UPDATE_ROLLBACK_IN_PROGRESS`, and those are
//! the cases that matter: a stack update or rollback while a refresh runs, and a group that is
//! gone. The stand-in answers from a scenario and records every call; the clock is the
//! harness's, so the wait for a cancellation takes no time.

use autoproxy_tests::inline_function::{self, Run};
use serde_json::{Value as Json, json};

/// The stand-in `boto3`: the two clients, answering from the scenario (`group_exists`,
/// `refreshes`: the statuses each `DescribeInstanceRefreshes` returns in turn, the last one
/// repeated; `start_error`; `stack_status`).
const BOTO3: &str = r#"
from recorder import S, ClientError, log

class AutoScaling:
    def describe_auto_scaling_groups(self, **kw):
        log("DescribeAutoScalingGroups", kw)
        names = kw["AutoScalingGroupNames"] if S["group_exists"] else []
        return {"AutoScalingGroups": [{"AutoScalingGroupName": n} for n in names]}
    def describe_instance_refreshes(self, **kw):
        log("DescribeInstanceRefreshes", kw)
        states = S["refreshes"]
        now = states.pop(0) if len(states) > 1 else states[0]
        return {"InstanceRefreshes": [{"InstanceRefreshId": "r-%d" % i, "Status": s} for i, s in enumerate(now)]}
    def cancel_instance_refresh(self, **kw):
        log("CancelInstanceRefresh", kw)
    def start_instance_refresh(self, **kw):
        log("StartInstanceRefresh", kw)
        if S.get("start_error"):
            raise ClientError(*S["start_error"])

class CloudFormation:
    def describe_stacks(self, **kw):
        log("DescribeStacks", kw)
        return {"Stacks": [{"StackStatus": S["stack_status"]}]}

def client(name):
    return {"autoscaling": AutoScaling, "cloudformation": CloudFormation}[name]()
"#;

/// An update (or `request` type) from launch template version 1 to `to`, under `scenario`,
/// with the function's 300 s.
fn run(request: &str, to: &str, scenario: &Json) -> Run {
    let props = |version: &str| json!({"AutoScalingGroupName": "autoproxy-ProxyAutoScalingGroup-X", "LaunchTemplateVersion": version, "InstanceWarmup": "900"});
    inline_function::run(
        "ProxyInstanceRefreshFunction",
        &[("boto3.py", BOTO3)],
        &inline_function::request(request, &props(to), &props("1")),
        scenario,
        300,
    )
}

#[test]
fn a_new_launch_template_version_starts_a_refresh_that_launches_first() {
    let run = run(
        "Update",
        "2",
        &json!({"group_exists": true, "refreshes": [["Successful"]], "stack_status": "UPDATE_IN_PROGRESS"}),
    );
    assert_eq!(run.status(), "SUCCESS", "{}", run.reason());
    let start = &run.calls.last().expect("calls").1;
    assert_eq!(run.calls.last().unwrap().0, "StartInstanceRefresh");
    assert_eq!(start["Preferences"]["MinHealthyPercentage"], 100);
    assert_eq!(start["Preferences"]["MaxHealthyPercentage"], 200);
    // The same version: nothing called.
    let same = self::run(
        "Update",
        "1",
        &json!({"group_exists": true, "refreshes": [[]], "stack_status": "UPDATE_IN_PROGRESS"}),
    );
    assert_eq!((same.status(), same.names()), ("SUCCESS", vec![]));
}

#[test]
fn a_running_refresh_is_cancelled_and_the_new_version_started_after_it() {
    let run = run(
        "Update",
        "3",
        &json!({
            "group_exists": true,
            "refreshes": [["InProgress", "Successful"], ["Cancelling"], ["Cancelling"], ["Cancelled"]],
            "stack_status": "UPDATE_IN_PROGRESS",
        }),
    );
    assert_eq!(run.status(), "SUCCESS", "{}", run.reason());
    let names = run.names();
    let cancel = names.iter().position(|n| *n == "CancelInstanceRefresh");
    let start = names.iter().position(|n| *n == "StartInstanceRefresh");
    assert!(
        matches!((cancel, start), (Some(c), Some(s)) if c < s),
        "cancel, wait, then start: {names:?}"
    );
    assert_eq!(names.last(), Some(&"StartInstanceRefresh"), "{names:?}");
}

#[test]
fn a_rollback_while_a_refresh_cannot_stop_goes_on_and_says_so() {
    // The refresh never leaves Cancelling within the function's time.
    let stuck = json!({"group_exists": true, "refreshes": [["Cancelling"]], "stack_status": "UPDATE_ROLLBACK_IN_PROGRESS"});
    let rollback = run("Update", "2", &stuck);
    assert_eq!(rollback.status(), "SUCCESS", "{}", rollback.reason());
    assert!(
        rollback.reason().contains("rollback goes on")
            && rollback.reason().contains("still Cancelling")
            && rollback.reason().contains("start-instance-refresh"),
        "{}",
        rollback.reason()
    );
    assert!(!rollback.names().contains(&"StartInstanceRefresh"));
    // The same outside a rollback fails the update, with the reason.
    let mut update = stuck;
    update["stack_status"] = json!("UPDATE_IN_PROGRESS");
    let update = run("Update", "2", &update);
    assert_eq!(update.status(), "FAILED");
    assert!(
        update.reason().contains("still Cancelling"),
        "{}",
        update.reason()
    );
    // A start refused in a rollback: reported, not failed.
    let refused = run(
        "Update",
        "2",
        &json!({"group_exists": true, "refreshes": [[]], "stack_status": "UPDATE_ROLLBACK_IN_PROGRESS",
               "start_error": ["InstanceRefreshInProgress", "An Instance Refresh is already in progress"]}),
    );
    assert_eq!(refused.status(), "SUCCESS", "{}", refused.reason());
    assert!(
        refused.reason().contains("already in progress"),
        "{}",
        refused.reason()
    );
}

#[test]
fn a_group_that_is_gone_needs_no_refresh() {
    for request in ["Update", "Delete"] {
        let run = run(
            request,
            "2",
            &json!({"group_exists": false, "refreshes": [[]], "stack_status": "UPDATE_IN_PROGRESS"}),
        );
        assert_eq!(run.status(), "SUCCESS", "{request}: {}", run.reason());
        assert!(!run.names().contains(&"StartInstanceRefresh"), "{request}");
    }
    // Gone between the look and the start.
    let raced = run(
        "Update",
        "2",
        &json!({"group_exists": true, "refreshes": [[]], "stack_status": "UPDATE_IN_PROGRESS",
               "start_error": ["ValidationError", "AutoScalingGroup name not found - autoproxy-ProxyAutoScalingGroup-X"]}),
    );
    assert_eq!(raced.status(), "SUCCESS", "{}", raced.reason());
    assert!(raced.reason().contains("is gone"), "{}", raced.reason());
}
