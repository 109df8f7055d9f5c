//! The run as the kernel saw it: `strace -f -y` around the document's `sh`, its log read back
//! as the writes, syncs, renames and unlinks that succeeded, in the order they completed.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

/// What the trace shows, in order; only calls that succeeded.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Event {
    /// Bytes written to a file.
    Write(PathBuf, u64),
    /// fsync or fdatasync of a file or directory.
    Sync(PathBuf),
    /// An fsync or fdatasync that failed.
    SyncFailed(PathBuf),
    Rename {
        from: PathBuf,
        to: PathBuf,
    },
    /// A name removed.
    Unlink(PathBuf),
}

/// One apply run under strace (`-DD`: the tracer is a grandchild in a group of its own, so the
/// run's process group and exit status are the script's own).
pub(super) struct Strace {
    dir: tempfile::TempDir,
}

impl Strace {
    pub(super) fn new() -> Strace {
        Strace {
            dir: tempfile::Builder::new()
                .prefix("autoproxy-strace-")
                .tempdir()
                .unwrap(),
        }
    }

    fn log(&self) -> PathBuf {
        self.dir.path().join("strace.log")
    }

    pub(super) fn wrapper(&self) -> Vec<String> {
        [
            "strace",
            "-DD",
            // Interruptible (a fatal signal is blocked only while a call is decoded): with
            // `-o FILE` strace would block SIGTERM for good.
            "-I2",
            "-f",
            "-y",
            "-qq",
            "-s",
            "0",
            "-e",
            "signal=none",
            "-e",
            "trace=fsync,fdatasync,write,pwrite64,writev,pwritev,pwritev2,copy_file_range,sendfile,rename,renameat,renameat2,unlink,unlinkat",
            "-o",
        ]
        .into_iter()
        .map(str::to_owned)
        .chain([self.log().display().to_string(), "--".to_owned()])
        .collect()
    }

    /// Ends the tracer (it stays attached to an HAProxy the run started) and returns the
    /// events it logged, clearing the log for the next run.
    pub(super) fn take(&self) -> Vec<Event> {
        let log = self.log().display().to_string();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let tracers = tracers_of(&log);
            if tracers.is_empty() {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "strace still runs: {tracers:?}"
            );
            // SIGTERM: strace detaches from what it still traces and exits.
            let _ = std::process::Command::new("kill")
                .arg("-TERM")
                .args(tracers.iter().map(ToString::to_string))
                .stderr(std::process::Stdio::null())
                .status();
            std::thread::sleep(Duration::from_millis(50));
        }
        let text = std::fs::read_to_string(self.log()).unwrap_or_default();
        let _ = std::fs::remove_file(self.log());
        parse(&text)
    }
}

/// Live strace processes writing `log`.
fn tracers_of(log: &str) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
            let zombie = std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|stat| Some(stat.rsplit_once(") ")?.1.starts_with('Z')))
                .unwrap_or(true);
            args.first().is_some_and(|a| a.ends_with(b"strace"))
                && args.contains(&log.as_bytes())
                && !zombie
        })
        .collect()
}

/// The events of an `strace -f -y` log, in the order the calls completed (a call another
/// process interrupted is split into `<unfinished ...>` and `<... resumed>`).
pub(super) fn parse(text: &str) -> Vec<Event> {
    let mut pending: BTreeMap<String, String> = BTreeMap::new();
    let mut events = Vec::new();
    for line in text.lines() {
        let Some((pid, rest)) = line.split_once(' ') else {
            continue;
        };
        let rest = rest.trim_start();
        let call = if let Some(started) = rest.strip_suffix(" <unfinished ...>") {
            pending.insert(pid.to_owned(), started.to_owned());
            continue;
        } else if let Some(resumed) = rest.strip_prefix("<... ") {
            let Some((_, tail)) = resumed.split_once(" resumed>") else {
                continue;
            };
            let Some(head) = pending.remove(pid) else {
                continue;
            };
            head + tail
        } else {
            rest.to_owned()
        };
        if let Some(event) = event_of(&call) {
            events.push(event);
        }
    }
    events
}

/// `name(args) = result`, as an event if it is one that succeeded.
fn event_of(call: &str) -> Option<Event> {
    let (name, rest) = call.split_once('(')?;
    // strace pads a short line (a resumed call's is short) with spaces before ` = `.
    let (args, result) = rest.rsplit_once(" = ")?;
    let args = args.trim_end().strip_suffix(')')?;
    let result: i64 = result.split_whitespace().next()?.parse().ok()?;
    let fds = fd_paths(args);
    if result < 0 {
        return matches!(name, "fsync" | "fdatasync")
            .then(|| Some(Event::SyncFailed(fds.first()?.clone())))
            .flatten();
    }
    match name {
        "write" | "pwrite64" | "writev" | "pwritev" | "pwritev2" => {
            Some(Event::Write(fds.first()?.clone(), result.unsigned_abs()))
        }
        "copy_file_range" => Some(Event::Write(fds.get(1)?.clone(), result.unsigned_abs())),
        "sendfile" => Some(Event::Write(fds.first()?.clone(), result.unsigned_abs())),
        "fsync" | "fdatasync" => Some(Event::Sync(fds.first()?.clone())),
        "rename" | "renameat" | "renameat2" if result == 0 => {
            let paths = quoted_paths(args);
            let [from, to] = paths.get(..2)? else {
                return None;
            };
            Some(Event::Rename {
                from: from.clone(),
                to: to.clone(),
            })
        }
        "unlink" | "unlinkat" if result == 0 => {
            Some(Event::Unlink(quoted_paths(args).first()?.clone()))
        }
        _ => None,
    }
}

/// The paths `-y` shows for file descriptors (`3</dir/file>`), in order.
fn fd_paths(args: &str) -> Vec<PathBuf> {
    let mut paths = Vec::new();
    let mut rest = args;
    while let Some(open) = rest.find('<') {
        let before = &rest[..open];
        let after = &rest[open + 1..];
        let Some(close) = after.find('>') else { break };
        let fd = before.rsplit([' ', ',', '(']).next().unwrap_or("");
        if !fd.is_empty() && fd.bytes().all(|b| b.is_ascii_digit()) {
            paths.push(PathBuf::from(&after[..close]));
        }
        rest = &after[close + 1..];
    }
    paths
}

/// The quoted path arguments of a rename, each made absolute with the directory descriptor
/// before it (`AT_FDCWD</cwd>`).
fn quoted_paths(args: &str) -> Vec<PathBuf> {
    let mut paths = Vec::new();
    let mut base = PathBuf::from("/");
    let mut rest = args;
    loop {
        let quote = rest.find('"');
        let dirfd = rest.find('<');
        match (quote, dirfd) {
            (Some(q), Some(d)) if d < q => {
                let after = &rest[d + 1..];
                let Some(close) = after.find('>') else { break };
                base = PathBuf::from(&after[..close]);
                rest = &after[close + 1..];
            }
            (Some(q), _) => {
                let after = &rest[q + 1..];
                let Some(close) = after.find('"') else { break };
                paths.push(base.join(&after[..close]));
                rest = &after[close + 1..];
            }
            _ => break,
        }
    }
    paths
}
