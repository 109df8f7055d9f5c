//! What the running HAProxy says about itself, asked over its stats socket (through
//! [`crate::haproxy`]) by the readers of the figures, never by the loop: a busy worker makes
//! a reader wait (each command at most [`TIMEOUT`]), never the resolving. Answers are kept
//! for [`KEEP`], so health checks from several load balancer nodes cost one question.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::haproxy::{RuntimeApi, RuntimeError};
use crate::running::Running;

/// Each command on the stats socket gets at most this long: a health check waits for it.
pub const TIMEOUT: Duration = Duration::from_secs(1);
/// All the questions of one look together.
pub const WHOLE: Duration = Duration::from_secs(2);
/// How long an answer is used again.
pub const KEEP: Duration = Duration::from_secs(1);

/// What the worker that answered said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Worker {
    pub pid: u32,
    /// The autoproxy generation it runs (0: none of ours).
    pub generation: u64,
    pub current_connections: Option<u64>,
    pub connection_rate: Option<u64>,
    /// Cumulated sessions of each backend, by name.
    pub backend_sessions: Vec<(String, u64)>,
}

impl Worker {
    /// The cumulated sessions of backend `name`, when it has one.
    pub fn sessions_of(&self, name: &str) -> Option<u64> {
        self.backend_sessions
            .iter()
            .find(|(backend, _)| backend == name)
            .map(|(_, total)| *total)
    }
}

/// The worker, or why it did not answer.
pub type Seen = Result<Worker, String>;

/// An answer: when, on which socket, and what.
type Kept = (Instant, Option<PathBuf>, Arc<Seen>);

/// Asks HAProxy, at most once per [`KEEP`] for the same socket.
#[derive(Debug, Default)]
pub struct Probe {
    last: tokio::sync::Mutex<Option<Kept>>,
}

impl Probe {
    /// What the worker on `socket` says (an answer at most [`KEEP`] old).
    pub async fn look(&self, socket: Option<&Path>) -> Arc<Seen> {
        let mut last = self.last.lock().await;
        if let Some((at, asked, seen)) = last.as_ref()
            && at.elapsed() < KEEP
            && asked.as_deref() == socket
        {
            return Arc::clone(seen);
        }
        let seen = Arc::new(match socket {
            Some(socket) => match tokio::time::timeout(WHOLE, ask(socket)).await {
                Ok(answer) => answer.map_err(|err| err.to_string()),
                Err(_) => Err(format!(
                    "HAProxy did not answer on {} within {} s (a busy or stopped worker)",
                    socket.display(),
                    WHOLE.as_secs()
                )),
            },
            None => Err("the installed config declares no stats socket".to_owned()),
        });
        *last = Some((
            Instant::now(),
            socket.map(Path::to_path_buf),
            Arc::clone(&seen),
        ));
        seen
    }
}

/// One connection: `show info`, the generation map, `show stat` of the backends.
async fn ask(socket: &Path) -> Result<Worker, RuntimeError> {
    let api = RuntimeApi::new(socket, TIMEOUT);
    let mut session = api.session().await?;
    let info = session.info().await?;
    let running = Running::read_on(&mut session, &info).await?;
    let backend_sessions = session.backend_sessions().await?;
    Ok(Worker {
        pid: info.pid,
        generation: running.generation,
        current_connections: info.current_connections,
        connection_rate: info.connection_rate,
        backend_sessions,
    })
}
