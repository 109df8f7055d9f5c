//! The map files of a config: staged and checked before anything names them, installed by
//! rename, and applied to the running HAProxy over its runtime API when only the route
//! tables changed (docs/ARCHITECTURE.md, "When a proxy reloads"). A config holds its own
//! route tables, so a rollback whose last-known-good has no maps kept byte for byte
//! (`apply/kept.rs`) writes them from its text.

use std::path::PathBuf;

use autoproxy::artifact::{self, MapFiles};

use super::{Before, Failure, NewConfig, Run, Stage, UPDATE_BUDGET, config, fail, files, log};
use crate::control::Asked;
use crate::haproxy::{MapChange, MapVersion, Session};

/// The largest `add map` payload sent at once: well under HAProxy's default `tune.bufsize`
/// (16 kB), which must hold the command and its whole payload. Before HAProxy 3.0 a larger
/// one makes it close the connection without an answer.
const PAYLOAD_BYTES: usize = 8 * 1024;

/// A config's maps written beside the live ones, and the config variant that reads them.
#[derive(Debug)]
pub(super) struct Staged {
    /// Staged route map → the path it is installed at.
    files: Vec<(PathBuf, PathBuf)>,
    /// The staged generation map and its path: installed with the config, never before it,
    /// so that files on disk never claim a generation whose config is not there.
    generation: Option<(PathBuf, PathBuf)>,
    /// The new config with its map paths pointing at the staged maps: what `haproxy -c`
    /// checks, so the live maps change only once the config passed.
    pub check: PathBuf,
    /// The route tables: (map path as HAProxy names it, its text).
    pub tables: Vec<(String, String)>,
}

impl Run {
    /// Writes the maps of this generation to a staging directory, and the config variant
    /// that names them. (The address map is started before, by [`Run::seed_address_map`].)
    pub(super) fn stage_maps(
        &mut self,
        text: &str,
        generation: u64,
        maps: &MapFiles,
    ) -> Result<Staged, Failure> {
        let maps_dir = self.paths.maps_dir.clone();
        let stage = files::temp_path(&maps_dir, ".stage");
        self.undo.temps.push(stage.clone());
        std::fs::create_dir(&stage)
            .and_then(|()| {
                std::fs::set_permissions(
                    &stage,
                    std::os::unix::fs::PermissionsExt::from_mode(0o755),
                )
            })
            .or_else(|err| fail(format!("cannot create {}: {err}", stage.display())))?;
        let stage_name = stage
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default()
            .to_owned();
        let (mut wanted, held) = self.serving_files(text, generation, maps);
        let mut check_text = text.to_owned();
        let mut staged = Vec::new();
        for (index, (path, body)) in wanted.iter().enumerate() {
            let staged_rel = format!("autoproxy/{stage_name}/{index}.map");
            let staged_path = self.paths.dir.join(&staged_rel);
            files::write_synced(&staged_path, body.as_bytes(), 0o644)
                .or_else(|err| fail(format!("cannot write {}: {err}", staged_path.display())))?;
            check_text = check_text.replace(path.as_str(), &staged_rel);
            staged.push((staged_path, self.paths.dir.join(path)));
        }
        files::sync_dir(&stage)
            .or_else(|err| fail(format!("cannot flush {}: {err}", stage.display())))?;
        let check = files::temp_path(&self.paths.dir, ".autoproxy-check");
        self.undo.temps.push(check.clone());
        files::write_synced(&check, check_text.as_bytes(), 0o644)
            .or_else(|err| fail(format!("cannot write {}: {err}", check.display())))?;
        log(
            "maps",
            &format!(
                "generation {generation}: {} exact, {} suffix routes staged in {}; {held} held until their host has an address",
                wanted[0].1.lines().count(),
                wanted[1].1.lines().count(),
                stage.display()
            ),
        );
        wanted.truncate(2);
        let generation = (staged.len() > 2).then(|| staged.remove(2));
        Ok(Staged {
            files: staged,
            generation,
            check,
            tables: wanted,
        })
    }

    /// The address map, started from `show servers state` of the running HAProxy when there
    /// is none or it is empty (a per-route config names one server per host), so the first
    /// switch to the map layout drops no route.
    pub(super) async fn seed_address_map(&mut self, maps: &MapFiles) -> Result<(), Failure> {
        let maps_dir = self.paths.maps_dir.clone();
        std::fs::create_dir_all(&maps_dir)
            .or_else(|err| fail(format!("cannot create {}: {err}", maps_dir.display())))?;
        let addresses = self.paths.dir.join(&maps.addresses);
        if std::fs::metadata(&addresses).is_ok_and(|m| m.len() > 0) {
            return Ok(());
        }
        let seeded = self.seed_addresses().await;
        // Under the map's lock, as the address service writes it: a service that wrote the
        // file meanwhile keeps what it wrote. Off the runtime thread: the lock may wait, for
        // at most its bound.
        let file = crate::address_map::MapFile::at(&addresses);
        let text = seeded.clone();
        let wait = crate::address_map::MAP_LOCK_WAIT;
        let wrote = tokio::task::spawn_blocking(move || file.start_with(&text, wait))
            .await
            .map_err(std::io::Error::other)
            .and_then(|wrote| wrote)
            .or_else(|err| fail(format!("cannot write {}: {err}", addresses.display())))?;
        if !wrote {
            return Ok(());
        }
        log(
            "maps",
            &format!(
                "started {} with {} addresses the running HAProxy had resolved",
                addresses.display(),
                seeded.lines().count()
            ),
        );
        Ok(())
    }

    /// Renames the staged maps into place: from the first rename on, a failure rolls back.
    pub(super) fn install_maps(&mut self, staged: &Staged) -> Result<(), Failure> {
        if self.undo.maps_before.is_none() {
            let targets = staged.files.iter().chain(staged.generation.iter());
            self.undo.maps_before = Some(
                targets
                    .map(|(_, to)| (to.clone(), std::fs::read(to).ok()))
                    .collect(),
            );
        }
        let mut dirs: Vec<PathBuf> = Vec::new();
        for (from, to) in &staged.files {
            let parent = to.parent().unwrap_or(&self.paths.dir).to_path_buf();
            std::fs::create_dir_all(&parent)
                .or_else(|err| fail(format!("cannot create {}: {err}", parent.display())))?;
            if self.undo.stage == Stage::Prepare {
                self.undo.stage = Stage::MapsInstalled;
            }
            std::fs::rename(from, to)
                .or_else(|err| fail(format!("cannot rename into {}: {err}", to.display())))?;
            if !dirs.contains(&parent) {
                dirs.push(parent);
            }
        }
        for dir in dirs {
            if let Err(err) = files::sync_dir(&dir) {
                log(
                    "maps",
                    &format!("WARNING: could not flush {}: {err}", dir.display()),
                );
            }
        }
        Ok(())
    }

    /// Renames the staged generation map into place, right before the config's rename (the
    /// swap flushes the maps' directory before it).
    pub(super) fn install_generation_map(&mut self, staged: &Staged) -> Result<(), Failure> {
        if let Some((from, to)) = &staged.generation {
            if self.undo.stage == Stage::Prepare {
                self.undo.stage = Stage::MapsInstalled;
            }
            std::fs::rename(from, to)
                .or_else(|err| fail(format!("cannot rename into {}: {err}", to.display())))?;
        }
        Ok(())
    }

    /// Writes the maps `text` names, as its route lines and header say, in place: how a
    /// rollback brings back last-known-good's maps when none were kept byte for byte (a
    /// last-known-good kept by an earlier agent, or of a layout without a generation map).
    pub(super) fn restore_maps(&mut self, text: &str) -> std::io::Result<usize> {
        let generation = config::header_generation(text).unwrap_or(0);
        let maps = MapFiles::named_by(text, generation);
        let (files, _) = self.serving_files(text, generation, &maps);
        for (path, body) in &files {
            let target = self.paths.dir.join(path);
            std::fs::create_dir_all(target.parent().unwrap_or(&self.paths.dir))?;
            files::replace(&target, body.as_bytes(), 0o644)?;
        }
        Ok(files.len())
    }

    /// Why this generation must be reloaded rather than applied at run time; `None` when
    /// only its route tables differ from the config HAProxy runs. Decided from what ran when
    /// the run took the lock (nothing else reloads HAProxy under it).
    pub(super) fn needs_reload(&self, text: &str, maps: &MapFiles) -> Option<String> {
        if maps.generation.is_none() {
            return Some("its maps are in a directory of their generation".to_owned());
        }
        let running = match self.state.before {
            Before::Stopped => return Some("HAProxy is not running".to_owned()),
            Before::Runs(None) => {
                return Some(
                    "the running HAProxy does not answer on the installed config's stats socket"
                        .to_owned(),
                );
            }
            Before::Runs(Some(running)) => running,
        };
        if !running.by_map {
            return Some("the running HAProxy holds no generation map".to_owned());
        }
        if self.state.installed_gen != running.generation {
            return Some(format!("{} is not what runs", self.params.config.display()));
        }
        let installed = std::fs::read_to_string(self.config()).unwrap_or_default();
        if config::structure(&installed) != config::structure(text) {
            return Some("the config changed beyond its route tables".to_owned());
        }
        None
    }

    /// Replaces the running HAProxy's route tables with the staged ones and verifies them,
    /// then sets its generation map: no reload. First, when no address service runs, the
    /// worker gets the address of every route host it lacks, from the address map file (a
    /// route never points at a missing address). Each table switches
    /// atomically (`prepare map`, `add map @ver` in chunks, `commit map @ver`); the generation
    /// is set last, once both tables were read back equal to their files.
    pub(super) async fn update_runtime(
        &mut self,
        new: &NewConfig,
        staged: &Staged,
    ) -> Result<(), String> {
        let (text, maps, generation) = (new.text.as_str(), &new.maps, new.generation);
        let api = self
            .socket()
            .ok_or_else(|| "the installed config declares no usable stats socket".to_owned())?;
        let deadline = std::time::Instant::now() + UPDATE_BUDGET;
        let mut session = api.session().await.map_err(|err| err.to_string())?;
        self.give_lacking_addresses(&mut session, text, maps, deadline)
            .await?;
        // Both tables filled first, then committed back to back: a route moving from one
        // table to the other is never in neither for longer than between two commands.
        let mut versions = Vec::new();
        for (map, table) in &staged.tables {
            versions.push(fill_map(&mut session, map, table, deadline).await?);
        }
        for (index, ((map, _), version)) in staged.tables.iter().zip(versions).enumerate() {
            if index == 1 {
                // The fault tests stop here: one table committed, the other not yet.
                self.pause("update").await;
            }
            due(deadline)?;
            session
                .change(MapChange::Commit { map, version })
                .await
                .map_err(|err| err.to_string())?;
        }
        verify_tables(&mut session, &staged.tables, deadline).await?;
        self.read_worker_addresses(&mut session, text, maps, deadline)
            .await?;
        due(deadline)?;
        let Some(generation_map) = &maps.generation else {
            return Err("this layout has no generation map".to_owned());
        };
        session
            .change(MapChange::Set {
                map: generation_map,
                key: artifact::GENERATION_KEY,
                value: &generation.to_string(),
            })
            .await
            .map_err(|err| err.to_string())?;
        self.state.seen = Some((generation, "update"));
        Ok(())
    }

    /// Gives the worker the addresses of new route hosts it lacks, from the address map file,
    /// only when no address service listens: while one runs, busy or not, it is the one
    /// writer of the worker's address map (it pushed the new hosts before it answered the
    /// apply, or pushes them once it can).
    async fn give_lacking_addresses(
        &self,
        session: &mut Session,
        text: &str,
        maps: &MapFiles,
        deadline: std::time::Instant,
    ) -> Result<(), String> {
        let control = self.paths.dir.join(crate::control::SOCKET);
        // A tokio connect with a deadline: a full backlog must not block the runtime thread,
        // which serves the signals.
        match crate::control::connect(&control).await {
            Err(Asked::NoResolver) => {}
            Ok(_) => return Ok(()),
            Err(Asked::Busy(why) | Asked::Failed(why)) => {
                log(
                    "update",
                    &format!("{why}: it gives the worker the new hosts' addresses"),
                );
                return Ok(());
            }
        }
        let pushed =
            push_addresses(session, &self.paths.dir, &maps.addresses, text, deadline).await?;
        if pushed > 0 {
            log(
                "update",
                &format!("gave the running HAProxy {pushed} address(es) of new route hosts"),
            );
        }
        Ok(())
    }

    /// The truth of every committed host: the worker's own address map, read back now. A host
    /// it lacks leaves its routes rejected as having no address; the record counts them
    /// unresolved.
    async fn read_worker_addresses(
        &mut self,
        session: &mut Session,
        text: &str,
        maps: &MapFiles,
        deadline: std::time::Instant,
    ) -> Result<(), String> {
        due(deadline)?;
        if !artifact::body(text).contains(maps.addresses.as_str()) {
            return Ok(());
        }
        let held = session
            .show_map(&maps.addresses)
            .await
            .map_err(|err| err.to_string())?;
        let lines: String = held
            .iter()
            .map(|(host, address)| format!("{host} {address}\n"))
            .collect();
        let lacking = super::record::unresolved_routes(text, &lines);
        if lacking > 0 {
            log(
                "update",
                &format!(
                    "{lacking} route(s) whose host the running HAProxy holds no address for: rejected as having none until the address service gives it"
                ),
            );
        }
        self.state.worker_addresses = Some(lines);
        Ok(())
    }
}

/// Reads each committed table back from HAProxy: an error unless it holds what its file does.
async fn verify_tables(
    session: &mut Session,
    tables: &[(String, String)],
    deadline: std::time::Instant,
) -> Result<(), String> {
    for (map, table) in tables {
        due(deadline)?;
        let mut held = session.show_map(map).await.map_err(|err| err.to_string())?;
        let mut want = entries(table);
        held.sort();
        want.sort();
        if held != want {
            return Err(format!(
                "HAProxy holds {} entries in {map} after the commit, the file {}",
                held.len(),
                want.len()
            ));
        }
    }
    Ok(())
}

/// Adds to the worker's address map every route host of `text` that the address map file
/// has and the worker lacks; how many it added. Unversioned,
/// as the address service writes that map.
async fn push_addresses(
    session: &mut Session,
    dir: &std::path::Path,
    map: &str,
    text: &str,
    deadline: std::time::Instant,
) -> Result<usize, String> {
    if !artifact::body(text).contains(map) {
        // A template that routes without the address map (backends as IP literals).
        return Ok(0);
    }
    let file = std::fs::read_to_string(dir.join(map)).unwrap_or_default();
    let known = crate::address_map::parse(&file).addresses;
    let held: std::collections::HashMap<String, String> = session
        .show_map(map)
        .await
        .map_err(|err| err.to_string())?
        .into_iter()
        .collect();
    let mut pushed = 0;
    for host in artifact::route_hosts(text) {
        let Some(address) = known.get(&host) else {
            continue;
        };
        let address = address.to_string();
        // Only what the worker lacks: an address it holds may be newer than the file read
        // here (the address service keeps it current).
        if held.contains_key(&host) {
            continue;
        }
        due(deadline)?;
        session
            .change(MapChange::Add {
                map,
                key: &host,
                value: &address,
            })
            .await
            .map_err(|err| err.to_string())?;
        pushed += 1;
    }
    Ok(pushed)
}

/// Gives up once `deadline` has passed: checked before every command, so the update ends
/// within its budget plus one socket time-out.
fn due(deadline: std::time::Instant) -> Result<(), String> {
    if std::time::Instant::now() >= deadline {
        return Err(format!(
            "the update did not finish within {} s",
            UPDATE_BUDGET.as_secs()
        ));
    }
    Ok(())
}

/// A new version of `map` holding `table`, not committed yet: its number.
async fn fill_map(
    session: &mut Session,
    map: &str,
    table: &str,
    deadline: std::time::Instant,
) -> Result<MapVersion, String> {
    due(deadline)?;
    let version = session
        .prepare_map(map)
        .await
        .map_err(|err| err.to_string())?;
    for chunk in chunks(table, PAYLOAD_BYTES) {
        due(deadline)?;
        session
            .fill_map(map, version, chunk)
            .await
            .map_err(|err| err.to_string())?;
    }
    Ok(version)
}

impl Run {
    /// The files of one generation's maps (the address map belongs to all): (path, text), the
    /// route tables first, as they may serve ([`crate::routes`]): a route whose host has no
    /// address keeps the target its map file holds now, or goes in with no address. How many
    /// are held.
    fn serving_files(
        &self,
        text: &str,
        generation: u64,
        maps: &MapFiles,
    ) -> (Vec<(String, String)>, usize) {
        let mut addresses = std::fs::read_to_string(self.paths.dir.join(&maps.addresses))
            .map(|text| crate::address_map::parse(&text).addresses)
            .unwrap_or_default();
        addresses.retain(|host, _| !self.state.unpushed.contains(host));
        let (routes, suffixes) = MapFiles::route_tables(text);
        let mut files = Vec::new();
        let mut held = 0;
        for (path, wanted) in [(&maps.routes, routes), (&maps.suffixes, suffixes)] {
            let current = std::fs::read_to_string(self.paths.dir.join(path)).unwrap_or_default();
            let serving = crate::routes::serving(&wanted, &addresses, &current);
            held += serving.held.len();
            files.push((path.clone(), serving.table));
        }
        if let Some(path) = &maps.generation {
            files.push((path.clone(), MapFiles::generation_table(generation)));
        }
        (files, held)
    }
}

/// `table` cut at line ends into pieces of at most `limit` bytes (a longer line alone).
fn chunks(table: &str, limit: usize) -> Vec<&str> {
    let mut pieces = Vec::new();
    let mut start = 0;
    let mut end = 0;
    for (at, _) in table.match_indices('\n') {
        let line_end = at + 1;
        if line_end - start > limit && end > start {
            pieces.push(&table[start..end]);
            start = end;
        }
        end = line_end;
    }
    if end > start {
        pieces.push(&table[start..end]);
    }
    pieces
}

/// The `key value` entries of a map file's text.
fn entries(table: &str) -> Vec<(String, String)> {
    table
        .lines()
        .filter_map(|line| line.split_once(' '))
        .map(|(key, value)| (key.to_owned(), value.to_owned()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_end_at_line_ends_and_keep_every_byte() {
        let table: String = (0..100)
            .map(|i| format!("k{i}.example v{i}:443\n"))
            .collect();
        let pieces = chunks(&table, 64);
        assert!(pieces.len() > 10);
        assert_eq!(pieces.concat(), table);
        assert!(pieces.iter().all(|p| p.len() <= 64 && p.ends_with('\n')));
        assert!(chunks("", 64).is_empty());
        let long = format!("{} x\nb y\n", "a".repeat(100));
        assert_eq!(chunks(&long, 64), [&long[..103], "b y\n"]);
    }

    #[test]
    fn entries_are_key_and_value() {
        assert_eq!(
            entries("a.example b:443\n\nc d:1\n"),
            [
                ("a.example".to_owned(), "b:443".to_owned()),
                ("c".to_owned(), "d:1".to_owned())
            ]
        );
    }
}
