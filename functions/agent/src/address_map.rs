//! The address map: the file `<config dir>/autoproxy/addresses.map` (`name address` lines)
//! that a starting HAProxy worker loads, written by the address service and, when no service
//! answers, merged into by an apply ([`crate::addresses::ensure`]).
//!
//! Both writers take the lock `addresses.map.lock` around a read and a rewrite, so neither
//! loses what the other added. Every write is atomic (a temporary file, fsync, rename, fsync
//! of the directory: [`crate::files::replace`], under that lock): a starting worker sees the
//! old file or the new one, whole.

use std::collections::BTreeMap;
use std::fs::File;
use std::net::IpAddr;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The map's path relative to the config's directory, and its name in HAProxy.
pub use autoproxy::artifact::ADDRESS_MAP as MAP;

/// The directory of the maps, their locks and the control socket, for the config at `config`.
pub fn maps_dir(config: &Path) -> PathBuf {
    config
        .parent()
        .unwrap_or(Path::new("/"))
        .join(autoproxy::artifact::MAPS_DIR)
}

/// How long an apply waits for the map's lock: the service holds it only to read and rewrite
/// the file (milliseconds at 10,000 names), so a longer wait means a stuck holder.
pub const MAP_LOCK_WAIT: Duration = Duration::from_secs(5);

/// How often a waiting writer tries the lock again.
const LOCK_RETRY: Duration = Duration::from_millis(10);

/// The address map file of one config directory.
#[derive(Debug, Clone)]
pub struct MapFile {
    path: PathBuf,
    lock: PathBuf,
}

/// The identity of a file's contents as written: changes whenever anyone rewrites it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    ino: u64,
    size: u64,
    mtime_ns: i128,
}

/// The entries of a map file, and its lines that are not entries.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Entries {
    pub addresses: BTreeMap<String, IpAddr>,
    /// `(line number, text)` of every malformed line.
    pub malformed: Vec<(usize, String)>,
}

/// The lock on a map file, held while it is read and rewritten.
#[derive(Debug)]
pub struct Locked(File);

impl Drop for Locked {
    fn drop(&mut self) {
        let _ = self.0.unlock();
    }
}

/// Parses `name address` lines; blank lines and `#` comments are skipped.
pub fn parse(text: &str) -> Entries {
    let mut entries = Entries::default();
    for (number, line) in text.lines().enumerate() {
        let mut words = line.split_whitespace();
        match (words.next(), words.next(), words.next()) {
            (None, ..) => {}
            (Some(word), ..) if word.starts_with('#') => {}
            (Some(name), Some(address), None) => match address.parse() {
                Ok(address) => {
                    entries.addresses.insert(name.to_ascii_lowercase(), address);
                }
                Err(_) => entries.malformed.push((number + 1, line.to_owned())),
            },
            _ => entries.malformed.push((number + 1, line.to_owned())),
        }
    }
    entries
}

/// The text of a map file: one `name address` line per entry, in the order given.
pub fn format<'a>(entries: impl IntoIterator<Item = (&'a str, IpAddr)>) -> String {
    let mut text = String::new();
    for (name, address) in entries {
        use std::fmt::Write as _;
        let _ = writeln!(text, "{name} {address}");
    }
    text
}

impl MapFile {
    /// The map file beside the config in `config_dir`.
    pub fn in_dir(config_dir: &Path) -> MapFile {
        let path = config_dir.join(MAP);
        let lock = path.with_extension("map.lock");
        MapFile { path, lock }
    }

    /// The map file at `path` (a config may name another than [`MAP`]).
    pub fn at(path: &Path) -> MapFile {
        let lock = path.with_extension("map.lock");
        MapFile {
            path: path.to_path_buf(),
            lock,
        }
    }

    /// Writes `text` under the lock (waited for at most `wait`) unless the file holds entries
    /// already; whether it wrote.
    pub fn start_with(&self, text: &str, wait: Duration) -> std::io::Result<bool> {
        let lock = self.lock(wait)?;
        if std::fs::metadata(&self.path).is_ok_and(|m| m.len() > 0) {
            return Ok(false);
        }
        self.write(&lock, text)?;
        Ok(true)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Takes the lock, waiting for it at most `wait` (an error of kind `TimedOut` past it);
    /// creates the directory and the lock file if needed. Never an unbounded `flock`: a
    /// thread left waiting after its caller's deadline fired would hold the process open.
    pub fn lock(&self, wait: Duration) -> std::io::Result<Locked> {
        let file = self.lock_file()?;
        let deadline = Instant::now() + wait;
        loop {
            match file.try_lock() {
                Ok(()) => return Ok(Locked(file)),
                Err(std::fs::TryLockError::WouldBlock) if Instant::now() < deadline => {
                    std::thread::sleep(LOCK_RETRY);
                }
                Err(std::fs::TryLockError::WouldBlock) => {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        format!(
                            "{} still held by another writer after {} ms",
                            self.lock.display(),
                            wait.as_millis()
                        ),
                    ));
                }
                Err(std::fs::TryLockError::Error(err)) => return Err(err),
            }
        }
    }

    /// Takes the lock when it is free now: `None` when another writer holds it.
    pub fn try_lock(&self) -> std::io::Result<Option<Locked>> {
        let file = self.lock_file()?;
        match file.try_lock() {
            Ok(()) => Ok(Some(Locked(file))),
            Err(std::fs::TryLockError::WouldBlock) => Ok(None),
            Err(std::fs::TryLockError::Error(err)) => Err(err),
        }
    }

    /// The lock file, opened (created, with its directory, if needed).
    fn lock_file(&self) -> std::io::Result<File> {
        if let Some(dir) = self.path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&self.lock)
    }

    /// The stamp of the file now; `None` when it does not exist.
    pub fn stamp(&self) -> Option<Stamp> {
        let meta = std::fs::metadata(&self.path).ok()?;
        Some(Stamp {
            ino: meta.ino(),
            size: meta.size(),
            mtime_ns: i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec()),
        })
    }

    /// Its entries; empty when it does not exist.
    pub fn read(&self) -> std::io::Result<Entries> {
        match std::fs::read_to_string(&self.path) {
            Ok(text) => Ok(parse(&text)),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(Entries::default()),
            Err(err) => Err(err),
        }
    }

    /// Replaces the file with `text`, atomically and durably, mode 0644; the stamp written.
    /// The caller holds the lock.
    pub fn write(&self, _lock: &Locked, text: &str) -> std::io::Result<Option<Stamp>> {
        crate::files::replace(&self.path, text.as_bytes(), 0o644)?;
        Ok(self.stamp())
    }

    /// Adds `found` to the file under its lock (waited for at most `wait`), keeping every
    /// other entry.
    pub fn merge(&self, found: &[(String, IpAddr)], wait: Duration) -> std::io::Result<()> {
        if found.is_empty() {
            return Ok(());
        }
        let lock = self.lock(wait)?;
        let mut entries = self.read()?.addresses;
        for (name, address) in found {
            entries.insert(name.clone(), *address);
        }
        self.write(
            &lock,
            &format(entries.iter().map(|(n, a)| (n.as_str(), *a))),
        )?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn map_files_read_back_what_was_written() {
        let text = "a.example 10.0.0.1\nb.example fd00::1\n";
        let entries = parse(text);
        assert!(entries.malformed.is_empty());
        assert_eq!(
            format(entries.addresses.iter().map(|(n, a)| (n.as_str(), *a))),
            text
        );
        let entries = parse("# comment\n\nA.example 10.0.0.1\nb.example\nc.example x\nd 1 2\n");
        assert_eq!(entries.addresses.len(), 1);
        assert!(entries.addresses.contains_key("a.example"));
        assert_eq!(
            entries.malformed.iter().map(|m| m.0).collect::<Vec<_>>(),
            [4, 5, 6]
        );
    }

    /// The service's loop only tries the lock: while an apply holds it, it gets none and
    /// waits for nothing; once it is free, it gets it.
    #[test]
    fn try_lock_gives_way_to_a_holder() {
        let dir = tempfile::tempdir().expect("temp dir");
        let map = MapFile::in_dir(dir.path());
        let held = map.lock(MAP_LOCK_WAIT).expect("locks");
        assert!(map.try_lock().expect("tries").is_none());
        drop(held);
        assert!(map.try_lock().expect("tries").is_some());
    }

    /// A writer waits for a held lock only so long: a merge and a first write give up with
    /// `TimedOut` after their wait, and the figure is printed.
    #[test]
    fn a_held_lock_is_waited_for_only_so_long() {
        let dir = tempfile::tempdir().expect("temp dir");
        let map = MapFile::in_dir(dir.path());
        let _held = map.lock(MAP_LOCK_WAIT).expect("locks");
        let wait = Duration::from_millis(300);
        let (sent, waited) = std::sync::mpsc::channel();
        let writer = map.clone();
        std::thread::spawn(move || {
            let started = Instant::now();
            let a: IpAddr = "10.0.0.1".parse().expect("ip");
            let merged = writer.merge(&[("a.example".to_owned(), a)], wait);
            let first = writer.start_with("b.example 10.0.0.2\n", wait);
            let _ = sent.send((merged, first, started.elapsed()));
        });
        let (merged, first, elapsed) = waited
            .recv_timeout(Duration::from_secs(20))
            .expect("the writers gave up within 20 s while the lock was held");
        for result in [merged.map(|()| true), first] {
            let err = result.expect_err("no write while the lock is held");
            assert_eq!(err.kind(), std::io::ErrorKind::TimedOut, "{err}");
        }
        assert!(elapsed >= wait * 2, "{elapsed:?}");
        assert_eq!(map.stamp(), None);
    }

    #[test]
    fn writes_are_atomic_and_merges_keep_other_entries() {
        let dir = tempfile::tempdir().expect("temp dir");
        let map = MapFile::in_dir(dir.path());
        assert_eq!(map.read().expect("reads").addresses.len(), 0);
        assert_eq!(map.stamp(), None);
        let a: IpAddr = "10.0.0.1".parse().expect("ip");
        map.merge(&[("a.example".to_owned(), a)], MAP_LOCK_WAIT)
            .expect("merges");
        let first = map.stamp().expect("exists");
        let b: IpAddr = "10.0.0.2".parse().expect("ip");
        map.merge(&[("b.example".to_owned(), b)], MAP_LOCK_WAIT)
            .expect("merges");
        assert_ne!(map.stamp(), Some(first));
        let text = std::fs::read_to_string(map.path()).expect("reads");
        assert_eq!(text, "a.example 10.0.0.1\nb.example 10.0.0.2\n");
        let mode = std::fs::metadata(map.path())
            .expect("meta")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o644);
        let leftovers: Vec<_> = std::fs::read_dir(dir.path().join("autoproxy"))
            .expect("lists")
            .filter_map(Result::ok)
            .filter(|e| e.file_name().to_string_lossy().starts_with(".addresses"))
            .collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");
    }
}
