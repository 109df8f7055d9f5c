//! autoproxy-agent-publisher: the `Custom::AutoproxyAgent` resources of the stack. On Create
//! and Update it publishes the autoproxy-agent binary that the AgentLayer layer puts at
//! `/opt/autoproxy-agent` to the config bucket, content-addressed, and answers with what the
//! apply document pins (`Sha256`, `Key`, `Architecture`, `Url`); on Delete it removes nothing,
//! so a rollback always finds the binary it returns to. Every answer, a failure included, is
//! PUT to the request's `ResponseURL`: an unanswered request would hold the stack for an hour.
//!
//! The stack has two such resources because of an ordering it cannot change: the config
//! bucket's notification depends on the configure function, which names the apply document,
//! which pins this resource's attributes, so the bucket is created after `AgentBinary`.
//! `AgentBinary` (`WhenBucketMissing: Skip`) therefore uploads only when the bucket already
//! exists (every update, so the object is there before the document naming it changes), and
//! `AgentBinaryUpload`, which references the bucket and so comes after it, uploads on the
//! stack's first create (`Sha256` makes it refuse a binary other than the one pinned).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use aws_lambda_events::event::cloudformation::{
    CloudFormationCustomResourceRequest, CloudFormationCustomResourceResponse,
    CloudFormationCustomResourceResponseStatus,
};
use aws_sdk_s3::error::{DisplayErrorContext, ProvideErrorMetadata};
use aws_sdk_s3::operation::head_object::HeadObjectError;
use aws_sdk_s3::primitives::ByteStream;
use lambda_runtime::{Diagnostic, LambdaEvent};
use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::Value;
use sha2::{Digest, Sha256};
use tracing::{error, info};

use crate::elf::{self, ElfError};
use crate::published::{Published, Stack, StackError};
use crate::response::{Responder, ResponseError};

/// Where the AgentLayer layer puts the binary in the function's file system.
pub const LAYER_FILE: &str = "/opt/autoproxy-agent";

/// What a request must look like, for the reasons that say it did not.
const EXPECTED_REQUEST: &str = "a CloudFormation custom resource request: RequestType \
                                Create, Update or Delete, ResponseURL, StackId, RequestId, \
                                LogicalResourceId, ResourceProperties";
const EXPECTED_PROPERTIES: &str = "{BucketName: <bucket>, Layer: <layer version ARN>, \
                                   Sha256: <64 hex digits, optional>, WhenBucketMissing: \
                                   Fail (the default) or Skip}";
/// CloudFormation refuses a response over 4,096 bytes; the reason is the only long field.
const MAX_REASON_CHARS: usize = 1500;

/// Everything an invocation needs, built once per cold start.
#[derive(Debug, Clone)]
pub struct Deps {
    pub s3: aws_sdk_s3::Client,
    /// The binary to publish: [`LAYER_FILE`] in Lambda, another file in tests.
    pub agent: PathBuf,
    pub responder: Responder,
}

/// The resource's properties, as `template.yaml` sets them. Unknown names are refused: a
/// misspelt `Sha256` must not silently publish an unchecked binary.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
struct Properties {
    /// CloudFormation copies it into the properties; it names this function.
    #[serde(rename = "ServiceToken", default)]
    _service_token: Option<IgnoredAny>,
    bucket_name: String,
    /// Only there so that a new layer version is a change of the resource (an Update).
    #[serde(rename = "Layer", default)]
    _layer: Option<IgnoredAny>,
    /// The sha256 the binary must have.
    #[serde(default)]
    sha256: Option<String>,
    #[serde(default)]
    when_bucket_missing: WhenBucketMissing,
}

/// What a missing bucket means for this resource.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
enum WhenBucketMissing {
    /// A failure: the object must exist when the resource is done.
    #[default]
    Fail,
    /// Not an error: the bucket comes later in the stack, and another resource uploads then.
    Skip,
}

/// What became of the object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stored {
    Uploaded,
    /// The content-addressed key already held an object of this size: nothing was sent.
    AlreadyThere,
    NoBucket,
}

/// Why a request was answered FAILED. Each says what was expected and what arrived.
#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    #[error("expected {EXPECTED_REQUEST}; {why}")]
    Request { why: String },
    #[error("expected ResourceProperties {EXPECTED_PROPERTIES}; {why}")]
    Properties { why: String },
    #[error(transparent)]
    Stack(#[from] StackError),
    #[error(
        "expected the autoproxy-agent binary at {path} (from the AgentLayer layer), cannot read it: {source}"
    )]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: {source}")]
    NotAnAgent {
        path: PathBuf,
        #[source]
        source: ElfError,
    },
    #[error(
        "expected the layer's binary to hash to {expected} (the Sha256 property), it hashes to {got}"
    )]
    Sha256Mismatch { expected: String, got: String },
    #[error("expected bucket {bucket} (of account {account}) to exist; S3 answered NoSuchBucket")]
    NoBucket { bucket: String, account: String },
    #[error("s3://{bucket}/{key}: {operation} failed: {message}")]
    S3 {
        operation: &'static str,
        bucket: String,
        key: String,
        message: String,
    },
}

/// Why an invocation failed without answering CloudFormation (Lambda then retries it).
#[derive(Debug, thiserror::Error)]
pub enum PublisherError {
    #[error("expected {EXPECTED_REQUEST}, got {got}; no ResponseURL to answer: {why}")]
    Malformed { got: String, why: String },
    #[error("cannot encode the response: {0}")]
    Encode(#[from] serde_json::Error),
    #[error(transparent)]
    Response(#[from] ResponseError),
}

impl From<PublisherError> for Diagnostic {
    fn from(err: PublisherError) -> Self {
        let kind = match &err {
            PublisherError::Malformed { .. } => "InvalidEvent",
            PublisherError::Encode(_) => "Encode",
            PublisherError::Response(_) => "ResponseNotDelivered",
        };
        Diagnostic {
            error_type: kind.to_owned(),
            error_message: err.to_string(),
        }
    }
}

/// The fields every request carries that its answer echoes.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Envelope {
    #[serde(rename = "ResponseURL")]
    response_url: String,
    stack_id: String,
    request_id: String,
    logical_resource_id: String,
    #[serde(default)]
    physical_resource_id: Option<String>,
}

/// A request handled: the physical id, the attributes and a sentence for the stack's events.
#[derive(Debug, Clone)]
struct Done {
    physical_resource_id: String,
    data: HashMap<String, String>,
    reason: String,
}

/// The Lambda entry point.
pub async fn function_handler(
    deps: &Deps,
    event: LambdaEvent<Value>,
) -> Result<CloudFormationCustomResourceResponse, PublisherError> {
    handle(deps, event.payload).await
}

/// Handles one request and PUTs the answer to its `ResponseURL`; returns the answer sent.
/// Fails only when it could not answer (no `ResponseURL`, or the PUT failed).
pub async fn handle(
    deps: &Deps,
    payload: Value,
) -> Result<CloudFormationCustomResourceResponse, PublisherError> {
    let parsed = serde_json::from_value::<CloudFormationCustomResourceRequest>(payload.clone());
    let known = parsed.as_ref().ok().and_then(envelope_of);
    let (envelope, outcome) = match (parsed, known) {
        (Ok(request), Some(envelope)) => (envelope, run(deps, request).await),
        // Malformed past its envelope: still answer, or the stack waits an hour.
        (parsed, _) => {
            let why = match parsed {
                Err(err) => err.to_string(),
                Ok(_) => "got another RequestType".to_owned(),
            };
            let envelope = serde_json::from_value::<Envelope>(payload.clone()).map_err(|_| {
                PublisherError::Malformed {
                    got: payload.to_string().chars().take(300).collect(),
                    why: why.clone(),
                }
            })?;
            (envelope, Err(PublishError::Request { why }))
        }
    };
    let response = answer(&envelope, outcome);
    deps.responder
        .put(&envelope.response_url, serde_json::to_vec(&response)?)
        .await?;
    Ok(response)
}

/// The request's envelope; `None` for a request type CloudFormation does not send.
fn envelope_of(request: &CloudFormationCustomResourceRequest) -> Option<Envelope> {
    let envelope = |response_url: &str,
                    stack_id: &str,
                    request_id: &str,
                    logical_resource_id: &str,
                    physical_resource_id: Option<&str>| Envelope {
        response_url: response_url.to_owned(),
        stack_id: stack_id.to_owned(),
        request_id: request_id.to_owned(),
        logical_resource_id: logical_resource_id.to_owned(),
        physical_resource_id: physical_resource_id.map(str::to_owned),
    };
    match request {
        CloudFormationCustomResourceRequest::Create(r) => Some(envelope(
            &r.response_url,
            &r.stack_id,
            &r.request_id,
            &r.logical_resource_id,
            None,
        )),
        CloudFormationCustomResourceRequest::Update(r) => Some(envelope(
            &r.response_url,
            &r.stack_id,
            &r.request_id,
            &r.logical_resource_id,
            Some(&r.physical_resource_id),
        )),
        CloudFormationCustomResourceRequest::Delete(r) => Some(envelope(
            &r.response_url,
            &r.stack_id,
            &r.request_id,
            &r.logical_resource_id,
            Some(&r.physical_resource_id),
        )),
        _ => None,
    }
}

async fn run(
    deps: &Deps,
    request: CloudFormationCustomResourceRequest,
) -> Result<Done, PublishError> {
    match request {
        CloudFormationCustomResourceRequest::Create(r) => {
            publish(deps, &r.resource_properties, &r.stack_id).await
        }
        CloudFormationCustomResourceRequest::Update(r) => {
            publish(deps, &r.resource_properties, &r.stack_id).await
        }
        // Content-addressed objects are what a rollback returns to: keep them all.
        CloudFormationCustomResourceRequest::Delete(r) => Ok(Done {
            physical_resource_id: r.physical_resource_id,
            data: HashMap::new(),
            reason: "nothing deleted: published agents are content-addressed and kept for \
                     rollbacks"
                .to_owned(),
        }),
        _ => Err(PublishError::Request {
            why: "got another RequestType".to_owned(),
        }),
    }
}

/// The response for `outcome`. A failed Update keeps the resource's id (a new one would read as
/// a replacement); a failed Create gets one that names no object.
fn answer(
    envelope: &Envelope,
    outcome: Result<Done, PublishError>,
) -> CloudFormationCustomResourceResponse {
    let mut response = CloudFormationCustomResourceResponse::default();
    response.stack_id.clone_from(&envelope.stack_id);
    response.request_id.clone_from(&envelope.request_id);
    response
        .logical_resource_id
        .clone_from(&envelope.logical_resource_id);
    match outcome {
        Ok(done) => {
            info!(
                logical_resource_id = envelope.logical_resource_id,
                physical_resource_id = done.physical_resource_id,
                reason = done.reason,
                "SUCCESS"
            );
            response.status = CloudFormationCustomResourceResponseStatus::Success;
            response.physical_resource_id = done.physical_resource_id;
            response.data = done.data;
            response.reason = Some(done.reason);
        }
        Err(failure) => {
            let reason: String = failure.to_string().chars().take(MAX_REASON_CHARS).collect();
            error!(
                logical_resource_id = envelope.logical_resource_id,
                reason, "FAILED"
            );
            response.status = CloudFormationCustomResourceResponseStatus::Failed;
            response.physical_resource_id = envelope
                .physical_resource_id
                .clone()
                .unwrap_or_else(|| format!("{}-not-published", envelope.logical_resource_id));
            response.reason = Some(reason);
        }
    }
    response
}

/// Create and Update: read, check, hash and store the binary.
async fn publish(deps: &Deps, properties: &Value, stack_id: &str) -> Result<Done, PublishError> {
    let properties: Properties =
        serde_json::from_value(properties.clone()).map_err(|err| PublishError::Properties {
            why: format!("got {properties}: {err}"),
        })?;
    let stack = Stack::from_id(stack_id)?;
    let binary = read(&deps.agent).await?;
    let architecture = elf::machine(&binary).map_err(|source| PublishError::NotAnAgent {
        path: deps.agent.clone(),
        source,
    })?;
    let digest = Sha256::digest(&binary);
    let sha256 = hex(&digest);
    if let Some(expected) = &properties.sha256
        && *expected != sha256
    {
        return Err(PublishError::Sha256Mismatch {
            expected: expected.clone(),
            got: sha256,
        });
    }
    let published = Published::new(&properties.bucket_name, &stack, &sha256, architecture)?;
    let size = binary.len();
    let target = Target {
        bucket: &properties.bucket_name,
        key: &published.key,
        owner: &stack.account,
    };
    let stored = store(&deps.s3, &target, binary, &digest).await?;
    let place = format!("s3://{}/{}", target.bucket, target.key);
    let reason = match (stored, properties.when_bucket_missing) {
        (Stored::Uploaded, _) => {
            format!("published autoproxy-agent ({architecture}, {size} bytes) at {place}")
        }
        (Stored::AlreadyThere, _) => {
            format!(
                "autoproxy-agent ({architecture}, {size} bytes) already at {place}; not sent again"
            )
        }
        (Stored::NoBucket, WhenBucketMissing::Skip) => format!(
            "autoproxy-agent ({architecture}, {size} bytes) not uploaded: bucket {} does not \
             exist yet (WhenBucketMissing: Skip)",
            target.bucket
        ),
        (Stored::NoBucket, WhenBucketMissing::Fail) => {
            return Err(PublishError::NoBucket {
                bucket: target.bucket.to_owned(),
                account: stack.account,
            });
        }
    };
    Ok(Done {
        physical_resource_id: published.key.clone(),
        data: published.attributes(),
        reason,
    })
}

async fn read(path: &Path) -> Result<Vec<u8>, PublishError> {
    tokio::fs::read(path)
        .await
        .map_err(|source| PublishError::Read {
            path: path.to_owned(),
            source,
        })
}

fn hex(digest: &[u8]) -> String {
    digest.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// The object a binary goes to, in a bucket that must belong to the stack's account.
#[derive(Debug, Clone, Copy)]
struct Target<'a> {
    bucket: &'a str,
    key: &'a str,
    owner: &'a str,
}

/// Uploads `binary` unless its content-addressed key already holds an object of its size. S3
/// checks the upload against `digest` (`x-amz-checksum-sha256`), so a corrupted transfer fails
/// rather than lands at a key that promises this content.
async fn store(
    s3: &aws_sdk_s3::Client,
    target: &Target<'_>,
    binary: Vec<u8>,
    digest: &[u8],
) -> Result<Stored, PublishError> {
    let s3_error = |operation: &'static str, message: String| PublishError::S3 {
        operation,
        bucket: target.bucket.to_owned(),
        key: target.key.to_owned(),
        message,
    };
    let size = binary.len();
    let head = s3
        .head_object()
        .bucket(target.bucket)
        .key(target.key)
        .expected_bucket_owner(target.owner)
        .send()
        .await;
    match head {
        Ok(head) if head.content_length().and_then(|n| usize::try_from(n).ok()) == Some(size) => {
            return Ok(Stored::AlreadyThere);
        }
        // Another size at a content-addressed key is no copy of this binary: replace it.
        Ok(_) => {}
        // No such key, or no such bucket: HEAD has no body to tell which; the PUT does.
        Err(err) if matches!(err.as_service_error(), Some(HeadObjectError::NotFound(_))) => {}
        Err(err) => return Err(s3_error("HeadObject", DisplayErrorContext(err).to_string())),
    }
    let put = s3
        .put_object()
        .bucket(target.bucket)
        .key(target.key)
        .expected_bucket_owner(target.owner)
        .content_type("application/octet-stream")
        .checksum_sha256(aws_smithy_types::base64::encode(digest))
        .body(ByteStream::from(binary))
        .send()
        .await;
    match put {
        Ok(_) => Ok(Stored::Uploaded),
        Err(err) if err.as_service_error().and_then(|e| e.code()) == Some("NoSuchBucket") => {
            Ok(Stored::NoBucket)
        }
        Err(err) => Err(s3_error("PutObject", DisplayErrorContext(err).to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn envelope(physical: Option<&str>) -> Envelope {
        Envelope {
            response_url: "http://127.0.0.1/r".to_owned(),
            stack_id: "arn:aws:cloudformation:us-east-1:123456789012:stack/s/1".to_owned(),
            request_id: "req".to_owned(),
            logical_resource_id: "AgentBinary".to_owned(),
            physical_resource_id: physical.map(str::to_owned),
        }
    }

    #[test]
    fn a_failure_keeps_the_resource_id_it_had_or_names_no_object() {
        let failure = || PublishError::Sha256Mismatch {
            expected: "a".into(),
            got: "b".into(),
        };
        let updated = answer(
            &envelope(Some("autoproxy-agent/a/autoproxy-agent")),
            Err(failure()),
        );
        assert_eq!(
            updated.status,
            CloudFormationCustomResourceResponseStatus::Failed
        );
        assert_eq!(
            updated.physical_resource_id,
            "autoproxy-agent/a/autoproxy-agent"
        );
        let created = answer(&envelope(None), Err(failure()));
        assert_eq!(created.physical_resource_id, "AgentBinary-not-published");
        assert!(created.data.is_empty());
        let reason = created.reason.unwrap_or_default();
        assert!(
            reason.contains("hash to a") && reason.contains("hashes to b"),
            "{reason}"
        );
    }

    #[test]
    fn a_long_reason_still_fits_the_response_limit() {
        let failure = PublishError::Properties {
            why: "x".repeat(10_000),
        };
        let response = answer(&envelope(None), Err(failure));
        let body = serde_json::to_vec(&response).expect("encodes");
        assert!(body.len() < 4096, "{} bytes", body.len());
    }

    #[test]
    fn properties_are_exactly_the_documented_ones() {
        let parse = |v: Value| serde_json::from_value::<Properties>(v).map_err(|e| e.to_string());
        let ok = parse(
            serde_json::json!({"ServiceToken": "arn:x", "BucketName": "b",
            "Layer": "arn:l:1", "WhenBucketMissing": "Skip"}),
        )
        .expect("valid");
        assert_eq!(ok.when_bucket_missing, WhenBucketMissing::Skip);
        assert_eq!(
            parse(serde_json::json!({"BucketName": "b"}))
                .expect("valid")
                .when_bucket_missing,
            WhenBucketMissing::Fail
        );
        let typo = parse(serde_json::json!({"Bucket": "b"})).expect_err("unknown field");
        assert!(typo.contains("Bucket"), "{typo}");
        let mode = parse(serde_json::json!({"BucketName": "b", "WhenBucketMissing": "Ignore"}))
            .expect_err("unknown mode");
        assert!(mode.contains("Ignore"), "{mode}");
    }

    #[test]
    fn hex_is_lower_case_two_digits_a_byte() {
        assert_eq!(hex(&[0x00, 0x0f, 0xab, 0xff]), "000fabff");
    }
}
