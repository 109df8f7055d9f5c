//! The programs the apply runs (`haproxy -c`, the reload command): bounded in time, and never
//! outliving the apply.
//!
//! A child stays in the apply's process group, so SSM's timeout (which kills the script's
//! group) takes it down with the apply; `timeout(1)` in the old script moved each child into a
//! group of its own, which outlived the apply and could reload after it had died. When the
//! apply itself ends a child (its own time limit, a signal to the apply), it kills the child
//! and every descendant still attached to it, found through `/proc`: a reload script's own
//! children too. A daemon the reload starts (HAProxy's master) has detached to init by then and
//! is left alone.

use std::collections::HashMap;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use rustix::process::{Pid, Signal, kill_process};

/// How a child ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finished {
    /// Its exit status; `None` when it was killed (by us at its time limit, or by a signal).
    pub code: Option<i32>,
    /// stdout and stderr together, in the order they came.
    pub output: String,
    /// It ran past its time limit and was killed.
    pub timed_out: bool,
}

impl Finished {
    pub fn success(&self) -> bool {
        self.code == Some(0)
    }

    /// The exit, as a log line says it.
    pub fn status(&self) -> String {
        match (self.code, self.timed_out) {
            (_, true) => "no exit within its time limit (killed)".to_owned(),
            (Some(code), false) => format!("exited with {code}"),
            (None, false) => "killed by a signal".to_owned(),
        }
    }
}

/// Runs `program args…` without a shell in `/`, stdin closed, its output captured, for at most
/// `limit`. The output goes through a file, not a pipe (a daemon it starts must not hold a
/// pipe of ours open), and that file has no name: it is made in `output_dir` already unlinked
/// ([`output_file`]), so an apply killed meanwhile leaves nothing behind.
pub async fn run(
    program: &Path,
    args: &[String],
    output_dir: &Path,
    limit: Duration,
) -> std::io::Result<Finished> {
    let mut output = output_file(output_dir)?;
    let mut command = tokio::process::Command::new(program);
    command
        .args(args)
        .current_dir("/")
        .stdin(Stdio::null())
        .stdout(output.try_clone()?)
        .stderr(output.try_clone()?);
    let mut child = command.spawn()?;
    let pid = child.id();
    // Dropped (a signal to the apply cancels the step): the guard kills the child's tree.
    let mut guard = TreeGuard { pid };
    let waited = tokio::time::timeout(limit, child.wait()).await;
    let (code, timed_out) = match waited {
        Ok(status) => {
            guard.pid = None;
            (status?.code(), false)
        }
        Err(_) => {
            guard.kill();
            let _ = child.wait().await;
            (None, true)
        }
    };
    let mut text = kept_output(&mut output).unwrap_or_default();
    text.truncate(text.trim_end().len());
    Ok(Finished {
        code,
        output: text,
        timed_out,
    })
}

/// The most of a child's output kept: its first and its last half of this (where a check's
/// first error and a reload's last words are), what lies between left out and counted.
pub const MAX_OUTPUT: usize = 64 * 1024;

/// A file without a name for a child's output, in `dir` (`O_TMPFILE`, or created and
/// unlinked at once where the filesystem lacks it): it goes when its last descriptor closes.
pub fn output_file(dir: &Path) -> std::io::Result<std::fs::File> {
    tempfile::tempfile_in(dir)
}

/// The output a child wrote to `file` (from [`output_file`]), at most [`MAX_OUTPUT`] bytes of
/// it (and a line saying how much was left out), whatever the child wrote.
pub fn kept_output(file: &mut std::fs::File) -> std::io::Result<String> {
    use std::io::{Read, Seek, SeekFrom};
    file.seek(SeekFrom::Start(0))?;
    let len = file.metadata()?.len();
    let half = MAX_OUTPUT as u64 / 2;
    if len <= MAX_OUTPUT as u64 {
        let mut all = Vec::new();
        file.read_to_end(&mut all)?;
        return Ok(String::from_utf8_lossy(&all).into_owned());
    }
    let mut head = Vec::new();
    (&mut *file).take(half).read_to_end(&mut head)?;
    file.seek(SeekFrom::Start(len - half))?;
    let mut tail = Vec::new();
    (&mut *file).take(half).read_to_end(&mut tail)?;
    Ok(format!(
        "{}\n[... {} bytes of output left out ...]\n{}",
        String::from_utf8_lossy(&head),
        len - 2 * half,
        String::from_utf8_lossy(&tail)
    ))
}

/// Kills a child and its descendants unless disarmed (`pid = None`).
struct TreeGuard {
    pid: Option<u32>,
}

impl TreeGuard {
    fn kill(&mut self) {
        if let Some(pid) = self.pid.take() {
            kill_tree(pid);
        }
    }
}

impl Drop for TreeGuard {
    fn drop(&mut self) {
        self.kill();
    }
}

/// SIGKILL to `root` and every process descending from it, children first found, as `/proc`
/// shows them now. Stopping the parents first keeps a shell from starting more.
pub fn kill_tree(root: u32) {
    let mut parents: HashMap<u32, Vec<u32>> = HashMap::new();
    for pid in crate::proc::pids() {
        if let Some(stat) = crate::proc::stat(pid) {
            parents.entry(stat.parent).or_default().push(pid);
        }
    }
    let mut order = vec![root];
    let mut next = 0;
    while next < order.len() {
        if let Some(children) = parents.get(&order[next]) {
            order.extend(children.iter().copied());
        }
        next += 1;
    }
    for pid in order {
        if let Some(pid) = i32::try_from(pid).ok().and_then(Pid::from_raw) {
            let _ = kill_process(pid, Signal::KILL);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A child that writes a megabyte: what the apply keeps (and logs) is its first and last
    /// 32 kB, and how much lies between.
    #[tokio::test]
    async fn a_childs_output_is_kept_to_its_head_and_tail() {
        let dir = tempfile::tempdir().expect("temp dir");
        let script = "echo first; head -c 1000000 /dev/zero | tr '\\0' x; echo; echo last";
        let finished = run(
            Path::new("/bin/sh"),
            &["-c".to_owned(), script.to_owned()],
            dir.path(),
            Duration::from_secs(30),
        )
        .await
        .expect("runs");
        assert!(finished.success(), "{}", finished.status());
        assert!(
            finished.output.len() <= MAX_OUTPUT + 100,
            "{} bytes kept",
            finished.output.len()
        );
        assert!(finished.output.starts_with("first\nxxx"));
        assert!(finished.output.ends_with("xxx\nlast"));
        assert!(finished.output.contains("bytes of output left out"));
    }

    /// The output file has no name: the child, listing the directory it is made in, finds
    /// nothing there, so an apply killed while a child runs leaves nothing behind.
    #[tokio::test]
    async fn a_childs_output_file_leaves_no_name_behind() {
        let dir = tempfile::tempdir().expect("temp dir");
        let listing = format!("ls -A {}", dir.path().display());
        let finished = run(
            Path::new("/bin/sh"),
            &["-c".to_owned(), listing],
            dir.path(),
            Duration::from_secs(30),
        )
        .await
        .expect("runs");
        assert!(finished.success(), "{}", finished.status());
        assert_eq!(finished.output, "", "the output dir as the child saw it");
    }

    #[tokio::test]
    async fn a_child_past_its_limit_is_killed_with_its_children() {
        let dir = std::env::temp_dir();
        let marker = dir.join(format!("autoproxy-child-test-{}", std::process::id()));
        let script = format!(
            "sleep 30 & echo $! > {}; echo started; wait",
            marker.display()
        );
        let finished = run(
            Path::new("/bin/sh"),
            &["-c".to_owned(), script],
            &dir,
            Duration::from_millis(500),
        )
        .await
        .expect("runs");
        assert!(finished.timed_out, "{finished:?}");
        assert_eq!(finished.output, "started");
        let grandchild: u32 = std::fs::read_to_string(&marker)
            .expect("the grandchild's pid")
            .trim()
            .parse()
            .expect("a pid");
        let _ = std::fs::remove_file(&marker);
        // A killed process stays a zombie until its parent (init here) reaps it, and SIGKILL
        // takes effect asynchronously: wait (bounded) until it no longer runs.
        let runs = || {
            let state = crate::proc::stat(grandchild);
            (state.is_some_and(|stat| stat.live()), state)
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        let (mut running, mut state) = runs();
        while running && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
            (running, state) = runs();
        }
        assert!(!running, "the grandchild still runs: {state:?}");
    }

    #[tokio::test]
    async fn output_and_status_come_back() {
        let finished = run(
            Path::new("/bin/sh"),
            &["-c".to_owned(), "echo out; echo err >&2; exit 3".to_owned()],
            &std::env::temp_dir(),
            Duration::from_secs(10),
        )
        .await
        .expect("runs");
        assert_eq!(finished.code, Some(3));
        assert_eq!(finished.output, "out\nerr");
        assert_eq!(finished.status(), "exited with 3");
    }
}
