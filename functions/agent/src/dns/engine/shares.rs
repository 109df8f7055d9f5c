//! Each member's share of the queries. The names are queued by the account their routes
//! belong to (the config's `#@route`/`#@suffix` lines), each queue in due order, and when
//! names of several accounts are due at once, the account that has had the fewest queries
//! goes next: start-time fair queuing over accounts, one query the unit. Every query counts
//! against its name's account (a turn's retries, TCP fallbacks and CNAME chases, a fill's new
//! names), so a member whose servers fail, or whose TTLs are short, spends its own share:
//! while the budget is contended, each account gets at least the cap divided by the accounts
//! with names due, and an account that asks for less than that is never made late by the
//! others. While it is not contended, every name goes by its due time, as before.
//!
//! Why no crate: the share is of one pacer's slots, decided a query at a time beside the
//! engine's due-time spreading; a fair-queuing crate would bring its own clock and queues.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::sync::Arc;
use std::time::Instant;

/// The account of names no route line names: the proxy's own names, the names an apply
/// wants, the hosts a held route still serves with. It shares as one member more.
pub const PLATFORM: &str = "";

/// How far one account's count may run ahead of the fair clock, in queries: a few turns'
/// worth (a turn is up to 3 tries, more with CNAME chases), so that its retries, which come
/// a timeout or two after the turn began, still count against it; a longer burst (a fill of
/// many new names) is forgotten this far on, so that a member that added many hosts at once
/// waits at most this many rounds of the others after it.
const MAX_LEAD: u64 = 64;

/// The accounts' queues and counts.
#[derive(Debug, Default)]
pub struct Shares {
    queues: BTreeMap<Arc<str>, Queue>,
    /// The start of the last name chosen among accounts due together: an account whose count
    /// is behind it starts from it (an account idle for a while saves no credit).
    clock: u64,
}

/// One account's names by due time (entries whose name was asked since, is in a turn or
/// moved to another account are stale and skipped), and its count.
#[derive(Debug, Default)]
struct Queue {
    due: BinaryHeap<Reverse<(Instant, Arc<str>)>>,
    count: u64,
    /// Queries sent for the account's names since the service started.
    sent: u64,
}

impl Queue {
    /// The earliest valid due time, dropping stale entries on the way: `valid` says whether
    /// an entry (account, due, name) still stands (the name was not asked since, is not in a
    /// turn, and still belongs to the account).
    fn head(
        &mut self,
        account: &str,
        valid: &impl Fn(&str, Instant, &Arc<str>) -> bool,
    ) -> Option<Instant> {
        while let Some(Reverse((due, name))) = self.due.peek() {
            if valid(account, *due, name) {
                return Some(*due);
            }
            self.due.pop();
        }
        None
    }
}

impl Shares {
    /// Queues `name` of `account`, due at `due`.
    pub fn push(&mut self, account: &Arc<str>, due: Instant, name: &Arc<str>) {
        self.queues
            .entry(Arc::clone(account))
            .or_default()
            .due
            .push(Reverse((due, Arc::clone(name))));
    }

    /// The earliest due time of any account, and that account.
    fn first(
        &mut self,
        valid: &impl Fn(&str, Instant, &Arc<str>) -> bool,
    ) -> Option<(Instant, Arc<str>)> {
        let mut first: Option<(Instant, Arc<str>)> = None;
        for (account, queue) in &mut self.queues {
            if let Some(due) = queue.head(account, valid)
                && first.as_ref().is_none_or(|(t, _)| due < *t)
            {
                first = Some((due, Arc::clone(account)));
            }
        }
        first
    }

    /// The earliest due time of any name.
    pub fn peek(&mut self, valid: &impl Fn(&str, Instant, &Arc<str>) -> bool) -> Option<Instant> {
        self.first(valid).map(|(due, _)| due)
    }

    /// The name due first, whether due or not (an early ask of the spreading, which only
    /// uses slots no name due needs).
    pub fn pop_first(
        &mut self,
        valid: &impl Fn(&str, Instant, &Arc<str>) -> bool,
    ) -> Option<Arc<str>> {
        let (_, account) = self.first(valid)?;
        self.pop(&account)
    }

    /// A name due at `now`: the first of the account, among those with a name due, whose
    /// count starts lowest (the earliest due among equals).
    pub fn pop_due(
        &mut self,
        now: Instant,
        valid: &impl Fn(&str, Instant, &Arc<str>) -> bool,
    ) -> Option<Arc<str>> {
        let (start, account) = self.best_due(now, valid)?;
        self.clock = start;
        self.pop(&account)
    }

    /// The same, only when that account's count starts below `account`'s: the follow-up of
    /// `account`'s turn waits for it.
    pub fn pop_due_below(
        &mut self,
        account: &str,
        now: Instant,
        valid: &impl Fn(&str, Instant, &Arc<str>) -> bool,
    ) -> Option<Arc<str>> {
        let (start, best) = self.best_due(now, valid)?;
        let theirs = self.queues.get(account).map_or(0, |q| q.count);
        if start >= theirs.max(self.clock) {
            return None;
        }
        self.clock = start;
        self.pop(&best)
    }

    /// The account whose name due at `now` goes next, and where its count starts.
    fn best_due(
        &mut self,
        now: Instant,
        valid: &impl Fn(&str, Instant, &Arc<str>) -> bool,
    ) -> Option<(u64, Arc<str>)> {
        let clock = self.clock;
        let mut best: Option<(u64, Instant, Arc<str>)> = None;
        for (account, queue) in &mut self.queues {
            let Some(due) = queue.head(account, valid).filter(|due| *due <= now) else {
                continue;
            };
            let start = queue.count.max(clock);
            if best
                .as_ref()
                .is_none_or(|(s, d, _)| (start, due) < (*s, *d))
            {
                best = Some((start, due, Arc::clone(account)));
            }
        }
        best.map(|(start, _, account)| (start, account))
    }

    fn pop(&mut self, account: &str) -> Option<Arc<str>> {
        let queue = self.queues.get_mut(account)?;
        queue.due.pop().map(|Reverse((_, name))| name)
    }

    /// Counts a query of `account` against its share.
    pub fn charge(&mut self, account: &Arc<str>) {
        let clock = self.clock;
        let queue = self.queues.entry(Arc::clone(account)).or_default();
        queue.count = (queue.count.max(clock) + 1).min(clock + MAX_LEAD);
        queue.sent += 1;
    }

    /// Queries sent for each account's names since the start, by account.
    pub fn sent(&self) -> impl Iterator<Item = (&str, u64)> {
        self.queues.iter().map(|(a, q)| (a.as_ref(), q.sent))
    }

    /// Forgets the accounts with no name queued that no name belongs to any longer.
    pub fn prune(&mut self, known: &impl Fn(&str) -> bool) {
        self.queues
            .retain(|account, queue| !queue.due.is_empty() || known(account));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Plays `due` (account, name, seconds from the start) all due by `now`, charging one
    /// query per name and `extra` more to the accounts it names; the order names go in.
    fn order(due: &[(&str, &str, u64)], extra: &[(&str, u64)]) -> Vec<String> {
        let start = Instant::now();
        let mut shares = Shares::default();
        for (account, name, at) in due {
            let account: Arc<str> = Arc::from(*account);
            shares.push(
                &account,
                start + Duration::from_secs(*at),
                &Arc::from(*name),
            );
        }
        for (account, n) in extra {
            (0..*n).for_each(|_| shares.charge(&Arc::from(*account)));
        }
        let now = start + Duration::from_secs(100);
        let valid = |_: &str, _: Instant, _: &Arc<str>| true;
        let mut order = Vec::new();
        while let Some(name) = shares.pop_due(now, &valid) {
            let account = due
                .iter()
                .find(|(_, n, _)| *n == name.as_ref())
                .map_or("", |(a, _, _)| *a);
            shares.charge(&Arc::from(account));
            order.push(name.to_string());
        }
        order
    }

    #[test]
    fn accounts_with_names_due_take_turns() {
        let check = |due: &[(&str, &str, u64)], extra: &[(&str, u64)], expected: &[&str]| {
            assert_eq!(order(due, extra), expected, "{due:?} {extra:?}");
        };
        // B's names came due first, A's later: they alternate, each account in due order.
        check(
            &[
                ("b", "b1", 1),
                ("b", "b2", 2),
                ("b", "b3", 3),
                ("a", "a1", 10),
                ("a", "a2", 11),
            ],
            &[],
            &["b1", "a1", "b2", "a2", "b3"],
        );
        // One account alone goes in due order.
        check(
            &[("a", "a2", 5), ("a", "a1", 4), ("a", "a3", 6)],
            &[],
            &["a1", "a2", "a3"],
        );
        // B's retries counted against it: A goes until it has had as many queries.
        check(
            &[
                ("b", "b1", 1),
                ("b", "b2", 2),
                ("a", "a1", 10),
                ("a", "a2", 11),
            ],
            &[("b", 2)],
            &["a1", "a2", "b1", "b2"],
        );
        // ... but a burst is forgotten past MAX_LEAD.
        check(
            &[("b", "b1", 1), ("a", "a1", 10)],
            &[("b", 1_000)],
            &["a1", "b1"],
        );
    }
}
