//! The service's output file: the address map a starting worker loads, read once at start
//! (the addresses a previous run or an apply left) and rewritten at most once a second while
//! the engine's map changes, under the lock an apply also takes.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::address_map::{self, MapFile, Stamp};

use crate::dns::engine::Engine;
use crate::log::log;

/// The shortest time between two writes.
const WRITE_SPACING: Duration = Duration::from_secs(1);
/// How soon a write tries the lock again after an apply held it (an apply holds it only to
/// read and replace the file).
const LOCK_RETRY: Duration = Duration::from_millis(100);

/// How a write that never waits for the lock ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tried {
    /// The file holds the engine's map.
    Wrote,
    /// Another writer (an apply) holds the lock: tried again later.
    Busy,
    /// The lock or the write failed (logged).
    Failed,
}

/// The map file as the service writes it.
#[derive(Debug)]
pub struct Output {
    file: MapFile,
    /// What the file held after our last write (another writer changes it).
    stamp: Option<Stamp>,
    /// The last write's content: what HAProxy is brought to.
    written: Arc<BTreeMap<Arc<str>, IpAddr>>,
    next_write: Instant,
}

impl Output {
    /// Opens `file` and gives `engine` what it holds; the number of addresses it held.
    pub fn open(file: MapFile, engine: &mut Engine, now: Instant) -> (Output, usize) {
        let loaded = match file.read() {
            Ok(entries) => {
                for (line, text) in &entries.malformed {
                    log(format_args!(
                        "{}:{line}: skipped malformed line {text:?}",
                        file.path().display()
                    ));
                }
                entries.addresses
            }
            Err(err) => {
                log(format_args!("cannot read {}: {err}", file.path().display()));
                BTreeMap::new()
            }
        };
        engine.load(&loaded, now);
        let output = Output {
            stamp: file.stamp(),
            written: Arc::new(engine.snapshot()),
            file,
            next_write: now,
        };
        (output, loaded.len())
    }

    pub fn path(&self) -> &Path {
        self.file.path()
    }

    /// What the file holds since our last write: what HAProxy is brought to.
    pub fn written(&self) -> &Arc<BTreeMap<Arc<str>, IpAddr>> {
        &self.written
    }

    /// When the engine's map is to be written next; none while the file holds it.
    pub fn next_write(&self, engine: &Engine) -> Option<Instant> {
        engine.dirty.then_some(self.next_write)
    }

    /// Writes the engine's map if it changed and the last write is a second old; whether
    /// it wrote. Never waits for the lock on the loop's thread: when an apply holds it, the
    /// map stays dirty and a later turn tries again.
    pub fn write_due(&mut self, engine: &mut Engine, now: Instant) -> bool {
        if !engine.dirty || now < self.next_write {
            return false;
        }
        self.try_write(engine, now) == Tried::Wrote
    }

    /// Writes the engine's map now if the lock is free, never waiting for it (the loop's
    /// thread calls this): when an apply holds it, [`LOCK_RETRY`] later the next write is
    /// due.
    pub fn try_write(&mut self, engine: &mut Engine, now: Instant) -> Tried {
        match self.file.try_lock() {
            Ok(Some(lock)) => {
                if self.write_locked(&lock, engine, now) {
                    Tried::Wrote
                } else {
                    Tried::Failed
                }
            }
            Ok(None) => {
                self.next_write = now + LOCK_RETRY;
                Tried::Busy
            }
            Err(err) => {
                self.next_write = now + WRITE_SPACING;
                log(format_args!("cannot lock {}: {err}", self.path().display()));
                Tried::Failed
            }
        }
    }

    /// Writes the engine's map under the lock (waited for, at most [`address_map::MAP_LOCK_WAIT`]:
    /// an apply holds it only to read and replace the file), taking in what another writer
    /// added first; whether it wrote. Only once the loop ended (at the service's stop).
    pub fn write(&mut self, engine: &mut Engine, now: Instant) -> bool {
        match self.file.lock(address_map::MAP_LOCK_WAIT) {
            Ok(lock) => self.write_locked(&lock, engine, now),
            Err(err) => {
                self.next_write = now + WRITE_SPACING;
                log(format_args!("cannot lock {}: {err}", self.path().display()));
                false
            }
        }
    }

    fn write_locked(
        &mut self,
        lock: &address_map::Locked,
        engine: &mut Engine,
        now: Instant,
    ) -> bool {
        self.next_write = now + WRITE_SPACING;
        if self.file.stamp() != self.stamp {
            match self.file.read() {
                Ok(entries) => engine.adopt(&entries.addresses, now),
                Err(err) => log(format_args!("cannot read {}: {err}", self.path().display())),
            }
        }
        let snapshot = engine.snapshot();
        let text = address_map::format(snapshot.iter().map(|(n, a)| (n.as_ref(), *a)));
        match self.file.write(lock, &text) {
            Ok(stamp) => {
                self.stamp = stamp;
                self.written = Arc::new(snapshot);
                engine.dirty = false;
                true
            }
            Err(err) => {
                log(format_args!(
                    "cannot write {}: {err}",
                    self.path().display()
                ));
                false
            }
        }
    }
}
