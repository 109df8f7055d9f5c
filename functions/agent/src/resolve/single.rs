//! One address service per config: an exclusive `flock` on `resolver.lock` in the maps
//! directory, held for the service's life (the kernel lets go when the process ends, however
//! it ends). The holder writes its pid into the file, so a second service can say whom it
//! found; it exits at once rather than resolve and push beside the first (twice the DNS
//! rate, and two writers each sure its view of the worker's map is exact).

use std::fs::File;
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};

/// The lock file, in the maps directory.
pub const LOCK: &str = "resolver.lock";

/// Why this service may not run.
#[derive(Debug, thiserror::Error)]
pub enum SingleError {
    #[error(
        "another address service for this config runs (pid {pid}: it holds {path}); this one exits"
    )]
    Held { path: PathBuf, pid: String },
    #[error("cannot take {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// The lock, held while this lives.
#[derive(Debug)]
pub struct Single {
    _file: File,
}

impl Single {
    /// Takes the lock in `maps_dir` without waiting, and writes this process's pid in it.
    pub fn take(maps_dir: &Path) -> Result<Single, SingleError> {
        let path = maps_dir.join(LOCK);
        let io = |source| SingleError::Io {
            path: path.clone(),
            source,
        };
        std::fs::create_dir_all(maps_dir).map_err(io)?;
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                let mut pid = String::new();
                let _ = file.read_to_string(&mut pid);
                let pid = pid.trim();
                return Err(SingleError::Held {
                    path,
                    pid: if pid.is_empty() { "unknown" } else { pid }.to_owned(),
                });
            }
            Err(std::fs::TryLockError::Error(err)) => return Err(io(err)),
        }
        file.set_len(0)
            .and_then(|()| file.rewind())
            .and_then(|()| writeln!(file, "{}", std::process::id()))
            .and_then(|()| file.flush())
            .map_err(io)?;
        Ok(Single { _file: file })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_holder_is_refused_and_told_the_first_ones_pid() {
        let dir = tempfile::tempdir().expect("temp dir");
        let first = Single::take(dir.path()).expect("the first takes it");
        // flock locks belong to the open file: a second open, even in this process, is refused.
        match Single::take(dir.path()) {
            Err(SingleError::Held { pid, .. }) => assert_eq!(pid, std::process::id().to_string()),
            other => panic!("expected Held, got {other:?}"),
        }
        drop(first);
        assert!(
            Single::take(dir.path()).is_ok(),
            "free once the first is gone"
        );
    }
}
