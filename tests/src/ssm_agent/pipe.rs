//! A child's pipe read to its end on a thread, its bytes visible as they come.

use std::io::Read;
use std::sync::mpsc;
use std::time::Duration;

/// A pipe read to its end on a thread, its bytes visible as they come.
#[derive(Debug)]
pub(super) struct Pipe {
    bytes: std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
    closed: mpsc::Receiver<()>,
}

impl Pipe {
    pub(super) fn drain<R: Read + Send + 'static>(pipe: Option<R>) -> Pipe {
        let bytes = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let (tx, closed) = mpsc::channel();
        if let Some(mut pipe) = pipe {
            let bytes = std::sync::Arc::clone(&bytes);
            std::thread::spawn(move || {
                let mut buffer = [0u8; 8192];
                while let Ok(n) = pipe.read(&mut buffer) {
                    if n == 0 {
                        break;
                    }
                    bytes
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .extend_from_slice(&buffer[..n]);
                }
                let _ = tx.send(());
            });
        } else {
            let _ = tx.send(());
        }
        Pipe { bytes, closed }
    }

    pub(super) fn so_far(&self) -> String {
        let bytes = self
            .bytes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        String::from_utf8_lossy(&bytes).into_owned()
    }

    /// What the pipe carried; bounded, in case a daemon the script started still holds it.
    pub(super) fn collect(&self) -> String {
        match self.closed.recv_timeout(Duration::from_secs(5)) {
            Ok(()) => self.so_far(),
            Err(_) => format!(
                "{}(output not closed within 5 s after the script ended)",
                self.so_far()
            ),
        }
    }
}
