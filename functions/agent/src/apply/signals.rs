//! The signals that stop an apply: SIGTERM (a cancel), SIGINT, SIGHUP.

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

    pub async fn any(mut self) -> &'static str {
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
