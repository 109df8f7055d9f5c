//! A server on a free loopback port for the harness's HTTP stand-ins: every connection is
//! handled on a thread of its own and may append to the server's log; the accept loop stops
//! when the server is dropped.

use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// A running server whose connections log `T`s.
#[derive(Debug)]
pub struct LoopbackServer<T> {
    pub port: u16,
    log: Arc<Mutex<Vec<T>>>,
    stop: Arc<AtomicBool>,
}

impl<T: Send + 'static> LoopbackServer<T> {
    /// Listens on a free loopback port and hands each connection to `handle`, with the log.
    pub fn start<H>(handle: H) -> LoopbackServer<T>
    where
        H: Fn(TcpStream, &Mutex<Vec<T>>) + Clone + Send + 'static,
    {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
        let port = listener.local_addr().expect("local address").port();
        let log = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (shared, stopped) = (log.clone(), stop.clone());
        std::thread::spawn(move || {
            for client in listener.incoming() {
                if stopped.load(Ordering::Relaxed) {
                    break;
                }
                let Ok(client) = client else { continue };
                let (log, handle) = (shared.clone(), handle.clone());
                std::thread::spawn(move || handle(client, &log));
            }
        });
        LoopbackServer { port, log, stop }
    }

    /// What the connections logged so far, in order, and forgets it.
    pub fn take(&self) -> Vec<T> {
        std::mem::take(&mut *self.log.lock().expect("request log"))
    }
}

impl<T> Drop for LoopbackServer<T> {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Wakes the accept loop so it sees the flag.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}
