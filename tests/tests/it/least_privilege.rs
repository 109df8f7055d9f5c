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

use autoproxy::render::DEFAULT_TEMPLATE;
use autoproxy_tests::estate::{Account, ZoneSpec, api_pair, versioned_bucket};
use autoproxy_tests::iam::Enforcing;
use autoproxy_tests::moto::Moto;
use aws_sdk_s3::primitives::ByteStream;
use serde_json::{Value, json};

use super::template::stack::{BUCKET, TEMPLATE_KEY, stack, statements_in};

mod functions;
mod members;
mod metrics;
mod publisher;
mod roles;

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
