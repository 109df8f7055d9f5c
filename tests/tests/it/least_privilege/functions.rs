//! The generator and the configure function, each as the principal of its own role: the
//! configure function rolls out what the generator published.

use std::time::Duration;

use autoproxy::fleet::Join;
use autoproxy::route53::AccountRoute53;
use autoproxy::settings::{ConfigureSettings, GenerateSettings};
use autoproxy_configure::handler::{self as configure, Reply};
use autoproxy_generate::handler::{self as generate, Deps};
use autoproxy_tests::moto::OWN_ACCOUNT;
use aws_sdk_s3::error::DisplayErrorContext;
use aws_sdk_s3::primitives::{ByteStream, DateTime, DateTimeFormat};
use aws_sdk_ssm::types::DocumentType;
use serde_json::json;

use super::roles::{CONFIGURE, GENERATE};
use super::{
    AT, DENIED, KEY, PROXY, classified, enforcing_with_bucket, prove, route53_with_one_zone,
    statements,
};
use crate::template::stack::{BUCKET, DOCUMENT, TEMPLATE_KEY};
use crate::template::template;

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
