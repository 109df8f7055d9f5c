//! Least privilege, proven against IAM: each function runs against a moto server that enforces
//! IAM, as a principal whose only policy is the one `template.yaml` gives that function's role
//! (resolved as a deployed stack holds it). A full run succeeds; without any one statement that
//! moto can check, it fails.
//!
//! What moto cannot check is named per statement and covered by the static tests of the
//! template (tests/tests/it/template/): under enforcement moto denies every Route53 call
//! whatever the policy, answers a missing key 404 with or without `s3:ListBucket`, and
//! evaluates no conditions and no bucket policies.
#![allow(clippy::print_stdout)]

mod agent;
mod members;

use std::time::Duration;

use autoproxy::fleet::Join;
use autoproxy::render::DEFAULT_TEMPLATE;
use autoproxy::route53::AccountRoute53;
use autoproxy::settings::{ConfigureSettings, GenerateSettings};
use autoproxy_configure::handler::{self as configure, Reply};
use autoproxy_generate::handler::Deps;
use autoproxy_tests::estate::{Account, ZoneSpec, api_pair, versioned_bucket};
use autoproxy_tests::generator::run_at;
use autoproxy_tests::iam::Enforcing;
use autoproxy_tests::moto::{Moto, OWN_ACCOUNT};
use aws_sdk_s3::error::DisplayErrorContext;
use aws_sdk_s3::primitives::{ByteStream, DateTime, DateTimeFormat};
use aws_sdk_ssm::types::DocumentType;
use serde_json::{Value, json};

use super::template::stack::{BUCKET, DOCUMENT, TEMPLATE_KEY, stack, statements_in};
use super::template::template;

const KEY: &str = "haproxy/haproxy.cfg";
const PROXY: &str = "peering-proxy.tools.example.com";
const AT: &str = "2026-11-23T03:14:02Z";

/// What a statement's removal shows.
#[derive(Clone, Copy)]
enum Check {
    /// The run fails without it.
    Needed,
    /// moto cannot show it; the reason, and the static test that covers it.
    Static(&'static str),
    /// moto checks only the action (it authorises every non-S3 call against the resource
    /// `*`): the statement is kept with `Resource: "*"`, and its resources are checked
    /// statically.
    ActionOnly(&'static str),
}

const QUEUE: &str = "the runs proven here are not started by the event queue, so no queue call \
                     is made; the statement's actions and queue are checked statically \
                     (template::queue::route53_events_reach_the_generator_through_its_queue)";

const ROUTE53: &str = "moto denies every Route53 call under IAM enforcement; the statement is \
                       checked statically (template::grants::what_moto_cannot_check_is_exactly_this)";

const SSM_RESOURCES: &str = "moto authorises SSM calls against the resource * and evaluates no \
                             ssm:resourceTag condition: both ssm:SendCommand statements are kept \
                             with Resource * (removing one alone leaves the other), and their \
                             document and instance resources are checked statically";

/// Every statement the generator's role has in this deployment, by Sid.
const GENERATE: &[(&str, Check)] = &[
    ("DrainRoute53Events", Check::Static(QUEUE)),
    ("ListHostedZones", Check::Static(ROUTE53)),
    ("ReadHostedZones", Check::Static(ROUTE53)),
    ("ListConfigBucket", Check::Static(LIST_BUCKET)),
    ("ReadWriteConfigAndManifest", Check::Needed),
    ("ReadTemplate", Check::Needed),
];

const MEMBER_ROLES: &str = "moto lets any role be assumed and the listing here finds no member \
                            (their Route53 would be denied under enforcement); the statement is \
                            checked statically (template::grants::what_moto_cannot_check_is_exactly_this)";

/// The generator's statements with `MemberAccounts` naming units (`units`) or the whole
/// organization: the deployment's, then each Organizations call, proven against IAM like the
/// rest, then the member roles.
fn generate_with_members(units: bool) -> Vec<(&'static str, Check)> {
    let listing: &[&str] = if units {
        &["ListUnitAccounts", "ListUnitChildren"]
    } else {
        &["ListOrganizationAccounts"]
    };
    GENERATE
        .iter()
        .cloned()
        .chain(listing.iter().map(|sid| (*sid, Check::Needed)))
        .chain([("AssumeMemberRoles", Check::Static(MEMBER_ROLES))])
        .collect()
}

const LIST_BUCKET: &str = "moto answers GetObject of a missing key 404 with or without \
                           s3:ListBucket (AWS answers 403 without it)";

const CONFIGURE: &[(&str, Check)] = &[
    ("SendApplyDocument", Check::ActionOnly(SSM_RESOURCES)),
    ("FollowCommands", Check::Needed),
    ("ReadConfigMetadata", Check::Needed),
    // The standalone policy attached to the role, listed after the inline ones.
    ("SendToTaggedInstances", Check::ActionOnly(SSM_RESOURCES)),
];

const FLEET_REPORT: &[(&str, Check)] = &[
    ("ReadLatestConfig", Check::Needed),
    ("ListFleetRecords", Check::Needed),
    ("ReadFleetRecords", Check::Needed),
    ("WriteFleetReport", Check::Needed),
    // Without it the report goes without the member accounts, with a warning naming the denial.
    ("ReadManifestAccounts", Check::Needed),
    ("ListFleetInstances", Check::Needed),
];

const PUBLISHER: &[(&str, Check)] = &[
    (
        "ListConfigBucket",
        Check::Static(
            "moto answers HeadObject of a missing key 404 with or without s3:ListBucket (AWS \
             answers 403 without it)",
        ),
    ),
    ("FindPublishedAgent", Check::Needed),
    ("PublishAgent", Check::Needed),
];

/// The statements template.yaml gives a function's role: its inline `Policies`, plus the
/// standalone policies attached to that role.
fn statements(template: &serde_yaml::Value, function: &str) -> Vec<Value> {
    statements_in(template, function, &stack(template))
}

fn sid(statement: &Value) -> &str {
    statement["Sid"].as_str().unwrap_or("(no Sid)")
}

/// Every statement is classified, and every classification names a statement.
fn classified<'a>(
    statements: &'a [Value],
    checks: &'a [(&str, Check)],
) -> Vec<(&'a Value, &'a Check)> {
    let sids: Vec<&str> = statements.iter().map(sid).collect();
    let known: Vec<&str> = checks.iter().map(|(sid, _)| *sid).collect();
    assert_eq!(
        sids, known,
        "template statements vs the ones this test knows"
    );
    statements
        .iter()
        .zip(checks)
        .map(|(statement, (_, check))| (statement, check))
        .collect()
}

/// Each statement moto can check: with all of them the run works, without it the run fails.
async fn prove<F, Fut>(iam: &Enforcing, checks: Vec<(&Value, &Check)>, run: F) -> Vec<String>
where
    F: Fn() -> Fut,
    Fut: Future<Output = Result<(), String>>,
{
    let all: Vec<Value> = checks
        .iter()
        .map(|(statement, check)| {
            let mut statement = (*statement).clone();
            if matches!(check, Check::ActionOnly(_)) {
                statement["Resource"] = json!("*");
            }
            statement
        })
        .collect();
    iam.allow_only(&all).unwrap();
    run()
        .await
        .unwrap_or_else(|err| panic!("with every statement: {err}"));
    let mut proven = Vec::new();
    for (index, (statement, check)) in checks.iter().enumerate() {
        let name = sid(statement);
        match check {
            Check::Static(reason) | Check::ActionOnly(reason) => {
                println!("{name}: not checkable here ({reason})");
            }
            Check::Needed => {
                let without: Vec<Value> = all
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| *i != index)
                    .map(|(_, s)| s.clone())
                    .collect();
                iam.allow_only(&without).unwrap();
                let outcome = run().await;
                assert!(outcome.is_err(), "the run still works without {name}");
                let err = outcome.unwrap_err();
                // Failing is not enough: it must fail because IAM said no.
                assert!(
                    DENIED.iter().any(|word| err.contains(word)),
                    "without {name} the run failed, but not on a denial: {err}"
                );
                let first: String = err.chars().take(160).collect();
                println!("{name}: needed (without it: {first}…)");
                proven.push(name.to_owned());
            }
        }
    }
    iam.allow_only(&all).unwrap();
    proven
}

/// How moto's IAM enforcement words a refusal: S3's AccessDenied, SSM's AccessDeniedException
/// ("… is not authorized to perform …"), and HeadObject's 403 without a body (one line, as
/// `autoproxy::aws_error` renders it, "HTTP 403, not an AWS error, with no body"; the agent
/// publisher, which does not use it, shows the SDK's `StatusCode(403)`).
const DENIED: [&str; 4] = [
    "AccessDenied",
    "not authorized",
    "HTTP 403",
    "StatusCode(403)",
];

/// Route53 for the generator, in a second moto without enforcement: one private zone with an
/// API pair pointing at the proxy.
async fn route53_with_one_zone() -> (Moto, aws_config::SdkConfig) {
    let route53 = Moto::start();
    let route53_sdk = route53.sdk_config().await;
    let zone = "lp.example.internal";
    Account::own(&route53_sdk)
        .seed_zone(ZoneSpec::private(zone, api_pair(zone, PROXY)))
        .await
        .unwrap();
    (route53, route53_sdk)
}

/// moto under IAM enforcement with the config bucket, the default template in it at
/// `TEMPLATE_KEY`: the admin's and the principal's SDK configurations.
async fn enforcing_with_bucket() -> (Enforcing, aws_config::SdkConfig, aws_config::SdkConfig) {
    let iam = Enforcing::start().unwrap();
    let admin = iam.sdk_config(&iam.admin).await;
    let principal = iam.sdk_config(&iam.principal).await;
    versioned_bucket(&admin, BUCKET).await.unwrap();
    aws_sdk_s3::Client::new(&admin)
        .put_object()
        .bucket(BUCKET)
        .key(TEMPLATE_KEY)
        .body(ByteStream::from_static(DEFAULT_TEMPLATE.as_bytes()))
        .send()
        .await
        .unwrap();
    (iam, admin, principal)
}

#[tokio::test(flavor = "multi_thread")]
async fn each_function_works_with_exactly_its_template_policy() {
    let template = template();
    let (iam, admin, principal) = enforcing_with_bucket().await;
    let admin_s3 = aws_sdk_s3::Client::new(&admin);

    // The generator. Route53 lives in a second moto without enforcement.
    let (_route53, route53_sdk) = route53_with_one_zone().await;
    let settings = GenerateSettings::from_lookup(|name| {
        match name {
            "CONFIG_BUCKET" => Some(BUCKET),
            "CONFIG_KEY" => Some(KEY),
            "PEERING_PROXY_HOSTNAME" => Some(PROXY),
            "TEMPLATE_KEY" => Some(TEMPLATE_KEY),
            "ROUTE53_REQUESTS_PER_SECOND" => Some("1000"),
            _ => None,
        }
        .map(str::to_owned)
    })
    .unwrap();
    let accounts = vec![AccountRoute53::new(
        OWN_ACCOUNT,
        &aws_sdk_route53::Config::new(&route53_sdk),
        1000.0,
    )];
    let deps = Deps::with_accounts(settings, &principal, accounts).unwrap();
    let generate_statements = statements(&template, "GenerateFunction");
    let checks = classified(&generate_statements, GENERATE);
    let proven = prove(&iam, checks, || async {
        run_at(&deps, &json!({}), AT, None)
            .await
            .map(drop)
            .map_err(|err| err.to_string())
    })
    .await;
    assert_eq!(proven, ["ReadWriteConfigAndManifest", "ReadTemplate"]);

    // The configure function: a rollout to the tagged instances; then the fleet report's.
    aws_sdk_ssm::Client::new(&admin)
        .create_document()
        .name(DOCUMENT)
        .document_type(DocumentType::Command)
        .content(
            json!({"schemaVersion": "2.2", "description": "test",
                "parameters": {"ConfigBucket": {"type": "String"}, "ConfigKey": {"type": "String"},
                               "ConfigVersion": {"type": "String", "default": ""}},
                "mainSteps": [{"action": "aws:runShellScript", "name": "apply",
                               "inputs": {"runCommand": ["true"]}}]})
            .to_string(),
        )
        .send()
        .await
        .unwrap();
    iam.admin_cli(&[
        "ec2",
        "run-instances",
        "--image-id",
        "ami-03cf127a",
        "--count",
        "1",
        "--tag-specifications",
        "ResourceType=instance,Tags=[{Key=Role,Value=peering-proxy}]",
    ])
    .unwrap();
    let now = DateTime::from(std::time::SystemTime::now())
        .fmt(DateTimeFormat::DateTime)
        .unwrap();
    let record = json!({"instance_id": "i-0lp", "generation": 1, "sha256": "",
        "result": "applied", "reason": "", "version_id": "v1", "at": now});
    admin_s3
        .put_object()
        .bucket(BUCKET)
        .key("haproxy/haproxy.fleet/arn:aws:ec2:us-east-1:123456789012:instance/i-0lp.json")
        .body(ByteStream::from(record.to_string().into_bytes()))
        .send()
        .await
        .unwrap();
    let settings = ConfigureSettings::from_lookup(|name| {
        match name {
            "APPLY_DOCUMENT" => Some(DOCUMENT),
            "CONFIG_BUCKET" => Some(BUCKET),
            _ => None,
        }
        .map(str::to_owned)
    })
    .unwrap();
    let deps = configure::Deps {
        settings,
        s3: aws_sdk_s3::Client::new(&principal),
        ssm: aws_sdk_ssm::Client::new(&principal),
        poll_every: Duration::from_millis(50),
    };
    // What the generator published, put again as new versions below.
    let published = admin_s3
        .get_object()
        .bucket(BUCKET)
        .key(KEY)
        .send()
        .await
        .unwrap();
    let body = published
        .body
        .collect()
        .await
        .unwrap()
        .into_bytes()
        .to_vec();
    let published = admin_s3
        .head_object()
        .bucket(BUCKET)
        .key(KEY)
        .send()
        .await
        .unwrap();
    let configure_statements = statements(&template, "ConfigureFunction");
    let checks = classified(&configure_statements, CONFIGURE);
    let proven = prove(&iam, checks, || async {
        // A new version each time, so a command must be sent (not one already under way).
        let version = admin_s3
            .put_object()
            .bucket(BUCKET)
            .key(KEY)
            .set_metadata(published.metadata().cloned())
            .body(ByteStream::from(body.clone()))
            .send()
            .await
            .map_err(|err| format!("seeding a version: {}", DisplayErrorContext(err)))?
            .version_id()
            .unwrap_or_default()
            .to_owned();
        let event = autoproxy_tests::pipeline::s3_put_event(BUCKET, KEY, &version);
        let soon = tokio::time::Instant::now() + Duration::from_secs(10);
        match configure::handle(&deps, &event, soon).await {
            Ok(Reply::Rollout(outcome))
                if !outcome.dispatched.is_empty() && outcome.dispatched.iter().all(|r| r.sent) =>
            {
                Ok(())
            }
            other => Err(format!("rollout: {other:?}")),
        }
    })
    .await;
    assert_eq!(proven, ["FollowCommands", "ReadConfigMetadata"]);
    prove_fleet_report(&template, &iam, &deps).await;
}

/// The fleet report's function (the same code, its own role): the report, and nothing of a
/// rollout.
async fn prove_fleet_report(template: &serde_yaml::Value, iam: &Enforcing, deps: &configure::Deps) {
    let report_statements = statements(template, "FleetReportFunction");
    let checks = classified(&report_statements, FLEET_REPORT);
    let proven = prove(iam, checks, || async {
        let soon = tokio::time::Instant::now() + Duration::from_secs(10);
        // moto checks IAM before it answers DescribeInstanceInformation, which it does not
        // implement (500): with the grant the report goes without the instance list; without
        // it, the list is denied. The report never fails for either, so the denial is read
        // from the join it reports.
        match configure::handle(deps, &json!({"fleet": true}), soon).await {
            Ok(Reply::Fleet(report)) => match &report.join {
                Join::Missing { reason } if DENIED.iter().any(|word| reason.contains(word)) => {
                    Err(format!("fleet report's instance list: {reason}"))
                }
                _ if report.warnings.is_empty() && report.instances == 1 => Ok(()),
                _ => Err(format!("fleet report: {report:?}")),
            },
            other => Err(format!("fleet report: {other:?}")),
        }
    })
    .await;
    assert_eq!(
        proven,
        [
            "ReadLatestConfig",
            "ListFleetRecords",
            "ReadFleetRecords",
            "WriteFleetReport",
            "ReadManifestAccounts",
            "ListFleetInstances"
        ]
    );
}
