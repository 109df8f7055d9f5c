//! Every name the engine knows: its address and what the rules know of it (`NameState`),
//! when it is due, its share of the steady rate, whether a turn of it is under way, and why
//! it is known at all (the config names it, or it was wanted until some time).

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, HashMap};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hickory_proto::rr::Name;

use super::super::schedule::{self, NameState, Outcome, Rules};
use crate::log::log;

/// One name.
#[derive(Debug)]
pub struct Entry {
    pub qname: Name,
    pub state: NameState,
    pub due: Instant,
    /// The re-ask period its last answer set (its share of the steady rate).
    pub period: Duration,
    pub busy: bool,
    pub in_config: bool,
    pub wanted_until: Option<Instant>,
    /// The last failure, for the logs (one line per change of kind) and for `ensure`.
    pub why: Option<String>,
    /// Known without an address and no turn of it has ended yet: its first answer, or its
    /// first turn's tries, are still to come.
    pub first_pending: bool,
}

/// How a turn's end changed a name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ended {
    /// The turn brought addresses.
    pub answered: bool,
    /// The name's address changed.
    pub changed: bool,
}

/// The names, their due times in order, and their demand.
#[derive(Debug, Default)]
pub struct Names {
    entries: HashMap<Arc<str>, Entry>,
    /// Due times; an entry whose name was asked since, is busy or gone is stale and skipped.
    due: BinaryHeap<Reverse<(Instant, Arc<str>)>>,
    /// Σ 1/period over the names: the steady rate, in queries per second.
    demand: f64,
    /// Names whose first turn is still to end ([`Entry::first_pending`]).
    first_pending: usize,
    /// The last [`Names::latest_start`] worked out, while it holds.
    spread: Option<Spread>,
}

/// A latest start worked out at `at` for names `spacing` apart.
#[derive(Debug, Clone, Copy)]
struct Spread {
    at: Instant,
    spacing: Duration,
    start: Instant,
}

/// How long a latest start is used before it is worked out again over every name: the work
/// is a sort of the due times, so it is done at most once a second; a bunch of names that
/// came due in between is caught by the next one (and, late, by the deadline itself).
const SPREAD_KEPT: Duration = Duration::from_secs(1);

impl Names {
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn get(&self, name: &str) -> Option<&Entry> {
        self.entries.get(name)
    }

    pub fn get_mut(&mut self, name: &str) -> Option<&mut Entry> {
        self.entries.get_mut(name)
    }

    /// The steady rate the names ask for, in queries per second.
    pub fn demand(&self) -> f64 {
        self.demand
    }

    /// How many names, known without an address, have not ended a turn yet.
    pub fn first_pending(&self) -> usize {
        self.first_pending
    }

    /// Adds `name` (not yet known) with `address`, due at `due` when it has one (without,
    /// its turn starts at once: the caller's); its key, or none for a name DNS cannot ask.
    pub fn insert(
        &mut self,
        name: &str,
        address: Option<IpAddr>,
        period: Duration,
        now: Instant,
        due: Instant,
    ) -> Option<Arc<str>> {
        let Ok(qname) = super::super::wire::fqdn(name) else {
            log(format_args!("ignored host name {name:?}"));
            return None;
        };
        let name: Arc<str> = Arc::from(name);
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
            first_pending: address.is_none(),
        };
        self.first_pending += usize::from(entry.first_pending);
        if let Some(old) = self.entries.insert(Arc::clone(&name), entry) {
            self.forget(&old);
        }
        if address.is_some() {
            self.due.push(Reverse((due, Arc::clone(&name))));
        }
        Some(name)
    }

    /// Forgets `name`; whether it had an address.
    pub fn remove(&mut self, name: &str) -> bool {
        self.entries.remove(name).is_some_and(|entry| {
            self.forget(&entry);
            entry.state.address.is_some()
        })
    }

    /// Takes a removed entry out of the sums.
    fn forget(&mut self, entry: &Entry) {
        self.demand -= 1.0 / entry.period.as_secs_f64();
        self.first_pending -= usize::from(entry.first_pending);
    }

    /// The address of `name`, or why it has none.
    pub fn answer(&self, name: &str) -> Result<IpAddr, String> {
        match self.entries.get(name) {
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

    /// The map as it should be: every name with an address, sorted.
    pub fn snapshot(&self) -> BTreeMap<Arc<str>, IpAddr> {
        self.entries
            .iter()
            .filter_map(|(name, e)| e.state.address.map(|a| (Arc::clone(name), a)))
            .collect()
    }

    /// Marks which names `config` names; the names neither it names nor anyone still wants.
    pub fn mark_config(&mut self, config: &BTreeSet<String>, now: Instant) -> Vec<Arc<str>> {
        self.entries
            .iter_mut()
            .filter_map(|(name, entry)| {
                entry.in_config = config.contains(name.as_ref());
                let wanted = entry.wanted_until.is_some_and(|t| t > now);
                (!entry.in_config && !wanted).then(|| Arc::clone(name))
            })
            .collect()
    }

    /// Ends the wants whose time is up; the names nothing keeps now (and not in a turn).
    pub fn expire_wanted(&mut self, now: Instant) -> Vec<Arc<str>> {
        self.entries
            .iter_mut()
            .filter_map(|(name, entry)| {
                let expired = entry.wanted_until.is_some_and(|t| t <= now);
                if expired {
                    entry.wanted_until = None;
                }
                (expired && !entry.in_config && !entry.busy).then(|| Arc::clone(name))
            })
            .collect()
    }

    /// Starts over from an exact sum: additions and removals drift in floating point.
    pub fn resum_demand(&mut self) {
        self.demand = self
            .entries
            .values()
            .map(|e| 1.0 / e.period.as_secs_f64())
            .sum();
    }

    /// The earliest valid due time, dropping stale heap entries on the way.
    pub fn peek_due(&mut self) -> Option<Instant> {
        while let Some(Reverse((due, name))) = self.due.peek() {
            match self.entries.get(name) {
                Some(entry) if !entry.busy && entry.due == *due => return Some(*due),
                _ => {
                    self.due.pop();
                }
            }
        }
        None
    }

    /// The name due first, whether due or not.
    pub fn pop_first(&mut self) -> Option<Arc<str>> {
        self.peek_due()?;
        self.due.pop().map(|Reverse((_, name))| name)
    }

    /// The latest time the name due first may be asked so that every name is asked by its
    /// due time when queries go `spacing` apart: over the due times in order (the k-th from
    /// 0), the least of `due_k - k * spacing`. Names that came due together (a fill's, a
    /// burst of wanted names) are so spread over the time before their due, never after it.
    /// Worked out at most once per [`SPREAD_KEPT`]; each name asked early moves it on by
    /// `spacing` ([`Names::asked_early`]), which can only be early, never late.
    pub fn latest_start(&mut self, spacing: Duration, now: Instant) -> Option<Instant> {
        let first = self.peek_due()?;
        if let Some(spread) = self
            .spread
            .filter(|s| s.spacing == spacing && now < s.at + SPREAD_KEPT)
        {
            return Some(spread.start.min(first));
        }
        let mut dues: Vec<Instant> = self
            .entries
            .values()
            .filter(|e| !e.busy)
            .map(|e| e.due)
            .collect();
        dues.sort_unstable();
        // Seconds from `now`, signed: a bunch far behind its due still orders right.
        let step = spacing.as_secs_f64();
        let least = dues
            .iter()
            .enumerate()
            .map(|(k, due)| signed_secs(*due, now) - step * k as f64)
            .fold(f64::INFINITY, f64::min);
        let start = now + Duration::from_secs_f64(least.clamp(0.0, 1e9));
        self.spread = Some(Spread {
            at: now,
            spacing,
            start,
        });
        Some(start.min(first))
    }

    /// The name due first was asked before its due time, `spacing` after the one before.
    pub fn asked_early(&mut self, spacing: Duration) {
        if let Some(spread) = self.spread.as_mut() {
            spread.start += spacing;
        }
    }

    /// Applies the end of `name`'s turn with `outcome` at `now` and schedules its next;
    /// logs what changed when `verbose`.
    pub fn end_turn(
        &mut self,
        name: &Arc<str>,
        outcome: &Outcome,
        why: Option<String>,
        now: Instant,
        rules: &Rules,
        verbose: bool,
    ) -> Option<Ended> {
        let entry = self.entries.get_mut(name)?;
        entry.busy = false;
        if std::mem::take(&mut entry.first_pending) {
            self.first_pending -= 1;
        }
        let settled = schedule::settle(&mut entry.state, outcome, now, rules);
        let answered = matches!(outcome, Outcome::Addresses { .. });
        if answered {
            if entry.why.take().is_some() && verbose {
                log(format_args!("{name} answers again"));
            }
        } else {
            let why = why.unwrap_or_else(|| "no answer".to_owned());
            if verbose {
                log_failure(name, entry, &settled, &why, now, rules);
            }
            entry.why = Some(why);
        }
        let changed = settled.before != settled.after;
        if changed && verbose && settled.dropped.is_none() {
            log(format_args!(
                "{name} {} -> {}",
                settled
                    .before
                    .map_or_else(|| "(none)".to_owned(), |a| a.to_string()),
                shown(settled.after)
            ));
        }
        self.demand += 1.0 / settled.next.as_secs_f64() - 1.0 / entry.period.as_secs_f64();
        entry.period = settled.next;
        entry.due = now + settled.next;
        self.due.push(Reverse((entry.due, Arc::clone(name))));
        Some(Ended { answered, changed })
    }
}

/// `t - now` in seconds, negative when `t` is past.
fn signed_secs(t: Instant, now: Instant) -> f64 {
    match t.checked_duration_since(now) {
        Some(ahead) => ahead.as_secs_f64(),
        None => -now.saturating_duration_since(t).as_secs_f64(),
    }
}

fn shown(address: Option<IpAddr>) -> String {
    address.map_or_else(|| "no address".to_owned(), |a| a.to_string())
}

/// One line for a failed turn: when the address went, or when the kind of failure changed.
fn log_failure(
    name: &str,
    entry: &Entry,
    settled: &schedule::Settled,
    why: &str,
    now: Instant,
    rules: &Rules,
) {
    let kind = why.split_whitespace().next().unwrap_or_default();
    let same = entry
        .why
        .as_deref()
        .and_then(|w| w.split_whitespace().next())
        == Some(kind);
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
            rules.max_stale.as_secs_f64()
        )),
        None if !same => log(format_args!(
            "{name}: {why}; keeping {}",
            shown(settled.after)
        )),
        None => {}
    }
}
