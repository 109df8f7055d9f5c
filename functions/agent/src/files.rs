//! The host floor's files: every file the agent writes in place of another goes through
//! [`replace`] (or [`copy_over`], the same for a copy of another file: last-known-good kept,
//! and restored), complete on disk (fsync) before the rename that installs it, and the rename
//! itself flushed (fsync of the directory), so a crash never leaves a renamed but empty file
//! in place. The apply stages a few files under its own names and renames them later (the
//! config and its maps, checked before they are installed): those use the parts,
//! [`write_synced`] and [`sync_dir`].

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// A new file in `dir` with a unique name starting with `prefix`, for `install`.
pub fn temp_path(dir: &Path, prefix: &str) -> PathBuf {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    dir.join(format!("{prefix}.{}.{nanos}", std::process::id()))
}

/// Replaces the file `path` with `bytes` (mode `mode`), durably: written aside in its
/// directory, flushed, renamed over `path`, the rename flushed. A reader sees the old file or
/// the new one, never a part, and a crash keeps one of them. A file that has a lock (the
/// address map's, the config's for the route maps) is replaced by the holder of that lock:
/// the callers take it.
pub fn replace(path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    let name = path
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default();
    replace_via(path, bytes, mode, &format!(".{name}"))
}

/// Replaces `to` with a copy of `from` (with its mode), durably as [`replace`] does, written
/// aside under `temp_prefix` (what a killed run's leftovers are known by).
pub fn copy_over(from: &Path, to: &Path, temp_prefix: &str) -> std::io::Result<()> {
    let bytes = std::fs::read(from)?;
    let mode = std::fs::metadata(from)?.permissions().mode() & 0o7777;
    replace_via(to, &bytes, mode, temp_prefix)
}

fn replace_via(path: &Path, bytes: &[u8], mode: u32, temp_prefix: &str) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    let temp = temp_path(dir, temp_prefix);
    let renamed = write_synced(&temp, bytes, mode).and_then(|()| std::fs::rename(&temp, path));
    if let Err(err) = renamed {
        let _ = std::fs::remove_file(&temp);
        return Err(err);
    }
    sync_dir(dir)
}

/// Writes `bytes` to a new file `path` (mode `mode`) and flushes it to disk.
pub fn write_synced(path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)?;
    file.write_all(bytes)?;
    file.set_permissions(std::fs::Permissions::from_mode(mode))?;
    file.sync_all()
}

/// Flushes a directory's entries (the renames in it) to disk.
pub fn sync_dir(dir: &Path) -> std::io::Result<()> {
    File::open(dir)?.sync_all()
}

/// The lock beside the config: held until the returned file is dropped (closing it releases
/// the lock; the file is close-on-exec, so no child holds it). Waits at most `wait`.
pub async fn lock(path: &Path, wait: Duration) -> Result<File, LockError> {
    let file = OpenOptions::new()
        .append(true)
        .create(true)
        .open(path)
        .map_err(LockError::Open)?;
    let deadline = Instant::now() + wait;
    loop {
        match file.try_lock() {
            Ok(()) => return Ok(file),
            Err(std::fs::TryLockError::WouldBlock) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(std::fs::TryLockError::WouldBlock) => return Err(LockError::Busy),
            Err(std::fs::TryLockError::Error(err)) => return Err(LockError::Open(err)),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error("{0}")]
    Open(std::io::Error),
    #[error("held by another apply")]
    Busy,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replace_leaves_the_new_bytes_with_their_mode_and_nothing_aside() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("a.map");
        replace(&path, b"old\n", 0o600).expect("written");
        replace(&path, b"new\n", 0o644).expect("replaced");
        assert_eq!(std::fs::read(&path).expect("reads"), b"new\n");
        let mode = std::fs::metadata(&path).expect("meta").permissions().mode();
        assert_eq!(mode & 0o777, 0o644);
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .expect("lists")
            .filter_map(Result::ok)
            .map(|entry| entry.file_name())
            .collect();
        assert_eq!(names, ["a.map"]);
    }

    #[test]
    fn a_failed_replace_keeps_the_old_file_and_leaves_nothing_aside() {
        let dir = tempfile::tempdir().expect("temp dir");
        // The target is a non-empty directory: the rename fails after the write aside.
        let path = dir.path().join("taken");
        std::fs::create_dir(&path).expect("dir");
        std::fs::write(path.join("inside"), b"x").expect("file");
        assert!(replace(&path, b"new\n", 0o644).is_err());
        assert!(path.join("inside").is_file());
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .expect("lists")
            .filter_map(Result::ok)
            .map(|entry| entry.file_name())
            .collect();
        assert_eq!(names, ["taken"]);
    }
}
