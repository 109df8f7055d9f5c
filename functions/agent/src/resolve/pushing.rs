//! When the map goes to the running HAProxy: the [`Pusher`] works in a task of its own (a
//! stuck worker must not stop the resolving; every command on its socket has a deadline), one
//! push at a time, after each write of the file, and every few seconds when nothing changed, so a
//! reload (a new worker that loaded an older file) is caught up on. After a push that left the
//! worker holding the addresses, the same task has the [`Releaser`] put the held routes in;
//! then the worker holds that map ([`Pushing::holds`], which `/ready`'s first pass waits for).

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::task::{JoinError, JoinHandle};

use super::held::Releaser;
use super::push::{Pusher, Synced};

/// The pusher and the releaser of held routes, which work in turn.
type Workers = (Pusher, Releaser);

/// A push and how it ended.
type Pushed = Result<(Workers, Synced), JoinError>;

/// Due again this long after a push started, should it never end (its socket calls time
/// out in seconds; its end sets the next due time).
const WHILE_PUSHING: Duration = Duration::from_secs(60);
/// The time between two pushes after one that brought the worker's map to its target...
const AFTER_SUCCESS: Duration = Duration::from_secs(2);
/// ... and after one that did not.
const AFTER_FAILURE: Duration = Duration::from_secs(3);

/// The pusher, or its push in flight, and when the next push is due.
#[derive(Debug)]
pub struct Pushing {
    config: PathBuf,
    stats_socket: Option<PathBuf>,
    /// None while its push is in flight.
    pusher: Option<Workers>,
    task: Option<JoinHandle<(Workers, Synced)>>,
    /// The map the push in flight brings the worker to.
    in_flight: Option<Target>,
    /// The map the last push that ended brought the worker to (its held routes put in); none
    /// after a push that failed, or when the socket changed.
    held: Option<Target>,
    due: Instant,
}

/// The address map a push brings the worker to.
type Target = Arc<BTreeMap<Arc<str>, IpAddr>>;

impl Pushing {
    /// Nowhere to push yet: the config names the stats socket.
    pub fn new(config: &Path, now: Instant) -> Pushing {
        Pushing {
            config: config.to_path_buf(),
            stats_socket: None,
            pusher: Some((Pusher::new(None), Releaser::new(config.to_path_buf()))),
            task: None,
            in_flight: None,
            held: None,
            due: now,
        }
    }

    /// Pushes to `stats_socket` from now on (a new pusher, due at once, when it changed).
    /// A push in flight to the old socket is dropped, never waited for: the loop calls this.
    /// Its answers go with the new pusher's first push.
    pub fn set_stats_socket(&mut self, stats_socket: Option<PathBuf>, now: Instant) {
        if self.stats_socket == stats_socket {
            return;
        }
        self.stats_socket = stats_socket;
        if let Some(task) = self.task.take() {
            task.abort();
        }
        self.in_flight = None;
        self.held = None;
        self.pusher = Some(self.fresh());
        self.due = now;
    }

    /// A push is due now (the file was written, or a request was answered).
    pub fn due_now(&mut self, now: Instant) {
        self.due = now;
    }

    /// Starts a push of `written` when one is due and none is in flight; `file_current`:
    /// whether the file holds the engine's map (a push waits for the write). Whether it
    /// started one.
    pub fn start(&mut self, written: &Target, file_current: bool, now: Instant) -> bool {
        if now < self.due || !file_current {
            return false;
        }
        let Some((mut pusher, mut releaser)) = self.pusher.take() else {
            return false;
        };
        let target = Arc::clone(written);
        self.in_flight = Some(Arc::clone(written));
        self.task = Some(tokio::spawn(async move {
            let synced = pusher.sync(&target).await;
            if !matches!(synced, Synced::Failed(_)) {
                releaser.release(&target, pusher.api()).await;
            }
            ((pusher, releaser), synced)
        }));
        self.due = now + WHILE_PUSHING;
        true
    }

    /// When a push is due, if one could start then.
    pub fn next_wake(&self, file_current: bool) -> Option<Instant> {
        (file_current && self.pusher.is_some()).then_some(self.due)
    }

    /// The push in flight, once it ended; never while none is.
    pub async fn finished(&mut self) -> Pushed {
        match self.task.as_mut() {
            Some(task) => task.await,
            None => std::future::pending().await,
        }
    }

    /// Takes back the pusher of a push that ended; why the worker may not hold the map, when
    /// it may not.
    pub fn ended(&mut self, pushed: Pushed, now: Instant) -> Option<String> {
        self.task = None;
        let target = self.in_flight.take();
        self.held = None;
        match pushed {
            Ok((workers, synced)) => {
                if self.pusher.is_none() {
                    self.pusher = Some(workers);
                }
                // Also every few seconds when nothing changed: a reload shows as a new pid.
                self.due = now
                    + if synced == Synced::Held {
                        AFTER_SUCCESS
                    } else {
                        AFTER_FAILURE
                    };
                match synced {
                    Synced::Failed(why) => Some(why),
                    Synced::Held | Synced::NoWorker => {
                        self.held = target;
                        None
                    }
                }
            }
            // The push panicked: start over with a fresh view of HAProxy.
            Err(err) => {
                self.pusher = Some(self.fresh());
                Some(format!("the push ended early: {err}"))
            }
        }
    }

    /// Whether the last push that ended brought the worker to `written` (and put the held
    /// routes in), or found no worker to bring: nothing of `written` waits for a push.
    pub fn holds(&self, written: &Target) -> bool {
        self.held
            .as_ref()
            .is_some_and(|held| Arc::ptr_eq(held, written))
    }

    /// A new pusher to the stats socket, with a new releaser.
    fn fresh(&self) -> Workers {
        (
            Pusher::new(self.stats_socket.clone()),
            Releaser::new(self.config.clone()),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A push in flight to a socket that never answers (a frozen worker) is dropped when the
    /// config names another socket: the loop goes on at once, and pushes there.
    #[tokio::test]
    async fn a_new_stats_socket_never_waits_for_the_push_in_flight() {
        let dir = tempfile::tempdir().expect("temp dir");
        let frozen = dir.path().join("frozen.sock");
        // Bound, never accepted from: a connection queues and no answer comes.
        let _listener = std::os::unix::net::UnixListener::bind(&frozen).expect("binds");
        let config = dir.path().join("haproxy.cfg");
        let now = Instant::now();
        let mut pushing = Pushing::new(&config, now);
        pushing.set_stats_socket(Some(frozen), now);
        assert!(pushing.start(&Arc::new(BTreeMap::new()), true, now));
        tokio::task::yield_now().await;
        let started = Instant::now();
        pushing.set_stats_socket(Some(dir.path().join("new.sock")), Instant::now());
        let took = started.elapsed();
        assert!(pushing.task.is_none() && pushing.pusher.is_some());
        assert!(took < Duration::from_secs(2), "the change waited {took:?}");
    }

    /// The worker holds a map once a push of that very map ended: not while it is in flight,
    /// not another map, not after a push that failed or a change of socket.
    #[tokio::test]
    async fn the_worker_holds_a_map_once_its_push_ended() {
        let dir = tempfile::tempdir().expect("temp dir");
        let config = dir.path().join("haproxy.cfg");
        let now = Instant::now();
        let mut pushing = Pushing::new(&config, now);
        let written: Target = Arc::new(BTreeMap::new());
        assert!(pushing.start(&written, true, now));
        assert!(!pushing.holds(&written), "in flight");
        let pushed = pushing.finished().await;
        assert_eq!(pushing.ended(pushed, Instant::now()), None);
        assert!(
            pushing.holds(&written),
            "no worker: nothing waits for a push"
        );
        assert!(!pushing.holds(&Arc::new(BTreeMap::new())), "another map");

        // Nothing listens on the new socket: the push fails.
        pushing.set_stats_socket(Some(dir.path().join("none.sock")), Instant::now());
        assert!(!pushing.holds(&written), "a new socket");
        assert!(pushing.start(&written, true, Instant::now()));
        let pushed = pushing.finished().await;
        assert!(pushing.ended(pushed, Instant::now()).is_some());
        assert!(!pushing.holds(&written), "a failed push");
    }
}
