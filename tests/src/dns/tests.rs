//! The server end to end: a client's query over UDP and TCP, the reply parsed back.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpStream, UdpSocket};
use std::time::Duration;

use super::wire::write_name;
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
