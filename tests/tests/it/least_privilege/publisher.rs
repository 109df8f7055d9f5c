//! The agent publisher, the custom resource that puts the agent binary in the config bucket.

use serde_json::{Value, json};

use super::roles::PUBLISHER;
use super::{classified, enforcing_with_bucket, prove, statements};
use crate::template::stack::BUCKET;
use crate::template::template;

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
