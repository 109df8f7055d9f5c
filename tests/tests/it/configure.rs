//! autoproxy-configure against a moto server: the SendCommand it makes, keys it ignores,
//! events it refuses, retries, and the fleet report it builds from the instances' records
//! (joined with SSM's instance list in `instances`).

use std::process::Command;
use std::time::Duration;

mod instances;
mod newest;

use autoproxy::fleet::Join;
use autoproxy::settings::ConfigureSettings;
use autoproxy_configure::handler::{self, ConfigureError, Deps, Outcome, Reply};
use autoproxy_tests::moto::Moto;
use aws_sdk_s3::primitives::{ByteStream, DateTime, DateTimeFormat};
use aws_sdk_ssm::types::DocumentType;
use serde_json::{Value, json};

const BUCKET: &str = "autoproxy-config";
const KEY: &str = "haproxy/haproxy.cfg";
const DOCUMENT: &str = "autoproxy-apply";

/// A minimal document with the apply document's parameters: moto only records the command.
const DOCUMENT_CONTENT: &str = r#"{"schemaVersion": "2.2", "description": "test",
  "parameters": {"ConfigBucket": {"type": "String"}, "ConfigKey": {"type": "String"},
                 "ConfigVersion": {"type": "String", "default": ""}},
  "mainSteps": [{"action": "aws:runShellScript", "name": "apply",
                 "inputs": {"runCommand": ["true"]}}]}"#;

struct Fixture {
    moto: Moto,
    deps: Deps,
    ssm: aws_sdk_ssm::Client,
}

async fn fixture(settings: &[(&str, &str)]) -> Fixture {
    let moto = Moto::start();
    let sdk = moto.sdk_config().await;
    let s3 = aws_sdk_s3::Client::new(&sdk);
    let ssm = aws_sdk_ssm::Client::new(&sdk);
    s3.create_bucket().bucket(BUCKET).send().await.unwrap();
    s3.put_bucket_versioning()
        .bucket(BUCKET)
        .versioning_configuration(
            aws_sdk_s3::types::VersioningConfiguration::builder()
                .status(aws_sdk_s3::types::BucketVersioningStatus::Enabled)
                .build(),
        )
        .send()
        .await
        .unwrap();
    ssm.create_document()
        .name(DOCUMENT)
        .document_type(DocumentType::Command)
        .content(DOCUMENT_CONTENT)
        .send()
        .await
        .unwrap();
    // Two tagged proxies and one other instance, created with the AWS CLI (moto resolves tag targets through its EC2 instances).
    for (count, role) in [("2", "peering-proxy"), ("1", "bastion")] {
        let status = Command::new(autoproxy_tests::tool("aws"))
            .envs(moto.env())
            .args([
                "ec2",
                "run-instances",
                "--image-id",
                "ami-03cf127a",
                "--count",
                count,
            ])
            .args(["--tag-specifications"])
            .arg(format!(
                "ResourceType=instance,Tags=[{{Key=Role,Value={role}}}]"
            ))
            .stdout(std::process::Stdio::null())
            .status()
            .unwrap();
        assert!(status.success(), "aws ec2 run-instances failed");
    }
    let mut vars: Vec<(&str, &str)> = vec![("APPLY_DOCUMENT", DOCUMENT)];
    vars.extend_from_slice(settings);
    let settings = ConfigureSettings::from_lookup(|name| {
        vars.iter()
            .rev()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| (*v).to_owned())
    })
    .unwrap();
    let deps = Deps {
        settings,
        s3,
        ssm: ssm.clone(),
        poll_every: Duration::from_millis(50),
    };
    Fixture { moto, deps, ssm }
}

/// Puts a config object with the generator's metadata; returns its version id.
async fn put_config(fx: &Fixture, key: &str, generation: u64) -> String {
    fx.deps
        .s3
        .put_object()
        .bucket(BUCKET)
        .key(key)
        .metadata("generation", generation.to_string())
        .body(ByteStream::from_static(b"# generation\nglobal\n"))
        .send()
        .await
        .unwrap()
        .version_id()
        .unwrap()
        .to_owned()
}

fn s3_event(key: &str, version: &str) -> Value {
    autoproxy_tests::pipeline::s3_put_event(BUCKET, key, version)
}

fn soon() -> tokio::time::Instant {
    tokio::time::Instant::now() + Duration::from_secs(10)
}

/// `handle` for an S3 event: the rollout's outcome.
async fn roll_out(fx: &Fixture, payload: &Value) -> Result<Outcome, ConfigureError> {
    handler::handle(&fx.deps, payload, soon())
        .await
        .map(|reply| match reply {
            Reply::Rollout(outcome) => outcome,
            Reply::Fleet(report) => panic!("a fleet report for an S3 event: {report:?}"),
        })
}

async fn commands(fx: &Fixture) -> Vec<aws_sdk_ssm::types::Command> {
    fx.ssm
        .list_commands()
        .send()
        .await
        .unwrap()
        .commands()
        .to_vec()
}

#[tokio::test(flavor = "multi_thread")]
async fn sends_the_apply_document_to_the_tagged_fleet_with_the_version() {
    let fx = fixture(&[]).await;
    let version = put_config(&fx, KEY, 7).await;
    let outcome = roll_out(&fx, &s3_event(KEY, &version)).await.unwrap();
    assert_eq!(outcome.dispatched.len(), 1);
    assert_eq!(outcome.dispatched[0].status.as_str(), "Success");

    let sent = commands(&fx).await;
    assert_eq!(sent.len(), 1);
    let command = &sent[0];
    assert_eq!(command.document_name(), Some(DOCUMENT));
    let target = &command.targets()[0];
    assert_eq!(target.key(), Some("tag:Role"));
    assert_eq!(target.values(), ["peering-proxy"]);
    let parameters = command.parameters().unwrap();
    assert_eq!(parameters["ConfigBucket"], [BUCKET]);
    assert_eq!(parameters["ConfigKey"], [KEY]);
    assert_eq!(parameters["ConfigVersion"], std::slice::from_ref(&version));
    assert_eq!(command.max_concurrency(), Some("1"));
    assert_eq!(command.max_errors(), Some("0"));
    // A gone instance is given up after two minutes, not after SSM's default hour (which moto
    // reports when the request carries none).
    assert_eq!(command.timeout_seconds(), Some(120));
    assert_eq!(
        command.comment(),
        Some(format!("autoproxy generation 7 (version {version})").as_str())
    );
    // moto does not echo CloudWatchOutputConfig back, so that part is not asserted here.
    // moto resolves the tag to the two proxies, not the bastion.
    assert_eq!(command.target_count(), 2);
    drop(fx.moto);
}

#[tokio::test(flavor = "multi_thread")]
async fn rate_control_and_tag_come_from_settings() {
    let fx = fixture(&[
        ("MAX_CONCURRENCY", "25%"),
        ("MAX_ERRORS", "1"),
        ("TARGET_TAG_VALUE", "bastion"),
        ("COMMAND_LOG_GROUP", "/autoproxy/apply"),
        ("DELIVERY_TIMEOUT_SECONDS", "45"),
    ])
    .await;
    let version = put_config(&fx, KEY, 8).await;
    roll_out(&fx, &s3_event(KEY, &version)).await.unwrap();
    let command = commands(&fx).await.remove(0);
    assert_eq!(command.max_concurrency(), Some("25%"));
    assert_eq!(command.max_errors(), Some("1"));
    assert_eq!(command.timeout_seconds(), Some(45));
    assert_eq!(command.targets()[0].values(), ["bastion"]);
    assert_eq!(command.target_count(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn other_keys_are_ignored_and_nothing_is_sent() {
    let fx = fixture(&[]).await;
    let version = put_config(&fx, "haproxy/haproxy.manifest.json", 1).await;
    let outcome = roll_out(&fx, &s3_event("haproxy/haproxy.manifest.json", &version))
        .await
        .unwrap();
    assert!(outcome.dispatched.is_empty());
    assert_eq!(outcome.ignored, ["haproxy/haproxy.manifest.json"]);
    assert!(commands(&fx).await.is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_malformed_event_is_an_error_and_nothing_is_sent() {
    let fx = fixture(&[]).await;
    for payload in [
        json!({"dry_run": true}),
        json!({"Records": []}),
        s3_event(KEY, ""),
    ] {
        let err = roll_out(&fx, &payload).await.unwrap_err();
        assert!(
            err.to_string()
                .contains("expected an S3 event notification"),
            "{err}"
        );
    }
    assert!(commands(&fx).await.is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_version_that_does_not_exist_is_an_error_and_nothing_is_sent() {
    let fx = fixture(&[]).await;
    put_config(&fx, KEY, 1).await;
    let err = roll_out(&fx, &s3_event(KEY, "no-such-version"))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("HeadObject failed"), "{err}");
    assert!(commands(&fx).await.is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rollout_that_reaches_no_instance_is_an_error() {
    // A typo in the tag: the command is sent, SSM targets nobody, and says "Success".
    let fx = fixture(&[("TARGET_TAG_VALUE", "peering-proxies")]).await;
    let version = put_config(&fx, KEY, 9).await;
    let err = roll_out(&fx, &s3_event(KEY, &version)).await.unwrap_err();
    let message = err.to_string();
    assert!(
        message.contains("generation 9 reached no instance")
            && message.contains("tagged Role=peering-proxies"),
        "{message}"
    );
    assert!(matches!(err, ConfigureError::NoTargets { .. }));
    assert_eq!(commands(&fx).await[0].target_count(), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_retry_or_a_duplicate_event_follows_the_command_already_sent() {
    let fx = fixture(&[]).await;
    let version = put_config(&fx, KEY, 10).await;
    let event = s3_event(KEY, &version);
    let first = roll_out(&fx, &event).await.unwrap();
    // The Lambda retry after a timeout, or S3 delivering the same event again.
    let again = roll_out(&fx, &event).await.unwrap();
    assert!(first.dispatched[0].sent);
    assert!(!again.dispatched[0].sent, "{again:?}");
    assert_eq!(
        again.dispatched[0].command_id,
        first.dispatched[0].command_id
    );
    assert_eq!(again.dispatched[0].status.as_str(), "Success");
    assert_eq!(commands(&fx).await.len(), 1, "no second command");

    // Another version is another rollout.
    let next = put_config(&fx, KEY, 11).await;
    let third = roll_out(&fx, &s3_event(KEY, &next)).await.unwrap();
    assert!(third.dispatched[0].sent);
    assert_eq!(commands(&fx).await.len(), 2);
}

/// Events for a version arrive while no instance carries the tag (a typo fixed a minute later,
/// instances still launching): SSM records that command as done ("Success", `TargetCount` 0).
/// The Lambda retry, or the same event again, once the tag is fixed, sends one new command to
/// the instances, not a follow of the one that reached nobody.
#[tokio::test(flavor = "multi_thread")]
async fn a_retry_after_a_rollout_that_reached_no_instance_sends_again() {
    let fx = fixture(&[("TARGET_TAG_VALUE", "peering-proxy-blue")]).await;
    let version = put_config(&fx, KEY, 12).await;
    let event = s3_event(KEY, &version);
    let err = roll_out(&fx, &event).await.unwrap_err();
    assert!(matches!(err, ConfigureError::NoTargets { .. }), "{err:?}");
    assert_eq!(commands(&fx).await[0].target_count(), 0);

    // The tag fixed: an instance launched with it.
    let status = Command::new(autoproxy_tests::tool("aws"))
        .envs(fx.moto.env())
        .args(["ec2", "run-instances", "--image-id", "ami-03cf127a"])
        .args(["--count", "1", "--tag-specifications"])
        .arg("ResourceType=instance,Tags=[{Key=Role,Value=peering-proxy-blue}]")
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "aws ec2 run-instances failed");

    let retried = roll_out(&fx, &event).await.unwrap();
    let rollout = &retried.dispatched[0];
    assert!(rollout.sent, "{retried:?}");
    assert_eq!((rollout.targets, rollout.status.as_str()), (1, "Success"));
    let sent = commands(&fx).await;
    assert_eq!(sent.len(), 2, "exactly one new command: {sent:?}");
    assert_eq!(sent.iter().filter(|c| c.target_count() == 1).count(), 1);

    // Once one reached the fleet, a duplicate follows it again.
    let duplicate = roll_out(&fx, &event).await.unwrap();
    assert!(!duplicate.dispatched[0].sent, "{duplicate:?}");
    assert_eq!(duplicate.dispatched[0].command_id, rollout.command_id);
    assert_eq!(commands(&fx).await.len(), 2);
}

/// `events/fleet-report.json`, as `cargo lambda invoke` sends it.
/// The fleet report the function wrote beside the config (as JSON, its content type checked).
async fn written_report<T: serde::de::DeserializeOwned>(deps: &Deps) -> T {
    let written = deps
        .s3
        .get_object()
        .bucket(BUCKET)
        .key("haproxy/haproxy.fleet.json")
        .send()
        .await
        .unwrap();
    assert_eq!(written.content_type(), Some("application/json"));
    serde_json::from_slice(&written.body.collect().await.unwrap().into_bytes()).unwrap()
}

fn fleet_request() -> Value {
    serde_json::from_str(include_str!("../../../events/fleet-report.json")).unwrap()
}

/// Where an instance's record goes: under its ARN, the one key its role may write.
fn record_key(instance_id: &str) -> String {
    autoproxy::fleet::record_key(
        KEY,
        "arn:aws:ec2:us-east-1:123456789012:instance/",
        instance_id,
    )
}

/// A record as the apply document writes it, at the end of an apply that ran just now.
fn fleet_record(instance_id: &str, generation: u64, result: &str, reason: &str) -> String {
    let now = DateTime::from(std::time::SystemTime::now());
    let at = now.fmt(DateTimeFormat::DateTime).unwrap();
    fleet_record_at(instance_id, generation, result, reason, &at)
}

fn fleet_record_at(
    instance_id: &str,
    generation: u64,
    result: &str,
    reason: &str,
    at: &str,
) -> String {
    json!({"instance_id": instance_id, "generation": generation, "sha256": "",
           "result": result, "reason": reason, "version_id": "v1", "at": at})
    .to_string()
}

async fn put_text(fx: &Fixture, key: &str, body: String) {
    fx.deps
        .s3
        .put_object()
        .bucket(BUCKET)
        .key(key)
        .body(ByteStream::from(body.into_bytes()))
        .send()
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn the_fleet_report_compares_each_record_with_the_latest_config() {
    let fx = fixture(&[("CONFIG_BUCKET", BUCKET)]).await;
    put_config(&fx, KEY, 7).await;
    put_config(&fx, KEY, 8).await;
    let current = fleet_record("i-0current", 8, "applied", "");
    put_text(&fx, &record_key("i-0current"), current).await;
    let behind = fleet_record("i-0behind", 7, "rejected", "haproxy -c refused the config");
    put_text(&fx, &record_key("i-0behind"), behind).await;
    put_text(
        &fx,
        &record_key("i-0broken"),
        "{\"instance_id\": ".to_owned(),
    )
    .await;
    // Terminated a day ago: its last record stays until the lifecycle rule expires it.
    let gone = fleet_record_at("i-0gone", 6, "applied", "", "2020-01-01T00:00:00Z");
    put_text(&fx, &record_key("i-0gone"), gone).await;
    let published = fx
        .deps
        .s3
        .head_object()
        .bucket(BUCKET)
        .key(KEY)
        .send()
        .await
        .unwrap()
        .last_modified()
        .unwrap()
        .secs();

    let reply = handler::handle(&fx.deps, &fleet_request(), soon())
        .await
        .unwrap();
    let Reply::Fleet(report) = &reply else {
        panic!("not a fleet report: {reply:?}");
    };
    assert_eq!(
        (
            report.latest_generation,
            report.instances,
            report.behind,
            report.silent
        ),
        (8, 2, 1, 1),
        "{report:?}"
    );
    assert_eq!(
        report.latest_published_at_unix,
        u64::try_from(published).unwrap()
    );
    // moto does not implement DescribeInstanceInformation (configure::instances joins it): the
    // records alone, and the report says so.
    let Join::Missing { reason } = &report.join else {
        panic!("moto listed the instances: {:?}", report.join);
    };
    assert!(
        reason.starts_with("DescribeInstanceInformation failed"),
        "{reason}"
    );
    // One line a person reads in the table: the call and the reason, not the SDK's dump of
    // moto's HTML page and the response's internals.
    assert!(
        reason.starts_with("DescribeInstanceInformation failed: HTTP 500, not an AWS error: ")
            && !reason.contains(['\n', '<'])
            && reason.len() < 250,
        "{reason}"
    );
    assert_eq!(report.warnings.len(), 1, "{:?}", report.warnings);
    assert!(
        report.warnings[0].starts_with(&format!("{}: not a fleet record", record_key("i-0broken"))),
        "{:?}",
        report.warnings
    );
    let [behind, current, gone] = &report.fleet[..] else {
        panic!("three instances: {report:?}");
    };
    assert_eq!(
        (
            gone.record.instance_id.as_str(),
            gone.silent,
            gone.behind_seconds
        ),
        ("i-0gone", true, 0)
    );
    assert_eq!(
        (current.record.instance_id.as_str(), current.current),
        ("i-0current", true)
    );
    assert_eq!(current.behind_seconds, 0);
    assert_eq!(
        (behind.record.instance_id.as_str(), behind.current),
        ("i-0behind", false)
    );
    assert_eq!(behind.record.reason, "haproxy -c refused the config");
    assert_eq!(
        behind.behind_seconds,
        report.now_unix - report.latest_published_at_unix
    );
    assert_eq!(report.max_behind_seconds, behind.behind_seconds);

    // The report is written beside the config, as returned.
    let written: Value = written_report(&fx.deps).await;
    assert_eq!(written, serde_json::to_value(&reply).unwrap());

    // Outside the records' prefix: the next report does not take it for a record.
    let Reply::Fleet(again) = handler::handle(&fx.deps, &fleet_request(), soon())
        .await
        .unwrap()
    else {
        panic!("not a fleet report");
    };
    assert_eq!((again.instances, again.warnings.len()), (2, 1));
    assert!(commands(&fx).await.is_empty(), "a report sends nothing");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_fleet_report_without_config_bucket_names_the_setting() {
    let fx = fixture(&[]).await;
    put_config(&fx, KEY, 1).await;
    let err = handler::handle(&fx.deps, &fleet_request(), soon())
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            ConfigureError::MissingSetting {
                variable: "CONFIG_BUCKET",
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("CONFIG_BUCKET"), "{err}");
}
