//! HAProxy's stats socket refusing chosen commands, the way HAProxy refuses one: the real
//! socket is moved aside and a stand-in listens at its path, passing every command through
//! except those that start with a refused prefix, which it answers itself with an error
//! (in `prompt` mode followed by the prompt, as HAProxy does). Dropped, it puts the real
//! socket back.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::Shutdown;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// The stand-in in front of a stats socket.
#[derive(Debug)]
pub struct RefusingSocket {
    path: PathBuf,
    real: PathBuf,
    stop: Arc<AtomicBool>,
    refused: Arc<AtomicUsize>,
}

impl RefusingSocket {
    /// Puts the stand-in at `path` (HAProxy's socket moves to `<path>.real`), refusing each
    /// command that starts with one of `prefixes`.
    pub fn start(path: &Path, prefixes: &[&str]) -> std::io::Result<RefusingSocket> {
        let real = path.with_extension("real");
        std::fs::rename(path, &real)?;
        let listener = UnixListener::bind(path)?;
        let stop = Arc::new(AtomicBool::new(false));
        let refused = Arc::new(AtomicUsize::new(0));
        let prefixes: Arc<Vec<String>> =
            Arc::new(prefixes.iter().map(|p| (*p).to_owned()).collect());
        let (thread_stop, thread_refused, thread_real) =
            (Arc::clone(&stop), Arc::clone(&refused), real.clone());
        std::thread::spawn(move || {
            for client in listener.incoming() {
                if thread_stop.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(client) = client else { continue };
                let (real, prefixes, refused) = (
                    thread_real.clone(),
                    Arc::clone(&prefixes),
                    Arc::clone(&thread_refused),
                );
                std::thread::spawn(move || relay(client, &real, &prefixes, &refused));
            }
        });
        Ok(RefusingSocket {
            path: path.to_path_buf(),
            real,
            stop,
            refused,
        })
    }

    /// How many commands it refused so far.
    pub fn refused(&self) -> usize {
        self.refused.load(Ordering::SeqCst)
    }
}

impl Drop for RefusingSocket {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop so it sees the stop.
        let _ = UnixStream::connect(&self.path);
        let _ = std::fs::rename(&self.real, &self.path);
    }
}

/// One client's connection: its lines to HAProxy, or refused here; HAProxy's answers back.
fn relay(client: UnixStream, real: &Path, prefixes: &[String], refused: &AtomicUsize) {
    let Ok(upstream) = UnixStream::connect(real) else {
        return;
    };
    let (Ok(mut to_client), Ok(mut from_upstream)) = (client.try_clone(), upstream.try_clone())
    else {
        return;
    };
    let back = std::thread::spawn(move || {
        let mut buffer = [0u8; 8192];
        while let Ok(n) = from_upstream.read(&mut buffer) {
            if n == 0 || to_client.write_all(&buffer[..n]).is_err() {
                break;
            }
        }
        let _ = to_client.shutdown(Shutdown::Write);
    });
    let (Ok(mut answer), mut upstream) = (client.try_clone(), upstream) else {
        return;
    };
    let mut prompt = false;
    for line in BufReader::new(client).split(b'\n') {
        let Ok(line) = line else { break };
        let text = String::from_utf8_lossy(&line);
        if text.trim() == "prompt" {
            prompt = true;
        }
        if prefixes.iter().any(|p| text.starts_with(p.as_str())) {
            refused.fetch_add(1, Ordering::SeqCst);
            let tail = if prompt { "\n> " } else { "" };
            let _ = answer.write_all(format!("Refused by the test's stand-in.\n{tail}").as_bytes());
            if !prompt {
                break;
            }
            continue;
        }
        let mut line = line;
        line.push(b'\n');
        if upstream.write_all(&line).is_err() {
            break;
        }
    }
    let _ = upstream.shutdown(Shutdown::Write);
    let _ = back.join();
}
