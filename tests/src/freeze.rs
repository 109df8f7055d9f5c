//! A busy worker, reproduced faithfully: SIGSTOP leaves the master up and the stats socket
//! silent (connections queue, nothing answers), SIGCONT lets it answer what queued.

use std::process::Command;
use std::time::Duration;

/// A process stopped with SIGSTOP; continued when dropped, or by itself after a while.
#[derive(Debug)]
pub struct Frozen {
    pid: u32,
}

fn signal(pid: u32, name: &str) {
    let _ = Command::new("kill").args([name, &pid.to_string()]).status();
}

impl Frozen {
    /// Stops `pid` until the guard is dropped.
    pub fn stop(pid: u32) -> Frozen {
        signal(pid, "-STOP");
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
