//! The resolving engine: every name's state ([`names`]), the lookups in flight ([`lookup`]),
//! the pacer ([`Pacer`]) and the sockets ([`transport`]). The service (`resolve::run`) and
//! the one-shot resolution of an apply drive the same engine, so both hold the same pacing
//! and the same rules.
//!
//! The engine does no I/O itself: [`Engine::poll_send`] hands out the next query the pacer
//! lets leave, and replies come back through [`Engine::on_udp`] and [`Engine::on_tcp`]; the
//! [`Transport`] moves the bytes. A turn's follow-up queries (retries, TCP, CNAME targets,
//! AAAA) are urgent: they go at the cap, before any name merely due, as do names without an
//! address. Names due are asked by their due time while the cap allows; when it does not,
//! each account gets its share ([`shares`]).

mod judged;
mod lookup;
mod names;
mod pace;
mod regular;
pub mod shares;
#[cfg(test)]
mod tests;
mod transport;

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::knobs::Knobs;
use super::schedule::{FillPace, Outcome, Pacer, Rules};
use super::wire::{self, Reply};
use crate::borders::Fences;
use crate::own::Own;
use judged::Judged;
use lookup::{InFlight, Lookup, Next, Pending};
use names::Names;
pub use transport::{TcpDone, Transport};

/// How long a name asked for by an apply (over the control socket, or merged into the map
/// file when no service answered) is kept, and refreshed, whatever the config says.
pub const WANTED_KEEP: Duration = Duration::from_secs(600);

/// The engine's clock: sends, replies and time-outs are handled on ticks this far apart
/// while queries are in flight (a few queries each at the cap), not on a wake-up each.
pub const TICK: Duration = Duration::from_millis(25);

/// A query to send.
#[derive(Debug)]
pub struct Outgoing {
    pub server: SocketAddr,
    pub bytes: Vec<u8>,
    pub via: Via,
}

/// How a query goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    Udp {
        id: u16,
    },
    /// An exchange that answers with `token`, given up after `timeout`.
    Tcp {
        token: u64,
        timeout: Duration,
    },
}

/// Counters of one refresh period, for the cycle line.
#[derive(Debug, Default, Clone, Copy)]
pub struct Stats {
    pub queries: u64,
    pub answered: u64,
    pub changed: u64,
    pub failed: u64,
    /// Queries no answer came to in time (the resolver may drop them; no negative answer).
    pub timeouts: u64,
    /// Times the fill's pace was halved for climbing time-outs.
    pub backoffs: u64,
}

/// Every name, and what is in flight.
#[derive(Debug)]
pub struct Engine {
    knobs: Knobs,
    rules: Rules,
    nameservers: Vec<SocketAddr>,
    names: Names,
    /// Turns to send before any name merely due: follow-ups at the front, new ones behind.
    urgent: VecDeque<Lookup>,
    pacer: Pacer,
    /// The fill's cap: the pacer's while names are new to the map.
    fill: FillPace,
    flight: InFlight,
    rotation: usize,
    /// The map changed since it was last written.
    pub dirty: bool,
    pub stats: Stats,
    /// The same counters since the engine started (the service's figures).
    pub totals: Stats,
    /// When a turn last ended with an answer (an address or a final negative one).
    pub last_answer: Option<Instant>,
    /// Whether to log each change and failure (the service does; `ensure` reports instead).
    pub verbose: bool,
    /// Where the tick grid starts.
    epoch: Instant,
    /// What a name's address is judged by: this proxy's own addresses and names (a loop) and
    /// the borders of the routes that send to it ([`judged`]).
    judged: Judged,
}

/// Where a new turn joins the urgent queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    /// Behind every turn queued: a name new to the map, in the order names came.
    Last,
    /// Before them: a name due now, or one an apply waits for.
    First,
}

impl Engine {
    pub fn new(knobs: Knobs) -> Engine {
        let now = Instant::now();
        Engine {
            knobs,
            rules: Rules {
                refresh: knobs.refresh,
                max_stale: knobs.max_stale,
            },
            nameservers: Vec::new(),
            names: Names::default(),
            urgent: VecDeque::new(),
            pacer: Pacer::new(knobs.max_qps),
            fill: FillPace::new(knobs.max_qps, knobs.fill_qps, now),
            flight: InFlight::default(),
            rotation: 0,
            dirty: false,
            stats: Stats::default(),
            totals: Stats::default(),
            last_answer: None,
            verbose: true,
            epoch: now,
            judged: Judged::default(),
        }
    }

    /// This proxy's own addresses and names from now on (their names are not added: the
    /// caller resolves them like any other).
    pub fn set_own(&mut self, own: Own) {
        self.dirty |= self.judged.set_own(own);
    }

    /// Where the installed config's routes may point from now on ([`crate::borders`]).
    pub fn set_fences(&mut self, fences: Fences) {
        self.dirty |= self.judged.set_fences(fences);
    }

    pub fn set_nameservers(&mut self, nameservers: Vec<SocketAddr>) {
        self.nameservers = nameservers;
    }

    /// How many names the engine keeps.
    pub fn len(&self) -> usize {
        self.names.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// How many names, known without an address, have not ended a turn yet (an answer, or
    /// the turn's tries spent): the first pass over them is not over.
    pub fn first_pending(&self) -> usize {
        self.names.first_pending()
    }

    /// Whether names are new to the map (known without an address, their first turn still
    /// to end): the queries go at the fill's cap then, at the steady cap otherwise.
    pub fn filling(&self) -> bool {
        self.names.first_pending() > 0
    }

    /// The cap in force, in queries per second.
    pub fn pace(&self) -> u32 {
        self.pacer.cap()
    }

    /// The address of `name`, or why it has none.
    pub fn answer(&self, name: &str) -> Result<IpAddr, String> {
        let address = self.names.answer(name)?;
        self.judged.refused(name, address).map_or(Ok(address), Err)
    }

    /// Whether a request of an apply need not wait for `name` any longer: it is known and not
    /// in the middle of a turn, or the installed config names it and its first turn is still
    /// to end (the fill's, behind which an apply would wait for the previous generation's
    /// hosts: it waits only for the hosts new to its own, which [`Engine::want`] puts first).
    pub fn settled(&self, name: &str) -> bool {
        self.names
            .get(name)
            .is_some_and(|e| !e.busy || (e.in_config && e.first_pending))
    }

    /// The map as it should be: every name with an address, sorted, but those that resolve
    /// to this proxy.
    pub fn snapshot(&self) -> BTreeMap<Arc<str>, IpAddr> {
        let mut snapshot = self.names.snapshot();
        snapshot.retain(|name, address| self.judged.refused(name, *address).is_none());
        snapshot
    }

    /// Adds `name`; one without an address starts its turn at once, at the cap. Its key.
    fn add(
        &mut self,
        name: &str,
        address: Option<IpAddr>,
        now: Instant,
        due: Instant,
    ) -> Option<Arc<str>> {
        let name = self
            .names
            .insert(name, address, self.rules.refresh, now, due)?;
        if address.is_none() {
            self.start(&name, Place::Last);
        }
        Some(name)
    }

    fn remove(&mut self, name: &str) {
        self.judged.forget(name);
        if self.names.remove(name) {
            self.dirty = true;
        }
    }

    /// Starts a turn for `name` now, at `place` in the urgent queue.
    fn start(&mut self, name: &Arc<str>, place: Place) {
        let Some(entry) = self.names.get_mut(name) else {
            return;
        };
        if entry.busy {
            return;
        }
        entry.busy = true;
        let lookup = Lookup::new(Arc::clone(name), entry.qname.clone(), self.rotation);
        self.rotation = self.rotation.wrapping_add(1);
        match place {
            Place::Last => self.urgent.push_back(lookup),
            Place::First => self.urgent.push_front(lookup),
        }
    }

    /// Keeps `name` for [`WANTED_KEEP`] from `now` whatever the config says.
    fn keep(&mut self, name: &str, now: Instant) {
        if let Some(entry) = self.names.get_mut(name) {
            entry.wanted_until = Some(now + WANTED_KEEP);
        }
    }

    /// Addresses read from the map file at start: asked again over the first refresh
    /// period, evenly, and kept [`WANTED_KEEP`] even if no config names them (an apply may
    /// have put them there for the config it is about to install).
    pub fn load(&mut self, addresses: &BTreeMap<String, IpAddr>, now: Instant) {
        let n = addresses.len().max(1) as u32;
        for (i, (name, address)) in addresses.iter().enumerate() {
            let offset = self.rules.refresh / n * i as u32;
            if self.add(name, Some(*address), now, now + offset).is_some() {
                self.keep(name, now);
            }
        }
    }

    /// Takes in entries another writer (an `ensure` that found no resolver) put in the file:
    /// unknown names are kept as wanted, known names without an address take it.
    pub fn adopt(&mut self, addresses: &BTreeMap<String, IpAddr>, now: Instant) {
        for (name, address) in addresses {
            match self.names.get_mut(name) {
                Some(entry) if entry.state.address.is_none() => {
                    entry.state.address = Some(*address);
                    entry.state.confirmed = Some(now);
                    self.dirty = true;
                }
                Some(_) => {}
                None => {
                    let due = now + self.rules.refresh;
                    if self.add(name, Some(*address), now, due).is_some() {
                        self.keep(name, now);
                    }
                }
            }
        }
    }

    /// The names the installed config routes to.
    pub fn set_config_names(&mut self, names: &BTreeSet<String>, now: Instant) {
        for name in self.names.mark_config(names, now) {
            self.remove(&name);
        }
        for name in names {
            if self.names.get(name).is_none()
                && self.add(name, None, now, now).is_some()
                && let Some(entry) = self.names.get_mut(name)
            {
                entry.in_config = true;
            }
        }
        self.names.resum_demand();
    }

    /// The account each name's routes belong to (the config's `#@route`/`#@suffix` lines):
    /// each account's names are asked in its share of the queries ([`shares`]); names it
    /// leaves out share as one more account.
    pub fn set_accounts(&mut self, accounts: &BTreeMap<String, String>) {
        self.names.set_accounts(accounts);
    }

    /// Queries sent for each account's names since the start (the platform's own, wanted and
    /// held names under [`shares::PLATFORM`]).
    pub fn sent_by_account(&self) -> impl Iterator<Item = (&str, u64)> {
        self.names.sent_by_account()
    }

    /// Names wanted now (by an apply): resolved first, at the cap, ahead of a fill's names,
    /// unless they have an address; kept for [`WANTED_KEEP`] whatever the config says.
    /// `accounts`: whose routes will send to each, for the names the installed config does
    /// not route yet (judged by them, [`crate::borders`]).
    pub fn want(
        &mut self,
        names: &[String],
        accounts: &BTreeMap<String, BTreeSet<String>>,
        now: Instant,
    ) {
        self.dirty |= self.judged.want_accounts(accounts);
        for name in names {
            match self.names.get(name) {
                Some(entry) => {
                    let idle = entry.state.address.is_none() && !entry.busy;
                    self.keep(name, now);
                    if idle {
                        self.start(&Arc::from(name.as_str()), Place::First);
                    }
                }
                None => {
                    let refresh = self.rules.refresh;
                    if let Some(key) = self.names.insert(name, None, refresh, now, now) {
                        self.keep(name, now);
                        self.start(&key, Place::First);
                    }
                }
            }
        }
    }

    /// Forgets wanted names whose time is up and that the config does not name.
    pub fn expire_wanted(&mut self, now: Instant) {
        for name in self.names.expire_wanted(now) {
            self.remove(&name);
        }
    }

    /// How late the name due first is at `now` (zero when none is overdue).
    pub fn lag(&mut self, now: Instant) -> Duration {
        self.names
            .peek_due()
            .map_or(Duration::ZERO, |due| now.saturating_duration_since(due))
    }

    /// When something must happen next: a query may leave, or one times out.
    pub fn next_wake(&mut self, now: Instant) -> Option<Instant> {
        let send = if self.nameservers.is_empty() {
            None
        } else if !self.urgent.is_empty() {
            Some(self.pacer.earliest(true).unwrap_or(now))
        } else {
            self.next_regular(now)
        };
        let expiry = self.flight.next_deadline();
        // Replies are read on the ticks: while any query is in flight, the next one.
        let replies = self.flight.awaits_udp().then_some(now + TICK);
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
        while let Some(query) = self.poll_send(now) {
            let (server, via) = (query.server, query.via);
            if let Err(err) = transport.send(query) {
                self.send_failed(server, via, &err, now);
            }
        }
    }

    /// The next query the pacer lets leave at `now`, recorded as sent; none until a later
    /// time. Urgent turns first, at the cap; then names due, oldest first, at the steady
    /// spacing.
    pub fn poll_send(&mut self, now: Instant) -> Option<Outgoing> {
        if self.nameservers.is_empty() {
            return None;
        }
        self.set_pace(now);
        loop {
            let steady = if self.urgent.is_empty() {
                let (name, steady) = self.pop_regular(now)?;
                self.start(&name, Place::First);
                steady
            } else if self.pacer.ready(true, now) {
                if let Some(name) = self.due_before_follow_up(now) {
                    self.start(&name, Place::First);
                }
                None
            } else {
                return None;
            };
            let lookup = self.urgent.pop_front()?;
            if let Some(query) = self.dispatch(lookup, now, steady) {
                return Some(query);
            }
        }
    }

    /// The query of `lookup`, recorded as in flight; none when it cannot be written.
    fn dispatch(
        &mut self,
        lookup: Lookup,
        now: Instant,
        steady: Option<Duration>,
    ) -> Option<Outgoing> {
        let server = *self
            .nameservers
            .get(lookup.ns % self.nameservers.len().max(1))?;
        let id = self.flight.fresh_id();
        let bytes = match wire::query(id, &lookup.target, lookup.qtype) {
            Ok(bytes) => bytes,
            Err(why) => {
                let name = Arc::clone(&lookup.name);
                self.finish(&name, &Outcome::Unanswered, Some(why), now);
                return None;
            }
        };
        self.pacer.sent(now, steady);
        self.names.charge(&lookup.name);
        self.fill.sent();
        self.stats.queries += 1;
        self.totals.queries += 1;
        let tcp = lookup.tcp;
        let pending = Pending {
            lookup,
            server,
            deadline: now + self.knobs.timeout,
            id,
        };
        let via = if tcp {
            let timeout = self.knobs.timeout.max(Duration::from_secs(1)) * 2;
            let token = self.flight.add_tcp(pending);
            Via::Tcp { token, timeout }
        } else {
            self.flight.add_udp(pending);
            Via::Udp { id }
        };
        Some(Outgoing { server, bytes, via })
    }

    /// A query handed out by [`Engine::poll_send`] could not be sent.
    pub fn send_failed(
        &mut self,
        server: SocketAddr,
        via: Via,
        err: &std::io::Error,
        now: Instant,
    ) {
        let pending = match via {
            Via::Udp { id } => self.flight.take_udp(id),
            Via::Tcp { token, .. } => self.flight.take_tcp(token),
        };
        if let Some(pending) = pending {
            self.retry(
                pending.lookup,
                format!("send to {server} failed: {err}"),
                now,
            );
        }
    }

    /// Nothing listens at `server`: its queries in flight failed.
    pub fn on_refused(&mut self, server: SocketAddr, now: Instant) {
        for pending in self.flight.take_server(server) {
            self.retry(
                pending.lookup,
                format!("connection refused by {server}"),
                now,
            );
        }
    }

    /// A datagram arrived from `from`.
    pub fn on_udp(&mut self, bytes: &[u8], from: SocketAddr, now: Instant) {
        if let Some((pending, reply)) = self.flight.take_reply(bytes, from) {
            let name = Arc::clone(&pending.lookup.name);
            let next = lookup::after(pending.lookup, reply, pending.server);
            self.then(&name, next, now);
        }
    }

    /// A TCP exchange ended.
    pub fn on_tcp(&mut self, done: TcpDone, now: Instant) {
        let Some(Pending {
            lookup, server, id, ..
        }) = self.flight.take_tcp(done.token)
        else {
            return;
        };
        let bytes = match done.result {
            Ok(bytes) => bytes,
            Err(err) => return self.retry(lookup, format!("TCP to {server}: {err}"), now),
        };
        match wire::interpret(&bytes, id, &lookup.target, lookup.qtype) {
            Ok(Reply::Truncated) => {
                self.retry(lookup, format!("truncated over TCP from {server}"), now);
            }
            Ok(reply) => {
                let name = Arc::clone(&lookup.name);
                let next = lookup::after(lookup, reply, server);
                self.then(&name, next, now);
            }
            Err(err) => self.retry(lookup, format!("TCP from {server}: {err}"), now),
        }
    }

    /// Queries unanswered by their deadline.
    pub fn expire(&mut self, now: Instant) {
        for pending in self.flight.take_expired(now) {
            self.fill.timed_out();
            self.stats.timeouts += 1;
            self.totals.timeouts += 1;
            let why = format!("timeout from {}", pending.server);
            self.retry(pending.lookup, why, now);
        }
    }

    /// A query of `lookup` got no usable answer (`why`).
    fn retry(&mut self, lookup: Lookup, why: String, now: Instant) {
        let name = Arc::clone(&lookup.name);
        let next = lookup::retry(lookup, why);
        self.then(&name, next, now);
    }

    /// Carries on `name`'s turn as `next` says.
    fn then(&mut self, name: &Arc<str>, next: Next, now: Instant) {
        match next {
            Next::Follow(lookup) => self.urgent.push_front(lookup),
            Next::Retry(lookup) => self.urgent.push_back(lookup),
            Next::Finish { outcome, why } => self.finish(name, &outcome, why, now),
        }
    }

    /// The turn of `name` ended with `outcome`.
    fn finish(&mut self, name: &Arc<str>, outcome: &Outcome, why: Option<String>, now: Instant) {
        if let Outcome::Addresses { addrs, .. } = outcome {
            // The proxy's own name moved: the hosts that resolve to it are looked at again.
            self.dirty |= self.judged.own_resolved(name, addrs);
        }
        let verbose = self.verbose;
        let Some(ended) = self
            .names
            .end_turn(name, outcome, why, now, &self.rules, verbose)
        else {
            return;
        };
        if ended.answered {
            self.stats.answered += 1;
            self.totals.answered += 1;
            self.last_answer = Some(now);
        } else {
            self.stats.failed += 1;
            self.totals.failed += 1;
        }
        if ended.changed {
            self.dirty = true;
            self.stats.changed += 1;
            self.totals.changed += 1;
        }
    }
}
