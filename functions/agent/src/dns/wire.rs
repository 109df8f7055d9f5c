//! DNS on the wire: one query message, and what its answer says about a name.
//!
//! Why hickory-proto and not hickory-resolver: the resolver's whole property is that *it*
//! decides when each packet leaves (evenly spread, never more than the cap in any second,
//! retries and TCP fallbacks included) and that it sees every answer's response code.
//! hickory-resolver's `Resolver` hides exactly that: its name-server pool retries, falls back
//! to TCP, chases CNAMEs and races servers on its own, and holds a cache (moka, even at
//! `cache_size` 0) — queries the pacer would never count. Its lower layer, hickory-proto, is
//! what we need and nothing more: it builds a query with EDNS0 and parses any answer
//! (compression, every record type, the extended response code) robustly. The transport is
//! ours: one long-lived UDP socket per address family (no socket per query: that is the CPU
//! budget at 10,000 names) and a TCP exchange for a truncated answer.
//!
//! Only the nameservers of the config's `#@nameserver` lines are asked; nothing reads
//! /etc/resolv.conf.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use hickory_proto::op::{Edns, Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::{Name, RData, RecordType};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The UDP payload size we advertise: the DNS flag day 2020 value, which fits any path MTU
/// without fragmentation. A longer answer comes truncated and is asked again over TCP.
pub const EDNS_PAYLOAD: u16 = 1232;

/// The most CNAMEs followed inside one answer.
const MAX_CHAIN: usize = 16;

/// Query ids that an off-path attacker cannot predict: SipHash under a random key (std's
/// `RandomState`) over a counter, so no extra crate is needed for 16 random bits.
#[derive(Debug)]
pub struct Ids {
    key: RandomState,
    counter: u64,
}

impl Default for Ids {
    fn default() -> Ids {
        Ids {
            key: RandomState::new(),
            counter: 0,
        }
    }
}

impl Ids {
    pub fn draw(&mut self) -> u16 {
        self.counter = self.counter.wrapping_add(1);
        // Truncating to 16 bits is the point: a query id is 16 bits.
        (self.key.hash_one(self.counter) & 0xffff) as u16
    }
}

/// `text` as a fully qualified name (answers carry fully qualified names; hickory compares
/// the flag too).
pub fn fqdn(text: &str) -> Result<Name, String> {
    let mut name = Name::from_ascii(text).map_err(|err| err.to_string())?;
    name.set_fqdn(true);
    Ok(name)
}

/// The query message for `name`/`qtype` with id `id`, recursion desired, EDNS0.
pub fn query(id: u16, name: &Name, qtype: RecordType) -> Result<Vec<u8>, String> {
    let mut message = Message::new(id, MessageType::Query, OpCode::Query);
    message.metadata.recursion_desired = true;
    message.add_query(Query::query(name.clone(), qtype));
    let mut edns = Edns::new();
    edns.set_max_payload(EDNS_PAYLOAD);
    message.set_edns(edns);
    message.to_vec().map_err(|err| err.to_string())
}

/// What an answer says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// Addresses of the asked type at the end of the CNAME chain, with the smallest TTL
    /// along the chain.
    Addresses { addrs: Vec<IpAddr>, ttl: u32 },
    /// The chain ends at a CNAME target whose records the answer does not carry: ask it
    /// (`ttl`: the smallest along the chain so far).
    Chase { target: Name, ttl: u32 },
    /// The name exists, without records of the asked type (NOERROR, no data).
    NoData,
    /// The name does not exist.
    NxDomain,
    /// The answer did not fit (TC bit): ask again over TCP.
    Truncated,
    /// Any other response code (SERVFAIL, REFUSED, ...): not an answer about the name.
    Failure(ResponseCode),
}

/// Why a message is not the answer to our question (it is ignored, as a stray packet).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Foreign {
    #[error("not a DNS message: {0}")]
    Malformed(String),
    #[error("not an answer to our question")]
    Mismatch,
}

/// Reads the answer `bytes` to query `id` for `name`/`qtype`.
pub fn interpret(bytes: &[u8], id: u16, name: &Name, qtype: RecordType) -> Result<Reply, Foreign> {
    let message = Message::from_vec(bytes).map_err(|err| Foreign::Malformed(err.to_string()))?;
    let meta = &message.metadata;
    let ours = meta.id == id
        && meta.message_type == MessageType::Response
        && message.queries.len() == 1
        && message.queries[0].query_type() == qtype
        && message.queries[0].name() == name;
    if !ours {
        return Err(Foreign::Mismatch);
    }
    if meta.truncation {
        return Ok(Reply::Truncated);
    }
    match meta.response_code {
        ResponseCode::NoError => {}
        ResponseCode::NXDomain => return Ok(Reply::NxDomain),
        other => return Ok(Reply::Failure(other)),
    }
    let mut current = name.clone();
    let mut ttl = u32::MAX;
    for _ in 0..=MAX_CHAIN {
        let mut addrs = Vec::new();
        let mut addr_ttl = u32::MAX;
        let mut next = None;
        for record in message.answers.iter().filter(|r| r.name == current) {
            match (&record.data, qtype) {
                (RData::A(a), RecordType::A) => {
                    addrs.push(IpAddr::V4(a.0));
                    addr_ttl = addr_ttl.min(record.ttl);
                }
                (RData::AAAA(aaaa), RecordType::AAAA) => {
                    addrs.push(IpAddr::V6(aaaa.0));
                    addr_ttl = addr_ttl.min(record.ttl);
                }
                (RData::CNAME(target), _) if next.is_none() => {
                    next = Some((target.0.clone(), record.ttl));
                }
                _ => {}
            }
        }
        if !addrs.is_empty() {
            addrs.sort();
            addrs.dedup();
            return Ok(Reply::Addresses {
                addrs,
                ttl: ttl.min(addr_ttl),
            });
        }
        match next {
            Some((target, cname_ttl)) => {
                ttl = ttl.min(cname_ttl);
                current = target;
            }
            None => break,
        }
    }
    let followed = current != *name;
    // An SOA in the authority section marks a negative answer about the end of the chain.
    let negative = message
        .authorities
        .iter()
        .any(|r| r.record_type() == RecordType::SOA);
    if followed && !negative {
        Ok(Reply::Chase {
            target: current,
            ttl,
        })
    } else {
        Ok(Reply::NoData)
    }
}

/// One exchange over TCP (RFC 7766: two-byte length prefix), within `timeout` in all.
pub async fn tcp_exchange(
    server: SocketAddr,
    query: &[u8],
    timeout: Duration,
) -> std::io::Result<Vec<u8>> {
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(server).await?;
        let len = u16::try_from(query.len())
            .map_err(|_| std::io::Error::other("query longer than 65535 bytes"))?;
        let mut framed = Vec::with_capacity(query.len() + 2);
        framed.extend_from_slice(&len.to_be_bytes());
        framed.extend_from_slice(query);
        stream.write_all(&framed).await?;
        let mut prefix = [0u8; 2];
        stream.read_exact(&mut prefix).await?;
        let mut answer = vec![0u8; usize::from(u16::from_be_bytes(prefix))];
        stream.read_exact(&mut answer).await?;
        Ok(answer)
    };
    tokio::time::timeout(timeout, exchange)
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "timed out"))?
}

#[cfg(test)]
mod tests {
    use super::*;
    use hickory_proto::rr::Record;
    use hickory_proto::rr::rdata::{A, AAAA, CNAME, SOA};

    fn name(text: &str) -> Name {
        fqdn(text).expect("a name")
    }

    fn answer(qname: &str, qtype: RecordType, build: impl FnOnce(&mut Message)) -> Vec<u8> {
        let mut message = Message::new(7, MessageType::Response, OpCode::Query);
        message.add_query(Query::query(name(qname), qtype));
        build(&mut message);
        message.to_vec().expect("encodes")
    }

    fn a(owner: &str, ttl: u32, ip: [u8; 4]) -> Record {
        Record::from_rdata(
            name(owner),
            ttl,
            RData::A(A::from(std::net::Ipv4Addr::from(ip))),
        )
    }

    fn cname(owner: &str, ttl: u32, target: &str) -> Record {
        Record::from_rdata(name(owner), ttl, RData::CNAME(CNAME(name(target))))
    }

    fn check(bytes: &[u8], qname: &str, qtype: RecordType, expected: &Result<Reply, Foreign>) {
        assert_eq!(
            &interpret(bytes, 7, &name(qname), qtype),
            expected,
            "{qname}"
        );
    }

    fn aaaa(owner: &str, ttl: u32, ip: &str) -> Record {
        let ip: std::net::Ipv6Addr = ip.parse().expect("an IPv6 address");
        Record::from_rdata(name(owner), ttl, RData::AAAA(AAAA::from(ip)))
    }

    /// The reply of addresses `addrs` (in that order) with `ttl`.
    fn addresses(addrs: &[&str], ttl: u32) -> Result<Reply, Foreign> {
        let addrs = addrs
            .iter()
            .map(|text| text.parse().expect("an address"))
            .collect();
        Ok(Reply::Addresses { addrs, ttl })
    }

    #[test]
    fn answers_are_read_as_the_resolver_needs_them() {
        use RecordType::{A as QA, AAAA as QAAAA};
        let many = answer("svc.example", QA, |m| {
            m.add_answer(a("svc.example", 60, [10, 0, 0, 9]));
            m.add_answer(a("svc.example", 30, [10, 0, 0, 1]));
        });
        check(
            &many,
            "SVC.example",
            QA,
            &addresses(&["10.0.0.1", "10.0.0.9"], 30),
        );
        let chain = answer("p.example", QA, |m| {
            m.add_answer(cname("p.example", 20, "lb.example"));
            m.add_answer(cname("lb.example", 300, "node.example"));
            m.add_answer(a("node.example", 60, [10, 0, 0, 2]));
            m.add_answer(a("other.example", 1, [10, 9, 9, 9]));
        });
        check(&chain, "p.example", QA, &addresses(&["10.0.0.2"], 20));
        let partial = answer("p.example", QA, |m| {
            m.add_answer(cname("p.example", 20, "lb.example"));
        });
        check(
            &partial,
            "p.example",
            QA,
            &Ok(Reply::Chase {
                target: name("lb.example"),
                ttl: 20,
            }),
        );
        let soa = SOA::new(name("example"), name("h.example"), 1, 60, 60, 60, 30);
        let nodata_after_chain = answer("p.example", QA, |m| {
            m.add_answer(cname("p.example", 20, "lb.example"));
            m.add_authority(Record::from_rdata(name("example"), 30, RData::SOA(soa)));
        });
        check(&nodata_after_chain, "p.example", QA, &Ok(Reply::NoData));
        let six = answer("v6.example", QAAAA, |m| {
            m.add_answer(aaaa("v6.example", 5, "fd00::1"));
        });
        check(&six, "v6.example", QAAAA, &addresses(&["fd00::1"], 5));
        check(
            &answer("e.example", QA, |_| {}),
            "e.example",
            QA,
            &Ok(Reply::NoData),
        );
        let nx = answer("gone.example", QA, |m| {
            m.metadata.response_code = ResponseCode::NXDomain;
        });
        check(&nx, "gone.example", QA, &Ok(Reply::NxDomain));
        let fail = answer("x.example", QA, |m| {
            m.metadata.response_code = ResponseCode::ServFail;
        });
        check(
            &fail,
            "x.example",
            QA,
            &Ok(Reply::Failure(ResponseCode::ServFail)),
        );
        let cut = answer("big.example", QA, |m| {
            m.metadata.truncation = true;
            m.add_answer(a("big.example", 60, [10, 0, 0, 3]));
        });
        check(&cut, "big.example", QA, &Ok(Reply::Truncated));
        // Someone else's answer, or garbage, is not ours.
        check(&many, "other.example", QA, &Err(Foreign::Mismatch));
        check(&many, "svc.example", QAAAA, &Err(Foreign::Mismatch));
        assert_eq!(
            interpret(&many, 8, &name("svc.example"), QA),
            Err(Foreign::Mismatch)
        );
        assert!(matches!(
            interpret(&[1, 2, 3], 7, &name("svc.example"), QA),
            Err(Foreign::Malformed(_))
        ));
    }

    #[test]
    fn a_query_carries_edns0_and_recursion_desired() {
        let bytes = query(42, &name("svc.example"), RecordType::A).expect("encodes");
        let message = Message::from_vec(&bytes).expect("decodes");
        assert_eq!(message.metadata.id, 42);
        assert!(message.metadata.recursion_desired);
        assert_eq!(
            message.edns.as_ref().map(Edns::max_payload),
            Some(EDNS_PAYLOAD)
        );
        let mut ids = Ids::default();
        let drawn: std::collections::HashSet<u16> = (0..64).map(|_| ids.draw()).collect();
        assert!(drawn.len() > 50, "ids vary: {drawn:?}");
    }
}
