//! The apply's end of the control socket: one request, its answers in the order asked.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

/// Why the resolver gave no answers.
#[derive(Debug)]
pub enum Asked {
    /// Nothing listens on its socket: resolve here.
    NoResolver,
    /// It listens but the exchange failed: the names stay missing (a second DNS client
    /// would break the instance's budget).
    Failed(String),
}

/// One name's answer: its address, or why it has none.
pub type Answer = Result<IpAddr, String>;

/// Asks the service on `socket` for `names`, answered by `deadline`: `NoResolver` when nothing
/// listens there.
pub async fn ask(
    socket: &Path,
    names: &[String],
    deadline: Instant,
) -> Result<Vec<(String, Answer)>, Asked> {
    let connect = tokio::time::timeout(
        Duration::from_secs(2),
        tokio::net::UnixStream::connect(socket),
    )
    .await;
    let Ok(Ok(stream)) = connect else {
        return Err(Asked::NoResolver);
    };
    let failed = |what: &str| Asked::Failed(format!("resolver at {}: {what}", socket.display()));
    let (read, mut write) = stream.into_split();
    let left = deadline.saturating_duration_since(Instant::now());
    // The resolver answers a little before we stop waiting, with what it has by then.
    let server_wait = left.saturating_sub(Duration::from_millis(500).min(left / 4));
    let mut request = String::with_capacity(names.len() * 40 + 16);
    for name in names {
        request.push_str("want ");
        request.push_str(name);
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
            let answer = answers
                .remove(name)
                .unwrap_or_else(|| Err("the resolver did not answer for it".to_owned()));
            (name.clone(), answer)
        })
        .collect())
}
