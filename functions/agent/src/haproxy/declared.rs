//! Where a config says HAProxy's sockets are: the stats socket (`global`'s `stats socket`)
//! and the address service's HTTP socket (the server of `backend autoproxy_agent`). The one
//! parser of both: a path that is not only a path is never connected to or bound.

use std::path::{Path, PathBuf};

/// What a config declares as its stats socket, in `global`'s first `stats socket` line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeclaredSocket {
    /// No `stats socket` with a path (none at all, or an IP address).
    None,
    /// A path that is not only a path: never connected to.
    Unsafe(String),
    Path(PathBuf),
}

/// The stats socket a config's text declares. The only parser of it: the apply and the
/// resolver both ask here.
pub fn declared_socket(config: &str) -> DeclaredSocket {
    let Some(value) = global_value(config, "stats") else {
        return DeclaredSocket::None;
    };
    let mut words = value.split_whitespace();
    if words.next() != Some("socket") {
        return DeclaredSocket::None;
    }
    let Some(path) = words.next() else {
        return DeclaredSocket::None;
    };
    let path = path.strip_prefix("unix@").unwrap_or(path);
    if !path.starts_with('/') {
        return DeclaredSocket::None;
    }
    if safe_socket_path(path) {
        DeclaredSocket::Path(PathBuf::from(path))
    } else {
        DeclaredSocket::Unsafe(path.to_owned())
    }
}

/// The usable stats socket of the config file at `path`, if it exists and declares one.
pub fn socket_of(path: &Path) -> Option<PathBuf> {
    let text = std::fs::read_to_string(path).ok()?;
    match declared_socket(&text) {
        DeclaredSocket::Path(socket) => Some(socket),
        DeclaredSocket::None | DeclaredSocket::Unsafe(_) => None,
    }
}

/// The arguments of the first `keyword` line in the `global` section, joined by one space.
pub fn global_value(text: &str, keyword: &str) -> Option<String> {
    let mut in_global = false;
    for line in text.lines() {
        let mut words = line.split_whitespace();
        let Some(first) = words.next() else { continue };
        if !line.starts_with([' ', '\t']) {
            if !first.starts_with('#') {
                in_global = first == "global";
            }
            continue;
        }
        if in_global && first == keyword {
            return Some(words.collect::<Vec<_>>().join(" "));
        }
    }
    None
}

/// A socket path that is only a path: letters, digits and `. _ / -`, absolute, no `..`.
fn safe_socket_path(path: &str) -> bool {
    path.starts_with('/')
        && (2..=201).contains(&path.len())
        && !path.contains("..")
        && path
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._/-".contains(&b))
}

/// The backend HAProxy forwards `/ready` and `/agent/metrics` to (the address service's
/// HTTP socket), as the template names it.
pub const AGENT_BACKEND: &str = "autoproxy_agent";

/// The address service's HTTP socket a config's text declares: the first `server` line of
/// `backend autoproxy_agent` whose address is a path (`unix@/path` or `/path`), with the same
/// path check as the stats socket.
pub fn declared_agent_socket(config: &str) -> DeclaredSocket {
    let mut in_backend = false;
    for line in config.lines() {
        let mut words = line.split_whitespace();
        let Some(first) = words.next() else { continue };
        if !line.starts_with([' ', '\t']) {
            if !first.starts_with('#') {
                in_backend = first == "backend" && words.next() == Some(AGENT_BACKEND);
            }
            continue;
        }
        if !in_backend || first != "server" {
            continue;
        }
        let Some(address) = words.nth(1) else {
            continue;
        };
        let path = address.strip_prefix("unix@").unwrap_or(address);
        if !path.starts_with('/') {
            continue;
        }
        return if safe_socket_path(path) {
            DeclaredSocket::Path(PathBuf::from(path))
        } else {
            DeclaredSocket::Unsafe(path.to_owned())
        };
    }
    DeclaredSocket::None
}

/// Where the service binds its HTTP socket for the config `text`: the path its agent backend
/// names, inside the `chroot` when there is one; none when it names none. `Err`: the path it
/// names, which is not only a path (never bound).
pub fn agent_bind_path(text: &str) -> Result<Option<PathBuf>, String> {
    let path = match declared_agent_socket(text) {
        DeclaredSocket::Path(path) => path,
        DeclaredSocket::None => return Ok(None),
        DeclaredSocket::Unsafe(path) => return Err(path),
    };
    let chroot = global_value(text, "chroot")
        .map(|dir| dir.trim().trim_end_matches('/').to_owned())
        .filter(|dir| dir.starts_with('/'));
    Ok(Some(match chroot {
        Some(dir) => PathBuf::from(format!("{dir}{}", path.display())),
        None => path,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_declared_socket_is_read_from_global_and_only_if_it_is_a_path() {
        let global =
            |line: &str| format!("global\n    {line}\n\ndefaults\n    stats socket /elsewhere\n");
        for (line, want) in [
            (
                "stats socket unix@/run/haproxy/admin.sock mode 660 level admin",
                DeclaredSocket::Path(PathBuf::from("/run/haproxy/admin.sock")),
            ),
            (
                "stats socket /run/a.sock",
                DeclaredSocket::Path(PathBuf::from("/run/a.sock")),
            ),
            ("stats socket ipv4@127.0.0.1:9", DeclaredSocket::None),
            ("stats timeout 30s", DeclaredSocket::None),
            ("maxconn 10", DeclaredSocket::None),
            (
                "stats socket /tmp/x,ignoreeof",
                DeclaredSocket::Unsafe("/tmp/x,ignoreeof".to_owned()),
            ),
            (
                "stats socket /run/../etc/x",
                DeclaredSocket::Unsafe("/run/../etc/x".to_owned()),
            ),
        ] {
            assert_eq!(declared_socket(&global(line)), want, "{line}");
        }
        assert_eq!(
            declared_socket("defaults\n    stats socket /x\n"),
            DeclaredSocket::None
        );
    }

    #[test]
    fn the_agent_socket_is_the_server_of_the_agent_backend() {
        let config = |server: &str| {
            format!(
                "global\n    stats socket /run/a.sock\n\nbackend other\n    server agent unix@/wrong.sock\n\
                 backend autoproxy_agent\n    mode http\n    {server}\n\nfrontend f\n    server x unix@/late.sock\n"
            )
        };
        for (server, want) in [
            (
                "server agent unix@/run/haproxy/autoproxy-agent.sock",
                DeclaredSocket::Path(PathBuf::from("/run/haproxy/autoproxy-agent.sock")),
            ),
            (
                "server agent /run/x.sock check",
                DeclaredSocket::Path(PathBuf::from("/run/x.sock")),
            ),
            ("server agent 127.0.0.1:9", DeclaredSocket::None),
            (
                "server agent unix@/run/../x.sock",
                DeclaredSocket::Unsafe("/run/../x.sock".to_owned()),
            ),
            ("# no server", DeclaredSocket::None),
        ] {
            assert_eq!(declared_agent_socket(&config(server)), want, "{server}");
        }
    }
}
