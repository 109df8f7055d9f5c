//! HAProxy's runtime API (the stats socket a config declares): the one place the agent talks
//! to a running HAProxy, and the one parser of where that socket is.
//!
//! No well-kept crate speaks this protocol, and it is small: a command is one line; without
//! `prompt` HAProxy answers it and closes the connection, with `prompt` it ends each answer with
//! `"\n> "` and keeps the connection for the next command. [`RuntimeApi::command`] is the first
//! mode (one short question), [`Session`] the second (many changes over one connection).
//!
//! Every exchange is async and bounded as a whole: a command (its write and every read of its
//! answer) gets one deadline, so a worker that answers a byte at a time cannot stretch it, and
//! the caller can drop the future at any point (a signal stops the apply there). A busy or
//! frozen worker is [`RuntimeError::Timeout`], which callers must not read as "not running".
//! Every command is checked before it is sent: a newline or `;` inside one would make HAProxy
//! run a second command, so such text never reaches the socket.

use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;

/// Why HAProxy could not be asked, or did not answer as expected.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error("cannot connect to HAProxy's stats socket {path}: {source}")]
    Connect {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("HAProxy's stats socket {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("HAProxy did not answer {command:?} on {path} within {} ms (a busy or stopped worker)", after.as_millis())]
    Timeout {
        path: PathBuf,
        command: String,
        after: Duration,
    },
    #[error("refusing to send {command:?} to HAProxy: expected one command without newline or ';'")]
    Unsafe { command: String },
    #[error("HAProxy closed {path} before it answered {command:?}")]
    Closed { path: PathBuf, command: String },
    #[error("HAProxy answered {command:?} with {answer:?}")]
    Refused { command: String, answer: String },
    #[error("expected {expected} in HAProxy's answer to {command:?}, got {answer:?}")]
    Unexpected {
        command: String,
        expected: &'static str,
        answer: String,
    },
}

impl RuntimeError {
    /// Nothing listens: no HAProxy runs on this socket (or the socket file is gone). Every
    /// other error means something is there that did not answer as it should.
    pub fn nothing_listens(&self) -> bool {
        matches!(self, RuntimeError::Connect { source, .. }
            if matches!(source.kind(), std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused))
    }
}

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

/// What `show info` says about the worker that answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Info {
    /// The worker's PID: it changes at every reload.
    pub pid: u32,
    /// The `description` of the config it runs (autoproxy writes its generation there).
    pub description: Option<String>,
}

impl Info {
    /// The autoproxy generation the worker runs, from `description autoproxy generation N`.
    pub fn generation(&self) -> Option<u64> {
        self.description
            .as_deref()?
            .strip_prefix("autoproxy generation ")
            .and_then(autoproxy::artifact::parse_generation)
    }
}

/// The stats socket at one path.
#[derive(Debug, Clone)]
pub struct RuntimeApi {
    path: PathBuf,
    timeout: Duration,
}

impl RuntimeApi {
    /// A client of the socket at `path`; every command (connect, write, whole answer) gets at
    /// most `timeout`.
    pub fn new(path: impl Into<PathBuf>, timeout: Duration) -> RuntimeApi {
        RuntimeApi {
            path: path.into(),
            timeout,
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn io(&self, source: std::io::Error) -> RuntimeError {
        RuntimeError::Io {
            path: self.path.clone(),
            source,
        }
    }

    fn timed_out(&self, command: &str) -> RuntimeError {
        RuntimeError::Timeout {
            path: self.path.clone(),
            command: autoproxy::excerpt(command, 200),
            after: self.timeout,
        }
    }

    /// Runs `exchange` under this client's per-command deadline.
    async fn bounded<T>(
        &self,
        command: &str,
        exchange: impl Future<Output = Result<T, RuntimeError>>,
    ) -> Result<T, RuntimeError> {
        tokio::time::timeout(self.timeout, exchange)
            .await
            .unwrap_or_else(|_| Err(self.timed_out(command)))
    }

    async fn connect(&self) -> Result<UnixStream, RuntimeError> {
        UnixStream::connect(&self.path)
            .await
            .map_err(|source| RuntimeError::Connect {
                path: self.path.clone(),
                source,
            })
    }

    /// Sends one command on its own connection and returns the whole answer.
    pub async fn command(&self, command: &str) -> Result<String, RuntimeError> {
        check(command)?;
        self.bounded(command, async {
            let mut stream = self.connect().await?;
            stream
                .write_all(format!("{command}\n").as_bytes())
                .await
                .map_err(|source| self.io(source))?;
            let mut answer = Vec::new();
            stream
                .read_to_end(&mut answer)
                .await
                .map_err(|source| self.io(source))?;
            Ok(String::from_utf8_lossy(&answer).into_owned())
        })
        .await
    }

    /// `show info`: which worker answers, and the description of its config.
    pub async fn info(&self) -> Result<Info, RuntimeError> {
        parse_info(&self.command("show info").await?)
    }

    /// The entries of a map, on a connection of its own.
    pub async fn show_map(&self, map: &str) -> Result<Vec<(String, String)>, RuntimeError> {
        let command = format!("show map {map}");
        parse_map(&command, &self.command(&command).await?)
    }

    /// A connection in `prompt` mode, for many commands.
    pub async fn session(&self) -> Result<Session, RuntimeError> {
        let stream = self
            .bounded("prompt", async { self.connect().await })
            .await?;
        let mut session = Session {
            api: self.clone(),
            stream,
            buffer: Vec::new(),
        };
        // The first prompt comes only after the first command in prompt mode.
        session.ask("prompt").await?;
        Ok(session)
    }
}

/// One connection in `prompt` mode.
#[derive(Debug)]
pub struct Session {
    api: RuntimeApi,
    stream: UnixStream,
    buffer: Vec<u8>,
}

impl Session {
    /// Sends one command and returns its answer (without the prompt).
    pub async fn ask(&mut self, command: &str) -> Result<String, RuntimeError> {
        check(command)?;
        self.ask_raw(&format!("{command}\n"), command).await
    }

    /// Writes `text` (checked by the caller) and reads the answer up to the next prompt, all
    /// within one command's deadline.
    async fn ask_raw(&mut self, text: &str, command: &str) -> Result<String, RuntimeError> {
        let api = self.api.clone();
        let (stream, buffer) = (&mut self.stream, &mut self.buffer);
        api.bounded(command, async {
            stream
                .write_all(text.as_bytes())
                .await
                .map_err(|source| api.io(source))?;
            buffer.clear();
            let mut chunk = [0u8; 16384];
            loop {
                if buffer.ends_with(b"\n> ") || buffer.as_slice() == b"> " {
                    let end = buffer.len() - 2;
                    return Ok(String::from_utf8_lossy(&buffer[..end]).into_owned());
                }
                let n = stream
                    .read(&mut chunk)
                    .await
                    .map_err(|source| api.io(source))?;
                if n == 0 {
                    return Err(RuntimeError::Closed {
                        path: api.path.clone(),
                        command: command.to_owned(),
                    });
                }
                buffer.extend_from_slice(&chunk[..n]);
            }
        })
        .await
    }

    /// Sends a command that answers nothing on success; any answer is HAProxy's refusal.
    pub async fn change(&mut self, command: &str) -> Result<(), RuntimeError> {
        let answer = self.ask(command).await?;
        if answer.trim().is_empty() {
            Ok(())
        } else {
            Err(RuntimeError::Refused {
                command: command.to_owned(),
                answer: answer.trim().to_owned(),
            })
        }
    }

    /// Sends a command with a payload (`<command> <<`, its lines, an empty line) and expects
    /// no answer but the payload prompts: any other answer is HAProxy's refusal. The payload
    /// is lines ending in `\n`, none empty (an empty line would end it early, and what
    /// follows would run as commands), without `\r` or `;`.
    pub async fn payload(&mut self, command: &str, lines: &str) -> Result<(), RuntimeError> {
        check(command)?;
        if lines.is_empty()
            || !lines.ends_with('\n')
            || lines.starts_with('\n')
            || lines.contains("\n\n")
            || lines.contains(['\r', ';'])
        {
            return Err(RuntimeError::Unsafe {
                command: autoproxy::excerpt(&format!("{command} << {lines}"), 200),
            });
        }
        let answer = self
            .ask_raw(&format!("{command} <<\n{lines}\n"), command)
            .await?;
        let mut rest = answer.as_str();
        while let Some(after) = rest.strip_prefix("+ ") {
            rest = after;
        }
        if rest.trim().is_empty() {
            Ok(())
        } else {
            Err(RuntimeError::Refused {
                command: format!("{command} <<"),
                answer: autoproxy::excerpt(rest.trim(), 400),
            })
        }
    }

    /// `show info` on this connection.
    pub async fn info(&mut self) -> Result<Info, RuntimeError> {
        parse_info(&self.ask("show info").await?)
    }

    /// The entries of a map as HAProxy holds them: `(key, value)` in HAProxy's order.
    pub async fn show_map(&mut self, map: &str) -> Result<Vec<(String, String)>, RuntimeError> {
        let command = format!("show map {map}");
        let answer = self.ask(&command).await?;
        parse_map(&command, &answer)
    }
}
/// A command goes out as one line: no newline, carriage return or `;` (HAProxy's separator).
fn check(command: &str) -> Result<(), RuntimeError> {
    if command.is_empty() || command.contains(['\n', '\r', ';']) {
        return Err(RuntimeError::Unsafe {
            command: autoproxy::excerpt(command, 200),
        });
    }
    Ok(())
}

fn parse_info(answer: &str) -> Result<Info, RuntimeError> {
    let mut pid = None;
    let mut description = None;
    for line in answer.lines() {
        if let Some(value) = line.strip_prefix("Pid: ") {
            pid = value.trim().parse().ok();
        } else if let Some(value) = line.strip_prefix("description: ") {
            description = Some(value.trim().to_owned());
        }
    }
    let pid = pid.ok_or_else(|| RuntimeError::Unexpected {
        command: "show info".to_owned(),
        expected: "a line 'Pid: N'",
        answer: autoproxy::excerpt(answer, 200),
    })?;
    Ok(Info { pid, description })
}

/// `show map` answers `0x55d1c0a0 key value` per entry.
fn parse_map(command: &str, answer: &str) -> Result<Vec<(String, String)>, RuntimeError> {
    let mut entries = Vec::new();
    for line in answer.lines().filter(|line| !line.trim().is_empty()) {
        let mut words = line.split_whitespace();
        match (words.next(), words.next(), words.next(), words.next()) {
            (Some(id), Some(key), Some(value), None) if id.starts_with("0x") => {
                entries.push((key.to_owned(), value.to_owned()));
            }
            _ => {
                return Err(RuntimeError::Unexpected {
                    command: command.to_owned(),
                    expected: "lines '<id> <key> <value>'",
                    answer: autoproxy::excerpt(line, 200),
                });
            }
        }
    }
    Ok(entries)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn info_gives_the_worker_and_its_generation() {
        let info = parse_info("Name: HAProxy\nPid: 4242\ndescription: autoproxy generation 17\n")
            .expect("parses");
        assert_eq!(info.pid, 4242);
        assert_eq!(info.generation(), Some(17));
        let other = parse_info("Pid: 1\ndescription: hand-made\n").expect("parses");
        assert_eq!(other.generation(), None);
        assert!(parse_info("Name: HAProxy\n").is_err());
    }

    #[test]
    fn a_command_that_would_be_two_is_never_sent() {
        for bad in ["show info\nshutdown", "set map a b c;shutdown", "", "x\r"] {
            assert!(
                matches!(check(bad), Err(RuntimeError::Unsafe { .. })),
                "{bad:?}"
            );
        }
        assert!(check("add map autoproxy/addresses.map a.b 10.0.0.1").is_ok());
    }

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
    fn map_entries_are_read_and_anything_else_refused() {
        let entries =
            parse_map("show map m", "0x1 a.example 10.0.0.1\n0x2 b 10.0.0.2\n\n").expect("parses");
        assert_eq!(
            entries,
            vec![
                ("a.example".to_owned(), "10.0.0.1".to_owned()),
                ("b".to_owned(), "10.0.0.2".to_owned())
            ]
        );
        assert!(parse_map("show map m", "Unknown map identifier.\n").is_err());
    }
}
