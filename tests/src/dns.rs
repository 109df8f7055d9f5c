//! A counting DNS server on loopback: the stand-in for the VPC resolver in tests and
//! benchmarks. It answers from a table the test changes while it runs and records every query
//! it receives, so a test can assert what reached "DNS" (names, types, rate), not what a
//! client meant to send.
//!
//! It answers as Route53's resolver does for the cases that matter here: A records; a CNAME
//! chain followed to the target's A records, all in one answer; NXDOMAIN for an unknown name
//! (or an unknown end of a chain, with the CNAMEs kept); an empty NOERROR for AAAA or any other
//! type of a known name. Names in the drop set get no answer at all (a timeout for the client).
//! Only UDP, one question per message, no EDNS: what a stub resolver or HAProxy sends.

use std::collections::{HashMap, HashSet};
use std::io;
use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
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

/// TTL of every record served (what Route53 gives an alias record).
const TTL: u32 = 60;
/// The longest CNAME chain followed before answering SERVFAIL (a loop in the table).
const MAX_CHAIN: usize = 8;

/// One query the server received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Query {
    pub at: Instant,
    /// The question's name, lower-cased, without the trailing dot.
    pub name: String,
    pub qtype: u16,
}

#[derive(Debug, Default)]
struct Zone {
    a: HashMap<String, Vec<Ipv4Addr>>,
    cname: HashMap<String, String>,
    drop: HashSet<String>,
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
        Ok(DnsServer {
            addr,
            shared,
            stop,
            thread: Some(thread),
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

    /// `name` is a CNAME to `target`. Replaces A records of the same name.
    pub fn cname(&self, name: &str, target: &str) {
        let name = normalise(name);
        let mut zone = self.zone();
        zone.a.remove(&name);
        zone.cname.insert(name, normalise(target));
    }

    /// `name` no longer exists (NXDOMAIN).
    pub fn remove(&self, name: &str) {
        let name = normalise(name);
        let mut zone = self.zone();
        zone.a.remove(&name);
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
        shared.log.lock().expect("dns log lock").push(Query {
            at,
            name: question.name.clone(),
            qtype: question.qtype,
        });
        let reply = {
            let zone = shared.zone.lock().expect("dns zone lock");
            if zone.drop.contains(&question.name) {
                continue;
            }
            answer(&zone, &question, &buf[..len])
        };
        let _ = socket.send_to(&reply, peer);
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
    Some(Question {
        id: u16::from_be_bytes([header[0], header[1]]),
        rd: header[2] & 0x01 != 0,
        name,
        qtype,
        qclass,
        end: pos,
    })
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

fn write_record(out: &mut Vec<u8>, name: &str, rtype: u16, data: &[u8]) {
    write_name(out, name);
    out.extend(rtype.to_be_bytes());
    out.extend(1u16.to_be_bytes()); // class IN
    out.extend(TTL.to_be_bytes());
    out.extend(
        u16::try_from(data.len())
            .expect("short record data")
            .to_be_bytes(),
    );
    out.extend_from_slice(data);
}

/// The reply to `question` (from message `query`) under `zone`.
fn answer(zone: &Zone, question: &Question, query: &[u8]) -> Vec<u8> {
    let mut records = Vec::new();
    let mut count = 0u16;
    let mut name = question.name.clone();
    let mut rcode = 0u8;
    let mut chain = 0;
    while let Some(target) = zone.cname.get(&name) {
        chain += 1;
        if chain > MAX_CHAIN {
            rcode = 2; // SERVFAIL: a loop in the table
            break;
        }
        let mut data = Vec::new();
        write_name(&mut data, target);
        write_record(&mut records, &name, CNAME, &data);
        count += 1;
        if question.qtype == CNAME {
            break;
        }
        name.clone_from(target);
    }
    let chain_answered = question.qtype == CNAME && chain > 0;
    if rcode == 0 && !chain_answered {
        match zone.a.get(&name) {
            Some(addrs) if question.qtype == A => {
                for addr in addrs {
                    write_record(&mut records, &name, A, &addr.octets());
                    count += 1;
                }
            }
            Some(_) => {}
            None => rcode = NXDOMAIN,
        }
    }
    if question.qclass != 1 {
        (records, count, rcode) = (Vec::new(), 0, 5); // REFUSED: only class IN is served
    }

    let mut out = Vec::with_capacity(question.end + records.len());
    out.extend(question.id.to_be_bytes());
    // QR, opcode 0, RD echoed; RA; the response code.
    out.push(0x80 | u8::from(question.rd));
    out.push(0x80 | rcode);
    out.extend(1u16.to_be_bytes()); // one question
    out.extend(count.to_be_bytes());
    out.extend([0, 0, 0, 0]); // no authority, no additional records
    out.extend_from_slice(&query[12..question.end]);
    out.extend(records);
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
