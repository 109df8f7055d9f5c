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

use std::time::Duration;

use autoproxy::fleet::Join;
use autoproxy::render::DEFAULT_TEMPLATE;
use autoproxy::route53::AccountRoute53;
use autoproxy::settings::{ConfigureSettings, GenerateSettings};
use autoproxy_configure::handler::{self as configure, Reply};
use autoproxy_generate::handler::{self as generate, Deps};
use autoproxy_tests::estate::{Account, ZoneSpec, api_pair, versioned_bucket};
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

const ROUTE53: &str = "moto denies every Route53 call under IAM enforcement; the statement is \
                       checked statically (template::grants::what_moto_cannot_check_is_exactly_this)";

const SSM_RESOURCES: &str = "moto authorises SSM calls against the resource * and evaluates no \
                             ssm:resourceTag condition: both ssm:SendCommand statements are kept \
                             with Resource * (removing one alone leaves the other), and their \
                             document and instance resources are checked statically";

/// Every statement the generator's role has in this deployment, by Sid.
const GENERATE: &[(&str, Check)] = &[
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
    ("ListFleetRecords", Check::Needed),
    ("ReadFleetRecords", Check::Needed),
    ("WriteFleetReport", Check::Needed),
    // Without it the report goes without the member accounts, with a warning naming the denial.
    ("ReadManifestAccounts", Check::Needed),
    ("ListFleetInstances", Check::Needed),
    // The standalone policy attached to the role, listed after the inline ones.
    ("SendToTaggedInstances", Check::ActionOnly(SSM_RESOURCES)),
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
/// ("… is not authorized to perform …"), and HeadObject's 403 without a body.
const DENIED: [&str; 3] = ["AccessDenied", "not authorized", "StatusCode(403)"];

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
        generate::handle(&deps, &json!({}), AT)
            .await
            .map(drop)
            .map_err(|err| err.to_string())
    })
    .await;
    assert_eq!(proven, ["ReadWriteConfigAndManifest", "ReadTemplate"]);

    // The configure function: a rollout to the tagged instances and the fleet report.
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
        .key("haproxy/haproxy.fleet/i-0lp.json")
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
                if !outcome.dispatched.is_empty() && outcome.dispatched.iter().all(|r| r.sent) => {}
            other => return Err(format!("rollout: {other:?}")),
        }
        // moto checks IAM before it answers DescribeInstanceInformation, which it does not
        // implement (500): with the grant the report goes without the instance list; without
        // it, the list is denied. The report never fails for either, so the denial is read
        // from the join it reports.
        match configure::handle(&deps, &json!({"fleet": true}), soon).await {
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
            "FollowCommands",
            "ReadConfigMetadata",
            "ListFleetRecords",
            "ReadFleetRecords",
            "WriteFleetReport",
            "ReadManifestAccounts",
            "ListFleetInstances"
        ]
    );
}

/// The generator listing its members, from units and from the whole organization: without
/// one of its Organizations grants the first run fails; later runs fall back on the members
/// the manifest names and say so in a warning, which is what a run reports as its failure.
#[tokio::test(flavor = "multi_thread")]
async fn the_generator_lists_members_with_exactly_its_template_policy() {
    assert_eq!(
        prove_member_listing(false).await,
        [
            "ReadWriteConfigAndManifest",
            "ReadTemplate",
            "ListUnitAccounts",
            "ListUnitChildren"
        ]
    );
    assert_eq!(
        prove_member_listing(true).await,
        [
            "ReadWriteConfigAndManifest",
            "ReadTemplate",
            "ListOrganizationAccounts"
        ]
    );
}

/// [`prove`] for a generator whose members are listed from a unit, or the whole organization.
async fn prove_member_listing(whole_organization: bool) -> Vec<String> {
    use autoproxy_generate::members::Members;
    use autoproxy_tests::organization::Organization;

    let template = template();
    let (iam, admin, principal) = enforcing_with_bucket().await;
    let organization = Organization::create(&admin).await.unwrap();
    let unit = organization
        .unit(&organization.root, "workloads")
        .await
        .unwrap();
    let source = if whole_organization {
        "organization"
    } else {
        unit.as_str()
    };
    let (_route53, route53_sdk) = route53_with_one_zone().await;
    let settings = member_settings(source);
    let members = settings.member_accounts.clone().unwrap();
    let accounts = vec![AccountRoute53::new(
        OWN_ACCOUNT,
        &aws_sdk_route53::Config::new(&route53_sdk),
        1000.0,
    )];
    let mut deps = Deps::with_accounts(settings, &principal, accounts).unwrap();
    deps.members = Some(Members::new(members, &principal, "aws", 1000.0));
    let mut stack = stack(&template);
    for (condition, holds) in [
        ("ListsMemberAccounts", true),
        ("ListsWholeOrganization", whole_organization),
        ("ListsUnits", !whole_organization),
    ] {
        stack.conditions.insert(condition.into(), holds);
    }
    stack
        .refs
        .insert("MemberRoleName".into(), json!("autoproxy-route53-read"));
    let statements = statements_in(&template, "GenerateFunction", &stack);
    let expected = generate_with_members(!whole_organization);
    let checks = classified(&statements, &expected);
    prove(&iam, checks, || async {
        let summary = generate::handle(&deps, &json!({}), AT)
            .await
            .map_err(|err| err.to_string())?;
        match summary
            .warnings
            .iter()
            .find(|w| w.contains("organizations:"))
        {
            Some(listing) => Err(listing.clone()),
            None => Ok(()),
        }
    })
    .await
}

/// The generator's settings with its members listed from `source` (`MEMBER_ACCOUNTS`).
fn member_settings(source: &str) -> GenerateSettings {
    GenerateSettings::from_lookup(|name| {
        match name {
            "CONFIG_BUCKET" => Some(BUCKET),
            "CONFIG_KEY" => Some(KEY),
            "PEERING_PROXY_HOSTNAME" => Some(PROXY),
            "TEMPLATE_KEY" => Some(TEMPLATE_KEY),
            "MEMBER_ACCOUNTS" => Some(source),
            "MEMBER_ROLE_NAME" => Some("autoproxy-route53-read"),
            _ => None,
        }
        .map(str::to_owned)
    })
    .unwrap()
}

/// The agent publisher, as CloudFormation invokes it for `AgentBinary`: each run publishes a
/// binary not yet in the bucket (its key is its sha256), so it must look for it and upload it.
#[tokio::test(flavor = "multi_thread")]
async fn the_agent_publisher_works_with_exactly_its_template_policy() {
    use autoproxy_agent_publisher::handler::{self as publisher, Deps as PublisherDeps};
    use autoproxy_agent_publisher::response::Responder;
    use autoproxy_tests::response_url::ResponseUrl;

    let template = template();
    let (iam, _admin, principal) = enforcing_with_bucket().await;
    let answers = ResponseUrl::start();
    let dir = tempfile::tempdir().unwrap();
    let deps = PublisherDeps {
        s3: aws_sdk_s3::Client::new(&principal),
        agent: dir.path().join("autoproxy-agent"),
        responder: Responder::new().unwrap(),
    };
    let runs = std::sync::atomic::AtomicUsize::new(0);
    let publisher_statements = statements(&template, "AgentPublisherFunction");
    let checks = classified(&publisher_statements, PUBLISHER);
    let proven = prove(&iam, checks, || async {
        // An x86_64 ELF header and a body of its own: a binary never published before.
        let run = runs.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut binary = vec![0u8; 64];
        binary[..4].copy_from_slice(b"\x7fELF");
        binary[4..7].copy_from_slice(&[2, 1, 1]);
        binary[16..20].copy_from_slice(&[3, 0, 62, 0]);
        binary.extend_from_slice(format!("least privilege run {run}").as_bytes());
        std::fs::write(&deps.agent, &binary).map_err(|err| err.to_string())?;
        let text = std::fs::read_to_string(autoproxy_tests::root().join("events/cfn-create.json"))
            .map_err(|err| err.to_string())?;
        let mut event: Value = serde_json::from_str(&text).map_err(|err| err.to_string())?;
        event["ResponseURL"] = json!(answers.url());
        event["ResourceProperties"]["BucketName"] = json!(BUCKET);
        let answer = publisher::handle(&deps, event)
            .await
            .map_err(|err| err.to_string())?;
        let answer = serde_json::to_value(&answer).map_err(|err| err.to_string())?;
        answers.take();
        match answer["Status"].as_str() {
            Some("SUCCESS")
                if answer["Reason"]
                    .as_str()
                    .is_some_and(|r| r.starts_with("published")) =>
            {
                Ok(())
            }
            _ => Err(format!("answered {answer}")),
        }
    })
    .await;
    assert_eq!(proven, ["FindPublishedAgent", "PublishAgent"]);
}

/// The address service's CloudWatch metrics, published as a proxy instance may: the instance
/// policy's `PublishMetrics` is needed (moto checks the action, under its own name for it; the
/// `cloudwatch:namespace` condition it does not evaluate is checked on the template,
/// template::grants).
#[tokio::test(flavor = "multi_thread")]
async fn the_address_service_publishes_metrics_with_exactly_its_template_grant() {
    use autoproxy_agent::resolve::observe::cloudwatch::{self, Sample};
    use autoproxy_tests::observe::CborShim;

    let template = template();
    let publish =
        autoproxy_tests::cfn::policy_statement(&template, "ProxyInstancePolicy", "PublishMetrics")
            .expect("a PublishMetrics statement");
    let mut publish = stack(&template).resolve(publish).unwrap();
    // moto names the action by CloudWatch's endpoint prefix (it checks
    // `monitoring:PutMetricData`); IAM's name, which the template must use, is checked here and
    // in template::grants.
    assert_eq!(publish["Action"], json!("cloudwatch:PutMetricData"));
    publish["Action"] = json!("monitoring:PutMetricData");
    let iam = Enforcing::start().unwrap();
    // aws-sdk-cloudwatch speaks only RPC v2 CBOR, which moto does not serve: the stand-in
    // makes the same call to moto as the same principal.
    let keys = [
        (iam.principal.id.as_str(), iam.principal.secret.as_str()),
        (iam.admin.id.as_str(), iam.admin.secret.as_str()),
    ];
    let shim = CborShim::start(&iam.moto.endpoint(), &keys);
    let principal = aws_config::defaults(aws_config::BehaviorVersion::latest())
        .endpoint_url(shim.endpoint())
        .region(aws_sdk_s3::config::Region::new(
            autoproxy_tests::moto::REGION,
        ))
        .credentials_provider(aws_sdk_s3::config::Credentials::new(
            &iam.principal.id,
            &iam.principal.secret,
            None,
            None,
            "iam",
        ))
        .retry_config(aws_config::retry::RetryConfig::disabled())
        .load()
        .await;
    let client = aws_sdk_cloudwatch::Client::new(&principal);
    let sample = Sample {
        haproxy_up: true,
        workers: 1,
        ..Sample::default()
    };
    // IAM refuses a policy without statements: one that grants nothing here keeps it valid.
    let filler = json!({"Sid": "Filler", "Effect": "Allow", "Action": "s3:ListAllMyBuckets",
        "Resource": "*"});
    let not_ours = Check::Static("not the instances': keeps the policy valid without the other");
    let checks = vec![(&publish, &Check::Needed), (&filler, &not_ours)];
    let proven = prove(&iam, checks, || async {
        cloudwatch::put(&client, "i-0lp", &sample, std::time::SystemTime::now())
            .await
            .map_err(|err| err.to_string())
    })
    .await;
    assert_eq!(proven, ["PublishMetrics"]);
}
