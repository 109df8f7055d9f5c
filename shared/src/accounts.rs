//! Every member account's health across runs, kept in the manifest (docs/ARCHITECTURE.md,
//! "Member accounts"): `ok`, `failing`, `not_onboarded` or `held`, since when and why.
//!
//! AWS answers AccessDenied alike for a role never created and for one that broke, so history
//! tells them apart: an account whose role was never assumed is `not_onboarded` (it does not
//! fail the run: onboarding is the member StackSet's, and may lag the account's creation); one
//! that worked before and fails now, whatever the error, is `failing` and keeps its last
//! routes.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum State {
    Ok,
    Failing,
    NotOnboarded,
    /// The mass-deletion guard holds its changes (see `publish::holds`).
    Held,
    /// Some of its zones were never read yet: its routes stay as last published until they
    /// are (the reason says how many).
    Pending,
}

impl State {
    /// As the manifest and the reports spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            State::Ok => "ok",
            State::Failing => "failing",
            State::NotOnboarded => "not_onboarded",
            State::Held => "held",
            State::Pending => "pending",
        }
    }
}

/// One account's state in the manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AccountState {
    pub account: String,
    pub state: State,
    /// When the account entered this state (RFC 3339).
    pub since: String,
    /// Why (empty when `ok`).
    #[serde(default)]
    pub reason: String,
}

/// How reading an account ended in this run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Read,
    /// STS refused its role.
    AssumeDenied(String),
    /// Anything else failed (a denied or throttled Route53 call, a zone read).
    Failed(String),
}

/// The run's counts, as the summary and the metrics give them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Counts {
    pub ok: usize,
    pub failing: usize,
    pub not_onboarded: usize,
    pub held: usize,
    pub pending: usize,
}

/// How long a reason may be in the manifest: an SDK error can be long.
const REASON_CHARS: usize = 300;

/// Why the Organization's management account is never onboarded by the member StackSet:
/// the start of its reason when its role was refused.
pub const MANAGEMENT_ACCOUNT: &str = "the management account: no service-managed StackSet \
    deploys here, deploy docs/member-account.yaml by hand (docs/DEPLOY.md, \"The management \
    account\")";

/// Says so in the management account's outcome when its role was refused, before the error
/// (a long reason is cut at its end).
pub fn note_management(outcomes: &mut BTreeMap<String, Outcome>, management: &str) {
    if let Some(Outcome::AssumeDenied(reason)) = outcomes.get_mut(management)
        && !reason.starts_with(MANAGEMENT_ACCOUNT)
    {
        *reason = format!("{MANAGEMENT_ACCOUNT}; {reason}");
    }
}

/// Whether the account's role has never been assumed, as far as the last manifest knows.
pub fn never_assumed(previous: &[AccountState], account: &str) -> bool {
    previous
        .iter()
        .find(|state| state.account == account)
        .is_none_or(|state| state.state == State::NotOnboarded)
}

/// What one run knows of the accounts.
#[derive(Debug, Clone, Copy)]
pub struct Run<'a> {
    /// How reading each account ended (a full sweep).
    pub outcomes: &'a BTreeMap<String, Outcome>,
    /// The guard's holds: account → reason.
    pub holds: &'a BTreeMap<String, String>,
    /// Accounts with zones never read: account → how many.
    pub unread: &'a BTreeMap<String, usize>,
    /// The run's time, RFC 3339.
    pub now: &'a str,
    /// Whether accounts without an outcome keep their last state (a run that read a zone).
    pub carry: bool,
}

/// This run's states: from each account's outcome, its zones never read, the guard's holds,
/// and the last states. Accounts with neither outcome nor hold keep their last state when
/// `carry` (a run that read one zone; a `pending` one turns `ok` once it has no zone left
/// unread); otherwise they are gone from the list. A failure outranks zones never read, and a
/// hold outranks both.
pub fn next(previous: &[AccountState], run: &Run<'_>) -> Vec<AccountState> {
    let last: BTreeMap<&str, &AccountState> = previous
        .iter()
        .map(|state| (state.account.as_str(), state))
        .collect();
    let mut states: BTreeMap<String, AccountState> = BTreeMap::new();
    if run.carry {
        for state in previous {
            states.insert(state.account.clone(), state.clone());
        }
    }
    let mut set = |account: &str, state: State, reason: &str| {
        let state = entered(last.get(account), account, state, reason, run.now);
        states.insert(account.to_owned(), state);
    };
    for state in previous
        .iter()
        .filter(|s| run.carry && s.state == State::Pending)
    {
        set(&state.account, State::Ok, "");
    }
    for (account, count) in run.unread {
        set(account, State::Pending, &unread_reason(*count));
    }
    for (account, outcome) in run.outcomes {
        match outcome {
            Outcome::Read if run.unread.contains_key(account) => {}
            Outcome::Read => set(account, State::Ok, ""),
            Outcome::AssumeDenied(reason) if never_assumed(previous, account) => {
                set(account, State::NotOnboarded, reason);
            }
            Outcome::AssumeDenied(reason) | Outcome::Failed(reason) => {
                set(account, State::Failing, reason);
            }
        }
    }
    for (account, reason) in run.holds {
        set(account, State::Held, reason);
    }
    states.into_values().collect()
}

/// Why an account is `pending`.
fn unread_reason(count: usize) -> String {
    format!(
        "{count} zone(s) never read yet: its routes stay as last published (none for an \
         account new here) until they are, and nothing inside them goes to anybody new"
    )
}

/// The state, since now unless the account was already in it.
fn entered(
    last: Option<&&AccountState>,
    account: &str,
    state: State,
    reason: &str,
    now: &str,
) -> AccountState {
    let since = match last {
        Some(last) if last.state == state => last.since.clone(),
        _ => now.to_owned(),
    };
    AccountState {
        account: account.to_owned(),
        state,
        since,
        reason: crate::excerpt(reason, REASON_CHARS),
    }
}

pub fn counts(states: &[AccountState]) -> Counts {
    let mut counts = Counts::default();
    for state in states {
        match state.state {
            State::Ok => counts.ok += 1,
            State::Failing => counts.failing += 1,
            State::NotOnboarded => counts.not_onboarded += 1,
            State::Held => counts.held += 1,
            State::Pending => counts.pending += 1,
        }
    }
    counts
}

/// How long the longest-failing account has failed, in whole minutes (0 when none fails): the
/// one figure an alarm needs, whatever the number of accounts.
pub fn longest_failing_minutes(states: &[AccountState], now_unix: u64) -> u64 {
    states
        .iter()
        .filter(|state| state.state == State::Failing)
        .filter_map(|state| crate::time::unix_seconds(&state.since))
        .map(|since| now_unix.saturating_sub(since) / 60)
        .max()
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: &str = "2026-11-23T03:00:00Z";
    const T1: &str = "2026-11-23T04:00:00Z";
    const A: &str = "111111111111";

    fn state(state: State, since: &str) -> AccountState {
        AccountState {
            account: A.into(),
            state,
            since: since.into(),
            reason: String::new(),
        }
    }

    /// [`next`] at `T1`.
    fn run(
        previous: &[AccountState],
        outcomes: &BTreeMap<String, Outcome>,
        holds: &BTreeMap<String, String>,
        unread: &BTreeMap<String, usize>,
        carry: bool,
    ) -> Vec<AccountState> {
        let run = Run {
            outcomes,
            holds,
            unread,
            now: T1,
            carry,
        };
        next(previous, &run)
    }

    #[test]
    fn an_account_with_zones_never_read_is_pending_and_says_how_many() {
        use State::*;
        let read = || Some(Outcome::Read);
        let failed = || Some(Outcome::Failed("Throttling".into()));
        // last state, outcome, zones never read, carried (an event run), expected, since
        #[rustfmt::skip]
        let cases = [
            (None, read(), 3, false, Pending, T1),
            (Some(Ok), read(), 3, false, Pending, T1),
            (Some(Pending), read(), 3, false, Pending, T0),
            (Some(Pending), read(), 0, false, Ok, T1),
            (Some(Pending), failed(), 3, false, Failing, T1),
            (Some(Pending), None, 3, true, Pending, T0),
            (Some(Pending), None, 0, true, Ok, T1),
        ];
        for (last, outcome, never_read, carry, expected, since) in cases {
            let what = format!("{last:?} {outcome:?} never_read={never_read} carry={carry}");
            let previous: Vec<AccountState> = last.map(|s| state(s, T0)).into_iter().collect();
            let outcomes = outcome.map(|o| (A.to_owned(), o)).into_iter().collect();
            let unread = (never_read > 0)
                .then(|| (A.to_owned(), never_read))
                .into_iter()
                .collect();
            let next = run(&previous, &outcomes, &BTreeMap::new(), &unread, carry);
            assert_eq!(next.len(), 1, "{what}");
            assert_eq!(
                (next[0].state, next[0].since.as_str()),
                (expected, since),
                "{what}"
            );
            if expected == Pending {
                assert!(
                    next[0].reason.starts_with("3 zone(s) never read"),
                    "{what}: {next:?}"
                );
            }
        }
    }

    /// The state and since after one run from `last`, with `outcome` (or a hold).
    fn check(last: Option<State>, outcome: Option<Outcome>, held: bool) -> (State, String) {
        let previous: Vec<AccountState> = last.map(|s| state(s, T0)).into_iter().collect();
        let outcomes: BTreeMap<String, Outcome> =
            outcome.map(|o| (A.to_owned(), o)).into_iter().collect();
        let holds: BTreeMap<String, String> = held
            .then(|| (A.to_owned(), "drop".to_owned()))
            .into_iter()
            .collect();
        let next = run(&previous, &outcomes, &holds, &BTreeMap::new(), false);
        assert_eq!(next.len(), 1);
        (next[0].state, next[0].since.clone())
    }

    #[test]
    fn history_tells_a_broken_role_from_one_never_created() {
        use State::*;
        let denied = || Some(Outcome::AssumeDenied("AccessDenied".into()));
        let failed = || Some(Outcome::Failed("Throttling".into()));
        let read = || Some(Outcome::Read);
        // last state, outcome, held, expected state, since
        let cases = [
            (None, read(), false, Ok, T1),
            (Some(Ok), read(), false, Ok, T0),
            (None, denied(), false, NotOnboarded, T1),
            (Some(NotOnboarded), denied(), false, NotOnboarded, T0),
            (Some(NotOnboarded), read(), false, Ok, T1),
            (Some(Ok), denied(), false, Failing, T1),
            (Some(Held), denied(), false, Failing, T1),
            (Some(Failing), denied(), false, Failing, T0),
            (Some(Ok), failed(), false, Failing, T1),
            (None, failed(), false, Failing, T1),
            (Some(Failing), failed(), false, Failing, T0),
            (Some(Failing), read(), false, Ok, T1),
            (Some(Ok), read(), true, Held, T1),
            (Some(Held), read(), true, Held, T0),
            (Some(Held), read(), false, Ok, T1),
        ];
        for (last, outcome, held, expected, since) in cases {
            let what = format!("{last:?} {outcome:?} held={held}");
            assert_eq!(
                check(last, outcome, held),
                (expected, since.to_owned()),
                "{what}"
            );
        }
    }

    #[test]
    fn accounts_without_an_outcome_are_carried_or_dropped() {
        let previous = [state(State::Failing, T0)];
        let (outcomes, holds) = (BTreeMap::new(), BTreeMap::new());
        let none = BTreeMap::new();
        assert_eq!(run(&previous, &outcomes, &holds, &none, true), previous);
        assert!(run(&previous, &outcomes, &holds, &none, false).is_empty());
    }

    #[test]
    fn the_management_account_s_refusal_says_how_to_onboard_it() {
        let denied = || Outcome::AssumeDenied("AccessDenied: sts:AssumeRole".into());
        let mut outcomes = BTreeMap::from([
            (A.to_owned(), denied()),
            ("222222222222".to_owned(), denied()),
            (
                "333333333333".to_owned(),
                Outcome::Failed("Throttling".into()),
            ),
        ]);
        let before = outcomes.clone();
        note_management(&mut outcomes, "444444444444");
        assert_eq!(outcomes, before, "not a member: nothing to say");
        note_management(&mut outcomes, "333333333333");
        assert_eq!(
            outcomes, before,
            "read, or failing for another reason: nothing to say"
        );
        note_management(&mut outcomes, A);
        note_management(&mut outcomes, A);
        let expected = format!("{MANAGEMENT_ACCOUNT}; AccessDenied: sts:AssumeRole");
        assert_eq!(outcomes[A], Outcome::AssumeDenied(expected));
        assert_eq!(outcomes["222222222222"], denied());
        let states = run(&[], &outcomes, &BTreeMap::new(), &BTreeMap::new(), false);
        assert_eq!(states[0].state, State::NotOnboarded);
        assert!(
            states[0].reason.starts_with(MANAGEMENT_ACCOUNT),
            "{:?}",
            states[0]
        );
    }

    #[test]
    fn counts_and_the_longest_failure() {
        let states = [
            state(State::Ok, T0),
            state(State::Failing, T0),
            state(State::Failing, T1),
            state(State::NotOnboarded, T0),
            state(State::Held, T0),
            state(State::Pending, T0),
        ];
        let counts = counts(&states);
        assert_eq!(
            (
                counts.ok,
                counts.failing,
                counts.not_onboarded,
                counts.held,
                counts.pending
            ),
            (1, 2, 1, 1, 1)
        );
        let now = crate::time::unix_seconds(T1).unwrap() + 90;
        assert_eq!(longest_failing_minutes(&states, now), 61);
        assert_eq!(longest_failing_minutes(&states[..1], now), 0);
    }
}
