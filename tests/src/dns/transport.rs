//! The serving threads: UDP and TCP on one port, each query recorded, then answered from the
//! zone (or not at all, for a dropped name).

use std::io::{IoSliceMut, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use nix::sys::socket::sockopt::ReceiveTimestampns;
use nix::sys::socket::{ControlMessageOwned, MsgFlags, SockaddrStorage, recvmsg, setsockopt};
use nix::sys::time::TimeSpec;

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
    let stamped = setsockopt(socket, ReceiveTimestampns, &true).is_ok();
    let mut buf = [0u8; 1500];
    let mut control = nix::cmsg_space!(TimeSpec);
    while !stop.load(Ordering::SeqCst) {
        // An error is the read timeout, or a stray ICMP error: look at the flag again.
        let Some(Datagram { len, peer, at }) = receive(socket, &mut buf, &mut control, stamped)
        else {
            continue;
        };
        let Some(question) = parse_question(&buf[..len]) else {
            continue;
        };
        let Some(reply) = respond(shared, &question, &buf[..len], at, false) else {
            continue;
        };
        let _ = socket.send_to(&reply, peer);
    }
}

/// One datagram received.
struct Datagram {
    len: usize,
    peer: SocketAddr,
    /// When the kernel took it in. On loopback that is in the sender's `sendto`, so a rate
    /// counted on these times is the sender's; `Instant::now()` after `recv` would add however
    /// long this thread was descheduled (tens of milliseconds on two loaded cores), bunching
    /// the queries that waited in the socket.
    at: Instant,
}

fn receive(
    socket: &UdpSocket,
    buf: &mut [u8],
    control: &mut [u8],
    stamped: bool,
) -> Option<Datagram> {
    let mut iov = [IoSliceMut::new(buf)];
    let msg = recvmsg::<SockaddrStorage>(
        socket.as_raw_fd(),
        &mut iov,
        stamped.then_some(control),
        MsgFlags::empty(),
    )
    .ok()?;
    let received = Instant::now();
    let address = msg.address?;
    let peer = match (address.as_sockaddr_in(), address.as_sockaddr_in6()) {
        (Some(v4), _) => SocketAddr::V4((*v4).into()),
        (None, Some(v6)) => SocketAddr::V6((*v6).into()),
        (None, None) => return None,
    };
    let stamp = msg.cmsgs().ok().and_then(|mut cmsgs| {
        cmsgs.find_map(|cmsg| match cmsg {
            ControlMessageOwned::ScmTimestampns(stamp) => Some(stamp),
            _ => None,
        })
    });
    let at = stamp.map_or(received, |stamp| kernel_instant(stamp, received));
    Some(Datagram {
        len: msg.bytes,
        peer,
        at,
    })
}

/// The monotonic instant of a kernel receive stamp (wall-clock time): `received` less the
/// wall-clock time since the stamp.
fn kernel_instant(stamp: TimeSpec, received: Instant) -> Instant {
    let waited = SystemTime::now()
        .duration_since(UNIX_EPOCH + Duration::from(stamp))
        .unwrap_or_default();
    received.checked_sub(waited).unwrap_or(received)
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
