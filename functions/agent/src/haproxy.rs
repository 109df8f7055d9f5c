//! HAProxy's runtime API (the stats socket a config declares): the one place the agent talks
//! to a running HAProxy, and ([`declared`]) the one parser of where that socket is.
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

mod declared;
#[cfg(test)]
pub(crate) mod fake;
mod map;

pub use map::{MapChange, MapVersion};

pub use declared::{
    AGENT_BACKEND, DeclaredSocket, agent_bind_path, declared_agent_socket, declared_socket,
    global_value, socket_of,
};

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
    #[error(
        "refusing to send {command:?} with the {what} {word:?}: expected one word, without space, control character, ';' or '\\', not '#<n>'"
    )]
    NotOneWord {
        command: &'static str,
        what: &'static str,
        word: String,
    },
    #[error(
        "HAProxy's answer to {command:?} on {path} ran past {limit} bytes: expected a whole answer within that"
    )]
    TooLong {
        path: PathBuf,
        command: String,
        limit: usize,
    },
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

/// What `show info` says about the worker that answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Info {
    /// The worker's PID: it changes at every reload.
    pub pid: u32,
    /// The `description` of the config it runs (autoproxy writes its generation there).
    pub description: Option<String>,
    /// `CurrConns`: the connections it holds now.
    pub current_connections: Option<u64>,
    /// `ConnRate`: the connections it accepted in the last second.
    pub connection_rate: Option<u64>,
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

/// The longest answer read: far above the longest one expected (`show map` of the address map
/// at the control socket's 16,384 names of at most 253 bytes, about 4.5 MB; `show servers
/// state` of a per-route config at 10,000 routes, about 2 MB). A longer one is an error, not
/// memory spent.
pub const MAX_ANSWER: usize = 16 * 1024 * 1024;

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

    fn too_long(&self, command: &str) -> RuntimeError {
        RuntimeError::TooLong {
            path: self.path.clone(),
            command: autoproxy::excerpt(command, 200),
            limit: MAX_ANSWER,
        }
    }

    /// `command` got no (whole) answer within `after`.
    pub fn timed_out(&self, command: &str, after: Duration) -> RuntimeError {
        RuntimeError::Timeout {
            path: self.path.clone(),
            command: autoproxy::excerpt(command, 200),
            after,
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
            .unwrap_or_else(|_| Err(self.timed_out(command, self.timeout)))
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
            (&mut stream)
                .take(MAX_ANSWER as u64 + 1)
                .read_to_end(&mut answer)
                .await
                .map_err(|source| self.io(source))?;
            if answer.len() > MAX_ANSWER {
                return Err(self.too_long(command));
            }
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
        let command = map::show(map)?;
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
    async fn ask(&mut self, command: &str) -> Result<String, RuntimeError> {
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
                if buffer.len() + n > MAX_ANSWER {
                    return Err(api.too_long(command));
                }
                buffer.extend_from_slice(&chunk[..n]);
            }
        })
        .await
    }

    /// Changes a map; HAProxy answers nothing on success, so any answer is its refusal.
    pub async fn change(&mut self, change: MapChange<'_>) -> Result<(), RuntimeError> {
        let command = change.line()?;
        let answer = self.ask(&command).await?;
        if answer.trim().is_empty() {
            Ok(())
        } else {
            Err(RuntimeError::Refused {
                command,
                answer: answer.trim().to_owned(),
            })
        }
    }

    /// `prepare map`: a new, empty version of `map`, to fill and commit.
    pub async fn prepare_map(&mut self, map: &str) -> Result<MapVersion, RuntimeError> {
        let command = map::prepare(map)?;
        let answer = self.ask(&command).await?;
        MapVersion::from_answer(&command, &answer)
    }

    /// `add map @<version> <map>` with `lines` (`key value\n` each) as its payload.
    pub async fn fill_map(
        &mut self,
        map: &str,
        version: MapVersion,
        lines: &str,
    ) -> Result<(), RuntimeError> {
        self.payload(&map::fill(map, version)?, lines).await
    }

    /// Sends a command with a payload (`<command> <<`, its lines, an empty line) and expects
    /// no answer but the payload prompts: any other answer is HAProxy's refusal. The payload
    /// is lines ending in `\n`, none empty (an empty line would end it early, and what
    /// follows would run as commands), without `\r` or `;`.
    async fn payload(&mut self, command: &str, lines: &str) -> Result<(), RuntimeError> {
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

    /// Every backend's cumulated sessions (`stot` of its BACKEND row in `show stat`), by name.
    pub async fn backend_sessions(&mut self) -> Result<Vec<(String, u64)>, RuntimeError> {
        let command = "show stat -1 2 -1";
        let answer = self.ask(command).await?;
        parse_backend_sessions(command, &answer)
    }

    /// The entries of a map as HAProxy holds them: `(key, value)` in HAProxy's order.
    pub async fn show_map(&mut self, map: &str) -> Result<Vec<(String, String)>, RuntimeError> {
        let command = map::show(map)?;
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
    let (mut current_connections, mut connection_rate) = (None, None);
    for line in answer.lines() {
        if let Some(value) = line.strip_prefix("Pid: ") {
            pid = value.trim().parse().ok();
        } else if let Some(value) = line.strip_prefix("description: ") {
            description = Some(value.trim().to_owned());
        } else if let Some(value) = line.strip_prefix("CurrConns: ") {
            current_connections = value.trim().parse().ok();
        } else if let Some(value) = line.strip_prefix("ConnRate: ") {
            connection_rate = value.trim().parse().ok();
        }
    }
    let pid = pid.ok_or_else(|| RuntimeError::Unexpected {
        command: "show info".to_owned(),
        expected: "a line 'Pid: N'",
        answer: autoproxy::excerpt(answer, 200),
    })?;
    Ok(Info {
        pid,
        description,
        current_connections,
        connection_rate,
    })
}

/// `show stat` answers CSV under a header line `# pxname,svname,...,stot,...`; a backend's
/// own row has `svname` BACKEND.
fn parse_backend_sessions(command: &str, answer: &str) -> Result<Vec<(String, u64)>, RuntimeError> {
    let unexpected = |expected| RuntimeError::Unexpected {
        command: command.to_owned(),
        expected,
        answer: autoproxy::excerpt(answer, 200),
    };
    let mut lines = answer.lines().filter(|line| !line.trim().is_empty());
    let header = lines
        .next()
        .and_then(|line| line.strip_prefix("# "))
        .ok_or_else(|| unexpected("a header line '# pxname,svname,...'"))?;
    let column = |name: &str| header.split(',').position(|field| field == name);
    let (Some(proxy), Some(service), Some(stot)) =
        (column("pxname"), column("svname"), column("stot"))
    else {
        return Err(unexpected("the columns pxname, svname and stot"));
    };
    let mut sessions = Vec::new();
    for line in lines {
        let fields: Vec<&str> = line.split(',').collect();
        if fields.get(service) != Some(&"BACKEND") {
            continue;
        }
        if let (Some(name), Some(total)) = (fields.get(proxy), fields.get(stot)) {
            let total = total.parse().map_err(|_| unexpected("a number in stot"))?;
            sessions.push(((*name).to_owned(), total));
        }
    }
    Ok(sessions)
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

    /// A socket that answers any command with bytes and no end: a read stops at
    /// [`MAX_ANSWER`], an error, in either mode.
    #[tokio::test]
    async fn an_endless_answer_is_cut_at_the_limit() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("stats.sock");
        let listener = tokio::net::UnixListener::bind(&path).expect("binds");
        let endless = tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let chunk = [b'x'; 65536];
                    while stream.write_all(&chunk).await.is_ok() {}
                });
            }
        });
        let api = RuntimeApi::new(&path, Duration::from_secs(60));
        let answer = api.command("show info").await;
        assert!(
            matches!(answer, Err(RuntimeError::TooLong { .. })),
            "{answer:?}"
        );
        let session = api.session().await;
        assert!(
            matches!(session, Err(RuntimeError::TooLong { .. })),
            "{session:?}"
        );
        endless.abort();
    }

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
    fn info_gives_the_connections() {
        let info = parse_info("Pid: 7\nCurrConns: 12\nConnRate: 3\n").expect("parses");
        assert_eq!(
            (info.current_connections, info.connection_rate),
            (Some(12), Some(3))
        );
        let bare = parse_info("Pid: 7\n").expect("parses");
        assert_eq!(
            (bare.current_connections, bare.connection_rate),
            (None, None)
        );
    }

    #[test]
    fn backend_sessions_come_from_the_backend_rows() {
        let answer = "# pxname,svname,qcur,qmax,scur,smax,slim,stot,bin\n\
                      reject_no_route,BACKEND,0,0,0,0,1,42,0\n\
                      passthrough,s1,0,0,0,0,1,9,0\n\
                      passthrough,BACKEND,0,0,0,0,1,10,0\n\n";
        assert_eq!(
            parse_backend_sessions("show stat", answer).expect("parses"),
            vec![
                ("reject_no_route".to_owned(), 42),
                ("passthrough".to_owned(), 10)
            ]
        );
        assert!(parse_backend_sessions("show stat", "Unknown command\n").is_err());
        assert!(parse_backend_sessions("show stat", "# pxname,svname\nx,BACKEND\n").is_err());
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
