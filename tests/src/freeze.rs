//! A busy worker, reproduced faithfully: SIGSTOP leaves the master up and the stats socket
//! silent (connections queue, nothing answers), SIGCONT lets it answer what queued.

use std::process::Command;
use std::time::{Duration, Instant};

/// A process stopped with SIGSTOP; continued when dropped, or by itself after a while.
#[derive(Debug)]
pub struct Frozen {
    pid: u32,
}

/// Whether `pid` is stopped by a signal: the state after the command's name in its `stat`.
fn stopped(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            == Some("T")
    })
}

fn signal(pid: u32, name: &str) {
    let _ = Command::new("kill").args([name, &pid.to_string()]).status();
}

impl Frozen {
    /// Stops `pid` until the guard is dropped. Returns once the kernel shows the process
    /// stopped (state `T` in `/proc/<pid>/stat`), or after a second: a signal is delivered
    /// when the process is next scheduled, which on a loaded machine can come after the
    /// caller's next step.
    pub fn stop(pid: u32) -> Frozen {
        signal(pid, "-STOP");
        let deadline = Instant::now() + Duration::from_secs(1);
        while !stopped(pid) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        Frozen { pid }
    }

    /// Stops `pid` for `duration`, then continues it from a thread of its own.
    pub fn stop_for(pid: u32, duration: Duration) -> std::thread::JoinHandle<()> {
        let frozen = Frozen::stop(pid);
        std::thread::spawn(move || {
            std::thread::sleep(duration);
            drop(frozen);
        })
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        signal(self.pid, "-CONT");
    }
}
