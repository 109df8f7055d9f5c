//! What one run of the script did, and how a test reads its transcript.

use std::fmt;
use std::time::{Duration, Instant};

/// What one run of the script did.
#[derive(Debug, Clone)]
pub struct Run {
    /// Exit status; `None` when killed (see `timed_out`).
    pub status: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    pub started: Instant,
    pub finished: Instant,
    pub timed_out: bool,
}

impl Run {
    pub fn success(&self) -> bool {
        self.status == Some(0)
    }

    pub fn elapsed(&self) -> Duration {
        self.finished - self.started
    }

    /// The details of the log lines of one step (`autoproxy-apply: <step>: <detail>`).
    pub fn step(&self, step: &str) -> Vec<&str> {
        let prefix = format!("autoproxy-apply: {step}: ");
        self.stdout
            .lines()
            .chain(self.stderr.lines())
            .filter_map(|line| line.strip_prefix(prefix.as_str()))
            .collect()
    }

    /// The detail of the one `FAILED` line, if the run failed.
    pub fn failure(&self) -> Option<&str> {
        self.step("FAILED").into_iter().next()
    }
}

/// The whole transcript, for assertion messages.
impl fmt::Display for Run {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let status = match (self.status, self.timed_out) {
            (_, true) => "killed after the timeout".to_owned(),
            (Some(code), false) => format!("exit {code}"),
            (None, false) => "killed by a signal".to_owned(),
        };
        writeln!(f, "--- apply document: {status} after {:?}", self.elapsed())?;
        writeln!(
            f,
            "--- stdout\n{}--- stderr\n{}---",
            self.stdout, self.stderr
        )
    }
}
