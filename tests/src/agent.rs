//! The autoproxy-agent binary as the stack publishes it: at the content-addressed key
//! `autoproxy-agent/<sha256>/autoproxy-agent` of the config bucket, with the attributes the
//! `AgentBinary` custom resource returns (`Sha256`, `Key`, `Architecture`, `Url`), which the
//! apply document's deploy resolves its `!GetAtt`s to.

use std::path::PathBuf;

/// The bucket the harness's documents name when no test said otherwise.
pub const BUCKET: &str = "autoproxy-config";

/// One published agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Published {
    pub binary: PathBuf,
    pub sha256: String,
    pub key: String,
    /// `uname -m` of the machine it runs on.
    pub architecture: String,
    pub url: String,
}

impl Published {
    /// The workspace's agent (built on first use) as it would be published to `bucket`; nothing
    /// is uploaded.
    pub fn describe(bucket: &str) -> Published {
        static SHA: std::sync::OnceLock<String> = std::sync::OnceLock::new();
        let binary = crate::agent_binary();
        let sha256 = SHA
            .get_or_init(|| {
                let bytes = std::fs::read(&binary).expect("read the agent binary");
                autoproxy::artifact::sha256_hex(&bytes)
            })
            .clone();
        let key = format!("autoproxy-agent/{sha256}/autoproxy-agent");
        Published {
            url: format!("https://{bucket}.s3.us-east-1.amazonaws.com/{key}"),
            binary,
            sha256,
            key,
            architecture: std::env::consts::ARCH.to_owned(),
        }
    }

    /// Uploads the agent to `bucket` where the stack publishes it.
    pub async fn publish(sdk: &aws_config::SdkConfig, bucket: &str) -> Published {
        let published = Published::describe(bucket);
        let body = aws_sdk_s3::primitives::ByteStream::from_path(&published.binary)
            .await
            .expect("read the agent binary");
        aws_sdk_s3::Client::new(sdk)
            .put_object()
            .bucket(bucket)
            .key(&published.key)
            .body(body)
            .send()
            .await
            .expect("upload the agent");
        published
    }

    /// The custom resource's attributes, for the document's `!GetAtt AgentBinary.*`.
    pub fn attributes(&self) -> Vec<(String, String)> {
        [
            ("AgentBinary.Sha256", &self.sha256),
            ("AgentBinary.Key", &self.key),
            ("AgentBinary.Architecture", &self.architecture),
            ("AgentBinary.Url", &self.url),
        ]
        .into_iter()
        .map(|(name, value)| (name.to_owned(), value.clone()))
        .collect()
    }
}
