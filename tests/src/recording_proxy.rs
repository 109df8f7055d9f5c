//! A loopback TCP proxy that timestamps every HTTP request it forwards: the rate limit is
//! asserted on what reached the (stand-in) Route53, not on what the client meant to send.
//!
//! One proxy per account: each account's Route53 client gets the proxy's endpoint, so every
//! timestamp is attributed to its account without parsing credentials. A request is counted
//! when a client→server chunk begins with an HTTP method token: hyper writes one request per
//! write sequence on a keep-alive connection and waits for the answer before the next one,
//! so a chunk that starts mid-request (a body) never starts with a method.
//!
//! Started with a delay, it holds each request that long before it forwards it: an endpoint
//! that answers every call late (a slow S3), the answer itself untouched.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::loopback::LoopbackServer;

const METHODS: &[&[u8]] = &[
    b"GET ",
    b"POST ",
    b"PUT ",
    b"DELETE ",
    b"HEAD ",
    b"PATCH ",
    b"OPTIONS ",
];

/// A running proxy; its threads stop accepting when it is dropped.
#[derive(Debug)]
pub struct RecordingProxy {
    pub port: u16,
    server: LoopbackServer<Instant>,
}

impl RecordingProxy {
    /// Listens on a free loopback port and forwards every connection to `upstream`.
    pub fn start(upstream: SocketAddr) -> RecordingProxy {
        RecordingProxy::start_slow(upstream, Duration::ZERO)
    }

    /// The same, holding each request `delay` before it forwards it.
    pub fn start_slow(upstream: SocketAddr, delay: Duration) -> RecordingProxy {
        let server =
            LoopbackServer::start(move |client, log| forward(client, upstream, delay, log));
        RecordingProxy {
            port: server.port,
            server,
        }
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The requests forwarded so far, in order, and forgets them.
    pub fn take(&self) -> Vec<Instant> {
        let mut times = self.server.take();
        times.sort();
        times
    }
}

fn forward(client: TcpStream, upstream: SocketAddr, delay: Duration, log: &Mutex<Vec<Instant>>) {
    let _ = client.set_nodelay(true);
    let Ok(server) = TcpStream::connect(upstream) else {
        return;
    };
    let _ = server.set_nodelay(true);
    let (Ok(mut client_read), Ok(mut server_write)) = (client.try_clone(), server.try_clone())
    else {
        return;
    };
    let (mut server_read, mut client_write) = (server, client);
    let answers = std::thread::spawn(move || {
        let _ = std::io::copy(&mut server_read, &mut client_write);
        let _ = client_write.shutdown(Shutdown::Write);
    });
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match client_read.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if METHODS.iter().any(|m| buf[..n].starts_with(m)) {
            log.lock().expect("request log").push(Instant::now());
            std::thread::sleep(delay);
        }
        if server_write.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = server_write.shutdown(Shutdown::Write);
    let _ = answers.join();
}

/// The most requests in any half-open window `[t, t + window)`.
pub fn peak_in_window(sorted: &[Instant], window: Duration) -> usize {
    let mut first = 0;
    let mut peak = 0;
    for (last, at) in sorted.iter().enumerate() {
        while at.duration_since(sorted[first]) >= window {
            first += 1;
        }
        peak = peak.max(last - first + 1);
    }
    peak
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_peak_counts_a_half_open_window() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let second = Duration::from_secs(1);
        // Six calls 200 ms apart: the sixth is exactly one second after the first.
        let even: Vec<_> = (0..6).map(|i| at(i * 200)).collect();
        assert_eq!(peak_in_window(&even, second), 5);
        // One call 1 ms late at the start squeezes six into a second.
        let squeezed = [at(1), at(200), at(400), at(600), at(800), at(1000)];
        assert_eq!(peak_in_window(&squeezed, second), 6);
        assert_eq!(peak_in_window(&[], second), 0);
    }
}
