//! A TCP endpoint on loopback that accepts every connection and never answers: the AWS
//! endpoint that hangs, where a refused connection fails at once. It holds each connection
//! open until dropped and notes when each came.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The endpoint; dropping it closes every connection.
#[derive(Debug)]
pub struct HangingEndpoint {
    addr: SocketAddr,
    accepted: Arc<Mutex<Vec<Instant>>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl HangingEndpoint {
    pub fn start() -> std::io::Result<HangingEndpoint> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let accepted = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (accepted, stop) = (Arc::clone(&accepted), Arc::clone(&stop));
            std::thread::spawn(move || {
                let mut held: Vec<TcpStream> = Vec::new();
                while !stop.load(Ordering::SeqCst) {
                    match listener.accept() {
                        Ok((stream, _)) => {
                            accepted.lock().expect("accepted lock").push(Instant::now());
                            held.push(stream);
                        }
                        Err(_) => std::thread::sleep(Duration::from_millis(10)),
                    }
                }
            })
        };
        Ok(HangingEndpoint {
            addr,
            accepted,
            stop,
            thread: Some(thread),
        })
    }

    /// `http://127.0.0.1:<port>`, for `AWS_ENDPOINT_URL`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// When each connection was accepted, in order.
    pub fn accepted(&self) -> Vec<Instant> {
        self.accepted.lock().expect("accepted lock").clone()
    }
}

impl Drop for HangingEndpoint {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
