//! Every name the engine knows: its address and what the rules know of it (`NameState`),
//! when it is due, its share of the steady rate, whether a turn of it is under way, why it is
//! known at all (the config names it, or it was wanted until some time), and the account its
//! routes belong to, whose share of the queries it is asked in ([`super::shares`]).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hickory_proto::rr::Name;

use super::super::schedule::{self, NameState, Outcome, Rules};
use super::shares::{PLATFORM, Shares};
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
    /// The account whose share it is asked in.
    pub account: Arc<str>,
}

/// How a turn's end changed a name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ended {
    /// The turn brought addresses.
    pub answered: bool,
    /// The name's address changed.
    pub changed: bool,
}

/// The names, their due times in order (by account), and their demand.
#[derive(Debug, Default)]
pub struct Names {
    entries: HashMap<Arc<str>, Entry>,
    /// Due times by account; an entry whose name was asked since, is busy, gone or moved to
    /// another account is stale and skipped.
    shares: Shares,
    /// The account of each name the config's routes name (others are [`PLATFORM`]'s).
    accounts: HashMap<Arc<str>, Arc<str>>,
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
        let account = self.account_of(&name);
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
            account: Arc::clone(&account),
        };
        self.first_pending += usize::from(entry.first_pending);
        if let Some(old) = self.entries.insert(Arc::clone(&name), entry) {
            self.forget(&old);
        }
        if address.is_some() {
            self.shares.push(&account, due, &name);
        }
        Some(name)
    }

    /// The account `name` is asked in.
    fn account_of(&self, name: &str) -> Arc<str> {
        self.accounts
            .get(name)
            .cloned()
            .unwrap_or_else(|| Arc::from(PLATFORM))
    }

    /// The account of each name (the config's); names it leaves out are [`PLATFORM`]'s.
    pub fn set_accounts(&mut self, accounts: &BTreeMap<String, String>) {
        let mut interned: BTreeMap<&str, Arc<str>> = BTreeMap::new();
        self.accounts = accounts
            .iter()
            .map(|(name, account)| {
                let account = interned
                    .entry(account.as_str())
                    .or_insert_with(|| Arc::from(account.as_str()));
                (Arc::from(name.as_str()), Arc::clone(account))
            })
            .collect();
        let mut moved = Vec::new();
        for (name, entry) in &mut self.entries {
            let account = self
                .accounts
                .get(name)
                .cloned()
                .unwrap_or_else(|| Arc::from(PLATFORM));
            if account != entry.account {
                entry.account = Arc::clone(&account);
                if !entry.busy {
                    moved.push((account, entry.due, Arc::clone(name)));
                }
            }
        }
        for (account, due, name) in moved {
            self.shares.push(&account, due, &name);
        }
        let used: BTreeSet<&str> = self.entries.values().map(|e| e.account.as_ref()).collect();
        self.shares.prune(&|account| used.contains(account));
    }

    /// Counts a query of `name` against its account's share.
    pub fn charge(&mut self, name: &str) {
        if let Some(entry) = self.entries.get(name) {
            self.shares.charge(&entry.account);
        }
    }

    /// Queries sent for each account's names since the start.
    pub fn sent_by_account(&self) -> impl Iterator<Item = (&str, u64)> {
        self.shares.sent()
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

    /// The earliest valid due time, dropping stale queue entries on the way.
    pub fn peek_due(&mut self) -> Option<Instant> {
        let entries = &self.entries;
        self.shares
            .peek(&|account, due, name| queued(entries, account, due, name))
    }

    /// The name due first, whether due or not.
    pub fn pop_first(&mut self) -> Option<Arc<str>> {
        let entries = &self.entries;
        self.shares
            .pop_first(&|account, due, name| queued(entries, account, due, name))
    }

    /// A name due at `now` of an account whose count is below `account`'s
    /// ([`Shares::pop_due_below`]).
    pub fn pop_due_below(&mut self, account: &str, now: Instant) -> Option<Arc<str>> {
        let entries = &self.entries;
        self.shares
            .pop_due_below(account, now, &|account, due, name| {
                queued(entries, account, due, name)
            })
    }

    /// A name due at `now`, of the account whose turn it is ([`Shares::pop_due`]).
    pub fn pop_due(&mut self, now: Instant) -> Option<Arc<str>> {
        let entries = &self.entries;
        self.shares.pop_due(now, &|account, due, name| {
            queued(entries, account, due, name)
        })
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
        self.shares.push(&entry.account, entry.due, name);
        Some(Ended { answered, changed })
    }
}

/// Whether the queue entry (`account`, `due`, `name`) stands: the name is not in a turn, was
/// not asked since, and is still the account's.
fn queued(entries: &HashMap<Arc<str>, Entry>, account: &str, due: Instant, name: &str) -> bool {
    entries
        .get(name)
        .is_some_and(|e| !e.busy && e.due == due && *e.account == *account)
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
