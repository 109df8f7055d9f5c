//! The generator's first run at deploy time (`GenerateOnDeploy`, a custom resource whose inline
//! function invokes the generator and waits for it): at create, and again only when the
//! generator's settings change; a failing run is reported (the stack's events, the `FirstRun`
//! output, the function's log) and never fails the deploy. The function runs with python3
//! (`autoproxy_tests::inline_function`) against a stand-in of the Lambda client.

use autoproxy_tests::inline_function::{self, Run};
use serde_json::{Value as Json, json};
use serde_yaml::Value;

use super::template;

/// The stand-in `boto3` (its Lambda client answers `invoke` from the scenario: `body` and
/// `error` (Lambda's `FunctionError`), or `raise` [code, message]) and `botocore.config`.
const BOTO3: &str = r#"
import io, json
from recorder import S, ClientError, log

class Lambda:
    def invoke(self, **kw):
        log("Invoke", kw)
        if S.get("raise"):
            raise ClientError(*S["raise"])
        answer = {"StatusCode": 200, "Payload": io.BytesIO(S["body"].encode())}
        if S.get("error"):
            answer["FunctionError"] = S["error"]
        return answer

def client(name, config=None):
    log("client", {"service": name, "config": getattr(config, "kw", None)})
    return {"lambda": Lambda}[name]()
"#;

const BOTOCORE_CONFIG: &str = r#"
class Config:
    def __init__(self, **kw):
        self.kw = kw
"#;

/// The generator's settings as the template gives them, changed or not.
fn settings(routing_rules: &str) -> Json {
    json!({"CONFIG_KEY": "haproxy/haproxy.cfg", "PEERING_PROXY_HOSTNAME": "proxy.tools.example.internal", "ROUTING_RULES": routing_rules})
}

fn run(kind: &str, new: Json, old: Json, scenario: &Json) -> Run {
    released(kind, (new, "0.2.0"), (old, "0.2.0"), scenario)
}

/// A run whose new and old properties are the settings and the release each names.
fn released(kind: &str, new: (Json, &str), old: (Json, &str), scenario: &Json) -> Run {
    let props = |(settings, release): (Json, &str)| json!({"FunctionName": "autoproxy-GenerateFunction-X", "Settings": settings, "Release": release});
    inline_function::run(
        "GenerateOnDeployFunction",
        &[
            ("boto3.py", BOTO3),
            ("botocore/__init__.py", ""),
            ("botocore/config.py", BOTOCORE_CONFIG),
        ],
        &inline_function::request(kind, &props(new), &props(old)),
        scenario,
        900,
    )
}

fn published() -> Json {
    json!({"body": json!({"trigger": "manual", "published": true, "rules": 4, "warnings": [], "accounts": {"ok": 2, "failing": 0}}).to_string()})
}

#[test]
fn creating_the_stack_runs_the_generator_once_and_reports_what_it_did() {
    let run = run("Create", settings(""), json!(null), &published());
    assert_eq!(run.status(), "SUCCESS", "{}", run.reason());
    let invokes: Vec<&Json> = run
        .calls
        .iter()
        .filter(|(n, _)| n == "Invoke")
        .map(|(_, a)| a)
        .collect();
    assert_eq!(invokes.len(), 1, "{:?}", run.calls);
    assert_eq!(invokes[0]["FunctionName"], "autoproxy-GenerateFunction-X");
    assert_eq!(
        invokes[0]["InvocationType"], "RequestResponse",
        "it waits for the run"
    );
    // The payload the generator's trigger parser reads as a manual full reconciliation.
    assert_eq!(invokes[0]["Payload"], "b'{}'");
    let config = &run.calls[0].1["config"];
    let wait = config["read_timeout"].as_f64().unwrap_or_default();
    assert!(
        wait > 800.0 && wait < 900.0,
        "waits for a long sweep, answers in time: {config}"
    );
    let result = run.response["Data"]["Result"].as_str().unwrap_or_default();
    assert!(
        result.contains("first run: published True, 4 rules, 0 warnings"),
        "{result}"
    );
    assert!(run.log.contains(result), "the function's log: {}", run.log);
}

#[test]
fn a_failing_first_run_is_reported_and_rolls_nothing_back() {
    let broken = json!({"body": json!({"errorMessage": "account 111111111111: zone Z0BROKEN: ListResourceRecordSets: AccessDenied", "errorType": "Error"}).to_string(), "error": "Unhandled"});
    let throttled = json!({"raise": ["TooManyRequestsException", "Rate Exceeded."]});
    for (scenario, said) in [
        (
            broken,
            "first run failed: account 111111111111: zone Z0BROKEN: ListResourceRecordSets: AccessDenied",
        ),
        (
            throttled,
            "first run did not complete (An error occurred (TooManyRequestsException): Rate Exceeded.)",
        ),
    ] {
        let run = run("Create", settings(""), json!(null), &scenario);
        assert_eq!(
            run.status(),
            "SUCCESS",
            "a failed run must not roll the stack back"
        );
        for (place, text) in [
            ("the stack's events", run.reason()),
            (
                "the FirstRun output",
                run.response["Data"]["Result"].as_str().unwrap_or_default(),
            ),
            ("the function's log", run.log.as_str()),
        ] {
            assert!(text.contains(said), "{place}: {text}");
            assert!(
                text.contains("autoproxy-GenerateFunction-X"),
                "{place} names the generator: {text}"
            );
        }
    }
}

#[test]
fn only_a_change_of_the_generators_settings_runs_it_again() {
    let same = run("Update", settings("[]"), settings("[]"), &published());
    assert!(!same.names().contains(&"Invoke"), "{:?}", same.calls);
    assert_eq!(same.status(), "SUCCESS");
    let changed = run(
        "Update",
        settings("[{\"id\": \"eks\"}]"),
        settings("[]"),
        &published(),
    );
    assert_eq!(
        changed.names().iter().filter(|n| **n == "Invoke").count(),
        1
    );
    let deleted = run("Delete", settings("[]"), json!(null), &published());
    assert!(!deleted.names().contains(&"Invoke"));
    assert_eq!(deleted.status(), "SUCCESS");
}

/// An upgrade or a roll back that changes only code changes no setting, but it changes the
/// release `make dist` writes into the properties: the generator runs again, and the `FirstRun`
/// output names the release whose run it reports, so the documented check beside
/// `ReleaseVersion` shows the new code's run, not the previous release's.
#[test]
fn a_new_release_runs_the_generator_again_and_its_result_names_the_release() {
    for (new, old) in [
        ("0.2.0 (commit b2)", "0.1.0 (commit a1)"),
        ("0.1.0 (commit a1)", "0.2.0 (commit b2)"),
    ] {
        let upgraded = released(
            "Update",
            (settings("[]"), new),
            (settings("[]"), old),
            &published(),
        );
        assert_eq!(
            upgraded.names().iter().filter(|n| **n == "Invoke").count(),
            1,
            "from {old} to {new}: {:?}",
            upgraded.calls
        );
        let result = upgraded.response["Data"]["Result"]
            .as_str()
            .unwrap_or_default();
        assert!(
            result.starts_with(&format!(
                "release {new}: the generator's first run: published True"
            )),
            "{result}"
        );
    }
}

#[test]
fn the_first_run_watches_exactly_the_generators_settings_and_comes_before_the_instances() {
    let template = template();
    let resources = &template["Resources"];
    let environment = &resources["GenerateFunction"]["Properties"]["Environment"]["Variables"];
    let watched = &resources["GenerateOnDeploy"]["Properties"]["Settings"];
    assert_eq!(
        serde_yaml::to_string(watched).unwrap(),
        serde_yaml::to_string(environment).unwrap(),
        "GenerateOnDeploy's Settings must be the generator's environment, or a change of a \
         setting would not run it again"
    );
    let token = serde_yaml::to_string(&resources["GenerateOnDeploy"]["Properties"]["FunctionName"])
        .unwrap();
    assert_eq!(token.trim(), "!Ref GenerateFunction");
    let depends: Vec<&str> = resources["ProxyAutoScalingGroup"]["DependsOn"]
        .as_sequence()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        depends.contains(&"GenerateOnDeploy"),
        "instances before the first config: {depends:?}"
    );
    let output = serde_yaml::to_string(&template["Outputs"]["FirstRun"]["Value"]).unwrap();
    assert_eq!(output.trim(), "!GetAtt GenerateOnDeploy.Result");
    // Its role may invoke the generator and nothing else.
    let policies =
        serde_yaml::to_string(&resources["GenerateOnDeployRole"]["Properties"]["Policies"])
            .unwrap();
    assert!(
        policies.contains("Action: lambda:InvokeFunction")
            && policies.contains("Resource: !GetAtt GenerateFunction.Arn"),
        "{policies}"
    );
    assert_eq!(policies.matches("Action:").count(), 1, "{policies}");
}
