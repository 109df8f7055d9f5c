//! A name's turn and the queries in flight. A turn is its first query, then as needed a
//! retry (the next nameserver, up to [`ATTEMPTS`] tries), a TCP query for a truncated answer,
//! a query for a CNAME target the answer did not follow, an AAAA query when there is no A
//! record: [`after`] says which, from the reply, as a pure function.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hickory_proto::rr::{Name, RecordType};

use super::super::schedule::Outcome;
use super::super::wire::{self, Ids, Reply};

/// Tries per turn for a name that gets no answer: the first query and two retries.
pub const ATTEMPTS: u8 = 3;
/// The most CNAME targets asked for in one turn (each one more query).
pub const MAX_CHASE: u8 = 8;

/// One name's turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lookup {
    pub name: Arc<str>,
    pub target: Name,
    pub qtype: RecordType,
    pub chased: u8,
    pub attempt: u8,
    /// Which nameserver (modulo their number) the next query goes to.
    pub ns: usize,
    pub tcp: bool,
    /// The smallest TTL of the CNAMEs followed so far.
    pub ttl: u32,
}

impl Lookup {
    /// The first query of `name`'s turn: its A records, from nameserver `ns`.
    pub fn new(name: Arc<str>, target: Name, ns: usize) -> Lookup {
        Lookup {
            name,
            target,
            qtype: RecordType::A,
            chased: 0,
            attempt: 0,
            ns,
            tcp: false,
            ttl: u32::MAX,
        }
    }
}

impl Lookup {
    /// Whether this is a follow-up of a turn under way (a retry, a TCP query, a CNAME target,
    /// AAAA), not its first query.
    pub fn is_follow_up(&self) -> bool {
        self.attempt > 0 || self.chased > 0 || self.tcp || self.qtype != RecordType::A
    }
}

/// What comes after a reply or a failed query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next {
    /// A follow-up query of the same turn, before any other (CNAME target, AAAA, TCP).
    Follow(Lookup),
    /// The same query again, to the next nameserver, after the follow-ups waiting.
    Retry(Lookup),
    /// The turn ended; `why` for anything but addresses.
    Finish {
        outcome: Outcome,
        why: Option<String>,
    },
}

/// What comes after `reply` to `lookup`'s query from `server`.
pub fn after(mut lookup: Lookup, reply: Reply, server: SocketAddr) -> Next {
    match reply {
        Reply::Addresses { addrs, ttl } => {
            let ttl = Duration::from_secs(u64::from(ttl.min(lookup.ttl)));
            let outcome = Outcome::Addresses { addrs, ttl };
            Next::Finish { outcome, why: None }
        }
        Reply::Chase { target, ttl } if lookup.chased < MAX_CHASE => {
            lookup.target = target;
            lookup.ttl = lookup.ttl.min(ttl);
            lookup.chased += 1;
            lookup.attempt = 0;
            lookup.tcp = false;
            Next::Follow(lookup)
        }
        Reply::Chase { .. } => finish(
            Outcome::Unanswered,
            format!("CNAME chain longer than {MAX_CHASE} queries"),
        ),
        Reply::NoData if lookup.qtype == RecordType::A => {
            lookup.qtype = RecordType::AAAA;
            lookup.attempt = 0;
            lookup.tcp = false;
            Next::Follow(lookup)
        }
        Reply::NoData => finish(Outcome::Negative, "no A or AAAA record".to_owned()),
        Reply::NxDomain => finish(Outcome::Negative, "NXDOMAIN".to_owned()),
        Reply::Truncated => {
            lookup.tcp = true;
            Next::Follow(lookup)
        }
        Reply::Failure(code) => retry(lookup, format!("rcode {code:?} from {server}")),
    }
}

/// What comes after `lookup`'s query got no usable answer (`why`): the next nameserver, or
/// the end of the turn after [`ATTEMPTS`] tries.
pub fn retry(mut lookup: Lookup, why: String) -> Next {
    lookup.attempt += 1;
    if lookup.attempt < ATTEMPTS {
        lookup.ns = lookup.ns.wrapping_add(1);
        Next::Retry(lookup)
    } else {
        finish(Outcome::Unanswered, why)
    }
}

fn finish(outcome: Outcome, why: String) -> Next {
    Next::Finish {
        outcome,
        why: Some(why),
    }
}

/// A query sent and not answered yet.
#[derive(Debug)]
pub struct Pending {
    pub lookup: Lookup,
    pub server: SocketAddr,
    /// When a UDP query times out (a TCP exchange times out in its task).
    pub deadline: Instant,
    pub id: u16,
}

/// Every query in flight: UDP ones by id, each with its deadline, and TCP exchanges by the
/// token their task answers with.
#[derive(Debug, Default)]
pub struct InFlight {
    udp: HashMap<u16, Pending>,
    deadlines: VecDeque<(Instant, u16)>,
    tcp: HashMap<u64, Pending>,
    next_token: u64,
    ids: Ids,
}

impl InFlight {
    /// An id no UDP query in flight has.
    pub fn fresh_id(&mut self) -> u16 {
        let mut id = self.ids.draw();
        while self.udp.contains_key(&id) {
            id = self.ids.draw();
        }
        id
    }

    /// Records a UDP query (deadlines come in the order queries leave: one timeout for all).
    pub fn add_udp(&mut self, pending: Pending) {
        self.deadlines.push_back((pending.deadline, pending.id));
        self.udp.insert(pending.id, pending);
    }

    /// Records a TCP exchange; its token.
    pub fn add_tcp(&mut self, pending: Pending) -> u64 {
        self.next_token = self.next_token.wrapping_add(1);
        self.tcp.insert(self.next_token, pending);
        self.next_token
    }

    pub fn take_udp(&mut self, id: u16) -> Option<Pending> {
        self.udp.remove(&id)
    }

    pub fn take_tcp(&mut self, token: u64) -> Option<Pending> {
        self.tcp.remove(&token)
    }

    /// The UDP query `bytes` answers, with what it says; none for a stray or foreign packet
    /// (the real answer may still come).
    pub fn take_reply(&mut self, bytes: &[u8], from: SocketAddr) -> Option<(Pending, Reply)> {
        let id = bytes.get(..2).map(|b| u16::from_be_bytes([b[0], b[1]]))?;
        let pending = self.udp.get(&id).filter(|p| p.server == from)?;
        let reply =
            wire::interpret(bytes, id, &pending.lookup.target, pending.lookup.qtype).ok()?;
        self.udp.remove(&id).map(|pending| (pending, reply))
    }

    /// The UDP queries in flight to `server`.
    pub fn take_server(&mut self, server: SocketAddr) -> Vec<Pending> {
        let ids: Vec<u16> = self
            .udp
            .iter()
            .filter(|(_, p)| p.server == server)
            .map(|(id, _)| *id)
            .collect();
        ids.into_iter()
            .filter_map(|id| self.udp.remove(&id))
            .collect()
    }

    /// The UDP queries unanswered by their deadline at `now`.
    pub fn take_expired(&mut self, now: Instant) -> Vec<Pending> {
        let mut expired = Vec::new();
        while let Some(&(deadline, id)) = self.deadlines.front() {
            if deadline > now {
                break;
            }
            self.deadlines.pop_front();
            // The id may have been answered and reused since: only its own deadline counts.
            if self.udp.get(&id).is_some_and(|p| p.deadline <= now)
                && let Some(pending) = self.udp.remove(&id)
            {
                expired.push(pending);
            }
        }
        expired
    }

    /// The earliest UDP deadline (possibly of a query answered since).
    pub fn next_deadline(&self) -> Option<Instant> {
        self.deadlines.front().map(|(t, _)| *t)
    }

    /// Whether a UDP reply may be waiting.
    pub fn awaits_udp(&self) -> bool {
        !self.udp.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hickory_proto::op::ResponseCode;

    const SERVER: &str = "10.0.0.2:53";

    /// `svc.example`'s first query, changed by `change`.
    fn lookup(change: impl FnOnce(&mut Lookup)) -> Lookup {
        let target = wire::fqdn("svc.example").expect("a name");
        let mut lookup = Lookup::new(Arc::from("svc.example"), target, 0);
        change(&mut lookup);
        lookup
    }

    fn check(start: Lookup, reply: Reply, expected: &Next) {
        let case = format!("{reply:?} after {start:?}");
        let server = SERVER.parse().expect("addr");
        assert_eq!(&after(start, reply, server), expected, "{case}");
    }

    fn lb() -> Name {
        wire::fqdn("lb.example").expect("a name")
    }

    #[test]
    fn a_reply_that_says_ask_further_leads_to_a_follow_up() {
        // A CNAME target left out is asked next, from a fresh attempt count, over UDP.
        let chase = Reply::Chase {
            target: lb(),
            ttl: 30,
        };
        let after_chase = lookup(|l| {
            l.target = lb();
            l.ttl = 30;
            l.chased = 1;
        });
        let tried_twice_over_tcp = lookup(|l| {
            l.attempt = 2;
            l.tcp = true;
        });
        check(tried_twice_over_tcp, chase, &Next::Follow(after_chase));
        // No A record: AAAA next.
        let aaaa = lookup(|l| l.qtype = RecordType::AAAA);
        check(lookup(|_| {}), Reply::NoData, &Next::Follow(aaaa));
        // Truncated: the same question over TCP.
        let tcp = lookup(|l| l.tcp = true);
        check(lookup(|_| {}), Reply::Truncated, &Next::Follow(tcp));
        // SERVFAIL: the next nameserver, behind the follow-ups.
        let retry = lookup(|l| {
            l.attempt = 1;
            l.ns = 1;
        });
        let servfail = Reply::Failure(ResponseCode::ServFail);
        check(lookup(|_| {}), servfail, &Next::Retry(retry));
    }

    #[test]
    fn a_final_reply_or_the_last_attempt_ends_the_turn() {
        // Addresses, valid for the smallest TTL of the chain.
        let addrs = vec!["10.0.0.9".parse().expect("ip")];
        let outcome = Outcome::Addresses {
            addrs: addrs.clone(),
            ttl: Duration::from_secs(20),
        };
        let reply = Reply::Addresses { addrs, ttl: 60 };
        let expected = Next::Finish { outcome, why: None };
        check(lookup(|l| l.ttl = 20), reply, &expected);
        // A chain too long to follow, no AAAA record either, NXDOMAIN.
        let chase = Reply::Chase {
            target: lb(),
            ttl: 30,
        };
        let why = "CNAME chain longer than 8 queries".to_owned();
        let long = lookup(|l| l.chased = MAX_CHASE);
        check(long, chase, &finish(Outcome::Unanswered, why));
        let why = "no A or AAAA record".to_owned();
        let aaaa = lookup(|l| l.qtype = RecordType::AAAA);
        check(aaaa, Reply::NoData, &finish(Outcome::Negative, why));
        let why = "NXDOMAIN".to_owned();
        check(
            lookup(|_| {}),
            Reply::NxDomain,
            &finish(Outcome::Negative, why),
        );
        // The last attempt failed.
        let why = format!("rcode ServFail from {SERVER}");
        let last = lookup(|l| l.attempt = ATTEMPTS - 1);
        let servfail = Reply::Failure(ResponseCode::ServFail);
        check(last, servfail, &finish(Outcome::Unanswered, why));
    }
}
