//! A moto server per test: the real AWS stand-in (Route53, S3, SSM, STS) on a loopback port.

use std::collections::BTreeSet;
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::Duration;

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
    /// Starts a fresh server on a free loopback port and waits until it answers. A server that
    /// exits before it listens (its port was taken in between) is started again on another.
    pub fn start() -> Moto {
        Moto::start_with(&[])
    }

    /// [`Moto::start`] with extra environment for the server (`INITIAL_NO_AUTH_ACTION_COUNT`
    /// turns IAM enforcement on after that many calls).
    pub fn start_with(env: &[(&str, &str)]) -> Moto {
        for _attempt in 0..3 {
            let mut moto = Moto::spawn(free_port(), env);
            if moto.wait_listening() {
                return moto;
            }
        }
        panic!("moto_server exited before it listened, three times over");
    }

    /// A server on a chosen port (the local stand-in's, which its env file names).
    pub fn start_on(port: u16) -> Moto {
        let mut moto = Moto::spawn(port, &[]);
        assert!(
            moto.wait_listening(),
            "moto_server could not listen on 127.0.0.1:{port}: is the port taken?"
        );
        moto
    }

    fn spawn(port: u16, env: &[(&str, &str)]) -> Moto {
        let exe = crate::tool("moto_server");
        let child = Command::new(&exe)
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|err| {
                panic!("cannot start {exe:?} ({err}); run .ci/tools.sh to install the test tools")
            });
        Moto { child, port }
    }

    /// Waits until this server listens; false when it exited first.
    fn wait_listening(&mut self) -> bool {
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], self.port));
        let child = &mut self.child;
        match crate::wait_listening(addr, Duration::from_secs(20), || {
            matches!(child.try_wait(), Ok(Some(_)))
        }) {
            crate::Listening::Yes => true,
            crate::Listening::Gone => false,
            crate::Listening::TimedOut => {
                panic!("moto_server did not listen on {} within 20 s", self.port)
            }
        }
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

/// A loopback port nobody listens on right now, for a server started next (moto, HAProxy).
///
/// Taken below the kernel's ephemeral range and never twice by this process: a port from
/// `bind(0)` is released before the server binds it (moto needs about a second to start),
/// and in that gap the kernel may hand it to any other `bind(0)` or outgoing connection; the
/// server then fails to bind while its test talks to whoever holds the port.
pub fn free_port() -> u16 {
    const LOWEST: u32 = 10_000;
    static HANDED_OUT: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());
    let mut handed_out = HANDED_OUT
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let ephemeral_low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse::<u32>().ok())
        .unwrap_or(32_768);
    let span = ephemeral_low.saturating_sub(LOWEST).max(1);
    // Processes started one after another begin at different places.
    let start = std::process::id().wrapping_mul(7_919) % span;
    (0..span)
        .map(|i| LOWEST + (start + handed_out.len() as u32 + i) % span)
        .filter_map(|port| u16::try_from(port).ok())
        .find(|port| !handed_out.contains(port) && TcpListener::bind(("127.0.0.1", *port)).is_ok())
        .inspect(|port| {
            handed_out.insert(*port);
        })
        .expect("a free loopback port below the ephemeral range")
}

/// Where the project's tools are installed by `.ci/tools.sh`.
pub fn tools_bin() -> PathBuf {
    let cache = std::env::var_os("AUTOPROXY_CACHE")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/autoproxy")))
        .unwrap_or_else(|| PathBuf::from(".cache/autoproxy"));
    cache.join("bin")
}
