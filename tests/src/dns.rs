//! A counting DNS server on loopback: the stand-in for the VPC resolver in tests and
//! benchmarks. It answers from a table the test changes while it runs and records every query
//! it receives, so a test can assert what reached "DNS" (names, types, rate), not what a
//! client meant to send.
//!
//! It answers as Route53's resolver does for the cases that matter here: A and AAAA records;
//! a CNAME chain followed to the target's records, all in one answer; NXDOMAIN for an unknown
//! name (or an unknown end of a chain, with the CNAMEs kept); an empty NOERROR for any other
//! type of a known name. Names in the drop set get no answer at all (a timeout for the
//! client), names set to fail get SERVFAIL, and a name can be made to answer with its CNAME
//! alone (as a resolver does whose chain leaves its zone), leaving the chase to the client.
//! Over UDP an answer longer than 512 bytes, or than the query's EDNS0 payload size, is
//! truncated (the records that fit, and the TC bit); the same port serves TCP, where nothing
//! is truncated. One question per message.

mod query;
#[cfg(test)]
mod tests;
mod transport;
mod wire;
mod zone;

use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

pub use query::{Query, average_per_second, max_in_window, max_per_second, per_second};
use transport::{Shared, serve, serve_tcp};
pub use wire::{A, AAAA, CNAME, NXDOMAIN};
use zone::Zone;

/// A running server; its thread stops when it is dropped.
#[derive(Debug)]
pub struct DnsServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    tcp_thread: Option<JoinHandle<()>>,
}

impl DnsServer {
    /// Binds `addr` over UDP and TCP (port 0 for a port free for both; `127.0.0.2:53` to be
    /// reachable through a resolv.conf, as root) and starts answering.
    pub fn start(addr: SocketAddr) -> io::Result<DnsServer> {
        let (socket, listener) = bind_both(addr)?;
        // The loop wakes up this often to see the stop flag.
        socket.set_read_timeout(Some(Duration::from_millis(100)))?;
        listener.set_nonblocking(true)?;
        let addr = socket.local_addr()?;
        let shared = Arc::new(Shared::default());
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (shared, stop) = (Arc::clone(&shared), Arc::clone(&stop));
            std::thread::spawn(move || serve(&socket, &shared, &stop))
        };
        let tcp_thread = {
            let (shared, stop) = (Arc::clone(&shared), Arc::clone(&stop));
            std::thread::spawn(move || serve_tcp(&listener, &shared, &stop))
        };
        Ok(DnsServer {
            addr,
            shared,
            stop,
            thread: Some(thread),
            tcp_thread: Some(tcp_thread),
        })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `name` answers with these A records (an empty list: NOERROR without data). Replaces a
    /// CNAME of the same name.
    pub fn set(&self, name: &str, addrs: &[Ipv4Addr]) {
        let name = normalise(name);
        let mut zone = self.zone();
        zone.cname.remove(&name);
        zone.a.insert(name, addrs.to_vec());
    }

    /// `name` answers with these AAAA records (and no A record unless [`DnsServer::set`]
    /// gives it some). Replaces a CNAME of the same name.
    pub fn set6(&self, name: &str, addrs: &[Ipv6Addr]) {
        let name = normalise(name);
        let mut zone = self.zone();
        zone.cname.remove(&name);
        zone.aaaa.insert(name, addrs.to_vec());
    }

    /// The TTL of `name`'s records (default 60 s).
    pub fn set_ttl(&self, name: &str, ttl: u32) {
        self.zone().ttl.insert(normalise(name), ttl);
    }

    /// Queries for `name` get SERVFAIL while `failing` is true.
    pub fn servfail(&self, name: &str, failing: bool) {
        let name = normalise(name);
        let mut zone = self.zone();
        if failing {
            zone.servfail.insert(name);
        } else {
            zone.servfail.remove(&name);
        }
    }

    /// While `alone` is true, a query for `name` (a CNAME) is answered with that CNAME
    /// only: the client must ask for the target itself.
    pub fn cname_alone(&self, name: &str, alone: bool) {
        let name = normalise(name);
        let mut zone = self.zone();
        if alone {
            zone.cname_only.insert(name);
        } else {
            zone.cname_only.remove(&name);
        }
    }

    /// `name` is a CNAME to `target`. Replaces A records of the same name.
    pub fn cname(&self, name: &str, target: &str) {
        let name = normalise(name);
        let mut zone = self.zone();
        zone.a.remove(&name);
        zone.aaaa.remove(&name);
        zone.cname.insert(name, normalise(target));
    }

    /// `name` no longer exists (NXDOMAIN).
    pub fn remove(&self, name: &str) {
        let name = normalise(name);
        let mut zone = self.zone();
        zone.a.remove(&name);
        zone.aaaa.remove(&name);
        zone.cname.remove(&name);
    }

    /// Queries for `name` get no answer at all while `dropped` is true (they are still
    /// recorded).
    pub fn drop_queries(&self, name: &str, dropped: bool) {
        let name = normalise(name);
        let mut zone = self.zone();
        if dropped {
            zone.drop.insert(name);
        } else {
            zone.drop.remove(&name);
        }
    }

    /// Every query received so far, in arrival order.
    pub fn queries(&self) -> Vec<Query> {
        self.log().clone()
    }

    /// How many queries were received so far.
    pub fn count(&self) -> usize {
        self.log().len()
    }

    /// Forgets the queries received so far.
    pub fn clear_log(&self) {
        self.log().clear();
    }

    fn zone(&self) -> MutexGuard<'_, Zone> {
        self.shared.zone.lock().expect("dns zone lock")
    }

    fn log(&self) -> MutexGuard<'_, Vec<Query>> {
        self.shared.log.lock().expect("dns log lock")
    }
}

impl Drop for DnsServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        if let Some(thread) = self.tcp_thread.take() {
            let _ = thread.join();
        }
    }
}

/// A UDP socket and a TCP listener on the same port: `addr`'s, or for port 0 one free for
/// both. A UDP port just chosen can be the local port of some TCP connection, so a port
/// whose TCP side is taken is given back and another one is tried.
fn bind_both(addr: SocketAddr) -> io::Result<(UdpSocket, TcpListener)> {
    const TRIES: usize = 50;
    let mut last = None;
    for _ in 0..TRIES {
        let socket = UdpSocket::bind(addr)?;
        match TcpListener::bind(socket.local_addr()?) {
            Ok(listener) => return Ok((socket, listener)),
            Err(e) if addr.port() == 0 => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| io::Error::other("no port free for both UDP and TCP")))
}

fn normalise(name: &str) -> String {
    name.trim_end_matches('.').to_ascii_lowercase()
}
