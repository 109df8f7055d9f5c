//! The steady schedule: when the next name due may be asked, and which one.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::Engine;

/// The steady rate's margin over the names' demand.
const DEMAND_HEADROOM: f64 = 1.05;

impl Engine {
    /// The spacing of the steady schedule: a little faster than the names' demand, so that a
    /// name is asked early only when names came due together, never by a backlog that grows
    /// with every jitter.
    pub(super) fn spacing(&self) -> Duration {
        self.pacer.steady(self.names.demand() * DEMAND_HEADROOM)
    }

    /// When the next name may be asked: at its due time, at the cap's pace whatever the
    /// steady spacing (a due time is a deadline: "asked again within REFRESH"), or earlier,
    /// at the steady spacing, when names due together need the time before their due to be
    /// spread over ([`super::names::Names::latest_start`]).
    pub(super) fn next_regular(&mut self, now: Instant) -> Option<Instant> {
        let due = self.names.peek_due()?;
        let deadline = due.max(self.pacer.earliest(true).unwrap_or(due));
        let spacing = self.spacing();
        let early = if spacing <= self.pacer.floor() {
            // Demand at the cap: every slot is the schedule's, no spreading to work out.
            Some(now)
        } else {
            self.names.latest_start(spacing, now)
        };
        let early = early.map(|t| t.max(self.pacer.earliest(false).unwrap_or(t)));
        Some(early.map_or(deadline, |t| t.min(deadline)))
    }

    /// The name to ask at `now`, if one may go: a name due (at the cap's pace; of the account
    /// whose turn it is, when names of several are due), else the name due first when the
    /// spreading asks for it (at the steady spacing, which it is sent with). None until a
    /// later time.
    pub(super) fn pop_regular(&mut self, now: Instant) -> Option<(Arc<str>, Option<Duration>)> {
        let due = self.names.peek_due()?;
        if due <= now {
            return self
                .pacer
                .ready(true, now)
                .then(|| self.names.pop_due(now))
                .flatten()
                .map(|name| (name, None));
        }
        if !self.pacer.ready(false, now) {
            return None;
        }
        let spacing = self.spacing();
        if spacing > self.pacer.floor() && self.names.latest_start(spacing, now)? > now {
            return None;
        }
        let name = self.names.pop_first()?;
        self.names.asked_early(spacing);
        Some((name, Some(spacing)))
    }

    /// A name due of an account whose count is below that of the follow-up at the front of
    /// the urgent queue: it goes first, so that a member's retries (its servers failing) and
    /// chases spend its own share, never another member's refresh. A new turn at the front
    /// (a fill's name, one an apply waits for) keeps its place.
    pub(super) fn due_before_follow_up(&mut self, now: Instant) -> Option<Arc<str>> {
        let front = self.urgent.front().filter(|l| l.is_follow_up())?;
        let account = Arc::clone(&self.names.get(&front.name)?.account);
        self.names.pop_due_below(&account, now)
    }
}
