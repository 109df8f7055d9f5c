//! The instances' side: the agent publisher and the address service, with exactly their
//! template grants.

use super::*;

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
