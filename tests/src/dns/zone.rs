//! The table the server answers from, and the answer it gives a question.

use std::collections::{HashMap, HashSet};
use std::net::{Ipv4Addr, Ipv6Addr};

use super::wire::{self, A, AAAA, CNAME, NXDOMAIN, Question, write_name, write_record};

/// TTL of every record served unless set (what Route53 gives an alias record).
const TTL: u32 = 60;
/// The longest CNAME chain followed before answering SERVFAIL (a loop in the table).
const MAX_CHAIN: usize = 8;

/// Names (lower-cased, without the trailing dot) and what the server answers for them.
#[derive(Debug, Default)]
pub(super) struct Zone {
    pub(super) a: HashMap<String, Vec<Ipv4Addr>>,
    pub(super) aaaa: HashMap<String, Vec<Ipv6Addr>>,
    pub(super) cname: HashMap<String, String>,
    pub(super) ttl: HashMap<String, u32>,
    pub(super) drop: HashSet<String>,
    pub(super) servfail: HashSet<String>,
    pub(super) cname_only: HashSet<String>,
}

/// The reply to `question` (from message `query`) under `zone`, at most `limit` bytes long:
/// the records that fit and the TC bit when they do not all fit.
pub(super) fn answer(zone: &Zone, question: &Question, query: &[u8], limit: usize) -> Vec<u8> {
    // Each record separately, so that a truncated reply holds whole records.
    let mut records: Vec<Vec<u8>> = Vec::new();
    let mut name = question.name.clone();
    let mut rcode = 0u8;
    let mut chain = 0;
    let record = |name: &str, rtype: u16, data: &[u8]| {
        let mut record = Vec::new();
        let ttl = zone.ttl.get(name).copied().unwrap_or(TTL);
        write_record(&mut record, name, rtype, ttl, data);
        record
    };
    let mut stop_at_cname = false;
    while let Some(target) = zone.cname.get(&name) {
        chain += 1;
        if chain > MAX_CHAIN {
            rcode = 2; // SERVFAIL: a loop in the table
            break;
        }
        let mut data = Vec::new();
        write_name(&mut data, target);
        records.push(record(&name, CNAME, &data));
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
            let v4 = v4.into_iter().flatten();
            records.extend(v4.map(|addr| record(&name, A, &addr.octets())));
        } else if question.qtype == AAAA {
            let v6 = v6.into_iter().flatten();
            records.extend(v6.map(|addr| record(&name, AAAA, &addr.octets())));
        }
    }
    if zone.servfail.contains(&question.name) {
        (records, rcode) = (Vec::new(), 2);
    }
    if question.qclass != 1 {
        (records, rcode) = (Vec::new(), 5); // REFUSED: only class IN is served
    }
    wire::reply(question, query, &records, rcode, limit)
}
