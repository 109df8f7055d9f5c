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
            tokio::time::timeout(RELEASE_BUDGET, set_entries(api, &path, &changed))
                .await
                .map_err(|_| {
                    format!(
                        "{path}: the worker did not take {} entries within {} s",
                        changed.len(),
                        RELEASE_BUDGET.as_secs()
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
