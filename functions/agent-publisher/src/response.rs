//! The answer to CloudFormation: one HTTP PUT of the JSON response to the request's
//! `ResponseURL`, a presigned S3 URL.
//!
//! A custom resource that never answers holds its stack for an hour, so this path must be
//! dependable and small. It uses the HTTP stack the AWS SDK's default client already builds
//! (hyper 1, rustls on aws-lc-rs, the system's root certificates), not a second client library:
//! nothing more to build or ship. The presigned URL signs an empty `Content-Type`, so the PUT
//! sends exactly that. Plain `http` is accepted only to a loopback address: that is a test's
//! stand-in for the URL, never something CloudFormation sends.

use std::net::IpAddr;
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::{Method, Request, Uri};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

/// How long one PUT may take; CloudFormation's URL stays valid for two hours, and an invocation
/// that fails here is retried by Lambda (custom resources are invoked asynchronously).
const TIMEOUT: Duration = Duration::from_secs(30);

/// Why the answer did not reach CloudFormation.
#[derive(Debug, thiserror::Error)]
pub enum ResponseError {
    #[error("cannot load the system's root certificates for HTTPS: {0}")]
    Roots(#[source] std::io::Error),
    #[error("expected ResponseURL to be an https URL (or http to a loopback address), got {url:?}")]
    Url { url: String },
    #[error("PUT of the response to {host}: {message}")]
    Put { host: String, message: String },
    #[error("PUT of the response to {host}: answered {status}: {body}")]
    Refused {
        host: String,
        status: u16,
        body: String,
    },
}

/// Sends responses; one per cold start.
#[derive(Debug, Clone)]
pub struct Responder {
    client: Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
}

impl Responder {
    /// A client for https URLs, with the system's root certificates (and http for tests).
    pub fn new() -> Result<Responder, ResponseError> {
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_provider_and_native_roots(rustls::crypto::aws_lc_rs::default_provider())
            .map_err(ResponseError::Roots)?
            .https_or_http()
            .enable_http1()
            .build();
        let client = Client::builder(TokioExecutor::new()).build(https);
        Ok(Responder { client })
    }

    /// PUTs `body` to `url` with an empty `Content-Type`; any 2xx answer is success.
    pub async fn put(&self, url: &str, body: Vec<u8>) -> Result<(), ResponseError> {
        let uri = checked_uri(url)?;
        // The host only: the query holds the URL's signature, which the logs need not keep.
        let host = uri.host().unwrap_or_default().to_owned();
        let put_error = |message: String| ResponseError::Put {
            host: host.clone(),
            message,
        };
        let request = Request::builder()
            .method(Method::PUT)
            .uri(uri.clone())
            .header(hyper::header::CONTENT_TYPE, "")
            .header(hyper::header::CONTENT_LENGTH, body.len())
            .body(Full::new(Bytes::from(body)))
            .map_err(|err| put_error(err.to_string()))?;
        let exchange = async {
            let response = self
                .client
                .request(request)
                .await
                .map_err(|err| put_error(format!("{err:?}")))?;
            let status = response.status();
            let answer = response
                .into_body()
                .collect()
                .await
                .map_err(|err| put_error(err.to_string()))?
                .to_bytes();
            if status.is_success() {
                Ok(())
            } else {
                Err(ResponseError::Refused {
                    host: host.clone(),
                    status: status.as_u16(),
                    body: String::from_utf8_lossy(&answer).chars().take(500).collect(),
                })
            }
        };
        tokio::time::timeout(TIMEOUT, exchange)
            .await
            .map_err(|_| put_error(format!("no answer within {} s", TIMEOUT.as_secs())))?
    }
}

/// `url` as a URI, if it is https, or http to a loopback address.
fn checked_uri(url: &str) -> Result<Uri, ResponseError> {
    let refuse = || ResponseError::Url {
        url: url.chars().take(200).collect(),
    };
    let uri: Uri = url.parse().map_err(|_| refuse())?;
    let host = uri.host().ok_or_else(refuse)?;
    match uri.scheme_str() {
        Some("https") => Ok(uri),
        Some("http") if is_loopback(host) => Ok(uri),
        _ => Err(refuse()),
    }
}

fn is_loopback(host: &str) -> bool {
    host == "localhost"
        || host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_https_or_loopback_http_is_answered() {
        for (url, ok) in [
            (
                "https://cloudformation-custom-resource-response-useast1.s3.amazonaws.com/arn%3Aaws?X-Amz-Signature=ab",
                true,
            ),
            ("http://127.0.0.1:8080/response", true),
            ("http://[::1]:8080/response", true),
            ("http://localhost/response", true),
            ("http://example.com/response", false),
            ("http://10.0.0.1/response", false),
            ("ftp://127.0.0.1/response", false),
            ("/response", false),
            ("", false),
        ] {
            assert_eq!(checked_uri(url).is_ok(), ok, "{url}");
        }
        let err = checked_uri("http://example.com/x").expect_err("plain http to a remote host");
        assert!(
            err.to_string().contains("got \"http://example.com/x\""),
            "{err}"
        );
    }
}
