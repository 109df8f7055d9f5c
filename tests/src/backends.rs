//! The TCP backends test HAProxies route to: each answers with its banner, so a probe tells
//! which one a route reached. Distinct loopback addresses (127.0.0.2, 127.0.0.3, …) share one
//! port.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddr, SocketAddrV4, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

/// A TCP backend: answers every connection with `backend <name>\n`, then waits for the
/// peer to close.
#[derive(Debug)]
pub struct Backend {
    pub name: String,
    pub addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Backend {
    /// A backend answering with its banner on `listener` (one bound anywhere: in a network
    /// namespace, [`crate::netns`]).
    pub fn start(name: &str, listener: TcpListener) -> Backend {
        let banner = format!("backend {name}\n");
        Backend::serving(name, listener, move |stream, _| {
            serve(stream, banner.as_bytes())
        })
    }

    /// A backend on `listener` that runs `handler` on every connection, in a thread of its
    /// own, with the flag that says the backend is being dropped.
    pub fn serving(
        name: &str,
        listener: TcpListener,
        handler: impl Fn(TcpStream, &AtomicBool) + Send + Sync + 'static,
    ) -> Backend {
        let addr = listener.local_addr().expect("local address");
        let stop = Arc::new(AtomicBool::new(false));
        let handler = Arc::new(handler);
        let thread = {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                for stream in listener.incoming() {
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    let Ok(stream) = stream else { continue };
                    let (handler, stop) = (Arc::clone(&handler), Arc::clone(&stop));
                    std::thread::spawn(move || handler(stream, &stop));
                }
            })
        };
        Backend {
            name: name.to_owned(),
            addr,
            stop,
            thread: Some(thread),
        }
    }

    /// What a client routed here reads.
    pub fn banner(&self) -> String {
        format!("backend {}", self.name)
    }
}

fn serve(mut stream: TcpStream, banner: &[u8]) {
    let _ = stream.write_all(banner);
    let _ = stream.shutdown(Shutdown::Write);
    // Read what the client sent (its ClientHello) until it closes: closing with unread
    // data would answer with a reset instead of a clean end.
    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
    let mut sink = [0u8; 4096];
    while matches!(stream.read(&mut sink), Ok(n) if n > 0) {}
}

impl Drop for Backend {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop up so it sees the flag.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Backends on 127.0.0.2, 127.0.0.3, … sharing one port.
#[derive(Debug)]
pub struct Backends {
    pub port: u16,
    pub list: Vec<Backend>,
}

impl Backends {
    pub fn start(names: &[&str]) -> Backends {
        for _attempt in 0..20 {
            let first = TcpListener::bind(("127.0.0.2", 0)).expect("bind 127.0.0.2");
            let port = first.local_addr().expect("local address").port();
            let mut listeners = vec![first];
            for index in 1..names.len() {
                let ip = Ipv4Addr::new(127, 0, 0, 2 + u8::try_from(index).expect("few backends"));
                match TcpListener::bind(SocketAddrV4::new(ip, port)) {
                    Ok(listener) => listeners.push(listener),
                    Err(_) => break,
                }
            }
            if listeners.len() == names.len() {
                let list = names
                    .iter()
                    .zip(listeners)
                    .map(|(name, listener)| Backend::start(name, listener))
                    .collect();
                return Backends { port, list };
            }
        }
        panic!(
            "could not find one port free on {} loopback addresses",
            names.len()
        );
    }

    pub fn get(&self, name: &str) -> &Backend {
        self.list
            .iter()
            .find(|b| b.name == name)
            .unwrap_or_else(|| panic!("no backend named {name}"))
    }
}
