//! autoproxy-resolver, the service that keeps HAProxy's address map current, run as the
//! instances run it: `autoproxy-agent resolve <haproxy.cfg>`, with its knobs in the
//! environment.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// The name HAProxy's runtime API gives the address map (as the config writes it).
pub const ADDRESS_MAP: &str = "autoproxy/addresses.map";

/// The knobs the resolver reads from its environment.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Knobs {
    /// Every name is asked once per this period (`AUTOPROXY_REFRESH_SECONDS`).
    pub refresh_seconds: f64,
    /// The most queries in any second (`AUTOPROXY_MAX_QPS`): the steady cap.
    pub max_qps: u32,
    /// The most queries in any second while names are new to the map (`AUTOPROXY_FILL_QPS`).
    pub fill_qps: u32,
    /// Seconds before a query counts as unanswered (`AUTOPROXY_QUERY_TIMEOUT`).
    pub query_timeout: f64,
    /// Seconds an address is kept without an answer confirming it
    /// (`AUTOPROXY_MAX_STALE_SECONDS`).
    pub max_stale_seconds: f64,
}

impl Knobs {
    /// A short refresh and timeout, so changes and failures show within seconds: every name
    /// asked again each 2 s, at most 50 queries a second.
    pub const QUICK: Knobs = Knobs {
        refresh_seconds: 2.0,
        max_qps: 50,
        fill_qps: 50,
        query_timeout: 0.3,
        max_stale_seconds: 900.0,
    };
}

impl Default for Knobs {
    /// The production values.
    fn default() -> Knobs {
        Knobs {
            refresh_seconds: 50.0,
            max_qps: 200,
            fill_qps: 800,
            query_timeout: 1.0,
            max_stale_seconds: 900.0,
        }
    }
}

/// A running resolver; killed when dropped. Its output (stdout and stderr) goes to a file.
#[derive(Debug)]
pub struct Resolver {
    child: Child,
    dir: tempfile::TempDir,
}

impl Resolver {
    /// Starts `autoproxy-agent resolve` on the installed config at `config`, its CloudWatch
    /// metrics off.
    pub fn start(config: &Path, knobs: Knobs) -> Resolver {
        Resolver::start_with(config, knobs, &[("AUTOPROXY_METRICS_SECONDS", "0")])
    }

    /// The same with more environment (`AUTOPROXY_METRICS_SECONDS`, a moto's endpoint).
    pub fn start_with<K: AsRef<std::ffi::OsStr>, V: AsRef<std::ffi::OsStr>>(
        config: &Path,
        knobs: Knobs,
        env: &[(K, V)],
    ) -> Resolver {
        let dir = tempfile::Builder::new()
            .prefix("autoproxy-resolver-")
            .tempdir()
            .expect("temp dir");
        let output = std::fs::File::create(dir.path().join("output.log")).expect("output file");
        let child = Command::new(crate::agent_binary())
            .arg("resolve")
            .arg(config)
            .env(
                "AUTOPROXY_REFRESH_SECONDS",
                knobs.refresh_seconds.to_string(),
            )
            .env("AUTOPROXY_MAX_QPS", knobs.max_qps.to_string())
            .env("AUTOPROXY_FILL_QPS", knobs.fill_qps.to_string())
            .env("AUTOPROXY_QUERY_TIMEOUT", knobs.query_timeout.to_string())
            .env(
                "AUTOPROXY_MAX_STALE_SECONDS",
                knobs.max_stale_seconds.to_string(),
            )
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(output.try_clone().expect("clone the output file"))
            .stderr(output)
            .spawn()
            .expect("start autoproxy-agent resolve");
        Resolver { child, dir }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Everything it printed so far.
    pub fn output(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("output.log")).unwrap_or_default()
    }

    /// Whether it still runs.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Its exit status once it exits by itself within `within`; None when it still runs.
    pub fn exited_within(&mut self, within: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + within;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGTERM, as systemd stops it; its exit status, or None when it did not exit in 5 s.
    pub fn terminate(&mut self) -> Option<ExitStatus> {
        let _ = Command::new("kill")
            .args(["-TERM", &self.pid().to_string()])
            .status();
        self.exited_within(Duration::from_secs(5))
    }
}

impl Drop for Resolver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The address map file beside the installed config at `config`.
pub fn address_map_path(config: &Path) -> PathBuf {
    config
        .parent()
        .expect("a config path has a directory")
        .join(ADDRESS_MAP)
}

/// The `name address` lines of a map file (none when it does not exist).
pub fn read_map_file(path: &Path) -> BTreeMap<String, String> {
    parse_map(&std::fs::read_to_string(path).unwrap_or_default(), 0)
}

/// The entries of map `map` in the running HAProxy worker, by `show map` on its stats socket.
pub fn show_map(stats_socket: &Path, map: &str) -> std::io::Result<BTreeMap<String, String>> {
    let mut socket = UnixStream::connect(stats_socket)?;
    socket.set_read_timeout(Some(Duration::from_secs(5)))?;
    socket.write_all(format!("show map {map}\n").as_bytes())?;
    let mut answer = String::new();
    socket.read_to_string(&mut answer)?;
    // Each entry reads `0x<entry id> <key> <value>`; anything else is an error message.
    let entries: String = answer
        .lines()
        .filter(|line| line.starts_with("0x"))
        .flat_map(|line| [line, "\n"])
        .collect();
    Ok(parse_map(&entries, 1))
}

fn parse_map(text: &str, skip: usize) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace().skip(skip);
            let (key, value) = (words.next()?, words.next()?);
            Some((key.to_owned(), value.to_owned()))
        })
        .collect()
}
