//! The document's script run as the SSM agent runs it: in a fresh directory, leading a
//! process group of its own, with a clean environment; watched, signalled and waited for.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::document::Document;
use super::error::AgentError;
use super::pipe::Pipe;
use super::run::Run;

impl Document {
    /// Runs the script as the agent does: written to `_script.sh` in a fresh directory and
    /// started with `sh -c`, parameters as `SSM_<Name>`, plus `env` (e.g. the moto server's
    /// endpoint and credentials for the AWS CLI). The environment is otherwise clean: only
    /// `PATH` (with the pinned tools first), `HOME` and `TMPDIR` pass through. The whole
    /// process group is killed after `timeout`.
    pub fn run(
        &self,
        given: &[(&str, &str)],
        env: &[(String, String)],
        timeout: Duration,
    ) -> Result<Run, AgentError> {
        Ok(self.spawn(given, env)?.wait(timeout))
    }

    /// `run`, started in the background: the caller watches its output, signals it as SSM
    /// would (a cancel, a timeout) and waits for it.
    pub fn spawn(
        &self,
        given: &[(&str, &str)],
        env: &[(String, String)],
    ) -> Result<Background, AgentError> {
        self.spawn_wrapped(given, env, &[])
    }

    /// `spawn` with the script's `sh` started by `wrapper` (a program and its arguments, e.g.
    /// `strace … --`), which execs it in the end: the wrapper leads the process group.
    pub fn spawn_wrapped(
        &self,
        given: &[(&str, &str)],
        env: &[(String, String)],
        wrapper: &[String],
    ) -> Result<Background, AgentError> {
        let values = self.resolve(given)?;
        let mut downloaded = String::new();
        for download in &self.downloads {
            match download.run(env) {
                Ok(line) => downloaded.push_str(&format!("{}: {line}\n", download.name)),
                Err(line) => downloaded.push_str(&format!("{}: FAILED: {line}\n", download.name)),
            }
        }
        let workdir = tempfile::Builder::new()
            .prefix("autoproxy-ssm-")
            .tempdir()
            .map_err(AgentError::Spawn)?;
        let script = workdir.path().join("_script.sh");
        std::fs::write(&script, &self.script).map_err(AgentError::Spawn)?;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o700))
            .map_err(AgentError::Spawn)?;

        let mut command = match wrapper.split_first() {
            Some((program, args)) => {
                let mut command = Command::new(program);
                command.args(args).arg("sh");
                command
            }
            None => Command::new("sh"),
        };
        command
            .arg("-c")
            .arg(&script)
            .current_dir(workdir.path())
            .env_clear()
            .env("PATH", search_path())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        for key in ["HOME", "TMPDIR"] {
            if let Some(value) = std::env::var_os(key) {
                command.env(key, value);
            }
        }
        command.envs(env.iter().map(|(k, v)| (k, v)));
        command.envs(
            values
                .iter()
                .map(|(name, value)| (format!("SSM_{name}"), value)),
        );

        let started = Instant::now();
        let mut child = command.spawn().map_err(AgentError::Spawn)?;
        let stdout = Pipe::drain(child.stdout.take());
        let stderr = Pipe::drain(child.stderr.take());
        Ok(Background {
            child,
            stdout,
            stderr,
            downloaded,
            started,
            _workdir: workdir,
        })
    }
}

/// A run of the document in the background ([`Document::spawn`]): its script leads its own
/// process group, as under the SSM agent.
#[derive(Debug)]
pub struct Background {
    child: std::process::Child,
    stdout: Pipe,
    stderr: Pipe,
    downloaded: String,
    started: Instant,
    /// Holds `_script.sh` until the run ends.
    _workdir: tempfile::TempDir,
}

impl Background {
    /// The PID of the script's process (with the launcher's `exec`, the agent's), which is
    /// also its process group's id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends `signal` (a name `kill` knows: `TERM`, `KILL`, …) to the script's whole process
    /// group, as SSM's cancel and timeout do.
    pub fn signal_group(&self, signal: &str) {
        let _ = Command::new("kill")
            .args([&format!("-{signal}"), "--", &format!("-{}", self.pid())])
            .stderr(Stdio::null())
            .status();
    }

    /// Sends `signal` to one process (one of [`Background::processes`]).
    pub fn signal_process(&self, pid: u32, signal: &str) {
        let _ = Command::new("kill")
            .args([&format!("-{signal}"), "--", &pid.to_string()])
            .stderr(Stdio::null())
            .status();
    }

    /// The live processes of the script's process group (zombies aside), each with its
    /// arguments: the script's `sh`, the agent it runs, their children.
    pub fn processes(&self) -> Vec<(u32, Vec<String>)> {
        let group = self.pid().to_string();
        let Ok(entries) = std::fs::read_dir("/proc") else {
            return Vec::new();
        };
        entries
            .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
            .filter_map(|pid| {
                let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
                // After the command in parentheses: state, ppid, pgrp.
                let fields: Vec<&str> = stat.rsplit_once(") ")?.1.split(' ').collect();
                if fields.first().is_some_and(|s| *s == "Z" || *s == "X")
                    || fields.get(2) != Some(&group.as_str())
                {
                    return None;
                }
                let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
                let argv = cmdline
                    .split(|b| *b == 0)
                    .filter(|arg| !arg.is_empty())
                    .map(|arg| String::from_utf8_lossy(arg).into_owned())
                    .collect();
                Some((pid, argv))
            })
            .collect()
    }

    /// What the script wrote on stdout so far.
    pub fn stdout_so_far(&self) -> String {
        self.stdout.so_far()
    }

    /// Waits until a line of stdout equals `line`; false when the run ended or `timeout` passed
    /// first.
    pub fn wait_for_line(&mut self, line: &str, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            if self.stdout.so_far().lines().any(|l| l == line) {
                return true;
            }
            if Instant::now() >= deadline || !matches!(self.child.try_wait(), Ok(None)) {
                return self.stdout.so_far().lines().any(|l| l == line);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Waits for the script to end; kills its whole process group after `timeout` (counted
    /// from its start).
    pub fn wait(mut self, timeout: Duration) -> Run {
        let deadline = self.started + timeout;
        let (status, timed_out) = loop {
            match self.child.try_wait() {
                Ok(Some(status)) => break (status.code(), false),
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(10));
                }
                _ => {
                    // The script leads its own process group: take all of it down.
                    self.signal_group("KILL");
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    break (None, true);
                }
            }
        };
        let finished = Instant::now();
        Run {
            status,
            stdout: std::mem::take(&mut self.downloaded) + &self.stdout.collect(),
            stderr: self.stderr.collect(),
            started: self.started,
            finished,
            timed_out,
        }
    }
}

/// PATH with the pinned tools (the AWS CLI) first, like an instance's `aws` on PATH.
fn search_path() -> String {
    let inherited = std::env::var("PATH").unwrap_or_else(|_| "/usr/bin:/bin".to_owned());
    format!("{}:{inherited}", crate::moto::tools_bin().display())
}
