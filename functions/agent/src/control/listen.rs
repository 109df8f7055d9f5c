//! The service's end of the control socket: it reads each request, hands it to the service's
//! loop, writes the answer.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{mpsc, oneshot};

use super::{MAX_LINE, MAX_WAIT, MAX_WANTED, REQUEST_TIMEOUT};
use crate::log::log;

/// A request, handed to the daemon's loop.
#[derive(Debug)]
pub struct Want {
    /// Valid host names, lower-case, in the order asked.
    pub names: Vec<String>,
    /// How long the client waits: answer by then with what there is.
    pub wait: Duration,
    /// The answer lines (without `done`).
    pub reply: oneshot::Sender<Vec<String>>,
}

/// The service's listening end: the socket, and the requests its connections hand over.
#[derive(Debug)]
pub struct Control {
    path: PathBuf,
    /// None when another service answers there, or the socket cannot be made.
    listener: Option<UnixListener>,
    want_tx: mpsc::Sender<Want>,
    want_rx: mpsc::Receiver<Want>,
}

impl Control {
    /// Listens on `path` (only root may connect); not at all when it cannot, or when
    /// another service answers there (each case logged).
    pub fn listen(path: &Path) -> Control {
        let (want_tx, want_rx) = mpsc::channel(16);
        Control {
            path: path.to_path_buf(),
            listener: bind(path),
            want_tx,
            want_rx,
        }
    }

    /// The next request; serves each connection in a task of its own meanwhile. Never
    /// returns when not listening. Cancel-safe: a request is taken only when returned.
    pub async fn next(&mut self) -> Want {
        loop {
            tokio::select! {
                Some(want) = self.want_rx.recv() => return want,
                accepted = accept(self.listener.as_ref()) => {
                    if let Ok((stream, _)) = accepted {
                        tokio::spawn(serve(stream, self.want_tx.clone()));
                    }
                }
            }
        }
    }

    /// Removes the socket file, when it is ours.
    pub fn close(self) {
        if self.listener.is_some() {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

fn bind(path: &Path) -> Option<UnixListener> {
    if let Some(dir) = path.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    // A socket file left by a stopped resolver refuses connections; an answering one
    // means another resolver runs for this config.
    if std::os::unix::net::UnixStream::connect(path).is_ok() {
        log(format_args!(
            "another resolver answers on {}; not listening",
            path.display()
        ));
        return None;
    }
    let _ = std::fs::remove_file(path);
    match UnixListener::bind(path) {
        Ok(listener) => {
            let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600));
            Some(listener)
        }
        Err(err) => {
            log(format_args!("cannot listen on {}: {err}", path.display()));
            None
        }
    }
}

async fn accept(
    listener: Option<&UnixListener>,
) -> std::io::Result<(UnixStream, tokio::net::unix::SocketAddr)> {
    match listener {
        Some(listener) => listener.accept().await,
        None => std::future::pending().await,
    }
}

/// Serves one connection.
async fn serve(stream: UnixStream, wants: mpsc::Sender<Want>) {
    let (read, mut write) = stream.into_split();
    let request = tokio::time::timeout(REQUEST_TIMEOUT, read_request(BufReader::new(read))).await;
    let lines = match request {
        Ok(Ok((names, wait))) => {
            let (reply, answer) = oneshot::channel();
            if wants.send(Want { names, wait, reply }).await.is_err() {
                vec!["error the resolver is stopping".to_owned()]
            } else {
                match tokio::time::timeout(wait + Duration::from_secs(5), answer).await {
                    Ok(Ok(mut lines)) => {
                        lines.push("done".to_owned());
                        lines
                    }
                    _ => vec!["error no answer in time".to_owned()],
                }
            }
        }
        Ok(Err(why)) => vec![format!("error {why}")],
        Err(_) => vec!["error no complete request in time".to_owned()],
    };
    let mut text = lines.join("\n");
    text.push('\n');
    let _ = write.write_all(text.as_bytes()).await;
    let _ = write.shutdown().await;
}

async fn read_request(
    mut read: BufReader<tokio::net::unix::OwnedReadHalf>,
) -> Result<(Vec<String>, Duration), String> {
    let mut names = Vec::new();
    let mut line = String::new();
    loop {
        line.clear();
        let n = (&mut read)
            .take(MAX_LINE as u64 + 1)
            .read_line(&mut line)
            .await
            .map_err(|err| err.to_string())?;
        if n == 0 {
            return Err("the request ended before 'go'".to_owned());
        }
        if n > MAX_LINE || !line.ends_with('\n') {
            return Err("a request line is too long".to_owned());
        }
        let mut words = line.split_whitespace();
        match (words.next(), words.next(), words.next()) {
            (Some("want"), Some(name), None) => {
                let host = autoproxy::names::HostName::parse(name)
                    .map_err(|err| format!("want {name:?}: {err}"))?;
                if names.len() >= MAX_WANTED {
                    return Err(format!("more than {MAX_WANTED} names"));
                }
                names.push(host.as_str().to_owned());
            }
            (Some("go"), Some(millis), None) => {
                let millis: u64 = millis
                    .parse()
                    .map_err(|_| format!("go {millis:?}: expected milliseconds"))?;
                return Ok((names, Duration::from_millis(millis).min(MAX_WAIT)));
            }
            _ => {
                return Err(format!(
                    "expected 'want <name>' or 'go <milliseconds>', got {:?}",
                    autoproxy::excerpt(line.trim_end(), 80)
                ));
            }
        }
    }
}
