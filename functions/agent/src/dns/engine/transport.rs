//! The sockets: one connected, non-blocking UDP socket per nameserver, long-lived (no
//! socket per query), read by [`Transport::drain`] on the engine's ticks rather than
//! through the event loop: a wake-up per datagram is what costs CPU at 200 queries a
//! second, not the work. Connected, a socket takes datagrams from its nameserver only, and
//! learns at once when nothing listens there (a retry goes to the next nameserver instead of
//! waiting out a time-out). TCP goes per exchange, in a task.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Instant;

use tokio::sync::mpsc;

use super::super::wire;
use super::{Engine, Outgoing, Via};

/// The answer of a TCP exchange, back from its task.
#[derive(Debug)]
pub struct TcpDone {
    /// The engine's token for the exchange.
    pub(super) token: u64,
    pub(super) result: std::io::Result<Vec<u8>>,
}

/// The sockets, and the channel the TCP exchanges answer on.
#[derive(Debug)]
pub struct Transport {
    sockets: HashMap<SocketAddr, std::net::UdpSocket>,
    buf: Vec<u8>,
    tcp_tx: mpsc::UnboundedSender<TcpDone>,
    pub tcp_rx: mpsc::UnboundedReceiver<TcpDone>,
}

impl Default for Transport {
    fn default() -> Transport {
        Transport::new()
    }
}

impl Transport {
    pub fn new() -> Transport {
        let (tcp_tx, tcp_rx) = mpsc::unbounded_channel();
        Transport {
            sockets: HashMap::new(),
            buf: vec![0u8; 65_536],
            tcp_tx,
            tcp_rx,
        }
    }

    /// Opens a socket for each new nameserver and closes those no longer named; the
    /// nameservers it could not open a socket for, with why.
    pub fn set_nameservers(&mut self, nameservers: &[SocketAddr]) -> Vec<(SocketAddr, String)> {
        self.sockets
            .retain(|server, _| nameservers.contains(server));
        let mut failed = Vec::new();
        for server in nameservers {
            if self.sockets.contains_key(server) {
                continue;
            }
            match connect(*server) {
                Ok(socket) => {
                    self.sockets.insert(*server, socket);
                }
                Err(err) => failed.push((*server, err.to_string())),
            }
        }
        failed
    }

    /// Sends `query`: a datagram at once, or a TCP exchange in a task that answers on
    /// `tcp_rx`.
    pub fn send(&self, query: Outgoing) -> std::io::Result<()> {
        match query.via {
            Via::Udp { .. } => match self.sockets.get(&query.server) {
                Some(socket) => socket.send(&query.bytes).map(|_| ()),
                None => Err(std::io::Error::other("no socket for it")),
            },
            Via::Tcp { token, timeout } => {
                let tx = self.tcp_tx.clone();
                tokio::spawn(async move {
                    let result = wire::tcp_exchange(query.server, &query.bytes, timeout).await;
                    let _ = tx.send(TcpDone { token, result });
                });
                Ok(())
            }
        }
    }

    /// Hands every datagram waiting on the sockets to `engine`.
    pub fn drain(&mut self, engine: &mut Engine, now: Instant) {
        for (server, socket) in &self.sockets {
            loop {
                match socket.recv(&mut self.buf) {
                    Ok(len) => engine.on_udp(&self.buf[..len], *server, now),
                    Err(err) if err.kind() == std::io::ErrorKind::ConnectionRefused => {
                        engine.on_refused(*server, now);
                    }
                    // WouldBlock: nothing more; anything else is no one query's business.
                    Err(_) => break,
                }
            }
        }
    }
}

fn connect(server: SocketAddr) -> std::io::Result<std::net::UdpSocket> {
    let local: SocketAddr = if server.is_ipv4() {
        SocketAddr::from(([0, 0, 0, 0], 0))
    } else {
        SocketAddr::from(([0u16; 8], 0))
    };
    let socket = std::net::UdpSocket::bind(local)?;
    socket.connect(server)?;
    socket.set_nonblocking(true)?;
    Ok(socket)
}
