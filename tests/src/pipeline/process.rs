//! Processes: each in its own process group, registered so an interrupt can stop them all.

use super::*;

/// What an interrupt must stop: process groups and HAProxy directories (HAProxy daemonises
/// into its own session; its processes are those that read the directory's config).
#[derive(Debug)]
pub(super) enum Started {
    Group(u32),
    Pid(u32),
    Haproxy(PathBuf),
}

pub(super) static STARTED: Mutex<Vec<Started>> = Mutex::new(Vec::new());

pub(super) fn register(started: Started) {
    STARTED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .push(started);
}

/// Stops everything the pipeline started (for Ctrl-C: the normal path stops each piece when
/// it is dropped). Safe to call twice.
pub fn stop_everything() {
    let started = std::mem::take(
        &mut *STARTED
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner),
    );
    for item in started.iter().rev() {
        let targets = match item {
            Started::Group(pgid) => vec![format!("-{pgid}")],
            Started::Pid(pid) => vec![pid.to_string()],
            // Every process that reads its config, as the fixture stops it: a pid file left
            // behind may name another process once the pid is reused.
            Started::Haproxy(dir) => {
                autoproxy_agent::apply::processes_reading(&dir.join("haproxy.cfg"))
                    .iter()
                    .map(ToString::to_string)
                    .collect()
            }
        };
        if targets.is_empty() {
            continue;
        }
        let _ = Command::new("kill")
            .args(["-TERM", "--"])
            .args(&targets)
            .stderr(Stdio::null())
            .status();
    }
}

/// A child process leading its own process group; the group is killed on drop.
#[derive(Debug)]
pub struct Spawned {
    pub child: Child,
}

impl Spawned {
    /// Starts `command` in its own process group, its output in `log`.
    pub fn start(mut command: Command, what: &str, log: &Path) -> Result<Spawned, PipelineError> {
        let out = std::fs::File::create(log)
            .map_err(|e| step_error(format!("create {}", log.display()), e))?;
        let err = out
            .try_clone()
            .map_err(|e| step_error(format!("create {}", log.display()), e))?;
        let child = command
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .process_group(0)
            .spawn()
            .map_err(|e| step_error(format!("start {what}"), e))?;
        register(Started::Group(child.id()));
        Ok(Spawned { child })
    }

    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", "--", &format!("-{}", self.child.id())])
            .stderr(Stdio::null())
            .status();
        let deadline = Instant::now() + Duration::from_secs(3);
        while self.alive() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        if self.alive() {
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{}", self.child.id())])
                .stderr(Stdio::null())
                .status();
            let _ = self.child.wait();
        }
    }
}

/// Runs a command to its end within `timeout`; its stdout, or why not.
pub fn run_bounded(
    mut command: Command,
    what: &str,
    timeout: Duration,
) -> Result<String, PipelineError> {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .map_err(|e| step_error(format!("run {what}"), e))?;
    let (mut stdout, mut stderr) = (child.stdout.take(), child.stderr.take());
    let out = std::thread::spawn(move || {
        let mut text = String::new();
        if let Some(pipe) = stdout.as_mut() {
            let _ = pipe.read_to_string(&mut text);
        }
        text
    });
    let err = std::thread::spawn(move || {
        let mut text = String::new();
        if let Some(pipe) = stderr.as_mut() {
            let _ = pipe.read_to_string(&mut text);
        }
        text
    });
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
            _ => {
                let _ = Command::new("kill")
                    .args(["-KILL", "--", &format!("-{}", child.id())])
                    .status();
                let _ = child.wait();
                return Err(step_error(what, format!("no answer within {timeout:?}")));
            }
        }
    };
    let stdout = out.join().unwrap_or_default();
    let stderr = err.join().unwrap_or_default();
    if status.success() {
        Ok(stdout)
    } else {
        Err(step_error(
            what,
            format!("{status}: {}{}", stderr.trim(), stdout.trim()),
        ))
    }
}

pub(super) fn wait_listening(
    addr: SocketAddr,
    what: &str,
    timeout: Duration,
) -> Result<(), PipelineError> {
    match crate::wait_listening(addr, timeout, || false) {
        crate::Listening::Yes => Ok(()),
        _ => Err(step_error(
            what,
            format!("not listening on {addr} after {timeout:?}"),
        )),
    }
}
