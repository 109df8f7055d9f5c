//! Long-lived connections through the proxy: a backend that never ends its answer (a line
//! every 100 ms, like a Kubernetes watch) and a client that holds a connection to it and can
//! tell whether it still flows.

use std::io::{BufRead, BufReader, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

/// A backend on one loopback address that writes `tick <n>` every 100 ms on each connection
/// until the client goes or the streamer is dropped.
#[derive(Debug)]
pub struct Streamer {
    pub addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Streamer {
    pub fn start(ip: Ipv4Addr, port: u16) -> std::io::Result<Streamer> {
        let listener = TcpListener::bind((ip, port))?;
        let addr = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            for stream in listener.incoming() {
                if flag.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(mut stream) = stream else { continue };
                let flag = Arc::clone(&flag);
                std::thread::spawn(move || {
                    let mut tick = 0_u64;
                    while !flag.load(Ordering::SeqCst)
                        && stream
                            .write_all(format!("tick {tick}\n").as_bytes())
                            .is_ok()
                    {
                        tick += 1;
                        std::thread::sleep(Duration::from_millis(100));
                    }
                });
            }
        });
        Ok(Streamer {
            addr,
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for Streamer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// A client holding a connection through the proxy's TLS frontend to a [`Streamer`].
#[derive(Debug)]
pub struct Held {
    reader: BufReader<TcpStream>,
    /// Lines read so far.
    pub lines: usize,
}

impl Held {
    /// Connects to `proxy`, sends a ClientHello for `sni`, and reads the first line.
    pub fn open(proxy: SocketAddr, sni: &str) -> Result<Held, String> {
        let mut stream = TcpStream::connect_timeout(&proxy, Duration::from_secs(2))
            .map_err(|err| format!("connect to {proxy}: {err}"))?;
        stream
            .set_read_timeout(Some(Duration::from_secs(3)))
            .and_then(|()| stream.write_all(&crate::proxy::client_hello(sni)))
            .map_err(|err| format!("send the ClientHello: {err}"))?;
        let mut held = Held {
            reader: BufReader::new(stream),
            lines: 0,
        };
        held.alive()?;
        Ok(held)
    }

    /// Reads what arrived since the last call and one line more: `Ok` while the stream
    /// flows, else how it ended.
    pub fn alive(&mut self) -> Result<(), String> {
        let mut line = String::new();
        match self.reader.read_line(&mut line) {
            Ok(n) if n > 0 && line.starts_with("tick ") => self.lines += 1,
            Ok(0) => return Err(format!("closed after {} lines", self.lines)),
            Ok(_) => return Err(format!("unexpected {line:?} after {} lines", self.lines)),
            Err(err) => return Err(format!("{err} after {} lines", self.lines)),
        }
        while self.reader.buffer().contains(&b'\n') {
            line.clear();
            self.reader
                .read_line(&mut line)
                .map_err(|err| err.to_string())?;
            self.lines += 1;
        }
        Ok(())
    }
}
