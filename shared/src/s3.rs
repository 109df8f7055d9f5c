//! The config bucket: the current config (with its provenance), the manifest, an optional
//! custom template, and the conditional writes that publish a new generation.

use std::collections::HashMap;

use aws_sdk_s3::Client;
use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_s3::primitives::ByteStream;

use crate::artifact::{
    self, Header, META_GENERATED_AT, META_GENERATION, META_RULES, META_SHA256, META_TRIGGER,
};
use crate::manifest::Manifest;
use crate::rules::Rule;

/// What S3 answers a conditional put that lost a race: 412 Precondition Failed (the object
/// changed since it was read), or 409 Conflict (a concurrent conditional write in flight).
const LOST_RACE: [u16; 2] = [412, 409];

/// The largest object this function reads (config, manifest, template): a bound, not a guess
/// at real sizes (10,000 routes render to about 3 MB; the manifest is larger).
pub const MAX_OBJECT_BYTES: usize = 256 * 1024 * 1024;

/// A failed S3 call, or an object that is not what it should be.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("s3://{bucket}/{key}: {operation} failed: {message}")]
    Call {
        operation: &'static str,
        bucket: String,
        key: String,
        message: String,
    },
    #[error(
        "s3://{bucket}/{key} changed while this run worked (a concurrent writer?); nothing was \
         published, the next run starts from the new object"
    )]
    Conflict { bucket: String, key: String },
    #[error("s3://{bucket}/{key}: expected {expected}, got {got}")]
    Invalid {
        bucket: String,
        key: String,
        expected: &'static str,
        got: String,
    },
}

/// The config in S3 as this run found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CurrentConfig {
    pub text: String,
    /// Its provenance, from the object metadata or else the header; `None` for a file that
    /// was not written by autoproxy.
    pub header: Option<Header>,
    pub etag: Option<String>,
    pub version_id: Option<String>,
}

impl CurrentConfig {
    pub fn generation(&self) -> u64 {
        self.header.as_ref().map_or(0, |h| h.generation)
    }

    pub fn rules(&self) -> usize {
        self.header.as_ref().map_or(0, |h| h.rules)
    }
}

/// When the config was last published, and by which trigger (`route53:…` for an event run).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LastPublish {
    pub at: std::time::SystemTime,
    pub trigger: Option<String>,
}

/// One object fetched: its text, metadata, ETag and version.
#[derive(Debug)]
struct Fetched {
    text: String,
    metadata: HashMap<String, String>,
    etag: Option<String>,
    version_id: Option<String>,
}

/// The bucket and keys this deployment writes.
#[derive(Debug, Clone)]
pub struct ConfigStore {
    client: Client,
    pub bucket: String,
    pub config_key: String,
    pub manifest_key: String,
}

impl ConfigStore {
    pub fn new(client: Client, bucket: &str, config_key: &str, manifest_key: &str) -> Self {
        ConfigStore {
            client,
            bucket: bucket.to_owned(),
            config_key: config_key.to_owned(),
            manifest_key: manifest_key.to_owned(),
        }
    }

    // By value: every caller hands over the error it is done with (`map_err`).
    #[allow(clippy::needless_pass_by_value)]
    fn call_error<E>(&self, operation: &'static str, key: &str, err: SdkError<E>) -> StoreError
    where
        E: ProvideErrorMetadata + std::error::Error + 'static,
    {
        StoreError::Call {
            operation,
            bucket: self.bucket.clone(),
            key: key.to_owned(),
            message: crate::aws_error::reason(&err),
        }
    }

    async fn fetch(&self, key: &str) -> Result<Option<Fetched>, StoreError> {
        let response = match self
            .client
            .get_object()
            .bucket(&self.bucket)
            .key(key)
            .send()
            .await
        {
            Ok(response) => response,
            Err(err) if err.as_service_error().is_some_and(|e| e.is_no_such_key()) => {
                return Ok(None);
            }
            Err(err) => return Err(self.call_error("GetObject", key, err)),
        };
        let invalid = |expected, got: String| StoreError::Invalid {
            bucket: self.bucket.clone(),
            key: key.to_owned(),
            expected,
            got,
        };
        if response
            .content_length()
            .is_some_and(|len| usize::try_from(len).map_or(true, |len| len > MAX_OBJECT_BYTES))
        {
            return Err(invalid(
                "an object of at most 256 MiB",
                format!("{:?} bytes", response.content_length()),
            ));
        }
        let metadata = response.metadata().cloned().unwrap_or_default();
        let etag = response.e_tag().map(str::to_owned);
        let version_id = response.version_id().map(str::to_owned);
        let bytes = response
            .body
            .collect()
            .await
            .map_err(|err| invalid("a readable body", err.to_string()))?
            .into_bytes();
        let text = String::from_utf8(bytes.to_vec())
            .map_err(|err| invalid("UTF-8 text", err.to_string()))?;
        Ok(Some(Fetched {
            text,
            metadata,
            etag,
            version_id,
        }))
    }

    /// The current config, or `None` before the first publish.
    pub async fn current_config(&self) -> Result<Option<CurrentConfig>, StoreError> {
        let Some(fetched) = self.fetch(&self.config_key).await? else {
            return Ok(None);
        };
        // A generation in the metadata that is not one would number the next config from
        // garbage (a huge value could wrap): refused, and nothing is written.
        if let Some(raw) = fetched.metadata.get(META_GENERATION)
            && artifact::parse_generation(raw).is_none()
        {
            return Err(StoreError::Invalid {
                bucket: self.bucket.clone(),
                key: self.config_key.clone(),
                expected: "metadata generation to be a whole number of at most 18 digits",
                got: format!("{raw:?}"),
            });
        }
        let header = header_from_metadata(&fetched.metadata)
            .or_else(|| artifact::parse_header(&fetched.text).ok());
        Ok(Some(CurrentConfig {
            text: fetched.text,
            header,
            etag: fetched.etag,
            version_id: fetched.version_id,
        }))
    }

    /// When the current config was last written (its `Last-Modified`) and by which trigger
    /// (its metadata), or `None` before the first publish. One `HeadObject`: the config's
    /// bytes are not read.
    pub async fn last_publish(&self) -> Result<Option<LastPublish>, StoreError> {
        let response = match self
            .client
            .head_object()
            .bucket(&self.bucket)
            .key(&self.config_key)
            .send()
            .await
        {
            Ok(response) => response,
            Err(err) if err.as_service_error().is_some_and(|e| e.is_not_found()) => {
                return Ok(None);
            }
            Err(err) => return Err(self.call_error("HeadObject", &self.config_key, err)),
        };
        let at = response
            .last_modified()
            .and_then(|time| std::time::SystemTime::try_from(*time).ok());
        let trigger = response
            .metadata()
            .and_then(|metadata| metadata.get(META_TRIGGER))
            .cloned();
        Ok(at.map(|at| LastPublish { at, trigger }))
    }

    /// The manifest, checked against `rules` (see [`Manifest::from_json`]); `None` when there
    /// is none yet, or it is of another format.
    pub async fn manifest(&self, rules: &[Rule]) -> Result<Option<Manifest>, StoreError> {
        let Some(fetched) = self.fetch(&self.manifest_key).await? else {
            return Ok(None);
        };
        Manifest::from_json(&fetched.text, rules).map_err(|err| StoreError::Invalid {
            bucket: self.bucket.clone(),
            key: self.manifest_key.clone(),
            expected: "an autoproxy manifest (JSON)",
            got: err.to_string(),
        })
    }

    /// A template object's text.
    pub async fn template(&self, key: &str) -> Result<String, StoreError> {
        match self.fetch(key).await? {
            Some(fetched) => Ok(fetched.text),
            None => Err(StoreError::Invalid {
                bucket: self.bucket.clone(),
                key: key.to_owned(),
                expected: "a template object (TEMPLATE_KEY)",
                got: "no such key".to_owned(),
            }),
        }
    }

    pub async fn put_manifest(&self, manifest: &Manifest) -> Result<(), StoreError> {
        self.client
            .put_object()
            .bucket(&self.bucket)
            .key(&self.manifest_key)
            .content_type("application/json")
            .body(ByteStream::from(manifest.to_json().into_bytes()))
            .send()
            .await
            .map_err(|err| self.call_error("PutObject", &self.manifest_key, err))?;
        Ok(())
    }

    /// Writes the config only if the object is still the one this run read (`If-Match` on its
    /// ETag, or `If-None-Match: *` when there was none), so a concurrent writer can never be
    /// overwritten by an older view. Returns the new version id.
    pub async fn put_config(
        &self,
        text: &str,
        header: &Header,
        read: Option<&CurrentConfig>,
    ) -> Result<Option<String>, StoreError> {
        let mut request = self
            .client
            .put_object()
            .bucket(&self.bucket)
            .key(&self.config_key)
            .content_type("text/plain; charset=utf-8")
            .body(ByteStream::from(text.as_bytes().to_vec()));
        for (key, value) in header_metadata(header) {
            request = request.metadata(key, value);
        }
        request = match read.and_then(|current| current.etag.as_deref()) {
            Some(etag) => request.if_match(etag),
            None => request.if_none_match("*"),
        };
        match request.send().await {
            Ok(out) => Ok(out.version_id().map(str::to_owned)),
            Err(err)
                if err
                    .raw_response()
                    .is_some_and(|r| LOST_RACE.contains(&r.status().as_u16())) =>
            {
                Err(StoreError::Conflict {
                    bucket: self.bucket.clone(),
                    key: self.config_key.clone(),
                })
            }
            Err(err) => Err(self.call_error("PutObject", &self.config_key, err)),
        }
    }
}

/// One object's bytes and its version id (`null` in a bucket without versioning), a failure
/// as one line: the download the proxies' agent does (a version given: that one), and the
/// SSM agent's own `aws:downloadContent`. An object larger than `limit` bytes is refused
/// before its body is read when S3 says its length, and read no further than the limit when
/// it does not (or says less than it sends): the reader's memory is bounded either way.
pub async fn get_bytes(
    client: &Client,
    bucket: &str,
    key: &str,
    version: Option<&str>,
    limit: usize,
) -> Result<(Vec<u8>, String), String> {
    let mut object = client
        .get_object()
        .bucket(bucket)
        .key(key)
        .set_version_id(version.map(str::to_owned))
        .send()
        .await
        .map_err(|err| crate::aws_error::reason(&err))?;
    let too_large = |got: String| format!("expected an object of at most {limit} bytes, got {got}");
    let said = object.content_length().unwrap_or(0);
    if usize::try_from(said).map_or(true, |said| said > limit) {
        return Err(too_large(format!("{said} bytes")));
    }
    let version = object.version_id().unwrap_or("null").to_owned();
    let mut bytes = Vec::with_capacity(usize::try_from(said).unwrap_or(0));
    while let Some(chunk) = object
        .body
        .try_next()
        .await
        .map_err(|err| err.to_string())?
    {
        if bytes.len() + chunk.len() > limit {
            return Err(too_large(format!("more than {limit} bytes in its body")));
        }
        bytes.extend_from_slice(&chunk);
    }
    Ok((bytes, version))
}

/// The header's values as S3 metadata.
pub fn header_metadata(header: &Header) -> Vec<(&'static str, String)> {
    vec![
        (META_GENERATION, header.generation.to_string()),
        (META_SHA256, header.sha256.clone()),
        (META_GENERATED_AT, header.generated_at.clone()),
        (META_TRIGGER, header.trigger.clone()),
        (META_RULES, header.rules.to_string()),
    ]
}

fn header_from_metadata(metadata: &HashMap<String, String>) -> Option<Header> {
    Some(Header {
        generation: artifact::parse_generation(metadata.get(META_GENERATION)?)?,
        sha256: metadata.get(META_SHA256)?.clone(),
        generated_at: metadata.get(META_GENERATED_AT).cloned().unwrap_or_default(),
        trigger: metadata.get(META_TRIGGER).cloned().unwrap_or_default(),
        rules: metadata.get(META_RULES)?.parse().ok()?,
    })
}
