//! A moto server per test: the real AWS stand-in (Route53, S3, SSM, STS) on a loopback port.

use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use aws_config::{BehaviorVersion, SdkConfig, retry::RetryConfig};
use aws_sdk_s3::config::{Credentials, Region};

/// The account moto answers as when no role is assumed.
pub const OWN_ACCOUNT: &str = "123456789012";
pub const REGION: &str = "us-east-1";

/// A running `moto_server`, stopped when dropped.
#[derive(Debug)]
pub struct Moto {
    child: Child,
    pub port: u16,
}

impl Moto {
    /// Starts a fresh server on a free loopback port and waits until it answers.
    pub fn start() -> Moto {
        let port = free_port();
        let exe = crate::tool("moto_server");
        let child = Command::new(&exe)
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|err| {
                panic!("cannot start {exe:?} ({err}); run .ci/tools.sh to install the test tools")
            });
        let moto = Moto { child, port };
        let deadline = Instant::now() + Duration::from_secs(20);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "moto_server did not listen on {port} within 20 s"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        moto
    }

    /// The server's process id (so an interrupted demo can stop it).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Environment for a child process (AWS CLI, the functions' binaries) to use this server.
    pub fn env(&self) -> Vec<(String, String)> {
        [
            ("AWS_ENDPOINT_URL", self.endpoint()),
            ("AWS_ACCESS_KEY_ID", "testing".to_owned()),
            ("AWS_SECRET_ACCESS_KEY", "testing".to_owned()),
            ("AWS_REGION", REGION.to_owned()),
            ("AWS_DEFAULT_REGION", REGION.to_owned()),
            ("AWS_EC2_METADATA_DISABLED", "true".to_owned()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect()
    }

    /// SDK configuration pointing at this server, with test credentials and no retries (a
    /// call moto does not implement answers 500; retrying it only slows the test down).
    pub async fn sdk_config(&self) -> SdkConfig {
        aws_config::defaults(BehaviorVersion::latest())
            .endpoint_url(self.endpoint())
            .region(Region::new(REGION))
            .credentials_provider(Credentials::new("testing", "testing", None, None, "moto"))
            .retry_config(RetryConfig::disabled())
            .load()
            .await
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A loopback port nobody listens on right now.
pub fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral loopback port");
    listener.local_addr().expect("local address").port()
}

/// Where the project's tools are installed by `.ci/tools.sh`.
pub fn tools_bin() -> PathBuf {
    let cache = std::env::var_os("AUTOPROXY_CACHE")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/autoproxy")))
        .unwrap_or_else(|| PathBuf::from(".cache/autoproxy"));
    cache.join("bin")
}
