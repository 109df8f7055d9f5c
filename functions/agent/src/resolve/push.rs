//! Pushes the address map to the running HAProxy worker over its stats socket: `add map`,
//! `set map`, `del map` on the map `autoproxy/addresses.map`, so a change is live without a
//! reload. A new worker's map (after a reload) is read first with `show map`: it loaded the
//! file, which may be older than what it should hold. After that the pusher's view is exact,
//! since the service is the one writer of the worker's address map while it runs.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::address_map::MAP;
use crate::haproxy::{MapChange, RuntimeApi, RuntimeError};

use super::log;

/// Every command on the stats socket waits at most this long.
const PUSH_TIMEOUT: Duration = Duration::from_secs(5);
/// A push as a whole (its connection, reading a new worker's map, every change) ends within
/// this: a worker that answers each command just in time cannot stretch it to N commands ×
/// [`PUSH_TIMEOUT`]. Far above a full push measured (10,000 entries in about a second).
const PUSH_BUDGET: Duration = Duration::from_secs(15);

/// The address map the worker should hold.
type Target = Arc<BTreeMap<Arc<str>, IpAddr>>;

/// How a push ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Synced {
    /// The worker's map equals the target.
    Held,
    /// No worker to push to (the config names no stats socket): the file is all a starting
    /// worker needs.
    NoWorker,
    /// The worker did not take it, and why: it holds an unknown part of the target.
    Failed(String),
}

/// What the running worker holds, as far as we know.
#[derive(Debug)]
pub struct Pusher {
    api: Option<RuntimeApi>,
    pid: Option<u32>,
    view: HashMap<String, IpAddr>,
    /// The target last pushed completely to `pid`: nothing to do while it is the same.
    pushed: Option<Target>,
    down: bool,
    /// How long a push may take as a whole.
    budget: Duration,
}

impl Pusher {
    pub fn new(stats_socket: Option<PathBuf>) -> Pusher {
        Pusher {
            api: stats_socket.map(|path| RuntimeApi::new(path, PUSH_TIMEOUT)),
            pid: None,
            view: HashMap::new(),
            pushed: None,
            down: false,
            budget: PUSH_BUDGET,
        }
    }

    /// The runtime API of the worker pushed to, if the config names a stats socket.
    pub fn api(&self) -> Option<&RuntimeApi> {
        self.api.as_ref()
    }

    /// Makes the worker's map equal `target`; how that ended (anything but `Held`: try again
    /// later).
    pub async fn sync(&mut self, target: &Target) -> Synced {
        let Some(api) = self.api.clone() else {
            // No worker to push to: the files are all a starting worker needs.
            return Synced::NoWorker;
        };
        let pushed = tokio::time::timeout(self.budget, self.push(&api, target))
            .await
            .unwrap_or_else(|_| {
                let what = format!("a push of {} addresses", target.len());
                Err(api.timed_out(&what, self.budget))
            });
        match pushed {
            Ok(pushed) => {
                if self.down {
                    log(format_args!(
                        "HAProxy reachable again (worker {})",
                        self.pid.unwrap_or_default()
                    ));
                    self.down = false;
                }
                if pushed > 0 {
                    log(format_args!(
                        "pushed {pushed} map change(s) to HAProxy worker {}",
                        self.pid.unwrap_or_default()
                    ));
                }
                Synced::Held
            }
            Err(err) => {
                if let RuntimeError::Refused { .. } = err {
                    log(format_args!("{err}"));
                } else if !self.down {
                    log(format_args!(
                        "HAProxy not reachable on {} ({err}); the map file stays current",
                        api.path().display()
                    ));
                    self.down = true;
                }
                // Read its map again next time.
                self.pid = None;
                self.pushed = None;
                Synced::Failed(err.to_string())
            }
        }
    }

    async fn push(&mut self, api: &RuntimeApi, target: &Target) -> Result<usize, RuntimeError> {
        let mut session = api.session().await?;
        let pid = session.info().await?.pid;
        if self.pid == Some(pid)
            && self
                .pushed
                .as_ref()
                .is_some_and(|pushed| Arc::ptr_eq(pushed, target))
        {
            return Ok(0);
        }
        // What the worker holds: read again when the worker is new (it loaded the file, which
        // may be older) or the last push did not end complete. Otherwise the view is exact:
        // while the service runs it is the one writer of this map (an apply asks it), and
        // reading 10,000 entries before every change would delay every apply that waits on it.
        if self.pid != Some(pid) || self.pushed.is_none() {
            self.view.clear();
            self.pushed = None;
            for (key, value) in session.show_map(MAP).await? {
                if let Ok(address) = value.parse() {
                    self.view.insert(key, address);
                }
            }
            self.pid = Some(pid);
        }
        self.pushed = None;
        let mut pushed = 0;
        let gone: Vec<String> = self
            .view
            .keys()
            .filter(|key| !target.contains_key(key.as_str()))
            .cloned()
            .collect();
        for key in gone {
            session
                .change(MapChange::Delete {
                    map: MAP,
                    key: &key,
                })
                .await?;
            self.view.remove(&key);
            pushed += 1;
        }
        for (name, address) in target.iter() {
            let value = address.to_string();
            let change = match self.view.get(name.as_ref()) {
                Some(old) if old == address => continue,
                Some(_) => MapChange::Set {
                    map: MAP,
                    key: name,
                    value: &value,
                },
                None => MapChange::Add {
                    map: MAP,
                    key: name,
                    value: &value,
                },
            };
            session.change(change).await?;
            self.view.insert(name.to_string(), *address);
            pushed += 1;
        }
        self.pushed = Some(Arc::clone(target));
        Ok(pushed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::haproxy::fake::slow_worker;

    /// A worker that takes each of 40 changes in 400 ms (under the 5 s time-out of each)
    /// would hold a push for 16 s: the push ends at its budget, failed, and the next one reads
    /// the worker's map again.
    #[tokio::test]
    async fn a_push_ends_within_its_budget_whatever_each_command_takes() {
        let dir = tempfile::tempdir().expect("temp dir");
        let socket = dir.path().join("stats.sock");
        let worker = slow_worker(&socket, Duration::from_millis(400));
        let mut pusher = Pusher::new(Some(socket));
        pusher.budget = Duration::from_secs(1);
        let target: Target = Arc::new(
            (0..40u8)
                .map(|i| {
                    (
                        Arc::from(format!("h{i}.example")),
                        IpAddr::from([10, 0, 0, i]),
                    )
                })
                .collect(),
        );
        let started = std::time::Instant::now();
        let synced = pusher.sync(&target).await;
        let took = started.elapsed();
        worker.abort();
        let Synced::Failed(why) = synced else {
            panic!("{synced:?} after {took:?}")
        };
        assert!(why.contains("a push of 40 addresses"), "{why}");
        assert!(pusher.pid.is_none() && pusher.pushed.is_none());
        // At its budget, far from the 16 s its commands would take (a loaded machine aside).
        assert!(took < Duration::from_secs(8), "the push took {took:?}");
    }
}
