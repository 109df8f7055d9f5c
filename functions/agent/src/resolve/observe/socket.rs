//! The address service's HTTP socket: where it goes, and binding it safely.
//!
//! * **Where.** The path the installed config names as the server of `backend
//!   autoproxy_agent` ([`crate::haproxy::declared_agent_socket`]). HAProxy's workers connect
//!   to it after they chroot, so under a `chroot` in `global` the socket goes to that path
//!   inside the chroot directory; HAProxy's master never connects to it.
//! * **Replacing.** Whatever is at the path is removed first only when it is a socket (the
//!   one a previous run left): any other file is left alone and the bind refused. On a change
//!   of path, or at the end, the old socket is removed only when it is still the one bound.
//! * **Who may connect.** Mode 0660, group: the config's `group` (or `gid`), the group
//!   HAProxy's workers run as; without one they keep the group of whoever started them (root
//!   under systemd), which is the socket's own group too. Connecting to a unix socket needs
//!   write permission on it, so 0660 is the least that lets the worker in when it runs as
//!   another user (`user haproxy`) and keeps every other user out.

use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use tokio::net::UnixListener;

/// The socket's mode (see the module doc).
pub const MODE: u32 = 0o660;

/// Why the socket could not be bound.
#[derive(Debug, thiserror::Error)]
pub enum SocketError {
    #[error("refusing to replace {path}: it is not a socket")]
    NotASocket { path: PathBuf },
    #[error("cannot bind {path}: {source}")]
    Bind {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

pub use crate::haproxy::agent_bind_path as bind_path;

/// The group HAProxy's workers run as, from the config `text` (`gid N`, or `group NAME`
/// looked up in `groups`, the text of /etc/group).
pub fn worker_group(text: &str, groups: &str) -> Option<u32> {
    if let Some(gid) = crate::haproxy::global_value(text, "gid") {
        return gid.trim().parse().ok();
    }
    let name = crate::haproxy::global_value(text, "group")?;
    groups.lines().find_map(|line| {
        let mut fields = line.split(':');
        let (Some(group), Some(_), Some(gid)) = (fields.next(), fields.next(), fields.next())
        else {
            return None;
        };
        (group == name.trim()).then(|| gid.parse().ok()).flatten()
    })
}

/// The file a bound socket is: removed at the end only while it is still this one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bound {
    pub path: PathBuf,
    /// Device, inode and change time: an inode number alone may be reused at once.
    id: (u64, u64, i64, i64),
}

/// Binds `path` (replacing a socket left there), mode [`MODE`], group `group`.
pub fn bind(path: &Path, group: Option<u32>) -> Result<(UnixListener, Bound), SocketError> {
    let failed = |source| SocketError::Bind {
        path: path.to_path_buf(),
        source,
    };
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_socket() => std::fs::remove_file(path).map_err(failed)?,
        Ok(_) => {
            return Err(SocketError::NotASocket {
                path: path.to_path_buf(),
            });
        }
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
        Err(err) => return Err(failed(err)),
    }
    let listener = UnixListener::bind(path).map_err(failed)?;
    let prepared = std::fs::set_permissions(path, std::fs::Permissions::from_mode(MODE))
        .and_then(|()| std::os::unix::fs::chown(path, None, group))
        .and_then(|()| std::fs::symlink_metadata(path));
    match prepared {
        Ok(meta) => Ok((
            listener,
            Bound {
                path: path.to_path_buf(),
                id: identity(&meta),
            },
        )),
        Err(err) => {
            drop(listener);
            let _ = std::fs::remove_file(path);
            Err(failed(err))
        }
    }
}

fn identity(meta: &std::fs::Metadata) -> (u64, u64, i64, i64) {
    (meta.dev(), meta.ino(), meta.ctime(), meta.ctime_nsec())
}

impl Bound {
    /// Removes the socket file when it is still the one bound.
    pub fn remove(&self) {
        if std::fs::symlink_metadata(&self.path).is_ok_and(|m| identity(&m) == self.id) {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_socket_goes_where_the_worker_looks_for_it() {
        let config = |global: &str| {
            format!(
                "global\n{global}\nbackend autoproxy_agent\n    server agent unix@/run/haproxy/agent.sock\n"
            )
        };
        let check = |global: &str, want: Result<Option<&str>, String>| {
            let want = want.map(|p| p.map(PathBuf::from));
            assert_eq!(bind_path(&config(global)), want, "{global}");
        };
        check("    maxconn 10", Ok(Some("/run/haproxy/agent.sock")));
        check(
            "    chroot /var/lib/haproxy/",
            Ok(Some("/var/lib/haproxy/run/haproxy/agent.sock")),
        );
        check("    chroot relative", Ok(Some("/run/haproxy/agent.sock")));
        assert_eq!(bind_path("global\n"), Ok(None));
        assert_eq!(
            bind_path("backend autoproxy_agent\n    server a unix@/x/../y\n"),
            Err("/x/../y".to_owned())
        );
    }

    #[test]
    fn the_worker_group_comes_from_the_config() {
        let groups = "root:x:0:\nhaproxy:x:115:\nother:x:7:haproxy\n";
        for (global, want) in [
            ("    group haproxy", Some(115)),
            ("    gid 99", Some(99)),
            ("    group nobody-here", None),
            ("    user haproxy", None),
        ] {
            assert_eq!(
                worker_group(&format!("global\n{global}\n"), groups),
                want,
                "{global}"
            );
        }
    }

    #[tokio::test]
    async fn a_left_socket_is_replaced_and_any_other_file_kept() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("agent.sock");
        let (first, bound) = bind(&path, None).expect("bound");
        drop(first);
        let mode = std::fs::metadata(&path)
            .expect("socket")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, MODE);
        let (_second, again) = bind(&path, None).expect("bound over the old socket");
        bound.remove();
        assert!(path.exists(), "a socket bound since is not removed");
        again.remove();
        assert!(!path.exists());
        std::fs::write(&path, "data").expect("write");
        assert!(matches!(
            bind(&path, None),
            Err(SocketError::NotASocket { .. })
        ));
        assert_eq!(std::fs::read_to_string(&path).expect("kept"), "data");
    }
}
