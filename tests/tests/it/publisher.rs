//! The `Custom::AutoproxyAgent` resources as CloudFormation calls them: the events of
//! `events/cfn-*.json`, the publisher's handler against moto as S3, and a loopback server as
//! the presigned `ResponseURL` that records the answer PUT. What the stack relies on: the
//! binary lands at its content-addressed key with the sha256 the answer pins, an update with
//! the same binary sends nothing, a delete keeps the object (a rollback returns to it), and
//! anything but an x86_64 or aarch64 executable fails the deploy with a reason and no upload.

use std::path::{Path, PathBuf};

use autoproxy::artifact::sha256_hex;
use autoproxy_agent_publisher::handler::{self, Deps};
use autoproxy_agent_publisher::response::Responder;
use autoproxy_tests::agent::Published;
use autoproxy_tests::estate::versioned_bucket;
use autoproxy_tests::moto::Moto;
use autoproxy_tests::response_url::{Recorded, ResponseUrl};
use autoproxy_tests::root;
use aws_config::SdkConfig;
use serde_json::{Value, json};

/// The bucket the sample events name: the stack's computed name.
const BUCKET: &str = "autoproxy-123456789012-0f1e2d3c";

/// A sample event from `events/`, answering to `url`.
fn event(name: &str, url: &ResponseUrl) -> Value {
    let path = root().join("events").join(format!("cfn-{name}.json"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|err| panic!("{path:?}: {err}"));
    let mut event: Value = serde_json::from_str(&text).unwrap();
    event["ResponseURL"] = json!(url.url());
    event
}

/// A 64-bit little-endian ELF executable header for `e_machine`, then `fill` bytes: a stand-in
/// agent whose content (hence key) a test chooses.
fn elf(e_machine: u16, fill: &[u8]) -> Vec<u8> {
    let mut bytes = vec![0u8; 64];
    bytes[..4].copy_from_slice(b"\x7fELF");
    bytes[4] = 2;
    bytes[5] = 1;
    bytes[6] = 1;
    bytes[16..18].copy_from_slice(&3u16.to_le_bytes());
    bytes[18..20].copy_from_slice(&e_machine.to_le_bytes());
    bytes.extend_from_slice(fill);
    bytes
}

const X86_64: u16 = 62;

/// moto as S3, the answer's recorder, a directory for stand-in binaries.
struct Stand {
    _moto: Moto,
    sdk: SdkConfig,
    url: ResponseUrl,
    dir: tempfile::TempDir,
}

impl Stand {
    async fn start() -> Stand {
        let moto = Moto::start();
        let sdk = moto.sdk_config().await;
        versioned_bucket(&sdk, BUCKET).await.unwrap();
        Stand {
            _moto: moto,
            sdk,
            url: ResponseUrl::start(),
            dir: tempfile::tempdir().unwrap(),
        }
    }

    /// A file in the stand's directory holding `bytes`.
    fn file(&self, name: &str, bytes: &[u8]) -> PathBuf {
        let path = self.dir.path().join(name);
        std::fs::write(&path, bytes).unwrap();
        path
    }

    fn deps(&self, agent: &Path) -> Deps {
        Deps {
            s3: aws_sdk_s3::Client::new(&self.sdk),
            agent: agent.to_owned(),
            responder: Responder::new().unwrap(),
        }
    }

    /// Runs the handler on `event` with `agent` as the layer's file; returns the one answer
    /// CloudFormation received, after checking it is what the handler says it sent and that
    /// it went as a presigned URL takes it.
    async fn call(&self, agent: &Path, event: Value) -> Recorded {
        let sent = handler::handle(&self.deps(agent), event)
            .await
            .unwrap_or_else(|err| panic!("the handler did not answer: {err}"));
        let mut received = self.url.take();
        assert_eq!(received.len(), 1, "{received:#?}");
        let answer = received.remove(0);
        assert_eq!(answer.method, "PUT");
        assert!(
            answer.target.contains("X-Amz-Signature="),
            "{}",
            answer.target
        );
        assert_eq!(
            answer.header("content-type"),
            Some(""),
            "{:?}",
            answer.headers
        );
        assert_eq!(answer.json(), serde_json::to_value(&sent).unwrap());
        answer
    }

    /// Every version of every object under `autoproxy-agent/`, as (key, size).
    async fn published(&self) -> Vec<(String, i64)> {
        let listed = aws_sdk_s3::Client::new(&self.sdk)
            .list_object_versions()
            .bucket(BUCKET)
            .prefix("autoproxy-agent/")
            .send()
            .await
            .unwrap();
        listed
            .versions()
            .iter()
            .map(|v| {
                (
                    v.key().unwrap_or_default().to_owned(),
                    v.size().unwrap_or_default(),
                )
            })
            .collect()
    }

    async fn object(&self, key: &str) -> Vec<u8> {
        aws_sdk_s3::Client::new(&self.sdk)
            .get_object()
            .bucket(BUCKET)
            .key(key)
            .send()
            .await
            .unwrap()
            .body
            .collect()
            .await
            .unwrap()
            .into_bytes()
            .to_vec()
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn create_update_delete_publish_the_agent_once_and_keep_it() {
    let stand = Stand::start().await;
    let agent = autoproxy_tests::agent_binary();
    let bytes = std::fs::read(&agent).unwrap();
    let sha256 = sha256_hex(&bytes);
    let key = format!("autoproxy-agent/{sha256}/autoproxy-agent");

    // Create: uploaded at the content-addressed key; the answer pins it.
    let created = stand.call(&agent, event("create", &stand.url)).await.json();
    assert_eq!(created["Status"], "SUCCESS", "{created:#}");
    assert_eq!(created["PhysicalResourceId"], json!(key));
    assert_eq!(created["LogicalResourceId"], "AgentBinary");
    assert_eq!(created["RequestId"], "5c2a1f0e-0000-4000-8000-000000000001");
    assert_eq!(
        created["StackId"],
        "arn:aws:cloudformation:us-east-1:123456789012:stack/autoproxy/0f1e2d3c-aaaa-bbbb-cccc-0123456789ab"
    );
    let data = &created["Data"];
    assert_eq!(data["Sha256"], json!(sha256));
    assert_eq!(data["Key"], json!(key));
    assert_eq!(data["Architecture"], std::env::consts::ARCH);
    assert_eq!(
        data["Url"],
        json!(format!("https://{BUCKET}.s3.us-east-1.amazonaws.com/{key}"))
    );
    // Exactly the attributes the apply document's tests deploy it with.
    let expected: serde_json::Map<String, Value> = Published::describe(BUCKET)
        .attributes()
        .into_iter()
        .map(|(name, value)| {
            (
                name.trim_start_matches("AgentBinary.").to_owned(),
                json!(value),
            )
        })
        .collect();
    assert_eq!(data, &Value::Object(expected));
    let stored = stand.object(&key).await;
    assert_eq!(sha256_hex(&stored), sha256);
    assert_eq!(stand.published().await, [(key.clone(), bytes.len() as i64)]);

    // Update with the same binary (a new layer version): the same answer, nothing sent again.
    let updated = stand.call(&agent, event("update", &stand.url)).await.json();
    assert_eq!(updated["Status"], "SUCCESS", "{updated:#}");
    assert_eq!(updated["PhysicalResourceId"], json!(key));
    assert_eq!(updated["Data"], created["Data"]);
    assert!(
        updated["Reason"]
            .as_str()
            .unwrap()
            .contains("not sent again"),
        "{updated:#}"
    );
    assert_eq!(stand.published().await, [(key.clone(), bytes.len() as i64)]);

    // Delete: success, and the object stays for a rollback to return to.
    let mut delete = event("delete", &stand.url);
    delete["PhysicalResourceId"] = json!(key);
    let deleted = stand.call(&agent, delete).await.json();
    assert_eq!(deleted["Status"], "SUCCESS", "{deleted:#}");
    assert_eq!(deleted["PhysicalResourceId"], json!(key));
    assert_eq!(deleted["Data"], json!({}));
    assert_eq!(stand.published().await, [(key, bytes.len() as i64)]);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_new_binary_is_published_beside_the_old_one() {
    let stand = Stand::start().await;
    let old = stand.file("old", &elf(X86_64, b"generation one"));
    let new = stand.file("new", &elf(X86_64, b"generation two"));
    let first = stand.call(&old, event("create", &stand.url)).await.json();
    let mut update = event("update", &stand.url);
    update["PhysicalResourceId"] = first["PhysicalResourceId"].clone();
    let second = stand.call(&new, update).await.json();
    assert_eq!(second["Status"], "SUCCESS", "{second:#}");
    // A new physical id: CloudFormation then deletes the old one, which removes nothing.
    assert_ne!(second["PhysicalResourceId"], first["PhysicalResourceId"]);
    let mut keys: Vec<String> = stand
        .published()
        .await
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    keys.sort();
    let mut expected = vec![
        first["Data"]["Key"].as_str().unwrap().to_owned(),
        second["Data"]["Key"].as_str().unwrap().to_owned(),
    ];
    expected.sort();
    assert_eq!(keys, expected);
    let mut delete = event("delete", &stand.url);
    delete["PhysicalResourceId"] = first["PhysicalResourceId"].clone();
    assert_eq!(stand.call(&new, delete).await.json()["Status"], "SUCCESS");
    assert_eq!(stand.published().await.len(), 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn anything_but_an_agent_executable_fails_with_a_reason_and_uploads_nothing() {
    let stand = Stand::start().await;
    let cases = [
        (
            stand.file("script", b"#!/bin/sh\necho I am not an agent\n"),
            "expected an ELF executable (starting 7f 45 4c 46), got a file starting 23 21 2f 62",
        ),
        (
            stand.file("arm32", &elf(40, b"x")),
            "expected an x86_64 or aarch64 executable, got e_machine 40 (32-bit ARM)",
        ),
        (
            stand.file("empty", b""),
            "expected an ELF executable, got 0 bytes",
        ),
        (
            stand.dir.path().join("missing"),
            "expected the autoproxy-agent binary at",
        ),
    ];
    for (file, reason) in cases {
        for kind in ["create", "update"] {
            let answer = stand.call(&file, event(kind, &stand.url)).await.json();
            assert_eq!(answer["Status"], "FAILED", "{kind} {file:?}: {answer:#}");
            let said = answer["Reason"].as_str().unwrap();
            assert!(said.contains(reason), "{kind} {file:?}: {said}");
            assert!(said.contains(&file.display().to_string()), "{said}");
            assert_eq!(answer["Data"], json!({}));
            if kind == "update" {
                // A failed update keeps the resource's id: no replacement.
                assert_eq!(
                    answer["PhysicalResourceId"],
                    event("update", &stand.url)["PhysicalResourceId"]
                );
            }
        }
    }
    assert_eq!(stand.published().await, []);
    // Deleting never needs the file.
    let answer = stand
        .call(
            &stand.dir.path().join("missing"),
            event("delete", &stand.url),
        )
        .await
        .json();
    assert_eq!(answer["Status"], "SUCCESS", "{answer:#}");
}

/// The stack's first create: `AgentBinary` runs before the bucket exists (`WhenBucketMissing:
/// Skip`), `AgentBinaryUpload` after it, pinned to the same sha256.
#[tokio::test(flavor = "multi_thread")]
async fn before_the_bucket_exists_the_attributes_come_first_and_the_upload_after() {
    let stand = Stand::start().await;
    let agent = stand.file("agent", &elf(X86_64, b"first deploy"));
    let mut create = event("create", &stand.url);
    create["ResourceProperties"]["BucketName"] = json!("autoproxy-123456789012-notyet00");
    let pinned = stand.call(&agent, create.clone()).await.json();
    assert_eq!(pinned["Status"], "SUCCESS", "{pinned:#}");
    assert!(
        pinned["Reason"]
            .as_str()
            .unwrap()
            .contains("does not exist yet"),
        "{pinned:#}"
    );
    let sha256 = pinned["Data"]["Sha256"].as_str().unwrap().to_owned();

    // The upload resource: no Skip, so a missing bucket fails it.
    let mut upload = create.clone();
    upload["LogicalResourceId"] = json!("AgentBinaryUpload");
    let properties = &mut upload["ResourceProperties"];
    properties
        .as_object_mut()
        .unwrap()
        .remove("WhenBucketMissing");
    properties["Sha256"] = json!(sha256);
    let missing = stand.call(&agent, upload.clone()).await.json();
    assert_eq!(missing["Status"], "FAILED", "{missing:#}");
    assert!(
        missing["Reason"].as_str().unwrap().contains(
            "expected bucket autoproxy-123456789012-notyet00 (of account 123456789012) to exist"
        ),
        "{missing:#}"
    );

    // Once the bucket exists, it uploads exactly the pinned binary.
    upload["ResourceProperties"]["BucketName"] = json!(BUCKET);
    let uploaded = stand.call(&agent, upload.clone()).await.json();
    assert_eq!(uploaded["Status"], "SUCCESS", "{uploaded:#}");
    assert_eq!(uploaded["Data"]["Sha256"], json!(sha256));
    assert_eq!(stand.published().await.len(), 1);

    // A layer holding another binary than the one pinned is refused.
    let other = stand.file("other", &elf(X86_64, b"not the pinned one"));
    let refused = stand.call(&other, upload).await.json();
    assert_eq!(refused["Status"], "FAILED", "{refused:#}");
    let reason = refused["Reason"].as_str().unwrap();
    assert!(
        reason.contains(&format!("expected the layer's binary to hash to {sha256}")),
        "{reason}"
    );
    assert_eq!(stand.published().await.len(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_request_malformed_past_its_envelope_is_still_answered() {
    let stand = Stand::start().await;
    let agent = stand.file("agent", &elf(X86_64, b"x"));
    let mut odd = event("create", &stand.url);
    odd["RequestType"] = json!("Explode");
    let answer = stand.call(&agent, odd).await.json();
    assert_eq!(answer["Status"], "FAILED", "{answer:#}");
    assert_eq!(answer["PhysicalResourceId"], "AgentBinary-not-published");
    assert!(
        answer["Reason"]
            .as_str()
            .unwrap()
            .contains("expected a CloudFormation custom resource request"),
        "{answer:#}"
    );

    let mut typo = event("create", &stand.url);
    typo["ResourceProperties"]["Sha265"] = json!("abc");
    let answer = stand.call(&agent, typo).await.json();
    assert_eq!(answer["Status"], "FAILED", "{answer:#}");
    assert!(
        answer["Reason"].as_str().unwrap().contains("Sha265"),
        "{answer:#}"
    );
    assert_eq!(stand.published().await, []);

    // Nowhere to answer: the invocation fails (and Lambda retries it).
    let err = handler::handle(&stand.deps(&agent), json!({"RequestType": "Create"}))
        .await
        .expect_err("no ResponseURL");
    assert!(err.to_string().contains("no ResponseURL"), "{err}");
    assert!(stand.url.take().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn an_answer_the_url_refuses_fails_the_invocation_so_lambda_retries_it() {
    let stand = Stand::start().await;
    let agent = stand.file("agent", &elf(X86_64, b"x"));
    let refusing = ResponseUrl::answering(403);
    let err = handler::handle(&stand.deps(&agent), event("create", &refusing))
        .await
        .expect_err("a refused answer");
    let said = err.to_string();
    assert!(said.contains("answered 403"), "{said}");
    assert!(
        !said.contains("X-Amz-Signature"),
        "the signature stays out of logs: {said}"
    );
    assert_eq!(refusing.take().len(), 1);
}
