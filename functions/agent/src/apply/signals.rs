//! The signals that stop an apply: SIGTERM (a cancel), SIGINT, SIGHUP. One that comes
//! during the steps stops them there (the rollback and the record follow); one that comes
//! during the rollback and the record lets them finish, within their bounds, and the apply
//! then exits with the signal's code (128 + its number).

use tokio::signal::unix::{SignalKind, signal};

/// SIGTERM, SIGINT and SIGHUP, as one future.
pub struct Signals {
    term: Option<tokio::signal::unix::Signal>,
    int: Option<tokio::signal::unix::Signal>,
    hup: Option<tokio::signal::unix::Signal>,
}

impl Signals {
    pub fn new() -> Signals {
        Signals {
            term: signal(SignalKind::terminate()).ok(),
            int: signal(SignalKind::interrupt()).ok(),
            hup: signal(SignalKind::hangup()).ok(),
        }
    }

    /// The next of them to come. Cancel-safe, and the streams stay: a signal that comes
    /// later is seen by the next call, never lost to handlers nobody reads.
    pub async fn next(&mut self) -> &'static str {
        async fn on(signal: Option<&mut tokio::signal::unix::Signal>) {
            match signal {
                Some(signal) => {
                    signal.recv().await;
                }
                None => std::future::pending().await,
            }
        }
        tokio::select! {
            () = on(self.term.as_mut()) => "SIGTERM",
            () = on(self.int.as_mut()) => "SIGINT",
            () = on(self.hup.as_mut()) => "SIGHUP",
        }
    }
}

/// The exit status of a process ended by the signal named `name`: 128 + its number, as a
/// shell reports it.
pub fn exit_code(name: &str) -> u8 {
    match name {
        "SIGHUP" => 129,
        "SIGINT" => 130,
        _ => 143,
    }
}
