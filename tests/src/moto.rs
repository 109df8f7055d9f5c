//! A moto server per test: the real AWS stand-in (Route53, S3, SSM, STS) on a loopback port.

use std::collections::BTreeSet;
use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use aws_config::{BehaviorVersion, SdkConfig, retry::RetryConfig};
use aws_sdk_s3::config::{Credentials, Region};

/// The account moto answers as when no role is assumed.
pub const OWN_ACCOUNT: &str = "123456789012";
pub const REGION: &str = "us-east-1";

/// The REST services the tests call, each with a path that lists something.
///
/// moto builds a REST service's request router on that service's first request, and while it
/// does, its cache of operation models briefly holds botocore's model in place of moto's own
/// (`moto/core/model.py`: both are cached under one key). A request routed in that window
/// answers 500 (`'OperationModel' object has no attribute 'http_trait'`). Tests fire their
/// first calls concurrently (seeding zones, scanning accounts) with SDK retries off, so now
/// and then one failed. One request per service, sent before any test call, builds each
/// router alone.
const WARM_UP: [(&str, &str); 2] = [("route53", "/2013-04-01/hostedzone"), ("s3", "/")];
/// Calls a server has answered before it is handed out (an IAM-enforcing server counts them
/// among its unchecked ones).
pub const WARM_UP_CALLS: usize = WARM_UP.len();

/// A running `moto_server`, stopped when dropped.
#[derive(Debug)]
pub struct Moto {
    child: Child,
    pub port: u16,
    /// The server's own log (request lines and Python tracebacks); a failing test prints the
    /// errors in it.
    log: tempfile::NamedTempFile,
}

impl Moto {
    /// Starts a fresh server on a free loopback port and waits until it answers. A server that
    /// exits before it answers (its port was taken in between) is started again on another.
    pub fn start() -> Moto {
        Moto::start_with(&[])
    }

    /// [`Moto::start`] with extra environment for the server (`INITIAL_NO_AUTH_ACTION_COUNT`
    /// turns IAM enforcement on after that many calls).
    pub fn start_with(env: &[(&str, &str)]) -> Moto {
        for _attempt in 0..3 {
            let mut moto = Moto::spawn(free_port(), env);
            if moto.warm_up() {
                return moto;
            }
        }
        panic!("moto_server exited before it answered, three times over");
    }

    /// A server on a chosen port (the local stand-in's, which its env file names).
    pub fn start_on(port: u16) -> Moto {
        let mut moto = Moto::spawn(port, &[]);
        assert!(
            moto.warm_up(),
            "moto_server could not listen on 127.0.0.1:{port}: is the port taken?"
        );
        moto
    }

    fn spawn(port: u16, env: &[(&str, &str)]) -> Moto {
        let exe = crate::tool("moto_server");
        let log = tempfile::NamedTempFile::new().expect("a temp file for moto's log");
        let stderr = log.reopen().expect("reopen moto's log");
        let child = Command::new(&exe)
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .unwrap_or_else(|err| {
                panic!("cannot start {exe:?} ({err}); run .ci/tools.sh to install the test tools")
            });
        Moto { child, port, log }
    }

    /// Waits until the server answers [`WARM_UP`]'s requests, sent one after another; false
    /// when it exited first.
    ///
    /// An accepted connection alone does not say the server is up: a process this one forks
    /// (another test's server) holds a copy of every socket open at that moment, the port
    /// probe of [`free_port`] among them, until it execs; a connection that lands there is
    /// reset. So a request that gets no answer is sent again until the server answers it.
    /// Panics when an answer is not 200 (whoever answers so is not a working moto) or none
    /// comes within 20 s.
    fn warm_up(&mut self) -> bool {
        let deadline = Instant::now() + Duration::from_secs(20);
        for (service, path) in WARM_UP {
            let status = loop {
                if matches!(self.child.try_wait(), Ok(Some(_))) {
                    return false;
                }
                match self.get(service, path) {
                    Ok(status) => break status,
                    Err(err) if Instant::now() >= deadline => panic!(
                        "moto on port {} did not answer within 20 s ({err}); its log ends:\n{}",
                        self.port,
                        self.log_tail(20)
                    ),
                    Err(_) => std::thread::sleep(Duration::from_millis(25)),
                }
            };
            assert_eq!(
                status,
                200,
                "moto on port {} answered GET {path} ({service}) with {status}, not 200; \
                 its log ends:\n{}",
                self.port,
                self.log_tail(20)
            );
        }
        true
    }

    /// The status of a GET that moto routes to `service` (it reads the service from the
    /// credential scope and checks no signature).
    fn get(&self, service: &str, path: &str) -> std::io::Result<u16> {
        let authorization = format!(
            "AWS4-HMAC-SHA256 Credential=testing/20260101/{REGION}/{service}/aws4_request, \
             SignedHeaders=host, Signature=0"
        );
        let addr = SocketAddr::from(([127, 0, 0, 1], self.port));
        crate::http::get(addr, path, &[("Authorization", &authorization)]).map(|a| a.status)
    }

    /// The last `lines` lines of the server's log.
    fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(self.log.path()).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// The last line of each Python traceback in the server's log, with how often it came.
    fn errors(&self) -> Vec<String> {
        let text = std::fs::read_to_string(self.log.path()).unwrap_or_default();
        let mut counts: std::collections::BTreeMap<&str, usize> = Default::default();
        let mut in_traceback = false;
        for line in text.lines() {
            if line.starts_with("Traceback (most recent call last)") {
                in_traceback = true;
            } else if in_traceback && !line.starts_with(' ') {
                *counts.entry(line).or_default() += 1;
                in_traceback = false;
            }
        }
        counts
            .into_iter()
            .map(|(line, n)| format!("{line} ({n}×)"))
            .collect()
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
        // A failing test says what moto itself raised (a call it does not implement, a bug).
        // moto logs a traceback after it has answered, so it gets a moment to write it.
        if std::thread::panicking() {
            std::thread::sleep(Duration::from_millis(300));
            let errors = self.errors();
            if !errors.is_empty() {
                eprintln!("moto on port {} raised: {}", self.port, errors.join("; "));
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A loopback port nobody listens on right now, for a server started next (moto, HAProxy).
///
/// Taken below the kernel's ephemeral range and never twice by this process: a port from
/// `bind(0)` is released before the server binds it (moto needs about a second to start),
/// and in that gap the kernel may hand it to any other `bind(0)` or outgoing connection; the
/// server then fails to bind while its test talks to whoever holds the port. The probe here
/// has a gap of its own: a process forked meanwhile holds a copy of the probe's socket until
/// it execs, so a connection may land on that copy (and be reset); a server's first answer,
/// not an accepted connection, says it is up ([`Moto::start`]).
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
