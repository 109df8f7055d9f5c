//! The integration-test harness: real stand-ins started per test (moto server, HAProxy), and
//! the helpers the `it` test binary shares.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

pub mod bench;
pub mod cfn;
pub mod check;
pub mod dataplane;
pub mod dns;
pub mod estate;
pub mod golden;
pub mod iam;
pub mod local;
pub mod moto;
pub mod pipeline;
pub mod proxy;
pub mod recording_proxy;
pub mod resolver;
pub mod ssm_agent;

use std::path::{Path, PathBuf};

/// The workspace root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ sits in the workspace root")
        .to_path_buf()
}

/// A tool by name: from `.ci/tools.sh`'s bin directory when it is there, else from PATH.
pub fn tool(name: &str) -> PathBuf {
    let installed = moto::tools_bin().join(name);
    if installed.exists() {
        installed
    } else {
        PathBuf::from(name)
    }
}

/// How a wait for a server's port ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listening {
    Yes,
    /// `gone` said the server will never listen (it exited).
    Gone,
    TimedOut,
}

/// The one way the harness waits for a server to listen: polls `addr` until a connection is
/// accepted, `gone()` says the server exited, or `timeout` passes.
pub fn wait_listening(
    addr: std::net::SocketAddr,
    timeout: std::time::Duration,
    mut gone: impl FnMut() -> bool,
) -> Listening {
    use std::time::{Duration, Instant};
    let deadline = Instant::now() + timeout;
    loop {
        if gone() {
            return Listening::Gone;
        }
        if std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
            return Listening::Yes;
        }
        if Instant::now() >= deadline {
            return Listening::TimedOut;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
}
