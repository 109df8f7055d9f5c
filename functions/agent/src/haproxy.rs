//! A small typed client of HAProxy's runtime API (the stats socket the config declares).
//!
//! No well-kept crate speaks this protocol, and it is small: a command is one line; without
//! `prompt` HAProxy answers it and closes the connection, with `prompt` it ends each answer with
//! `"\n> "` and keeps the connection for the next command. [`RuntimeApi::command`] is the first
//! mode (one short question), [`Session`] the second (many changes over one connection).
//! Every command is checked before it is sent: a newline or `;` inside one would make HAProxy
//! run a second command, so such text never reaches the socket.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

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
    /// A client of the socket at `path`; every read and write waits at most `timeout`.
    pub fn new(path: impl Into<PathBuf>, timeout: Duration) -> RuntimeApi {
        RuntimeApi {
            path: path.into(),
            timeout,
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn connect(&self) -> Result<UnixStream, RuntimeError> {
        let stream = UnixStream::connect(&self.path).map_err(|source| RuntimeError::Connect {
            path: self.path.clone(),
            source,
        })?;
        stream
            .set_read_timeout(Some(self.timeout))
            .and_then(|()| stream.set_write_timeout(Some(self.timeout)))
            .map_err(|source| self.io(source))?;
        Ok(stream)
    }

    fn io(&self, source: std::io::Error) -> RuntimeError {
        RuntimeError::Io {
            path: self.path.clone(),
            source,
        }
    }

    /// Sends one command on its own connection and returns the whole answer.
    pub fn command(&self, command: &str) -> Result<String, RuntimeError> {
        check(command)?;
        let mut stream = self.connect()?;
        stream
            .write_all(format!("{command}\n").as_bytes())
            .map_err(|source| self.io(source))?;
        let mut answer = Vec::new();
        stream
            .read_to_end(&mut answer)
            .map_err(|source| self.io(source))?;
        Ok(String::from_utf8_lossy(&answer).into_owned())
    }

    /// `show info`: which worker answers, and the description of its config.
    pub fn info(&self) -> Result<Info, RuntimeError> {
        parse_info(&self.command("show info")?)
    }

    /// The entries of a map, on a connection of its own.
    pub fn show_map(&self, map: &str) -> Result<Vec<(String, String)>, RuntimeError> {
        let command = format!("show map {map}");
        parse_map(&command, &self.command(&command)?)
    }

    /// A connection in `prompt` mode, for many commands.
    pub fn session(&self) -> Result<Session, RuntimeError> {
        let stream = self.connect()?;
        let mut session = Session {
            api: self.clone(),
            stream,
            buffer: Vec::new(),
        };
        // The first prompt comes only after the first command in prompt mode.
        session.ask("prompt")?;
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
    pub fn ask(&mut self, command: &str) -> Result<String, RuntimeError> {
        check(command)?;
        self.ask_raw(&format!("{command}\n"), command)
    }

    /// Writes `text` (checked by the caller) and reads the answer up to the next prompt.
    fn ask_raw(&mut self, text: &str, command: &str) -> Result<String, RuntimeError> {
        self.stream
            .write_all(text.as_bytes())
            .map_err(|source| self.api.io(source))?;
        self.buffer.clear();
        let mut chunk = [0u8; 16384];
        loop {
            if self.buffer.ends_with(b"\n> ") || self.buffer == b"> " {
                let end = self.buffer.len() - 2;
                return Ok(String::from_utf8_lossy(&self.buffer[..end]).into_owned());
            }
            let n = self
                .stream
                .read(&mut chunk)
                .map_err(|source| self.api.io(source))?;
            if n == 0 {
                return Err(RuntimeError::Closed {
                    path: self.api.path.clone(),
                    command: command.to_owned(),
                });
            }
            self.buffer.extend_from_slice(&chunk[..n]);
        }
    }

    /// Sends a command that answers nothing on success; any answer is HAProxy's refusal.
    pub fn change(&mut self, command: &str) -> Result<(), RuntimeError> {
        let answer = self.ask(command)?;
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
    pub fn payload(&mut self, command: &str, lines: &str) -> Result<(), RuntimeError> {
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
        let answer = self.ask_raw(&format!("{command} <<\n{lines}\n"), command)?;
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
    pub fn info(&mut self) -> Result<Info, RuntimeError> {
        parse_info(&self.ask("show info")?)
    }

    /// The entries of a map as HAProxy holds them: `(key, value)` in HAProxy's order.
    pub fn show_map(&mut self, map: &str) -> Result<Vec<(String, String)>, RuntimeError> {
        let command = format!("show map {map}");
        let answer = self.ask(&command)?;
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
