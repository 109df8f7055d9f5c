//! The apply's first steps: the S3 client, the download of one version of the config, and
//! its verification (header, sha256, what the config must declare).

use autoproxy::artifact::{self, MapFiles};

use super::{DOWNLOAD_TIMEOUT, Failure, MAX_CONFIG_BYTES, NewConfig, Run, fail, log, oneline};
use crate::haproxy::{self, DeclaredSocket};

impl Run {
    pub(super) async fn s3(&mut self) -> aws_sdk_s3::Client {
        if let Some(client) = &self.s3 {
            return client.clone();
        }
        let sdk = crate::sdk::load(crate::sdk::Calls::Apply).await;
        let client = aws_sdk_s3::Client::new(&sdk);
        self.s3 = Some(client.clone());
        client
    }

    pub(super) async fn download(&mut self) -> Result<(String, String), Failure> {
        let s3 = self.s3().await;
        let params = &self.params;
        let source = format!(
            "s3://{}/{} (version {})",
            params.bucket,
            params.key,
            if params.version.is_empty() {
                "latest"
            } else {
                &params.version
            }
        );
        let version = Some(params.version.as_str()).filter(|v| !v.is_empty());
        let fetched = tokio::time::timeout(
            DOWNLOAD_TIMEOUT,
            autoproxy::s3::get_bytes(&s3, &params.bucket, &params.key, version, MAX_CONFIG_BYTES),
        )
        .await;
        let (bytes, version) = match fetched {
            Ok(Ok(got)) => got,
            Ok(Err(err)) => return fail(format!("download of {source} failed: {}", oneline(&err))),
            Err(_) => {
                return fail(format!(
                    "download of {source} failed: no answer within {} s",
                    DOWNLOAD_TIMEOUT.as_secs()
                ));
            }
        };
        log(
            "download",
            &format!("{source}: got version {version}, {} bytes", bytes.len()),
        );
        let text = String::from_utf8(bytes)
            .or_else(|_| fail(format!("version {version} is not UTF-8 text")))?;
        Ok((text, version))
    }

    pub(super) fn verify(&self, text: String, version: &str) -> Result<NewConfig, Failure> {
        let header = artifact::parse_header(&text).or_else(|err| {
            fail(match err {
                artifact::HeaderError::Mismatch { header, body } => format!(
                    "sha256 mismatch in version {version}: the header says {header}, the body hashes to {body}"
                ),
                other => format!("version {version} has no valid header: {other}"),
            })
        })?;
        let generation = header.generation;
        let description = haproxy::global_value(&text, "description").unwrap_or_default();
        let want = format!("autoproxy generation {generation}");
        if description != want {
            return fail(format!(
                "generation {generation} declares 'description {description}' in global, expected '{want}': its running generation could not be checked"
            ));
        }
        let socket = match haproxy::declared_socket(&text) {
            DeclaredSocket::Path(socket) => socket,
            DeclaredSocket::None => {
                return fail(format!(
                    "generation {generation} declares no 'stats socket <path>' in global: its running generation could not be checked"
                ));
            }
            DeclaredSocket::Unsafe(socket) => {
                return fail(format!(
                    "generation {generation} declares stats socket '{socket}': expected an absolute path of letters, digits and . _ / - only"
                ));
            }
        };
        log(
            "verify",
            &format!(
                "generation {generation}, sha256 {} matches its header",
                header.sha256
            ),
        );
        let maps = MapFiles::named_by(&text, generation);
        Ok(NewConfig {
            text,
            generation,
            socket,
            maps,
        })
    }
}
