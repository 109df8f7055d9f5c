//! The resolver's decisions, pure: which address a name maps to after an answer, when it is
//! asked again, when a dead address goes, and when the next query may leave. The rules are
//! the ones the module doc of `resolve` states; each has a table test here.

use std::collections::VecDeque;
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// Consecutive final negative answers (NXDOMAIN or no address record) after which an
/// address is dropped, provided they span at least one refresh period.
pub const NEGATIVE_ANSWERS: u32 = 3;

/// The shortest re-ask period is REFRESH / this whatever the TTL (10 s at 50 s): a TTL-0 name
/// costs what 5 ordinary names cost (50 at 1 s); Route53's fastest health checks run every 10 s.
pub const FLOOR_SHARE: u32 = 5;

/// What the timing rules need.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rules {
    /// Every name is asked at least once per this period.
    pub refresh: Duration,
    /// An address no answer confirmed for this long is dropped.
    pub max_stale: Duration,
}

/// The final outcome of one lookup of a name (retries, TCP and CNAME chase done).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Its addresses (sorted), valid for `ttl`.
    Addresses { addrs: Vec<IpAddr>, ttl: Duration },
    /// A final answer without an address: NXDOMAIN, or neither A nor AAAA.
    Negative,
    /// No answer about the name: time-outs, SERVFAIL, REFUSED, a broken chain.
    Unanswered,
}

/// What is known about one name.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NameState {
    /// The address in the map, if any.
    pub address: Option<IpAddr>,
    /// When an answer last confirmed an address (or the address was loaded from the file).
    pub confirmed: Option<Instant>,
    /// Consecutive final negative answers, and when the first of them came.
    pub negatives: u32,
    pub first_negative: Option<Instant>,
}

/// What settling an outcome changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settled {
    pub before: Option<IpAddr>,
    pub after: Option<IpAddr>,
    /// Ask the name again after this long.
    pub next: Duration,
    /// Why the address was dropped, when it was.
    pub dropped: Option<Drop>,
}

/// Why an address left the map.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Drop {
    /// [`NEGATIVE_ANSWERS`] negative answers over at least one refresh period.
    Negative,
    /// No answer confirmed it for `max_stale`.
    Stale,
}

/// The map value among `addrs` (sorted): the current one while it is still among them
/// (no flapping between a load balancer's nodes), else the lowest IPv4, else the lowest IPv6.
pub fn choose(current: Option<IpAddr>, addrs: &[IpAddr]) -> Option<IpAddr> {
    if let Some(current) = current.filter(|c| addrs.contains(c)) {
        return Some(current);
    }
    addrs
        .iter()
        .find(|a| a.is_ipv4())
        .or_else(|| addrs.first())
        .copied()
}

/// The re-ask period after an answer with `ttl`: min(TTL, refresh), at least refresh / 5.
pub fn period(ttl: Duration, rules: &Rules) -> Duration {
    ttl.min(rules.refresh).max(rules.refresh / FLOOR_SHARE)
}

/// Applies one final outcome to a name's state at `now`.
pub fn settle(state: &mut NameState, outcome: &Outcome, now: Instant, rules: &Rules) -> Settled {
    let before = state.address;
    let mut dropped = None;
    let next = match outcome {
        Outcome::Addresses { addrs, ttl } => {
            state.address = choose(state.address, addrs);
            state.confirmed = Some(now);
            state.negatives = 0;
            state.first_negative = None;
            period(*ttl, rules)
        }
        Outcome::Negative => {
            state.negatives = state.negatives.saturating_add(1);
            let first = *state.first_negative.get_or_insert(now);
            if state.address.is_some()
                && state.negatives >= NEGATIVE_ANSWERS
                && now.saturating_duration_since(first) >= rules.refresh
            {
                dropped = Some(Drop::Negative);
            }
            rules.refresh
        }
        Outcome::Unanswered => rules.refresh,
    };
    if dropped.is_none() && !matches!(outcome, Outcome::Addresses { .. }) && state.address.is_some()
    {
        let confirmed = *state.confirmed.get_or_insert(now);
        if now.saturating_duration_since(confirmed) >= rules.max_stale {
            dropped = Some(Drop::Stale);
        }
    }
    if dropped.is_some() {
        state.address = None;
    }
    Settled {
        before,
        after: state.address,
        next,
        dropped,
    }
}

/// When queries may leave: evenly at the steady spacing for names that are due, at the cap
/// for urgent ones (new names, retries, TCP fallbacks, CNAME chases), and never more than
/// the cap in any second, whatever the kind. The cap may change ([`Pacer::set_cap`]: the
/// fill's and the steady one); a lower one holds from the query after the change on, counted
/// over the queries already sent.
#[derive(Debug)]
pub struct Pacer {
    max_qps: usize,
    floor: Duration,
    /// The nominal time of the last query: spacing counts from the schedule, not from when a
    /// late wake-up sent it (else every late wake-up would slow the rate for good).
    slot: Option<Instant>,
    next_regular: Option<Instant>,
    /// When the queries of the last second left: the hard cap.
    recent: VecDeque<Instant>,
}

/// The most a late loop may catch up on the schedules (more than the engine's tick).
const CATCH_UP: Duration = Duration::from_millis(100);
const SECOND: Duration = Duration::from_secs(1);
/// The window the cap is counted over: a second and a margin, so that the cap holds by the
/// receiver's clock too, which sees each tick's few datagrams arrive spread over some
/// milliseconds. At saturation the rate is the cap less 2.5%.
const WINDOW: Duration = Duration::from_millis(1025);

impl Pacer {
    pub fn new(max_qps: u32) -> Pacer {
        let max_qps = max_qps.max(1);
        Pacer {
            max_qps: max_qps as usize,
            floor: SECOND / max_qps,
            slot: None,
            next_regular: None,
            recent: VecDeque::with_capacity(max_qps as usize + 1),
        }
    }

    /// The earliest time the next query may leave: `urgent` ones only wait for the cap.
    pub fn earliest(&self, urgent: bool) -> Option<Instant> {
        let last = self.slot.map(|t| t + self.floor);
        // The query `max_qps` places back leaves the window first: then one more may go.
        let window = self
            .recent
            .len()
            .checked_sub(self.max_qps)
            .and_then(|i| self.recent.get(i))
            .map(|t| *t + WINDOW);
        let regular = if urgent { None } else { self.next_regular };
        [last, window, regular].into_iter().flatten().max()
    }

    /// The most queries in any second from now on.
    pub fn set_cap(&mut self, max_qps: u32) {
        let max_qps = max_qps.max(1);
        if max_qps as usize != self.max_qps {
            self.max_qps = max_qps as usize;
            self.floor = SECOND / max_qps;
        }
    }

    /// The spacing of the cap in force: the shortest between two queries.
    pub fn floor(&self) -> Duration {
        self.floor
    }

    /// The cap in force.
    pub fn cap(&self) -> u32 {
        u32::try_from(self.max_qps).unwrap_or(u32::MAX)
    }

    /// Whether a query may leave at `now`.
    pub fn ready(&self, urgent: bool, now: Instant) -> bool {
        self.earliest(urgent).is_none_or(|t| t <= now)
    }

    /// Records a query sent at `now`; `steady` (for a regular one) is the spacing of the
    /// steady schedule.
    pub fn sent(&mut self, now: Instant, steady: Option<Duration>) {
        while self.recent.front().is_some_and(|t| *t + WINDOW <= now) {
            self.recent.pop_front();
        }
        self.recent.push_back(now);
        // The slots this query filled on the nominal schedules; a loop that woke late
        // catches up on at most CATCH_UP of them (never past the cap: `recent`).
        let late_floor = now.checked_sub(CATCH_UP).unwrap_or(now);
        self.slot = Some(self.slot.map_or(now, |t| (t + self.floor).max(late_floor)));
        if let Some(steady) = steady {
            let slot = self.next_regular.map_or(now, |t| t.max(late_floor));
            self.next_regular = Some(slot + steady);
        }
    }

    /// The spacing of the steady schedule for a demand of `per_second` queries per second.
    pub fn steady(&self, per_second: f64) -> Duration {
        if per_second <= 0.0 || !per_second.is_finite() {
            return self.floor;
        }
        Duration::from_secs_f64(1.0 / per_second).max(self.floor)
    }
}

/// The fill's pace: up to the fill cap while names are new to the address map, halved
/// (down to the steady cap) in a second whose time-outs climb, since the VPC resolver drops
/// what exceeds its budget rather than refusing it; won back a step each second without a
/// time-out. A time-out is no answer, never a negative one ([`Outcome::Unanswered`]).
#[derive(Debug, Clone)]
pub struct FillPace {
    steady: u32,
    fill: u32,
    rate: u32,
    /// The second being counted: its start, the queries sent and the time-outs seen in it.
    since: Instant,
    sent: u32,
    timeouts: u32,
    /// No judgement before then: the time-outs of queries sent at the old rate still come.
    hold_until: Instant,
}

/// A change of the fill's pace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PaceChange {
    /// `timeouts` of the second's queries went unanswered (`sent` left in it).
    BackedOff {
        from: u32,
        to: u32,
        timeouts: u32,
        sent: u32,
    },
    /// A second without a time-out.
    Recovered { from: u32, to: u32 },
}

/// Time-outs climb when a second has at least this many ...
const CLIMB_TIMEOUTS: u32 = 5;
/// ... and they are more than this share of the queries sent in it.
const CLIMB_SHARE: f64 = 0.05;
/// Seconds without a time-out from the steady cap back to the fill cap.
const RECOVERY_SECONDS: u32 = 16;

impl FillPace {
    /// `steady` and `fill` queries a second (`fill` at least `steady`), counted from `now`.
    pub fn new(steady: u32, fill: u32, now: Instant) -> FillPace {
        let fill = fill.max(steady);
        FillPace {
            steady,
            fill,
            rate: fill,
            since: now,
            sent: 0,
            timeouts: 0,
            hold_until: now,
        }
    }

    /// The fill's cap now.
    pub fn rate(&self) -> u32 {
        self.rate
    }

    pub fn sent(&mut self) {
        self.sent = self.sent.saturating_add(1);
    }

    pub fn timed_out(&mut self) {
        self.timeouts = self.timeouts.saturating_add(1);
    }

    /// Judges the fill's second that ended by `now`, if one did; `timeout` is how long a query
    /// waits for its answer (the time-outs of a faster pace come in that much later).
    pub fn judge(&mut self, now: Instant, timeout: Duration) -> Option<PaceChange> {
        let (sent, timeouts) = self.end_second(now)?;
        let from = self.rate;
        let climbing =
            timeouts >= CLIMB_TIMEOUTS && f64::from(timeouts) > f64::from(sent) * CLIMB_SHARE;
        if climbing && from > self.steady {
            self.rate = (from / 2).max(self.steady);
            self.hold_until = now + timeout + SECOND;
            return Some(PaceChange::BackedOff {
                from,
                to: self.rate,
                timeouts,
                sent,
            });
        }
        self.recover(timeouts)
    }

    /// Ends the second that ended by `now` outside a fill: its time-outs are the steady
    /// pace's (a resolver outage, say), which the fill's pace does not answer for, so they never
    /// back it off; a second without one still wins back a step.
    pub fn judge_steady(&mut self, now: Instant) -> Option<PaceChange> {
        let (_, timeouts) = self.end_second(now)?;
        self.recover(timeouts)
    }

    /// The counts of the second that ended by `now`, and a new second begun; none when it has
    /// not ended, or while no judgement is due.
    fn end_second(&mut self, now: Instant) -> Option<(u32, u32)> {
        if now < self.since + SECOND {
            return None;
        }
        let counts = (
            std::mem::take(&mut self.sent),
            std::mem::take(&mut self.timeouts),
        );
        self.since = now;
        (now >= self.hold_until).then_some(counts)
    }

    /// A step back toward the fill cap after a second without a time-out.
    fn recover(&mut self, timeouts: u32) -> Option<PaceChange> {
        let from = self.rate;
        if timeouts == 0 && from < self.fill {
            let step = ((self.fill - self.steady) / RECOVERY_SECONDS).max(1);
            self.rate = from.saturating_add(step).min(self.fill);
            return Some(PaceChange::Recovered {
                from,
                to: self.rate,
            });
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().expect("an address")
    }

    #[test]
    fn the_map_value_is_stable_then_lowest_ipv4_then_ipv6() {
        let check = |current: Option<&str>, addrs: &[&str], expected: Option<&str>| {
            let mut addrs: Vec<IpAddr> = addrs.iter().map(|a| ip(a)).collect();
            addrs.sort();
            assert_eq!(
                choose(current.map(ip), &addrs),
                expected.map(ip),
                "{current:?} {addrs:?}"
            );
        };
        check(None, &["10.0.0.9", "10.0.0.1"], Some("10.0.0.1"));
        check(
            Some("10.0.0.9"),
            &["10.0.0.9", "10.0.0.1"],
            Some("10.0.0.9"),
        );
        check(
            Some("10.0.0.5"),
            &["10.0.0.9", "10.0.0.1"],
            Some("10.0.0.1"),
        );
        check(None, &["fd00::2", "fd00::1"], Some("fd00::1"));
        check(None, &["fd00::1", "10.0.0.3"], Some("10.0.0.3"));
        check(Some("fd00::1"), &["fd00::1", "10.0.0.3"], Some("fd00::1"));
        check(Some("10.0.0.1"), &[], None);
    }

    const RULES: Rules = Rules {
        refresh: Duration::from_secs(50),
        max_stale: Duration::from_secs(900),
    };

    #[test]
    fn names_are_asked_again_at_min_ttl_refresh() {
        let check = |ttl: u64, expected: u64| {
            assert_eq!(
                period(Duration::from_secs(ttl), &RULES),
                Duration::from_secs(expected),
                "ttl {ttl}"
            );
        };
        check(300, 50);
        check(50, 50);
        check(20, 20);
        // Never more often than a fifth of the refresh period, whatever the TTL.
        check(11, 11);
        check(9, 10);
        check(0, 10);
        let quick = Rules {
            refresh: Duration::from_millis(500),
            ..RULES
        };
        assert_eq!(period(Duration::ZERO, &quick), Duration::from_millis(100));
    }

    /// Plays `steps` (seconds after the start, outcome) on a name that has `10.0.0.1`,
    /// and returns the address after each.
    fn play(steps: &[(u64, Outcome)]) -> Vec<(Option<IpAddr>, Option<Drop>)> {
        let start = Instant::now();
        let mut state = NameState {
            address: Some(ip("10.0.0.1")),
            confirmed: Some(start),
            ..NameState::default()
        };
        steps
            .iter()
            .map(|(at, outcome)| {
                let settled = settle(
                    &mut state,
                    outcome,
                    start + Duration::from_secs(*at),
                    &RULES,
                );
                (settled.after, settled.dropped)
            })
            .collect()
    }

    #[test]
    fn dead_addresses_go_by_the_rules() {
        use Outcome::{Negative, Unanswered};
        let kept = (Some(ip("10.0.0.1")), None);
        let answer = Outcome::Addresses {
            addrs: vec![ip("10.0.0.1")],
            ttl: Duration::from_secs(60),
        };
        // Three negative answers spanning a refresh period drop it; fewer, or faster, do not.
        assert_eq!(
            play(&[(50, Negative), (100, Negative), (150, Negative)]),
            [kept, kept, (None, Some(Drop::Negative))]
        );
        assert_eq!(
            play(&[
                (50, Negative),
                (51, Negative),
                (52, Negative),
                (100, Negative)
            ]),
            [kept, kept, kept, (None, Some(Drop::Negative))]
        );
        // An answer in between starts the count again.
        assert_eq!(
            play(&[
                (50, Negative),
                (100, Negative),
                (150, answer.clone()),
                (200, Negative)
            ]),
            [kept, kept, kept, kept]
        );
        // Time-outs and SERVFAIL keep it up to the stale age, then drop it.
        assert_eq!(
            play(&[(50, Unanswered), (899, Unanswered), (900, Unanswered)]),
            [kept, kept, (None, Some(Drop::Stale))]
        );
        // ... counted from the last answer that confirmed it.
        assert_eq!(
            play(&[
                (800, answer),
                (900, Unanswered),
                (1699, Unanswered),
                (1700, Unanswered)
            ]),
            [kept, kept, kept, (None, Some(Drop::Stale))]
        );
        // Negative answers do not confirm it either.
        assert_eq!(
            play(&[(10, Negative), (900, Negative)]),
            [kept, (None, Some(Drop::Stale))]
        );
    }

    #[test]
    fn the_pacer_holds_the_cap_and_the_steady_spacing() {
        let start = Instant::now();
        let ms = |n: u64| start + Duration::from_millis(n);
        let mut pacer = Pacer::new(4);
        assert!(pacer.ready(false, start));
        // Urgent queries go at the cap's spacing (250 ms at 4/s).
        pacer.sent(start, None);
        assert_eq!(pacer.earliest(true), Some(ms(250)));
        for t in [250, 500, 750] {
            assert!(pacer.ready(true, ms(t)));
            pacer.sent(ms(t), None);
        }
        // Four in the last second: the fifth waits for the first to leave the window.
        assert_eq!(pacer.earliest(true), Some(ms(1025)));
        // Regular queries keep their own, wider, spacing.
        let mut pacer = Pacer::new(100);
        let steady = pacer.steady(2.0);
        assert_eq!(steady, Duration::from_millis(500));
        pacer.sent(start, Some(steady));
        assert_eq!(pacer.earliest(false), Some(ms(500)));
        assert_eq!(pacer.earliest(true), Some(ms(10)));
        assert_eq!(
            pacer.steady(1e6),
            Duration::from_millis(10),
            "never under the cap"
        );
        assert_eq!(pacer.steady(0.0), Duration::from_millis(10));

        // A wake-up 25 ms late sends what the schedule owed (slots 10 and 20 ms), no more.
        let mut pacer = Pacer::new(100);
        pacer.sent(start, None);
        let mut sent = 0;
        while pacer.ready(true, ms(25)) {
            pacer.sent(ms(25), None);
            sent += 1;
        }
        assert_eq!(sent, 2);
        assert_eq!(pacer.earliest(true), Some(ms(30)));
        // ... and never more than the cap in a second, however late.
        let mut pacer = Pacer::new(10);
        let mut sent = 0;
        for t in (0..2000).step_by(250) {
            while pacer.ready(true, ms(t)) {
                pacer.sent(ms(t), None);
                sent += 1;
            }
        }
        assert!(sent <= 20, "{sent} in two seconds at 10/s");
    }

    /// Plays seconds of (queries sent, time-outs) on a fill of 800/s over a steady 200/s
    /// with a 1-s time-out; the rate after each.
    fn fill_rates(seconds: &[(u32, u32)]) -> Vec<u32> {
        let start = Instant::now();
        let mut pace = FillPace::new(200, 800, start);
        seconds
            .iter()
            .enumerate()
            .map(|(i, (sent, timeouts))| {
                (0..*sent).for_each(|_| pace.sent());
                (0..*timeouts).for_each(|_| pace.timed_out());
                pace.judge(start + SECOND * (i as u32 + 1), SECOND);
                pace.rate()
            })
            .collect()
    }

    #[test]
    fn a_fill_backs_off_when_time_outs_climb_and_recovers_slowly() {
        // Clean seconds, or a few time-outs: full pace.
        assert_eq!(fill_rates(&[(800, 0), (800, 4), (800, 30)]), [800; 3]);
        // A climb halves it; then no judgement for a time-out and a second (the old pace's
        // time-outs still arrive), then halved again down to the steady cap, never below.
        assert_eq!(
            fill_rates(&[
                (800, 300),
                (400, 300),
                (400, 100),
                (400, 100),
                (200, 200),
                (200, 200),
                (200, 200)
            ]),
            [400, 400, 200, 200, 200, 200, 200]
        );
        // Back up by 1/16 of the way each clean second, not at once; a second with some
        // time-outs below the climb holds it.
        assert_eq!(
            fill_rates(&[
                (800, 300),
                (400, 0),
                (400, 0),
                (437, 0),
                (474, 0),
                (511, 3),
                (511, 0)
            ]),
            [400, 400, 437, 474, 511, 511, 548]
        );
        // A second that ends without queries but with time-outs is a climb too (the last of a
        // fill's answers never came).
        assert_eq!(fill_rates(&[(0, 50)]), [400]);
    }
}
