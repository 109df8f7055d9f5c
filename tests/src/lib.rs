//! The integration-test harness: real stand-ins started per test (moto server, HAProxy), and
//! the helpers the `it` test binary shares.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

pub mod agent;
pub mod backends;
pub mod bench;
pub mod cfn;
pub mod check;
pub mod config_bucket;
pub mod dataplane;
pub mod dist;
pub mod dns;
pub mod estate;
pub mod eventbridge;
pub mod fault_proxy;
pub mod freeze;
pub mod generator;
pub mod golden;
pub mod hanging_endpoint;
pub mod haproxy_version;
pub mod http;
pub mod iam;
pub mod inline_function;
pub mod kube;
pub mod local;
pub mod loopback;
pub mod moto;
pub mod netns;
pub mod observe;
pub mod organization;
pub mod pipeline;
pub mod prometheus;
pub mod proxy;
pub mod recording_proxy;
pub mod refusing_socket;
pub mod resolver;
pub mod response_url;
pub mod ssm_agent;
pub mod stream;
pub mod systemctl;
pub mod timed_fleet;
pub mod user_data;

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

/// How the harness waits for a server to listen: polls `addr` until a connection is accepted,
/// `gone()` says the server exited, or `timeout` passes. (moto is up when it answers a
/// request instead: see `moto::Moto::start`.)
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

/// The agent binary every harness piece runs, chosen once: see [`agent_binary`].
static AGENT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

/// The `autoproxy-agent` binary of this workspace (debug), built on first use and stripped
/// (see [`strip_agent`]): what the apply document runs on an instance. `cargo test` builds only
/// the test binaries, so the harness asks cargo for it (a no-op when it is up to date).
/// `AUTOPROXY_AGENT_BINARY` names another build instead (the benchmark's: the release binary
/// the stack ships; see [`agent_from_env`]).
pub fn agent_binary() -> PathBuf {
    AGENT
        .get_or_init(|| {
            agent_from_env()
                .unwrap_or_else(|err| panic!("{err}"))
                .unwrap_or_else(stripped_build)
        })
        .clone()
}

/// The workspace's debug agent, built and stripped beside itself.
fn stripped_build() -> PathBuf {
    let built = build_agent();
    let stripped = built.with_file_name("autoproxy-agent.stripped");
    strip_agent(&built, &stripped).unwrap_or_else(|err| panic!("{err}"));
    stripped
}

/// The variable that names an agent build to run instead of the workspace's debug one.
pub const AGENT_BINARY_VAR: &str = "AUTOPROXY_AGENT_BINARY";

/// The agent build [`AGENT_BINARY_VAR`] names: `None` when it is not set, an error when it
/// names no file (said at once, not as a failed download in the first apply).
pub fn agent_from_env() -> Result<Option<PathBuf>, String> {
    agent_named(std::env::var_os(AGENT_BINARY_VAR).as_deref())
}

fn agent_named(value: Option<&std::ffi::OsStr>) -> Result<Option<PathBuf>, String> {
    match value.map(Path::new) {
        None => Ok(None),
        Some(path) if path.is_file() => Ok(Some(path.to_path_buf())),
        Some(path) => Err(format!(
            "{AGENT_BINARY_VAR}: expected the path of an autoproxy-agent build, got {} (not a \
             file)",
            path.display()
        )),
    }
}

/// The agent without its symbols and debug info (`strip`), at `to` (written beside it, then
/// renamed: two test processes may strip at once). Every apply uploads, downloads and hashes
/// the agent, as an instance does the stripped release binary the stack ships: 30 MB of that
/// against the 80 MB debug build saves about a second a rollout in the demo, and the same
/// hashing and moto traffic in every apply of the suite.
fn strip_agent(built: &Path, to: &Path) -> Result<(), String> {
    let partial = to.with_extension(format!("partial.{}", std::process::id()));
    let status = std::process::Command::new("strip")
        .arg("-o")
        .arg(&partial)
        .arg(built)
        .status()
        .map_err(|e| format!("strip {}: {e}", built.display()))?;
    if !status.success() {
        return Err(format!("strip {}: {status}", built.display()));
    }
    std::fs::rename(&partial, to).map_err(|e| format!("rename to {}: {e}", to.display()))
}

/// For the demo: the stripped agent ([`strip_agent`]), copied into `dir`, becomes
/// [`agent_binary`]. Call it before anything uses the agent.
pub fn use_stripped_agent(dir: &Path) -> Result<PathBuf, String> {
    let stripped = dir.join("autoproxy-agent");
    strip_agent(&build_agent(), &stripped)?;
    AGENT
        .set(stripped.clone())
        .map_err(|used| format!("the agent is in use already: {}", used.display()))?;
    Ok(stripped)
}

fn build_agent() -> PathBuf {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = std::process::Command::new(cargo)
        // `--workspace`, as `cargo test --workspace` builds: the test crate's dependencies
        // (tests/Cargo.toml) give it the apply's test hooks (the fault tests pause it) and the
        // very features `cargo test` built everything with, so only the binary is linked. With
        // `-p`, or with `--features` here, cargo would resolve other features and build the
        // dependencies all again (5 minutes on 2 cores, while every test that needs the agent
        // waits).
        .args([
            "build",
            "--quiet",
            "--workspace",
            "--bin",
            "autoproxy-agent",
        ])
        .current_dir(root())
        .status()
        .expect("run cargo build --bin autoproxy-agent");
    assert!(status.success(), "cargo build --bin autoproxy-agent failed");
    let target =
        std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root().join("target"), PathBuf::from);
    let binary = target.join("debug").join("autoproxy-agent");
    assert!(binary.exists(), "no {} after the build", binary.display());
    binary
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_agent_build_is_named_by_an_existing_file_or_refused() {
        assert_eq!(agent_named(None), Ok(None));
        let file = tempfile::NamedTempFile::new().unwrap();
        assert_eq!(
            agent_named(Some(file.path().as_os_str())),
            Ok(Some(file.path().to_path_buf()))
        );
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("autoproxy-agent");
        let refused = agent_named(Some(missing.as_os_str())).unwrap_err();
        assert!(
            refused.contains("AUTOPROXY_AGENT_BINARY")
                && refused.contains(&missing.display().to_string()),
            "{refused}"
        );
        assert!(agent_named(Some(dir.path().as_os_str())).is_err());
    }
}
