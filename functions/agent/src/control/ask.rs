//! The apply's end of the control socket: one request, its answers in the order asked.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

/// How long the apply waits for a connection to the control socket.
const CONNECT_WAIT: Duration = Duration::from_secs(2);

/// Why the resolver gave no answers.
#[derive(Debug)]
pub enum Asked {
    /// Nothing listens on its socket (no socket, or one nobody listens on): resolve here.
    NoResolver,
    /// It listens but takes no connection now (its backlog is full, or the connect did not
    /// end in time): the service is alive, so the names stay missing (a second DNS client
    /// would break the instance's budget).
    Busy(String),
    /// It listens but the exchange failed: the names stay missing, as when busy.
    Failed(String),
}

/// A connection to the service on `socket`: absent only when nothing listens there.
pub async fn connect(socket: &Path) -> Result<tokio::net::UnixStream, Asked> {
    let busy = |what: String| Asked::Busy(format!("resolver at {} busy: {what}", socket.display()));
    match tokio::time::timeout(CONNECT_WAIT, tokio::net::UnixStream::connect(socket)).await {
        Ok(Ok(stream)) => Ok(stream),
        Ok(Err(err))
            if matches!(
                err.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused
            ) =>
        {
            Err(Asked::NoResolver)
        }
        // A full backlog: the connect fails at once with EAGAIN.
        Ok(Err(err)) if err.kind() == std::io::ErrorKind::WouldBlock => {
            Err(busy(format!("no connection taken ({err})")))
        }
        Ok(Err(err)) => Err(Asked::Failed(format!(
            "resolver at {}: cannot connect: {err}",
            socket.display()
        ))),
        Err(_) => Err(busy(format!(
            "no connection within {} s",
            CONNECT_WAIT.as_secs()
        ))),
    }
}

/// One name's answer: its address, or why it has none.
pub type Answer = Result<IpAddr, String>;

/// Asks the service on `socket` for `names`, answered by `deadline`: `NoResolver` only when
/// nothing listens there (a busy service is [`Asked::Busy`]). `fences`: the borders of the
/// config the names are for, whose routes' accounts each `want` line names (the service
/// judges a name by them until it reads that config): account ids only, and none for a name
/// routed by more than [`crate::borders::MAX_ACCOUNTS`] accounts.
pub async fn ask(
    socket: &Path,
    names: &[String],
    fences: &crate::borders::Fences,
    deadline: Instant,
) -> Result<Vec<(String, Answer)>, Asked> {
    let stream = connect(socket).await?;
    let failed = |what: &str| Asked::Failed(format!("resolver at {}: {what}", socket.display()));
    let (read, mut write) = stream.into_split();
    let left = deadline.saturating_duration_since(Instant::now());
    // The resolver answers a little before we stop waiting, with what it has by then.
    let server_wait = left.saturating_sub(Duration::from_millis(500).min(left / 4));
    let asked = &names[..names.len().min(super::MAX_WANTED)];
    let mut request = String::with_capacity(asked.len() * 40 + 16);
    for name in asked {
        request.push_str("want ");
        request.push_str(name);
        let accounts: Vec<&str> = fences
            .accounts(name)
            .into_iter()
            .filter(|a| autoproxy::model::is_account_id(a))
            .collect();
        if !accounts.is_empty() && accounts.len() <= crate::borders::MAX_ACCOUNTS {
            request.push(' ');
            request.push_str(&accounts.join(","));
        }
        request.push('\n');
    }
    request.push_str(&format!("go {}\n", server_wait.as_millis()));
    let exchange = async {
        write
            .write_all(request.as_bytes())
            .await
            .map_err(|err| failed(&err.to_string()))?;
        let mut lines = BufReader::new(read).lines();
        let mut answers: BTreeMap<String, Answer> = BTreeMap::new();
        loop {
            let line = lines
                .next_line()
                .await
                .map_err(|err| failed(&err.to_string()))?
                .ok_or_else(|| failed("closed before 'done'"))?;
            let mut words = line.splitn(3, ' ');
            match (words.next(), words.next(), words.next()) {
                (Some("done"), None, None) => break,
                (Some("ok"), Some(name), Some(address)) => {
                    let answer = address
                        .parse()
                        .map_err(|_| format!("the resolver sent {address:?}"));
                    answers.insert(name.to_owned(), answer);
                }
                (Some("missing"), Some(name), why) => {
                    answers.insert(name.to_owned(), Err(why.unwrap_or("no reason").to_owned()));
                }
                (Some("error"), ..) => return Err(failed(&line)),
                _ => return Err(failed(&format!("unexpected line {line:?}"))),
            }
        }
        Ok(answers)
    };
    let mut answers = tokio::time::timeout_at(deadline.into(), exchange)
        .await
        .map_err(|_| failed("no answer within the budget"))??;
    Ok(names
        .iter()
        .map(|name| {
            let answer = answers.remove(name).unwrap_or_else(|| {
                Err(if asked.contains(name) {
                    "the resolver did not answer for it".to_owned()
                } else {
                    format!("not asked: more than {} names at once", super::MAX_WANTED)
                })
            });
            (name.clone(), answer)
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use std::os::unix::net::UnixListener;

    use super::*;

    /// Absent is no socket, or one nobody listens on; busy is a listener whose backlog is
    /// full. Only absent lets the apply resolve by itself.
    #[tokio::test]
    async fn a_busy_service_is_not_an_absent_one() {
        let dir = tempfile::tempdir().expect("temp dir");
        let socket = dir.path().join("resolver.sock");
        let names = ["a.example".to_owned()];
        let deadline = || Instant::now() + Duration::from_secs(3);
        assert!(matches!(
            ask(&socket, &names, &Default::default(), deadline()).await,
            Err(Asked::NoResolver)
        ));
        let listener = UnixListener::bind(&socket).expect("binds");
        // A backlog of 0 holds one connection not yet accepted: the next finds it full.
        rustix::net::listen(&listener, 0).expect("listens");
        let _queued = std::os::unix::net::UnixStream::connect(&socket).expect("queued");
        let asked = ask(&socket, &names, &Default::default(), deadline()).await;
        assert!(matches!(asked, Err(Asked::Busy(_))), "{asked:?}");
        drop(listener);
        assert!(matches!(
            ask(&socket, &names, &Default::default(), deadline()).await,
            Err(Asked::NoResolver)
        ));
    }
}
