//! Files the apply installs: every one is complete on disk (fsync) before the rename that
//! installs it, and the rename itself is flushed (fsync of the directory), so a crash never
//! leaves a renamed but empty file in place.

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

/// Copies `from` to a new synced file `to` with the same mode.
pub fn copy_synced(from: &Path, to: &Path) -> std::io::Result<()> {
    let bytes = std::fs::read(from)?;
    let mode = std::fs::metadata(from)?.permissions().mode() & 0o7777;
    write_synced(to, &bytes, mode)
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
