//! The address service on a proxy instance, publishing its CloudWatch metrics under the
//! instance policy.

use autoproxy_tests::iam::Enforcing;
use serde_json::json;

use super::{Check, prove};
use crate::template::stack::stack;
use crate::template::template;

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
