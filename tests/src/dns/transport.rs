//! The serving threads: UDP and TCP on one port, each query recorded, then answered from the
//! zone (or not at all, for a dropped name).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::query::Query;
use super::wire::{Question, parse_question};
use super::zone::{Zone, answer};

/// The UDP payload a query without EDNS0 may receive.
const PLAIN_UDP: usize = 512;

/// What the serving threads share with the [`super::DnsServer`] handle.
#[derive(Debug, Default)]
pub(super) struct Shared {
    pub(super) zone: Mutex<Zone>,
    pub(super) log: Mutex<Vec<Query>>,
}

pub(super) fn serve(socket: &UdpSocket, shared: &Shared, stop: &AtomicBool) {
    let mut buf = [0u8; 1500];
    while !stop.load(Ordering::SeqCst) {
        // An error is the read timeout, or a stray ICMP error: look at the flag again.
        let Ok((len, peer)) = socket.recv_from(&mut buf) else {
            continue;
        };
        let at = Instant::now();
        let Some(question) = parse_question(&buf[..len]) else {
            continue;
        };
        let Some(reply) = respond(shared, &question, &buf[..len], at, false) else {
            continue;
        };
        let _ = socket.send_to(&reply, peer);
    }
}

/// Records the query and builds its reply (none for a dropped name), truncated to what
/// the transport carries.
fn respond(
    shared: &Shared,
    question: &Question,
    query: &[u8],
    at: Instant,
    tcp: bool,
) -> Option<Vec<u8>> {
    shared.log.lock().expect("dns log lock").push(Query {
        at,
        name: question.name.clone(),
        qtype: question.qtype,
        tcp,
    });
    let zone = shared.zone.lock().expect("dns zone lock");
    if zone.drop.contains(&question.name) {
        return None;
    }
    let limit = if tcp {
        usize::from(u16::MAX)
    } else {
        question.udp_payload.max(PLAIN_UDP)
    };
    Some(answer(&zone, question, query, limit))
}

pub(super) fn serve_tcp(listener: &TcpListener, shared: &Shared, stop: &AtomicBool) {
    while !stop.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((stream, _)) => serve_tcp_connection(stream, shared),
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

/// One query per connection, as the resolver's TCP fallback sends it.
fn serve_tcp_connection(mut stream: TcpStream, shared: &Shared) {
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    let mut prefix = [0u8; 2];
    if stream.read_exact(&mut prefix).is_err() {
        return;
    }
    let mut msg = vec![0u8; usize::from(u16::from_be_bytes(prefix))];
    if stream.read_exact(&mut msg).is_err() {
        return;
    }
    let at = Instant::now();
    let Some(question) = parse_question(&msg) else {
        return;
    };
    if let Some(reply) = respond(shared, &question, &msg, at, true) {
        let len = u16::try_from(reply.len()).unwrap_or(u16::MAX);
        let mut framed = len.to_be_bytes().to_vec();
        framed.extend_from_slice(&reply);
        let _ = stream.write_all(&framed);
    }
}
