//! A stand-in for a worker's stats socket, for unit tests of what talks to it under a
//! budget; the tests that need HAProxy itself run a real one (tests/).

use std::path::Path;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixListener;

/// A stats socket at `path` in `prompt` mode whose worker (PID 7) holds empty maps and takes
/// each change `slow` after it was sent: just within the per-command time-out.
pub fn slow_worker(path: &Path, slow: Duration) -> tokio::task::JoinHandle<()> {
    let listener = UnixListener::bind(path).expect("binds");
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let (read, mut write) = stream.into_split();
                let mut lines = BufReader::new(read).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    let answer = if line == "show info" {
                        "Pid: 7\n"
                    } else {
                        if !line.starts_with("prompt") && !line.starts_with("show map") {
                            tokio::time::sleep(slow).await;
                        }
                        ""
                    };
                    let sent = write.write_all(format!("{answer}\n> ").as_bytes()).await;
                    if sent.is_err() {
                        return;
                    }
                }
            });
        }
    })
}
