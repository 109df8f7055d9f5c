//! Held routes move to their target once its host has an address ([`crate::routes`]): the
//! apply leaves a route without an address at its old target, or in at its new one with no
//! address (rejected as `reject_no_address`), and the address service, which is the one to
//! learn the address, moves it without waiting for another apply.
//!
//! The route map files are the apply's, so this runs under the apply's lock, taken without
//! waiting: an apply that holds it writes the tables itself, and the next push tries again.
//! Only entries that now serve are written: to the running worker first, one entry at a time
//! (`add map`/`set map`: each is atomic), after its addresses were pushed; then to the file,
//! so a worker that did not answer is tried again at the next push (the file still differs).

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use autoproxy::artifact::MapFiles;

use crate::files;
use crate::haproxy::{MapChange, RuntimeApi, RuntimeError};
use crate::routes;

/// One route table's entries to change so its held routes serve: (key, target).
type Released = Vec<(String, String)>;

/// How long a release may give one table's entries to the worker, under the apply's lock:
/// a slow worker must not hold an apply back by N commands × their time-out each. What it
/// took by then stays, and the next try skips it.
const RELEASE_BUDGET: Duration = Duration::from_secs(5);

/// The addresses a release was for.
type Target = Arc<BTreeMap<Arc<str>, IpAddr>>;

/// Puts the installed config's held routes in once their hosts have addresses: after each
/// push that left the worker holding the addresses (or when there is no worker), once per
/// change of the addresses or of the config.
#[derive(Debug)]
pub struct Releaser {
    /// The installed config, whose held routes go in once their host has an address.
    config: PathBuf,
    /// The addresses and config stamp the held routes were last released for.
    released_for: Option<(Target, Option<(u64, std::time::SystemTime)>)>,
}

impl Releaser {
    pub fn new(config: PathBuf) -> Releaser {
        Releaser {
            config,
            released_for: None,
        }
    }

    /// Puts in the held routes that can serve with `target`, through `api` when a worker runs
    /// (it holds the addresses already), unless done for the same addresses and config.
    pub async fn release(&mut self, target: &Target, api: Option<&RuntimeApi>) {
        let stamp = std::fs::metadata(&self.config)
            .and_then(|m| Ok((m.len(), m.modified()?)))
            .ok();
        if self
            .released_for
            .as_ref()
            .is_some_and(|(done, at)| Arc::ptr_eq(done, target) && *at == stamp)
        {
            return;
        }
        match release(&self.config, target, api).await {
            Ok(released) => {
                if released > 0 {
                    super::log(format_args!(
                        "{released} held route(s) put in: their hosts have addresses now"
                    ));
                }
                self.released_for = Some((Arc::clone(target), stamp));
            }
            Err(err) => super::log(format_args!("held routes not put in yet: {err}")),
        }
    }
}

/// The tables of the config at `config` whose held routes can serve with `addresses`: (map
/// path as the config names it, the table's new text, the entries that changed).
fn releasable(
    config: &Path,
    addresses: &BTreeMap<String, IpAddr>,
) -> Vec<(String, String, Released)> {
    let dir = config.parent().unwrap_or(Path::new("/"));
    let Ok(text) = std::fs::read_to_string(config) else {
        return Vec::new();
    };
    let generation = autoproxy::artifact::parse_header(&text).map_or(0, |h| h.generation);
    let maps = MapFiles::named_by(&text, generation);
    let (routes, suffixes) = MapFiles::route_tables(&text);
    let mut out = Vec::new();
    for (path, wanted) in [(maps.routes, routes), (maps.suffixes, suffixes)] {
        let current = std::fs::read_to_string(dir.join(&path)).unwrap_or_default();
        let serving = routes::serving(&wanted, addresses, &current);
        let now: BTreeMap<&str, &str> = routes::entries(&current).collect();
        let changed: Released = routes::entries(&serving.table)
            .filter(|(key, target)| now.get(key) != Some(target))
            .map(|(key, target)| (key.to_owned(), target.to_owned()))
            .collect();
        if !changed.is_empty() {
            out.push((path, serving.table, changed));
        }
    }
    out
}

/// Puts in the held routes of the config at `config` whose host has an address in
/// `addresses`; how many. Nothing when an apply holds the lock.
pub async fn release(
    config: &Path,
    addresses: &Arc<BTreeMap<Arc<str>, IpAddr>>,
    api: Option<&RuntimeApi>,
) -> Result<usize, String> {
    release_within(config, addresses, api, RELEASE_BUDGET).await
}

/// [`release`], giving each table's entries to the worker within `budget`.
async fn release_within(
    config: &Path,
    addresses: &Arc<BTreeMap<Arc<str>, IpAddr>>,
    api: Option<&RuntimeApi>,
    budget: Duration,
) -> Result<usize, String> {
    let addresses: BTreeMap<String, IpAddr> = addresses
        .iter()
        .map(|(name, address)| (name.to_string(), *address))
        .collect();
    if releasable(config, &addresses).is_empty() {
        return Ok(0);
    }
    let lock_path = PathBuf::from(format!("{}.lock", config.display()));
    // Read-only: the service's unit makes the config's directory read-only for it (only the
    // maps directory is writable), and flock needs no more. The apply created the file.
    let lock = std::fs::File::open(&lock_path)
        .map_err(|err| format!("cannot open {}: {err}", lock_path.display()))?;
    if lock.try_lock().is_err() {
        return Ok(0);
    }
    // Again under the lock: an apply may have just written the tables.
    let dir = config.parent().unwrap_or(Path::new("/"));
    let mut released = 0;
    for (path, table, changed) in releasable(config, &addresses) {
        if let Some(api) = api {
            tokio::time::timeout(budget, set_entries(api, &path, &changed))
                .await
                .map_err(|_| {
                    format!(
                        "{path}: the worker did not take {} entries within {} s",
                        changed.len(),
                        budget.as_secs_f64()
                    )
                })?
                .map_err(|err| format!("{path}: {err}"))?;
        }
        let target = dir.join(&path);
        files::replace(&target, table.as_bytes(), 0o644)
            .map_err(|err| format!("cannot write {}: {err}", target.display()))?;
        released += changed.len();
    }
    drop(lock);
    Ok(released)
}

/// Sets each entry in the running worker's `map`: `set map` where it holds the key, else
/// `add map`; nothing where it holds the entry already (an earlier try that ran out of time
/// gave it).
async fn set_entries(api: &RuntimeApi, map: &str, entries: &Released) -> Result<(), RuntimeError> {
    let mut session = api.session().await?;
    let held: BTreeMap<String, String> = session.show_map(map).await?.into_iter().collect();
    for (key, target) in entries {
        let change = if held.get(key) == Some(target) {
            continue;
        } else if held.contains_key(key) {
            MapChange::Set {
                map,
                key,
                value: target,
            }
        } else {
            MapChange::Add {
                map,
                key,
                value: target,
            }
        };
        session.change(change).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::haproxy::fake::slow_worker;

    /// A config of 40 routes whose file map still holds each at its old host, every host
    /// with an address: the release moves all 40.
    fn held_estate(dir: &Path) -> (PathBuf, Arc<BTreeMap<Arc<str>, IpAddr>>) {
        let config = dir.join("haproxy.cfg");
        let (mut text, mut table) = ("# generation: 3\nglobal\n".to_owned(), String::new());
        let mut addresses = BTreeMap::new();
        for i in 0..40u8 {
            text.push_str(&format!(
                "#@route k{i}.example new{i}.example:443 api 1 Z1\n"
            ));
            table.push_str(&format!("k{i}.example old{i}.example:443\n"));
            addresses.insert(
                Arc::from(format!("new{i}.example")),
                IpAddr::from([10, 0, 1, i]),
            );
            addresses.insert(
                Arc::from(format!("old{i}.example")),
                IpAddr::from([10, 0, 2, i]),
            );
        }
        std::fs::write(&config, text).expect("writes the config");
        std::fs::write(dir.join("haproxy.cfg.lock"), "").expect("writes the lock");
        std::fs::create_dir(dir.join("autoproxy")).expect("creates the maps directory");
        std::fs::write(dir.join("autoproxy/routes.map"), table).expect("writes the map");
        (config, Arc::new(addresses))
    }

    /// A worker that takes each of 40 entries in 400 ms (under the 5 s time-out of each)
    /// would hold the apply's lock for 16 s: the release ends at its budget, writes no file
    /// (the next push tries again) and lets the lock go; a worker that keeps up gets them all.
    #[tokio::test]
    async fn a_release_gives_the_worker_a_table_within_its_budget_whatever_each_entry_takes() {
        let dir = tempfile::tempdir().expect("temp dir");
        let (config, addresses) = held_estate(dir.path());
        let map = dir.path().join("autoproxy/routes.map");
        let before = std::fs::read_to_string(&map).expect("reads the map");
        let socket = dir.path().join("stats.sock");
        let worker = slow_worker(&socket, Duration::from_millis(400));
        let api = RuntimeApi::new(&socket, Duration::from_secs(5));

        let started = std::time::Instant::now();
        let released =
            release_within(&config, &addresses, Some(&api), Duration::from_secs(1)).await;
        let took = started.elapsed();
        worker.abort();
        let Err(why) = released else {
            panic!("{released:?} after {took:?}")
        };
        assert!(why.contains("did not take 40 entries within 1 s"), "{why}");
        // At its budget, far from the 16 s its commands would take (a loaded machine aside).
        assert!(took < Duration::from_secs(8), "the release took {took:?}");
        assert_eq!(
            std::fs::read_to_string(&map).expect("reads the map"),
            before
        );
        let lock = std::fs::File::open(dir.path().join("haproxy.cfg.lock")).expect("opens");
        assert!(lock.try_lock().is_ok(), "the release let the lock go");
        drop(lock);

        let socket = dir.path().join("quick.sock");
        let worker = slow_worker(&socket, Duration::ZERO);
        let api = RuntimeApi::new(&socket, Duration::from_secs(5));
        let released =
            release_within(&config, &addresses, Some(&api), Duration::from_secs(1)).await;
        worker.abort();
        assert_eq!(released, Ok(40));
        let after = std::fs::read_to_string(&map).expect("reads the map");
        assert!(
            after.starts_with("k0.example new0.example:443\n"),
            "{after}"
        );
        assert_eq!(after.lines().count(), 40, "{after}");
    }
}
