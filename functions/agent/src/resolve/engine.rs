//! The resolving engine: every name's state, the lookups in flight, the pacer and the
//! sockets. The daemon (`resolve::run`) and `addresses::ensure`'s fallback drive the same
//! engine, so both hold the same pacing and the same rules.
//!
//! A lookup is one name's turn: its first query, then as needed a retry (next nameserver,
//! up to [`ATTEMPTS`] tries), a TCP query for a truncated answer, a query for a CNAME target
//! the answer did not follow, an AAAA query when there is no A record. Each of those is one
//! query through the pacer; the follow-ups are urgent (they go at the cap, before any name
//! merely due), as are names without an address.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hickory_proto::rr::{Name, RecordType};
use tokio::sync::mpsc;

use super::control::WANTED_KEEP;
use super::dns::{self, Ids, Reply};
use super::knobs::Knobs;
use super::log::log;
use super::schedule::{self, NameState, Outcome, Pacer, Rules};

/// Tries per turn for a name that gets no answer: the first query and two retries.
pub const ATTEMPTS: u8 = 3;
/// The most CNAME targets asked for in one turn (each one more query).
pub const MAX_CHASE: u8 = 8;
/// The engine's clock: sends, replies and time-outs are handled on ticks this far apart
/// while queries are in flight (a few queries each at the cap), not on a wake-up each.
pub const TICK: Duration = Duration::from_millis(25);
/// The steady rate's margin over the names' demand.
const DEMAND_HEADROOM: f64 = 1.05;

/// One name.
#[derive(Debug)]
struct Entry {
    qname: Name,
    state: NameState,
    due: Instant,
    /// The re-ask period its last answer set (its share of the steady rate).
    period: Duration,
    busy: bool,
    in_config: bool,
    wanted_until: Option<Instant>,
    /// The last failure, for the logs (one line per change of kind) and for `ensure`.
    why: Option<String>,
}

/// One name's turn in flight.
#[derive(Debug)]
struct Lookup {
    name: Arc<str>,
    target: Name,
    qtype: RecordType,
    chased: u8,
    attempt: u8,
    ns: usize,
    tcp: bool,
    /// The smallest TTL of the CNAMEs followed so far.
    ttl: u32,
}

#[derive(Debug)]
struct Pending {
    lookup: Lookup,
    server: SocketAddr,
    deadline: Instant,
}

/// The answer of a TCP exchange, back from its task.
#[derive(Debug)]
pub struct TcpDone {
    lookup: Lookup,
    id: u16,
    server: SocketAddr,
    result: std::io::Result<Vec<u8>>,
}

/// The sockets: one connected, non-blocking UDP socket per nameserver, long-lived (no
/// socket per query), read by [`Transport::drain`] on the engine's ticks rather than
/// through the event loop: a wake-up per datagram is what costs CPU at 200 queries a
/// second, not the work. Connected, a socket takes datagrams from its nameserver only, and
/// learns at once when nothing listens there (a retry goes to the next nameserver instead of
/// waiting out a time-out). TCP goes per exchange, in a task.
#[derive(Debug)]
pub struct Transport {
    sockets: HashMap<SocketAddr, std::net::UdpSocket>,
    buf: Vec<u8>,
    tcp_tx: mpsc::UnboundedSender<TcpDone>,
    pub tcp_rx: mpsc::UnboundedReceiver<TcpDone>,
}

impl Default for Transport {
    fn default() -> Transport {
        Transport::new()
    }
}

impl Transport {
    pub fn new() -> Transport {
        let (tcp_tx, tcp_rx) = mpsc::unbounded_channel();
        Transport {
            sockets: HashMap::new(),
            buf: vec![0u8; 65_536],
            tcp_tx,
            tcp_rx,
        }
    }

    /// Opens a socket for each new nameserver and closes those no longer named; the
    /// nameservers it could not open a socket for, with why.
    pub fn set_nameservers(&mut self, nameservers: &[SocketAddr]) -> Vec<(SocketAddr, String)> {
        self.sockets
            .retain(|server, _| nameservers.contains(server));
        let mut failed = Vec::new();
        for server in nameservers {
            if self.sockets.contains_key(server) {
                continue;
            }
            match connect(*server) {
                Ok(socket) => {
                    self.sockets.insert(*server, socket);
                }
                Err(err) => failed.push((*server, err.to_string())),
            }
        }
        failed
    }

    fn send(&self, server: SocketAddr, query: &[u8]) -> std::io::Result<()> {
        match self.sockets.get(&server) {
            Some(socket) => socket.send(query).map(|_| ()),
            None => Err(std::io::Error::other("no socket for it")),
        }
    }

    /// Hands every datagram waiting on the sockets to `engine`.
    pub fn drain(&mut self, engine: &mut Engine, now: Instant) {
        for (server, socket) in &self.sockets {
            loop {
                match socket.recv(&mut self.buf) {
                    Ok(len) => engine.on_udp(&self.buf[..len], *server, now),
                    Err(err) if err.kind() == std::io::ErrorKind::ConnectionRefused => {
                        engine.on_refused(*server, now);
                    }
                    // WouldBlock: nothing more; anything else is no one query's business.
                    Err(_) => break,
                }
            }
        }
    }
}

fn connect(server: SocketAddr) -> std::io::Result<std::net::UdpSocket> {
    let local: SocketAddr = if server.is_ipv4() {
        SocketAddr::from(([0, 0, 0, 0], 0))
    } else {
        SocketAddr::from(([0u16; 8], 0))
    };
    let socket = std::net::UdpSocket::bind(local)?;
    socket.connect(server)?;
    socket.set_nonblocking(true)?;
    Ok(socket)
}

/// Counters of one refresh period, for the cycle line.
#[derive(Debug, Default, Clone, Copy)]
pub struct Stats {
    pub queries: u64,
    pub answered: u64,
    pub changed: u64,
    pub failed: u64,
}

/// Every name, and what is in flight.
#[derive(Debug)]
pub struct Engine {
    knobs: Knobs,
    rules: Rules,
    nameservers: Vec<SocketAddr>,
    names: HashMap<Arc<str>, Entry>,
    due: BinaryHeap<Reverse<(Instant, Arc<str>)>>,
    urgent: VecDeque<Lookup>,
    /// Σ 1/period over the names: the steady rate, in queries per second.
    demand: f64,
    pacer: Pacer,
    outstanding: HashMap<u16, Pending>,
    deadlines: VecDeque<(Instant, u16)>,
    tcp_in_flight: usize,
    ids: Ids,
    rotation: usize,
    /// The map changed since it was last written.
    pub dirty: bool,
    pub stats: Stats,
    /// Whether to log each change and failure (the daemon does; `ensure` reports instead).
    pub verbose: bool,
    /// Where the tick grid starts.
    epoch: Instant,
}

impl Engine {
    pub fn new(knobs: Knobs) -> Engine {
        Engine {
            knobs,
            rules: Rules {
                refresh: knobs.refresh,
                max_stale: knobs.max_stale,
            },
            nameservers: Vec::new(),
            names: HashMap::new(),
            due: BinaryHeap::new(),
            urgent: VecDeque::new(),
            demand: 0.0,
            pacer: Pacer::new(knobs.max_qps),
            outstanding: HashMap::new(),
            deadlines: VecDeque::new(),
            tcp_in_flight: 0,
            ids: Ids::default(),
            rotation: 0,
            dirty: false,
            stats: Stats::default(),
            verbose: true,
            epoch: Instant::now(),
        }
    }

    pub fn set_nameservers(&mut self, nameservers: Vec<SocketAddr>) {
        self.nameservers = nameservers;
    }

    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// The address of `name`, or why it has none.
    pub fn answer(&self, name: &str) -> Result<IpAddr, String> {
        match self.names.get(name) {
            Some(Entry {
                state:
                    NameState {
                        address: Some(address),
                        ..
                    },
                ..
            }) => Ok(*address),
            Some(entry) if entry.busy => Err("still resolving".to_owned()),
            Some(entry) => Err(entry
                .why
                .clone()
                .unwrap_or_else(|| "not asked yet".to_owned())),
            None => Err("not known".to_owned()),
        }
    }

    /// Whether `name` is known and not in the middle of a turn.
    pub fn settled(&self, name: &str) -> bool {
        self.names.get(name).is_some_and(|e| !e.busy)
    }

    /// The map as it should be: every name with an address, sorted.
    pub fn snapshot(&self) -> std::collections::BTreeMap<Arc<str>, IpAddr> {
        self.names
            .iter()
            .filter_map(|(name, e)| e.state.address.map(|a| (Arc::clone(name), a)))
            .collect()
    }

    fn add(&mut self, name: &str, address: Option<IpAddr>, now: Instant, due: Instant) -> bool {
        let Ok(qname) = dns::fqdn(name) else {
            log(format_args!("ignored host name {name:?}"));
            return false;
        };
        let name: Arc<str> = Arc::from(name);
        let period = self.rules.refresh;
        self.demand += 1.0 / period.as_secs_f64();
        let entry = Entry {
            qname,
            state: NameState {
                address,
                confirmed: address.map(|_| now),
                ..NameState::default()
            },
            due,
            period,
            busy: false,
            in_config: false,
            wanted_until: None,
            why: None,
        };
        self.names.insert(Arc::clone(&name), entry);
        if address.is_some() {
            self.due.push(Reverse((due, name)));
        } else {
            self.start(&name, true);
        }
        true
    }

    fn remove(&mut self, name: &str) {
        if let Some(entry) = self.names.remove(name) {
            self.demand -= 1.0 / entry.period.as_secs_f64();
            if entry.state.address.is_some() {
                self.dirty = true;
            }
        }
    }

    /// Starts a turn for `name` now (at the cap when `urgent`).
    fn start(&mut self, name: &Arc<str>, urgent: bool) {
        let Some(entry) = self.names.get_mut(name) else {
            return;
        };
        if entry.busy {
            return;
        }
        entry.busy = true;
        let lookup = Lookup {
            name: Arc::clone(name),
            target: entry.qname.clone(),
            qtype: RecordType::A,
            chased: 0,
            attempt: 0,
            ns: self.rotation,
            tcp: false,
            ttl: u32::MAX,
        };
        self.rotation = self.rotation.wrapping_add(1);
        if urgent {
            self.urgent.push_back(lookup);
        } else {
            self.urgent.push_front(lookup);
        }
    }

    /// Addresses read from the map file at start: asked again over the first refresh
    /// period, evenly, and kept [`WANTED_KEEP`] even if no config names
    /// them (an apply may have put them there for the config it is about to install).
    pub fn load(&mut self, addresses: &std::collections::BTreeMap<String, IpAddr>, now: Instant) {
        let n = addresses.len().max(1) as u32;
        for (i, (name, address)) in addresses.iter().enumerate() {
            let offset = self.rules.refresh / n * i as u32;
            if self.add(name, Some(*address), now, now + offset)
                && let Some(entry) = self.names.get_mut(name.as_str())
            {
                entry.wanted_until = Some(now + WANTED_KEEP);
            }
        }
    }

    /// Takes in entries another writer (an `ensure` that found no resolver) put in the file:
    /// unknown names are kept as wanted, known names without an address take it.
    pub fn adopt(&mut self, addresses: &std::collections::BTreeMap<String, IpAddr>, now: Instant) {
        for (name, address) in addresses {
            match self.names.get_mut(name.as_str()) {
                Some(entry) if entry.state.address.is_none() => {
                    entry.state.address = Some(*address);
                    entry.state.confirmed = Some(now);
                    self.dirty = true;
                }
                Some(_) => {}
                None => {
                    if self.add(name, Some(*address), now, now + self.rules.refresh)
                        && let Some(entry) = self.names.get_mut(name.as_str())
                    {
                        entry.wanted_until = Some(now + WANTED_KEEP);
                    }
                }
            }
        }
    }

    /// The names the installed config routes to; the number of them without an address.
    pub fn set_config_names(&mut self, names: &std::collections::BTreeSet<String>, now: Instant) {
        let gone: Vec<Arc<str>> = self
            .names
            .iter_mut()
            .filter_map(|(name, entry)| {
                entry.in_config = names.contains(name.as_ref());
                let wanted = entry.wanted_until.is_some_and(|t| t > now);
                (!entry.in_config && !wanted).then(|| Arc::clone(name))
            })
            .collect();
        for name in gone {
            self.remove(&name);
        }
        for name in names {
            if !self.names.contains_key(name.as_str())
                && self.add(name, None, now, now)
                && let Some(entry) = self.names.get_mut(name.as_str())
            {
                entry.in_config = true;
            }
        }
        // Start from an exact sum again: additions and removals drift in floating point.
        self.demand = self
            .names
            .values()
            .map(|e| 1.0 / e.period.as_secs_f64())
            .sum();
    }

    /// Names wanted now (by an apply): resolved first, at the cap, unless they have an
    /// address; kept for [`WANTED_KEEP`] whatever the config says.
    pub fn want(&mut self, names: &[String], now: Instant) {
        let until = now + WANTED_KEEP;
        for name in names {
            match self.names.get_mut(name.as_str()) {
                Some(entry) => {
                    entry.wanted_until = Some(until);
                    if entry.state.address.is_none() && !entry.busy {
                        let name: Arc<str> = Arc::from(name.as_str());
                        self.start(&name, true);
                    }
                }
                None => {
                    if self.add(name, None, now, now)
                        && let Some(entry) = self.names.get_mut(name.as_str())
                    {
                        entry.wanted_until = Some(until);
                    }
                }
            }
        }
    }

    /// Forgets wanted names whose time is up and that the config does not name.
    pub fn expire_wanted(&mut self, now: Instant) {
        let gone: Vec<Arc<str>> = self
            .names
            .iter_mut()
            .filter_map(|(name, entry)| {
                let expired = entry.wanted_until.is_some_and(|t| t <= now);
                if expired {
                    entry.wanted_until = None;
                }
                (expired && !entry.in_config && !entry.busy).then(|| Arc::clone(name))
            })
            .collect();
        for name in gone {
            self.remove(&name);
        }
    }

    /// The earliest valid due time, dropping stale heap entries on the way.
    fn peek_due(&mut self) -> Option<Instant> {
        while let Some(Reverse((due, name))) = self.due.peek() {
            match self.names.get(name) {
                Some(entry) if !entry.busy && entry.due == *due => return Some(*due),
                _ => {
                    self.due.pop();
                }
            }
        }
        None
    }

    /// When something must happen next: a query may leave, or one times out.
    pub fn next_wake(&mut self, now: Instant) -> Option<Instant> {
        let send = if self.nameservers.is_empty() {
            None
        } else if !self.urgent.is_empty() {
            Some(self.pacer.earliest(true).unwrap_or(now))
        } else {
            self.peek_due()
                .map(|due| due.max(self.pacer.earliest(false).unwrap_or(due)))
        };
        let expiry = self.deadlines.front().map(|(t, _)| *t);
        // Replies are read on the ticks: while any query is in flight, the next one.
        let replies = (!self.outstanding.is_empty()).then_some(now + TICK);
        let next = [send, expiry, replies].into_iter().flatten().min()?;
        // On the grid: a wake-up serves every send, reply and time-out that came due since.
        let since = next.saturating_duration_since(self.epoch).as_nanos();
        let tick = TICK.as_nanos();
        let ticks = u32::try_from(since.div_ceil(tick)).unwrap_or(u32::MAX);
        Some(self.epoch + TICK * ticks)
    }

    /// One tick: takes in the replies waiting, ends the queries out of time, sends what the
    /// pacer allows.
    pub fn step(&mut self, now: Instant, transport: &mut Transport) {
        transport.drain(self, now);
        self.expire(now);
        self.send_due(now, transport);
    }

    /// Sends what the pacer allows at `now`.
    pub fn send_due(&mut self, now: Instant, transport: &Transport) {
        if self.nameservers.is_empty() {
            return;
        }
        loop {
            if !self.urgent.is_empty() {
                if !self.pacer.ready(true, now) {
                    return;
                }
                if let Some(lookup) = self.urgent.pop_front() {
                    self.dispatch(lookup, now, transport, None);
                }
                continue;
            }
            match self.peek_due() {
                Some(due) if due <= now && self.pacer.ready(false, now) => {}
                _ => return,
            }
            let Some(Reverse((_, name))) = self.due.pop() else {
                return;
            };
            // A little faster than the demand, so that a name comes late only when names
            // came due together, never by a backlog that grows with every jitter.
            let steady = self.pacer.steady(self.demand * DEMAND_HEADROOM);
            self.start(&name, false);
            if let Some(lookup) = self.urgent.pop_front() {
                self.dispatch(lookup, now, transport, Some(steady));
            }
        }
    }

    fn dispatch(
        &mut self,
        lookup: Lookup,
        now: Instant,
        transport: &Transport,
        steady: Option<Duration>,
    ) {
        let Some(server) = self
            .nameservers
            .get(lookup.ns % self.nameservers.len().max(1))
            .copied()
        else {
            return;
        };
        let mut id = self.ids.draw();
        while self.outstanding.contains_key(&id) {
            id = self.ids.draw();
        }
        let query = match dns::query(id, &lookup.target, lookup.qtype) {
            Ok(query) => query,
            Err(why) => {
                self.finish(&lookup.name, &Outcome::Unanswered, Some(why), now);
                return;
            }
        };
        self.pacer.sent(now, steady);
        self.stats.queries += 1;
        if lookup.tcp {
            let tx = transport.tcp_tx.clone();
            let timeout = self.knobs.timeout.max(Duration::from_secs(1)) * 2;
            self.tcp_in_flight += 1;
            tokio::spawn(async move {
                let result = dns::tcp_exchange(server, &query, timeout).await;
                let _ = tx.send(TcpDone {
                    lookup,
                    id,
                    server,
                    result,
                });
            });
            return;
        }
        match transport.send(server, &query) {
            Ok(()) => {
                let deadline = now + self.knobs.timeout;
                self.outstanding.insert(
                    id,
                    Pending {
                        lookup,
                        server,
                        deadline,
                    },
                );
                self.deadlines.push_back((deadline, id));
            }
            Err(err) => self.retry(lookup, format!("send to {server} failed: {err}"), now),
        }
    }

    /// Nothing listens at `server`: its queries in flight failed.
    pub fn on_refused(&mut self, server: SocketAddr, now: Instant) {
        let refused: Vec<u16> = self
            .outstanding
            .iter()
            .filter(|(_, p)| p.server == server)
            .map(|(id, _)| *id)
            .collect();
        for id in refused {
            if let Some(pending) = self.outstanding.remove(&id) {
                let why = format!("connection refused by {server}");
                self.retry(pending.lookup, why, now);
            }
        }
    }

    /// A datagram arrived.
    pub fn on_udp(&mut self, bytes: &[u8], from: SocketAddr, now: Instant) {
        let Some(id) = bytes.get(..2).map(|b| u16::from_be_bytes([b[0], b[1]])) else {
            return;
        };
        let reply = match self.outstanding.get(&id) {
            Some(pending) if pending.server == from => {
                match dns::interpret(bytes, id, &pending.lookup.target, pending.lookup.qtype) {
                    Ok(reply) => reply,
                    Err(_) => return, // not the answer to it: it may still come
                }
            }
            _ => return,
        };
        if let Some(pending) = self.outstanding.remove(&id) {
            self.on_reply(pending.lookup, pending.server, reply, now);
        }
    }

    /// A TCP exchange ended.
    pub fn on_tcp(&mut self, done: TcpDone, now: Instant) {
        self.tcp_in_flight = self.tcp_in_flight.saturating_sub(1);
        let server = done.server;
        match done.result {
            Ok(bytes) => {
                match dns::interpret(&bytes, done.id, &done.lookup.target, done.lookup.qtype) {
                    Ok(Reply::Truncated) => {
                        self.retry(
                            done.lookup,
                            format!("truncated over TCP from {server}"),
                            now,
                        );
                    }
                    Ok(reply) => self.on_reply(done.lookup, server, reply, now),
                    Err(err) => self.retry(done.lookup, format!("TCP from {server}: {err}"), now),
                }
            }
            Err(err) => self.retry(done.lookup, format!("TCP to {server}: {err}"), now),
        }
    }

    fn on_reply(&mut self, mut lookup: Lookup, server: SocketAddr, reply: Reply, now: Instant) {
        match reply {
            Reply::Addresses { addrs, ttl } => {
                let ttl = Duration::from_secs(u64::from(ttl.min(lookup.ttl)));
                self.finish(&lookup.name, &Outcome::Addresses { addrs, ttl }, None, now);
            }
            Reply::Chase { target, ttl } if lookup.chased < MAX_CHASE => {
                lookup.target = target;
                lookup.ttl = lookup.ttl.min(ttl);
                lookup.chased += 1;
                lookup.attempt = 0;
                lookup.tcp = false;
                self.urgent.push_front(lookup);
            }
            Reply::Chase { .. } => {
                let why = format!("CNAME chain longer than {MAX_CHASE} queries");
                self.finish(&lookup.name, &Outcome::Unanswered, Some(why), now);
            }
            Reply::NoData if lookup.qtype == RecordType::A => {
                lookup.qtype = RecordType::AAAA;
                lookup.attempt = 0;
                lookup.tcp = false;
                self.urgent.push_front(lookup);
            }
            Reply::NoData => {
                let why = "no A or AAAA record".to_owned();
                self.finish(&lookup.name, &Outcome::Negative, Some(why), now);
            }
            Reply::NxDomain => {
                self.finish(
                    &lookup.name,
                    &Outcome::Negative,
                    Some("NXDOMAIN".to_owned()),
                    now,
                );
            }
            Reply::Truncated => {
                lookup.tcp = true;
                self.urgent.push_front(lookup);
            }
            Reply::Failure(code) => {
                self.retry(lookup, format!("rcode {code:?} from {server}"), now);
            }
        }
    }

    /// A query of `lookup` got no usable answer: the next nameserver, or the turn ends.
    fn retry(&mut self, mut lookup: Lookup, why: String, now: Instant) {
        lookup.attempt += 1;
        if lookup.attempt < ATTEMPTS {
            lookup.ns = lookup.ns.wrapping_add(1);
            self.urgent.push_back(lookup);
        } else {
            self.finish(&lookup.name, &Outcome::Unanswered, Some(why), now);
        }
    }

    /// Queries unanswered by their deadline.
    pub fn expire(&mut self, now: Instant) {
        while let Some(&(deadline, id)) = self.deadlines.front() {
            if deadline > now {
                return;
            }
            self.deadlines.pop_front();
            // The id may have been answered and reused since: only its own deadline counts.
            if self.outstanding.get(&id).is_some_and(|p| p.deadline <= now)
                && let Some(pending) = self.outstanding.remove(&id)
            {
                let why = format!("timeout from {}", pending.server);
                self.retry(pending.lookup, why, now);
            }
        }
    }

    /// The turn of `name` ended with `outcome`.
    fn finish(&mut self, name: &Arc<str>, outcome: &Outcome, why: Option<String>, now: Instant) {
        let Some(entry) = self.names.get_mut(name) else {
            return;
        };
        entry.busy = false;
        let settled = schedule::settle(&mut entry.state, outcome, now, &self.rules);
        let shown =
            |a: Option<IpAddr>| a.map_or_else(|| "no address".to_owned(), |a| a.to_string());
        if let Outcome::Addresses { .. } = outcome {
            self.stats.answered += 1;
            if entry.why.take().is_some() && self.verbose {
                log(format_args!("{name} answers again"));
            }
        } else {
            self.stats.failed += 1;
            let why = why.unwrap_or_else(|| "no answer".to_owned());
            let kind = why.split_whitespace().next().unwrap_or_default();
            let same = entry
                .why
                .as_deref()
                .and_then(|w| w.split_whitespace().next())
                == Some(kind);
            if self.verbose {
                match settled.dropped {
                    Some(schedule::Drop::Negative) => log(format_args!(
                        "{name}: {why}; dropped {} after {} negative answers over {:.0}s",
                        shown(settled.before),
                        entry.state.negatives,
                        entry
                            .state
                            .first_negative
                            .map_or(0.0, |t| now.saturating_duration_since(t).as_secs_f64())
                    )),
                    Some(schedule::Drop::Stale) => log(format_args!(
                        "{name}: {why}; dropped {}: no answer confirmed it for {:.0}s",
                        shown(settled.before),
                        self.rules.max_stale.as_secs_f64()
                    )),
                    None if !same => log(format_args!(
                        "{name}: {why}; keeping {}",
                        shown(settled.after)
                    )),
                    None => {}
                }
            }
            entry.why = Some(why);
        }
        if settled.before != settled.after {
            self.dirty = true;
            self.stats.changed += 1;
            if self.verbose && settled.dropped.is_none() {
                log(format_args!(
                    "{name} {} -> {}",
                    settled
                        .before
                        .map_or_else(|| "(none)".to_owned(), |a| a.to_string()),
                    shown(settled.after)
                ));
            }
        }
        self.demand += 1.0 / settled.next.as_secs_f64() - 1.0 / entry.period.as_secs_f64();
        entry.period = settled.next;
        entry.due = now + settled.next;
        self.due.push(Reverse((entry.due, Arc::clone(name))));
    }
}
