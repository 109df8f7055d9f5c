//! The service's end of the control socket: it reads each request, hands it to the service's
//! loop, writes the answer.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, oneshot};

use super::{MAX_CONNECTIONS, MAX_LINE, MAX_WAIT, MAX_WANTED, REQUEST_TIMEOUT};
use crate::log::log;

/// A request, handed to the daemon's loop.
#[derive(Debug)]
pub struct Want {
    /// Valid host names, lower-case, in the order asked.
    pub names: Vec<String>,
    /// Whose routes will send to them, for the lines that say.
    pub accounts: super::Accounts,
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
    /// One permit per connection served: at most [`MAX_CONNECTIONS`] at once.
    permits: std::sync::Arc<Semaphore>,
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
            permits: std::sync::Arc::new(Semaphore::new(MAX_CONNECTIONS)),
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
                accepted = accept(self.listener.as_ref(), &self.permits) => {
                    if let Ok((stream, permit)) = accepted {
                        tokio::spawn(serve(stream, self.want_tx.clone(), permit));
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
    match bind_private(path) {
        Ok(listener) => Some(listener),
        Err(err) => {
            log(format_args!("cannot listen on {}: {err}", path.display()));
            None
        }
    }
}

/// Binds in a directory only root may enter, sets the socket's mode 0600 there, and only then
/// renames it to `path`: no client can connect before the mode is set.
fn bind_private(path: &Path) -> std::io::Result<UnixListener> {
    use std::os::unix::fs::DirBuilderExt;
    let dir = path.with_extension(format!("binding.{}", std::process::id()));
    remove_stale_bindings(path);
    std::fs::DirBuilder::new().mode(0o700).create(&dir)?;
    let inside = dir.join("s");
    let bound = UnixListener::bind(&inside).and_then(|listener| {
        std::fs::set_permissions(&inside, std::fs::Permissions::from_mode(0o600))?;
        let _ = std::fs::remove_file(path);
        std::fs::rename(&inside, path)?;
        Ok(listener)
    });
    let _ = std::fs::remove_dir_all(&dir);
    bound
}

/// Removes the binding directories a service killed while it bound left beside `path`
/// (`<socket stem>.binding.<pid>`, the pid naming no live process), and this process's own.
fn remove_stale_bindings(path: &Path) {
    let (Some(dir), Some(stem)) = (path.parent(), path.file_stem().and_then(|s| s.to_str())) else {
        return;
    };
    let prefix = format!("{stem}.binding.");
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|name| name.strip_prefix(&prefix))
            .and_then(|pid| pid.parse::<u32>().ok())
        else {
            continue;
        };
        let ours = pid == std::process::id();
        if ours || !crate::proc::exists(pid) {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// The next connection, once fewer than [`MAX_CONNECTIONS`] are served (not accepted before:
/// the others wait in the socket's queue, and past it find the service busy).
async fn accept(
    listener: Option<&UnixListener>,
    permits: &std::sync::Arc<Semaphore>,
) -> std::io::Result<(UnixStream, OwnedSemaphorePermit)> {
    let Some(listener) = listener else {
        return std::future::pending().await;
    };
    let permit = permits
        .clone()
        .acquire_owned()
        .await
        .map_err(std::io::Error::other)?;
    let (stream, _) = listener.accept().await?;
    Ok((stream, permit))
}

/// Serves one connection, holding one of the [`MAX_CONNECTIONS`] permits until it ends.
async fn serve(stream: UnixStream, wants: mpsc::Sender<Want>, _permit: OwnedSemaphorePermit) {
    let (read, mut write) = stream.into_split();
    let request = tokio::time::timeout(REQUEST_TIMEOUT, read_request(BufReader::new(read))).await;
    let lines = match request {
        Ok(Ok((names, accounts, wait))) => {
            let (reply, answer) = oneshot::channel();
            let want = Want {
                names,
                accounts,
                wait,
                reply,
            };
            if wants.send(want).await.is_err() {
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

/// A request: the names, whose they are, how long to wait.
type Request = (Vec<String>, super::Accounts, Duration);

async fn read_request(
    mut read: BufReader<tokio::net::unix::OwnedReadHalf>,
) -> Result<Request, String> {
    let mut names = Vec::new();
    let mut accounts = super::Accounts::new();
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
        match (words.next(), words.next(), words.next(), words.next()) {
            (Some("want"), Some(name), whose, None) => {
                let host = autoproxy::names::HostName::parse(name)
                    .map_err(|err| format!("want {name:?}: {err}"))?;
                if names.len() >= MAX_WANTED {
                    return Err(format!("more than {MAX_WANTED} names"));
                }
                if let Some(whose) = whose {
                    let whose =
                        parse_accounts(whose).map_err(|why| format!("want {name}: {why}"))?;
                    accounts
                        .entry(host.as_str().to_owned())
                        .or_default()
                        .extend(whose);
                }
                names.push(host.as_str().to_owned());
            }
            (Some("go"), Some(millis), None, None) => {
                let millis: u64 = millis
                    .parse()
                    .map_err(|_| format!("go {millis:?}: expected milliseconds"))?;
                return Ok((names, accounts, Duration::from_millis(millis).min(MAX_WAIT)));
            }
            _ => {
                return Err(format!(
                    "expected 'want <name> [<accounts>]' or 'go <milliseconds>', got {:?}",
                    autoproxy::excerpt(line.trim_end(), 80)
                ));
            }
        }
    }
}

/// The accounts of a `want` line: account ids, comma-separated, at most
/// [`crate::borders::MAX_ACCOUNTS`].
fn parse_accounts(text: &str) -> Result<Vec<String>, String> {
    let accounts: Vec<String> = text.split(',').map(str::to_owned).collect();
    if accounts.len() > crate::borders::MAX_ACCOUNTS {
        return Err(format!(
            "more than {} accounts",
            crate::borders::MAX_ACCOUNTS
        ));
    }
    match accounts
        .iter()
        .find(|a| !autoproxy::model::is_account_id(a))
    {
        Some(bad) => Err(format!("expected account ids, got {bad:?}")),
        None => Ok(accounts),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `want` line may say whose routes will send to the name: account ids, comma-separated.
    #[tokio::test]
    async fn a_want_line_may_name_the_accounts_of_its_routes() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("autoproxy/resolver.sock");
        let mut control = Control::listen(&path);
        let (seen, mut got) = mpsc::channel(4);
        tokio::spawn(async move {
            loop {
                let want = control.next().await;
                let _ = seen.send(want.accounts.clone()).await;
                let _ = want.reply.send(Vec::new());
            }
        });
        let request = "want a.example 111111111111,222222222222\nwant B.example\n\
                       want a.example 333333333333\ngo 100\n";
        assert_eq!(exchange(&path, request).await, "done\n");
        let accounts = got.recv().await.expect("a request");
        let a: Vec<&str> = accounts["a.example"].iter().map(String::as_str).collect();
        assert_eq!(a, ["111111111111", "222222222222", "333333333333"]);
        assert!(!accounts.contains_key("b.example"));
        let bad = exchange(&path, "want a.example 1111,x\ngo 100\n").await;
        assert!(
            bad.starts_with("error want a.example: expected account ids"),
            "{bad}"
        );
        let many = vec!["111111111111"; crate::borders::MAX_ACCOUNTS + 1].join(",");
        let bad = exchange(&path, &format!("want a.example {many}\ngo 100\n")).await;
        assert!(bad.contains("more than 16 accounts"), "{bad}");
    }

    /// Sends `request` on a new connection; the whole answer.
    async fn exchange(path: &Path, request: &str) -> String {
        let mut stream = UnixStream::connect(path).await.expect("connects");
        stream.write_all(request.as_bytes()).await.expect("sends");
        let mut answer = String::new();
        let _ = stream.read_to_string(&mut answer).await;
        answer
    }

    /// The socket is root-only as it appears, and nothing else is left beside it (a killed
    /// service's binding directory is removed); a request of more than [`MAX_WANTED`] names is
    /// refused; past [`MAX_CONNECTIONS`] open connections the next one is not served until
    /// one ends.
    #[tokio::test]
    async fn the_socket_is_root_only_and_capped() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("autoproxy/resolver.sock");
        // What a service killed while it bound left behind: its binding directory.
        let mut gone = std::process::Command::new("true").spawn().expect("spawns");
        gone.wait().expect("ends");
        let stale = path.with_extension(format!("binding.{}", gone.id()));
        std::fs::create_dir_all(&stale).expect("stale binding");
        std::fs::write(stale.join("s"), "").expect("stale socket");
        let mut control = Control::listen(&path);
        let mode = std::fs::metadata(&path)
            .expect("socket")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        let names: Vec<_> = std::fs::read_dir(path.parent().expect("dir"))
            .expect("lists")
            .filter_map(Result::ok)
            .map(|entry| entry.file_name())
            .collect();
        assert_eq!(names, ["resolver.sock"]);
        tokio::spawn(async move {
            loop {
                let want = control.next().await;
                let lines = want.names.iter().map(|n| format!("missing {n} test"));
                let _ = want.reply.send(lines.collect());
            }
        });
        let too_many: String = (0..=MAX_WANTED)
            .map(|n| format!("want h{n}.example\n"))
            .chain(["go 100\n".to_owned()])
            .collect();
        let answer = exchange(&path, &too_many).await;
        let first = answer.lines().next();
        assert_eq!(
            first,
            Some(format!("error more than {MAX_WANTED} names").as_str())
        );
        let mut idle = Vec::new();
        for _ in 0..MAX_CONNECTIONS {
            idle.push(UnixStream::connect(&path).await.expect("connects"));
        }
        let one = "want a.example\ngo 100\n";
        let waiting = tokio::spawn({
            let path = path.clone();
            async move { exchange(&path, one).await }
        });
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(
            !waiting.is_finished(),
            "served past {MAX_CONNECTIONS} connections"
        );
        drop(idle.pop());
        let answer = tokio::time::timeout(Duration::from_secs(20), waiting)
            .await
            .expect("served once a connection ended")
            .expect("joins");
        assert_eq!(answer, "missing a.example test\ndone\n");
    }
}
