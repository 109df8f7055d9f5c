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

use std::collections::{HashMap, HashSet};
use std::io;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Query type A.
pub const A: u16 = 1;
/// Query type CNAME.
pub const CNAME: u16 = 5;
/// Query type AAAA.
pub const AAAA: u16 = 28;

/// Response code NXDOMAIN.
pub const NXDOMAIN: u8 = 3;

/// TTL of every record served unless set (what Route53 gives an alias record).
const TTL: u32 = 60;
/// The UDP payload a query without EDNS0 may receive.
const PLAIN_UDP: usize = 512;
/// The longest CNAME chain followed before answering SERVFAIL (a loop in the table).
const MAX_CHAIN: usize = 8;

/// One query the server received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Query {
    pub at: Instant,
    /// The question's name, lower-cased, without the trailing dot.
    pub name: String,
    pub qtype: u16,
    /// Whether it came over TCP.
    pub tcp: bool,
}

#[derive(Debug, Default)]
struct Zone {
    a: HashMap<String, Vec<Ipv4Addr>>,
    aaaa: HashMap<String, Vec<Ipv6Addr>>,
    cname: HashMap<String, String>,
    ttl: HashMap<String, u32>,
    drop: HashSet<String>,
    servfail: HashSet<String>,
    cname_only: HashSet<String>,
}

#[derive(Debug, Default)]
struct Shared {
    zone: Mutex<Zone>,
    log: Mutex<Vec<Query>>,
}

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
    /// Binds `addr` (port 0 for a free port; `127.0.0.2:53` to be reachable through a
    /// resolv.conf, as root) and starts answering.
    pub fn start(addr: SocketAddr) -> io::Result<DnsServer> {
        let socket = UdpSocket::bind(addr)?;
        // The loop wakes up this often to see the stop flag.
        socket.set_read_timeout(Some(Duration::from_millis(100)))?;
        let addr = socket.local_addr()?;
        let shared = Arc::new(Shared::default());
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (shared, stop) = (Arc::clone(&shared), Arc::clone(&stop));
            std::thread::spawn(move || serve(&socket, &shared, &stop))
        };
        // TCP on the same port where it is free (it is for a port just chosen by UDP).
        let tcp_thread = TcpListener::bind(addr)
            .and_then(|listener| listener.set_nonblocking(true).map(|()| listener))
            .ok()
            .map(|listener| {
                let (shared, stop) = (Arc::clone(&shared), Arc::clone(&stop));
                std::thread::spawn(move || serve_tcp(&listener, &shared, &stop))
            });
        Ok(DnsServer {
            addr,
            shared,
            stop,
            thread: Some(thread),
            tcp_thread,
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

fn normalise(name: &str) -> String {
    name.trim_end_matches('.').to_ascii_lowercase()
}

fn serve(socket: &UdpSocket, shared: &Shared, stop: &AtomicBool) {
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

fn serve_tcp(listener: &TcpListener, shared: &Shared, stop: &AtomicBool) {
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

/// The question of a query message, with what the reply must echo.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Question {
    id: u16,
    rd: bool,
    name: String,
    qtype: u16,
    qclass: u16,
    /// Where the question section ends in the message.
    end: usize,
    /// The UDP payload size of the query's EDNS0 OPT record (0 without one).
    udp_payload: usize,
}

fn parse_question(msg: &[u8]) -> Option<Question> {
    let header = msg.get(..12)?;
    let is_query = header[2] & 0x80 == 0;
    let qdcount = u16::from_be_bytes([header[4], header[5]]);
    if !is_query || qdcount != 1 {
        return None;
    }
    let (name, mut pos) = read_name(msg, 12)?;
    let fixed = msg.get(pos..pos + 4)?;
    let qtype = u16::from_be_bytes([fixed[0], fixed[1]]);
    let qclass = u16::from_be_bytes([fixed[2], fixed[3]]);
    pos += 4;
    let arcount = u16::from_be_bytes([header[10], header[11]]);
    Some(Question {
        id: u16::from_be_bytes([header[0], header[1]]),
        rd: header[2] & 0x01 != 0,
        name,
        qtype,
        qclass,
        end: pos,
        udp_payload: if arcount > 0 {
            opt_payload(msg, pos)
        } else {
            0
        },
    })
}

/// The payload size of an OPT record (root name, type 41) starting at `pos`; 0 otherwise.
fn opt_payload(msg: &[u8], pos: usize) -> usize {
    match msg.get(pos..pos + 5) {
        Some([0, 0, 41, high, low]) => usize::from(u16::from_be_bytes([*high, *low])),
        _ => 0,
    }
}

/// Reads an uncompressed name (a question never needs compression) at `pos`; the name,
/// lower-cased without the trailing dot, and the position after it.
fn read_name(msg: &[u8], mut pos: usize) -> Option<(String, usize)> {
    let mut labels: Vec<String> = Vec::new();
    loop {
        let len = usize::from(*msg.get(pos)?);
        pos += 1;
        if len == 0 {
            return Some((labels.join("."), pos));
        }
        if len > 63 {
            return None; // a compression pointer or a reserved label type
        }
        let label = msg.get(pos..pos + len)?;
        labels.push(String::from_utf8_lossy(label).to_ascii_lowercase());
        pos += len;
    }
}

fn write_name(out: &mut Vec<u8>, name: &str) {
    for label in name.split('.').filter(|l| !l.is_empty()) {
        let bytes = &label.as_bytes()[..label.len().min(63)];
        out.push(u8::try_from(bytes.len()).expect("a label is at most 63 bytes"));
        out.extend_from_slice(bytes);
    }
    out.push(0);
}

fn write_record(out: &mut Vec<u8>, name: &str, rtype: u16, ttl: u32, data: &[u8]) {
    write_name(out, name);
    out.extend(rtype.to_be_bytes());
    out.extend(1u16.to_be_bytes()); // class IN
    out.extend(ttl.to_be_bytes());
    out.extend(
        u16::try_from(data.len())
            .expect("short record data")
            .to_be_bytes(),
    );
    out.extend_from_slice(data);
}

/// The reply to `question` (from message `query`) under `zone`, at most `limit` bytes long:
/// the records that fit and the TC bit when they do not all fit.
fn answer(zone: &Zone, question: &Question, query: &[u8], limit: usize) -> Vec<u8> {
    // Each record separately, so that a truncated reply holds whole records.
    let mut records: Vec<Vec<u8>> = Vec::new();
    let mut name = question.name.clone();
    let mut rcode = 0u8;
    let mut chain = 0;
    let ttl = |name: &str| zone.ttl.get(name).copied().unwrap_or(TTL);
    let mut stop_at_cname = false;
    while let Some(target) = zone.cname.get(&name) {
        chain += 1;
        if chain > MAX_CHAIN {
            rcode = 2; // SERVFAIL: a loop in the table
            break;
        }
        let mut data = Vec::new();
        write_name(&mut data, target);
        let mut record = Vec::new();
        write_record(&mut record, &name, CNAME, ttl(&name), &data);
        records.push(record);
        if question.qtype == CNAME || zone.cname_only.contains(&name) {
            stop_at_cname = true;
            break;
        }
        name.clone_from(target);
    }
    if rcode == 0 && !stop_at_cname {
        let (v4, v6) = (zone.a.get(&name), zone.aaaa.get(&name));
        if v4.is_none() && v6.is_none() {
            rcode = NXDOMAIN;
        } else if question.qtype == A {
            for addr in v4.into_iter().flatten() {
                let mut record = Vec::new();
                write_record(&mut record, &name, A, ttl(&name), &addr.octets());
                records.push(record);
            }
        } else if question.qtype == AAAA {
            for addr in v6.into_iter().flatten() {
                let mut record = Vec::new();
                write_record(&mut record, &name, AAAA, ttl(&name), &addr.octets());
                records.push(record);
            }
        }
    }
    if zone.servfail.contains(&question.name) {
        (records, rcode) = (Vec::new(), 2);
    }
    if question.qclass != 1 {
        (records, rcode) = (Vec::new(), 5); // REFUSED: only class IN is served
    }

    let mut fit = 0;
    let mut size = question.end;
    for record in &records {
        if size + record.len() > limit {
            break;
        }
        size += record.len();
        fit += 1;
    }
    let truncated = fit < records.len();
    let mut out = Vec::with_capacity(size);
    out.extend(question.id.to_be_bytes());
    // QR, opcode 0, TC when truncated, RD echoed; RA; the response code.
    out.push(0x80 | if truncated { 0x02 } else { 0 } | u8::from(question.rd));
    out.push(0x80 | rcode);
    out.extend(1u16.to_be_bytes()); // one question
    out.extend(u16::try_from(fit).unwrap_or(u16::MAX).to_be_bytes());
    out.extend([0, 0, 0, 0]); // no authority, no additional records
    out.extend_from_slice(&query[12..question.end]);
    for record in &records[..fit] {
        out.extend_from_slice(record);
    }
    out
}

/// Queries per 1-s window from `from` (the first window is `[from, from + 1 s)`) until `to`;
/// queries outside `[from, to)` are not counted.
pub fn per_second(queries: &[Query], from: Instant, to: Instant) -> Vec<usize> {
    let windows = to.saturating_duration_since(from).as_secs_f64().ceil() as usize;
    let mut counts = vec![0; windows];
    for query in queries.iter().filter(|q| q.at >= from && q.at < to) {
        let index = (query.at - from).as_secs() as usize;
        if let Some(count) = counts.get_mut(index) {
            *count += 1;
        }
    }
    counts
}

/// The most queries received in any window of length `window` (sliding, not aligned to
/// anything). `queries` must be in arrival order, as [`DnsServer::queries`] gives them.
pub fn max_in_window(queries: &[Query], window: Duration) -> usize {
    let mut start = 0;
    let mut best = 0;
    for (end, query) in queries.iter().enumerate() {
        while query.at.duration_since(queries[start].at) >= window {
            start += 1;
        }
        best = best.max(end + 1 - start);
    }
    best
}

/// The most queries received in any 1-s window (sliding).
pub fn max_per_second(queries: &[Query]) -> usize {
    max_in_window(queries, Duration::from_secs(1))
}

/// Queries per second on average between the first and the last query (0 for fewer than two).
pub fn average_per_second(queries: &[Query]) -> f64 {
    match (queries.first(), queries.last()) {
        (Some(first), Some(last)) if queries.len() > 1 => {
            let span = last.at.duration_since(first.at).as_secs_f64();
            if span > 0.0 {
                (queries.len() - 1) as f64 / span
            } else {
                0.0
            }
        }
        _ => 0.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(id: u16, name: &str, qtype: u16) -> Vec<u8> {
        let mut msg = id.to_be_bytes().to_vec();
        msg.extend([0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0]); // RD, one question
        write_name(&mut msg, name);
        msg.extend(qtype.to_be_bytes());
        msg.extend(1u16.to_be_bytes());
        msg
    }

    /// A parsed reply: id, rcode, the echoed question name, and the answer records as
    /// (owner, type, data as text).
    #[derive(Debug, PartialEq)]
    struct Reply {
        id: u16,
        rcode: u8,
        question: String,
        answers: Vec<(String, u16, String)>,
    }

    /// Reads a name that may use compression pointers.
    fn read_any_name(msg: &[u8], mut pos: usize) -> (String, usize) {
        let mut labels = Vec::new();
        let mut end = None;
        loop {
            let len = usize::from(msg[pos]);
            if len & 0xc0 == 0xc0 {
                end.get_or_insert(pos + 2);
                pos = (len & 0x3f) << 8 | usize::from(msg[pos + 1]);
                continue;
            }
            pos += 1;
            if len == 0 {
                return (labels.join("."), end.unwrap_or(pos));
            }
            labels.push(String::from_utf8(msg[pos..pos + len].to_vec()).unwrap());
            pos += len;
        }
    }

    fn parse_reply(msg: &[u8]) -> Reply {
        assert_eq!(msg[2] & 0x80, 0x80, "QR set");
        assert_eq!(msg[2] & 0x01, 0x01, "RD echoed");
        let ancount = u16::from_be_bytes([msg[6], msg[7]]);
        let (question, mut pos) = read_any_name(msg, 12);
        pos += 4;
        let mut answers = Vec::new();
        for _ in 0..ancount {
            let (owner, after) = read_any_name(msg, pos);
            let rtype = u16::from_be_bytes([msg[after], msg[after + 1]]);
            let rdlen = usize::from(u16::from_be_bytes([msg[after + 8], msg[after + 9]]));
            let data = &msg[after + 10..after + 10 + rdlen];
            let text = match rtype {
                A => Ipv4Addr::new(data[0], data[1], data[2], data[3]).to_string(),
                CNAME => read_any_name(msg, after + 10).0,
                _ => format!("{data:?}"),
            };
            answers.push((owner, rtype, text));
            pos = after + 10 + rdlen;
        }
        assert_eq!(pos, msg.len(), "no trailing bytes");
        Reply {
            id: u16::from_be_bytes([msg[0], msg[1]]),
            rcode: msg[3] & 0x0f,
            question,
            answers,
        }
    }

    fn ask(server: &DnsServer, id: u16, name: &str, qtype: u16) -> Option<Reply> {
        let client = UdpSocket::bind("127.0.0.1:0").unwrap();
        client
            .set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        client
            .send_to(&query(id, name, qtype), server.addr())
            .unwrap();
        let mut buf = [0u8; 1500];
        let len = client.recv(&mut buf).ok()?;
        Some(parse_reply(&buf[..len]))
    }

    fn rec(owner: &str, rtype: u16, data: &str) -> (String, u16, String) {
        (owner.to_owned(), rtype, data.to_owned())
    }

    #[test]
    fn answers_a_cname_chains_nxdomain_and_empty_aaaa() {
        let server = DnsServer::start("127.0.0.1:0".parse().unwrap()).expect("start dns");
        let ip = |last| Ipv4Addr::new(10, 0, 0, last);
        server.set("api.example.internal", &[ip(1), ip(2)]);
        server.cname("proxy.example.internal", "lb.example.internal.");
        server.cname("lb.example.internal", "node.example.internal");
        server.set("node.example.internal", &[ip(9)]);
        server.cname("dangling.example.internal", "nowhere.example.internal");

        let reply = ask(&server, 7, "API.example.internal", A).expect("an answer");
        assert_eq!(reply.id, 7);
        assert_eq!(reply.rcode, 0);
        assert_eq!(
            reply.question, "API.example.internal",
            "question echoed as sent"
        );
        assert_eq!(
            reply.answers,
            [
                rec("api.example.internal", A, "10.0.0.1"),
                rec("api.example.internal", A, "10.0.0.2")
            ]
        );

        let reply = ask(&server, 8, "proxy.example.internal", A).expect("an answer");
        assert_eq!(
            reply.answers,
            [
                rec("proxy.example.internal", CNAME, "lb.example.internal"),
                rec("lb.example.internal", CNAME, "node.example.internal"),
                rec("node.example.internal", A, "10.0.0.9"),
            ]
        );

        let reply = ask(&server, 9, "dangling.example.internal", A).expect("an answer");
        assert_eq!(reply.rcode, NXDOMAIN);
        assert_eq!(reply.answers.len(), 1, "the CNAME is kept");

        let reply = ask(&server, 10, "missing.example.internal", A).expect("an answer");
        assert_eq!((reply.rcode, reply.answers.len()), (NXDOMAIN, 0));

        let reply = ask(&server, 11, "api.example.internal", AAAA).expect("an answer");
        assert_eq!((reply.rcode, reply.answers.len()), (0, 0));

        server.remove("api.example.internal");
        let reply = ask(&server, 12, "api.example.internal", A).expect("an answer");
        assert_eq!(reply.rcode, NXDOMAIN);

        server.set("slow.example.internal", &[ip(3)]);
        server.drop_queries("slow.example.internal", true);
        assert_eq!(ask(&server, 13, "slow.example.internal", A), None);
        server.drop_queries("slow.example.internal", false);
        assert!(ask(&server, 14, "slow.example.internal", A).is_some());

        let log = server.queries();
        assert_eq!(log.len(), 8);
        assert_eq!(log[0].name, "api.example.internal", "lower-cased");
        assert_eq!(log[4].qtype, AAAA);
        assert_eq!(
            log[6].name, "slow.example.internal",
            "a dropped query is recorded"
        );
        server.clear_log();
        assert_eq!(server.count(), 0);
    }

    /// Sends `msg` over TCP and returns the reply message.
    fn ask_tcp(server: &DnsServer, msg: &[u8]) -> Vec<u8> {
        let mut stream = TcpStream::connect(server.addr()).unwrap();
        let mut framed = u16::try_from(msg.len()).unwrap().to_be_bytes().to_vec();
        framed.extend_from_slice(msg);
        stream.write_all(&framed).unwrap();
        let mut prefix = [0u8; 2];
        stream.read_exact(&mut prefix).unwrap();
        let mut reply = vec![0u8; usize::from(u16::from_be_bytes(prefix))];
        stream.read_exact(&mut reply).unwrap();
        reply
    }

    fn raw_udp(server: &DnsServer, msg: &[u8]) -> Vec<u8> {
        let client = UdpSocket::bind("127.0.0.1:0").unwrap();
        client
            .set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        client.send_to(msg, server.addr()).unwrap();
        let mut buf = [0u8; 4096];
        let len = client.recv(&mut buf).unwrap();
        buf[..len].to_vec()
    }

    #[test]
    fn long_answers_are_truncated_over_udp_and_whole_over_tcp() {
        let server = DnsServer::start("127.0.0.1:0".parse().unwrap()).expect("start dns");
        let many: Vec<Ipv4Addr> = (1..=25).map(|i| Ipv4Addr::new(10, 1, 0, i)).collect();
        server.set("many.example.internal", &many);
        server.set_ttl("many.example.internal", 5);
        let plain = query(1, "many.example.internal", A);
        let reply = raw_udp(&server, &plain);
        assert!(reply.len() <= 512, "{} bytes", reply.len());
        assert_eq!(reply[2] & 0x02, 0x02, "TC set");
        let kept = u16::from_be_bytes([reply[6], reply[7]]);
        assert!(kept > 0 && kept < 25, "whole records that fit: {kept}");

        // With EDNS0 (payload 1232), the 25 records (about 1 KB) fit in one datagram.
        let mut edns = plain.clone();
        edns[11] = 1; // one additional record
        edns.extend([0, 0, 41, 0x04, 0xd0, 0, 0, 0, 0, 0, 0]);
        let reply = raw_udp(&server, &edns);
        assert_eq!(reply[2] & 0x02, 0, "no TC with EDNS0");
        assert_eq!(parse_reply(&reply).answers.len(), 25);

        let reply = parse_reply(&ask_tcp(&server, &plain));
        assert_eq!(reply.answers.len(), 25, "TCP is never truncated");
        assert_eq!(
            reply.answers[0],
            rec("many.example.internal", A, "10.1.0.1")
        );
        let log = server.queries();
        assert_eq!(
            log.iter().map(|q| q.tcp).collect::<Vec<_>>(),
            [false, false, true]
        );

        server.cname("alias.example.internal", "many.example.internal");
        server.cname_alone("alias.example.internal", true);
        let reply = ask(&server, 2, "alias.example.internal", A).expect("an answer");
        assert_eq!(
            reply.answers,
            [rec(
                "alias.example.internal",
                CNAME,
                "many.example.internal"
            )]
        );
        server.servfail("alias.example.internal", true);
        let reply = ask(&server, 3, "alias.example.internal", A).expect("an answer");
        assert_eq!((reply.rcode, reply.answers.len()), (2, 0));
        server.set6("six.example.internal", &["fd00::1".parse().unwrap()]);
        let reply = ask(&server, 4, "six.example.internal", AAAA).expect("an answer");
        assert_eq!(reply.answers.len(), 1);
        let reply = ask(&server, 5, "six.example.internal", A).expect("an answer");
        assert_eq!((reply.rcode, reply.answers.len()), (0, 0), "NODATA");
    }

    #[test]
    fn malformed_messages_get_no_answer() {
        let server = DnsServer::start("127.0.0.1:0".parse().unwrap()).expect("start dns");
        let client = UdpSocket::bind("127.0.0.1:0").unwrap();
        client
            .set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        let mut truncated = query(1, "api.example.internal", A);
        truncated.truncate(20);
        for msg in [&truncated[..], &[0u8; 5][..]] {
            client.send_to(msg, server.addr()).unwrap();
        }
        let mut buf = [0u8; 512];
        assert!(client.recv(&mut buf).is_err());
        assert_eq!(server.count(), 0);
    }

    #[test]
    fn rates_per_window() {
        let t0 = Instant::now();
        let at = |ms: u64| Query {
            at: t0 + Duration::from_millis(ms),
            name: "x".to_owned(),
            qtype: A,
            tcp: false,
        };
        let queries: Vec<Query> = [0, 100, 900, 1000, 1500, 1950, 3100]
            .into_iter()
            .map(at)
            .collect();
        assert_eq!(
            per_second(&queries, t0, t0 + Duration::from_millis(3500)),
            [3, 3, 0, 1]
        );
        // Every window of one second ending at a query, (t - 1 s, t], holds three at most.
        assert_eq!(max_per_second(&queries), 3);
        assert_eq!(max_in_window(&queries, Duration::from_millis(101)), 2);
        assert!((average_per_second(&queries) - 6.0 / 3.1).abs() < 1e-9);
        assert_eq!(average_per_second(&queries[..1]), 0.0);
    }
}
