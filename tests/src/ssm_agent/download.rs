//! One `aws:downloadContent` step: read from the document, and carried out against moto's S3
//! as the SSM agent carries it out.

use std::path::{Path, PathBuf};

use serde_yaml::Value;

use super::error::AgentError;
use super::shape::{expect_str, get, shape};

/// One `aws:downloadContent` step from S3: the object's URL and the directory it goes to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Download {
    pub name: String,
    /// `https://<bucket>.s3.<region>.amazonaws.com/<key>`, as the SSM agent takes it.
    pub url: String,
    pub destination: PathBuf,
}

impl Download {
    pub(super) fn from_step(step: &Value) -> Result<Download, AgentError> {
        expect_str(get(step, &["action"])?, "aws:downloadContent", "action")?;
        expect_str(get(step, &["inputs", "sourceType"])?, "S3", "sourceType")?;
        let info = get(step, &["inputs", "sourceInfo"])?
            .as_str()
            .ok_or_else(|| shape("sourceInfo as a JSON string", "something else"))?;
        let info: serde_json::Value = serde_json::from_str(info)
            .map_err(|err| shape("sourceInfo as JSON", &err.to_string()))?;
        let url = info
            .get("path")
            .and_then(serde_json::Value::as_str)
            .ok_or_else(|| shape("sourceInfo {\"path\": URL}", &info.to_string()))?;
        let destination = get(step, &["inputs", "destinationPath"])?
            .as_str()
            .ok_or_else(|| shape("destinationPath as a string", "something else"))?;
        Ok(Download {
            name: get(step, &["name"])?
                .as_str()
                .unwrap_or("download")
                .to_owned(),
            url: url.to_owned(),
            destination: PathBuf::from(destination),
        })
    }

    /// (bucket, key) of a virtual-hosted S3 URL.
    pub fn object(&self) -> Option<(&str, &str)> {
        let rest = self.url.strip_prefix("https://")?;
        let (host, key) = rest.split_once('/')?;
        let (bucket, _) = host.split_once(".s3.")?;
        Some((bucket, key))
    }

    /// Fetches the object into the destination directory under its key's last part, as the
    /// SSM agent does, from the S3 endpoint of `env` (moto). A failure is the step's output.
    pub(super) fn run(&self, env: &[(String, String)]) -> Result<String, String> {
        let (bucket, key) = self
            .object()
            .ok_or_else(|| format!("{}: not an S3 object URL", self.url))?;
        let client = S3Client::from_env(env)?;
        let (dir, name) = self.saved_as(key);
        std::fs::create_dir_all(&dir).map_err(|err| err.to_string())?;
        let target = dir.join(name);
        match client.fetch(bucket, key, &target) {
            Ok(()) => Ok(format!(
                "downloaded s3://{bucket}/{key} to {}",
                target.display()
            )),
            Err(err) => Err(format!("s3://{bucket}/{key}: {err}")),
        }
    }

    /// Where the SSM agent saves one object, as (directory, file name): into
    /// `destinationPath` under the key's last part when that path is a directory or ends with
    /// '/', else as that path itself.
    fn saved_as(&self, key: &str) -> (PathBuf, String) {
        let destination = self.destination.to_string_lossy();
        if destination.ends_with('/') || self.destination.is_dir() {
            (
                self.destination.clone(),
                key.rsplit('/').next().unwrap_or(key).to_owned(),
            )
        } else {
            (
                self.destination
                    .parent()
                    .map_or_else(|| PathBuf::from("/"), Path::to_path_buf),
                self.destination
                    .file_name()
                    .map_or_else(String::new, |n| n.to_string_lossy().into_owned()),
            )
        }
    }
}

/// What the download needs of the environment the script gets: moto's S3 endpoint and the
/// credentials for it.
struct S3Client {
    endpoint: String,
    access: String,
    secret: String,
    region: String,
}

impl S3Client {
    fn from_env(env: &[(String, String)]) -> Result<S3Client, String> {
        let endpoint = env
            .iter()
            .rev()
            .find(|(k, _)| k == "AWS_ENDPOINT_URL_S3" || k == "AWS_ENDPOINT_URL")
            .map(|(_, v)| v.trim_end_matches('/').to_owned())
            .ok_or("no AWS_ENDPOINT_URL to download from")?;
        let var = |name: &str| {
            env.iter()
                .rev()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
                .unwrap_or_default()
        };
        Ok(S3Client {
            endpoint,
            access: var("AWS_ACCESS_KEY_ID"),
            secret: var("AWS_SECRET_ACCESS_KEY"),
            region: var("AWS_REGION"),
        })
    }

    /// Writes object `key` of `bucket` to `target`, on a thread and runtime of its own (the
    /// caller may be inside one).
    fn fetch(self, bucket: &str, key: &str, target: &Path) -> Result<(), String> {
        let (bucket, key, target) = (bucket.to_owned(), key.to_owned(), target.to_owned());
        std::thread::spawn(move || -> Result<(), String> {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|err| err.to_string())?;
            rt.block_on(async {
                let config = aws_sdk_s3::Config::builder()
                    .behavior_version(aws_config::BehaviorVersion::latest())
                    .endpoint_url(self.endpoint)
                    .region(aws_sdk_s3::config::Region::new(self.region))
                    .credentials_provider(aws_sdk_s3::config::Credentials::new(
                        self.access,
                        self.secret,
                        None,
                        None,
                        "ssm-agent-stand-in",
                    ))
                    .force_path_style(true)
                    .build();
                let client = aws_sdk_s3::Client::from_conf(config);
                let (bytes, _) = autoproxy::s3::get_bytes(
                    &client,
                    &bucket,
                    &key,
                    None,
                    autoproxy::s3::MAX_OBJECT_BYTES,
                )
                .await?;
                std::fs::write(&target, &bytes).map_err(|err| err.to_string())
            })
        })
        .join()
        .map_err(|_| "the download thread panicked".to_owned())?
    }
}
