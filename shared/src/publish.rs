//! Whether a rendered config goes out: publish only on change, and never a sudden mass
//! deletion without `force` (docs/ARCHITECTURE.md, "Safety"); and which generation it carries.
//!
//! The guard works per account ([`holds`]) against the last manifest; [`decide`]'s estate-wide
//! count against the config's header is the guard only when there is no manifest to compare
//! accounts with.

use std::collections::{BTreeMap, BTreeSet};

/// What the current config in S3 says about itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Current<'a> {
    pub sha256: &'a str,
    pub rules: usize,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// The body is byte-identical to the current one: write nothing, so S3 fires no event
    /// and the fleet does not reload.
    Unchanged,
    Publish,
    /// Refused by the mass-deletion guard; the reason is for the summary.
    Blocked(String),
}

/// The mass-deletion guard: how far the rule count may fall, and whether this run overrides it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Guard {
    pub max_drop_percent: u8,
    /// `{"force": true}`: publish whatever the drop.
    pub force: bool,
}

/// Decides from the current config (if any), the sha256 of the candidate's body rendered
/// with the *current* generation (so an equal body means nothing changed), and the guard.
pub fn decide(
    current: Option<Current<'_>>,
    candidate_sha256: &str,
    rules: usize,
    guard: Guard,
) -> Decision {
    let Guard {
        max_drop_percent,
        force,
    } = guard;
    let Some(current) = current else {
        return Decision::Publish;
    };
    if current.sha256 == candidate_sha256 {
        return Decision::Unchanged;
    }
    if force || rules >= current.rules {
        return Decision::Publish;
    }
    let dropped = current.rules - rules;
    // dropped / current > max / 100, in integers.
    let too_many = dropped * 100 > usize::from(max_drop_percent) * current.rules;
    if rules == 0 || too_many {
        return Decision::Blocked(format!(
            "refusing to publish: the rule count would drop from {} to {rules} ({}%), more than \
             MAX_RULE_DROP_PERCENT={max_drop_percent}%{}; check Route53 and the warnings, then \
             invoke with {{\"force\": true}} if this is intended",
            current.rules,
            dropped * 100 / current.rules,
            if rules == 0 { " and to zero" } else { "" },
        ));
    }
    Decision::Publish
}

/// `force` of a manual run: nothing, everything, or these accounts' held changes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Force {
    #[default]
    None,
    All,
    Accounts(BTreeSet<String>),
}

impl Force {
    pub fn releases(&self, account: &str) -> bool {
        match self {
            Force::None => false,
            Force::All => true,
            Force::Accounts(accounts) => accounts.contains(account),
        }
    }
}

/// An account whose routes would fall beyond the threshold: its deletions, and its
/// additions with them, wait; every other account publishes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hold {
    pub account: String,
    pub before: usize,
    pub after: usize,
    pub max_drop_percent: u8,
}

impl std::fmt::Display for Hold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let Hold {
            account,
            before,
            after,
            max_drop_percent,
        } = self;
        write!(
            f,
            "holding account {account}: its routes would drop from {before} to {after} ({}%), \
             more than MAX_RULE_DROP_PERCENT={max_drop_percent}%{}; its last published routes \
             stay (additions in it wait too) while every other account publishes; check its \
             Route53 and the warnings, then invoke with {{\"force\": \"{account}\"}} if this is \
             intended",
            (before - after) * 100 / before,
            if *after == 0 { " and to zero" } else { "" },
        )
    }
}

/// The per-account mass-deletion guard: each account's route count before (the last
/// manifest) and after (this run), by account. An account missing from `after` has none left
/// (it left the Organization's units, or lost every zone).
pub fn holds(
    before: &BTreeMap<String, usize>,
    after: &BTreeMap<String, usize>,
    max_drop_percent: u8,
    force: &Force,
) -> Vec<Hold> {
    before
        .iter()
        .filter(|(account, before)| **before > 0 && !force.releases(account))
        .filter_map(|(account, &before)| {
            let after = after.get(account).copied().unwrap_or(0);
            let dropped = before.saturating_sub(after);
            let too_many = dropped * 100 > usize::from(max_drop_percent) * before;
            (after == 0 || too_many).then(|| Hold {
                account: account.clone(),
                before,
                after,
                max_drop_percent,
            })
        })
        .collect()
}

/// The generation of the next config: one more than the highest generation published, or the
/// publish time in Unix seconds, whichever is larger.
///
/// The fleet installs only generations newer than the one it runs. A counter alone restarts
/// at 1 whenever the history it counts from is gone (a new stack, another `CONFIG_KEY`, an
/// emptied bucket), and the fleet would skip every config until the count caught up. The clock
/// carries on across such resets: every earlier generation was at most its own publish time
/// (or a small counter), so "now" is above them all. The `+ 1` keeps two publishes within
/// one second, or under a clock that is behind, apart.
pub fn next_generation(published: u64, now_unix_secs: u64) -> u64 {
    published.saturating_add(1).max(now_unix_secs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(current: Option<(&str, usize)>, sha: &str, rules: usize, force: bool) -> String {
        let current = current.map(|(sha256, rules)| Current { sha256, rules });
        let guard = Guard {
            max_drop_percent: 50,
            force,
        };
        match decide(current, sha, rules, guard) {
            Decision::Unchanged => "unchanged".into(),
            Decision::Publish => "publish".into(),
            Decision::Blocked(_) => "blocked".into(),
        }
    }

    /// current (sha, rules), candidate sha, new rules, force, expected decision.
    type Case = (
        Option<(&'static str, usize)>,
        &'static str,
        usize,
        bool,
        &'static str,
    );

    #[test]
    fn table() {
        let cases: &[Case] = &[
            (None, "a", 0, false, "publish"),
            (None, "a", 10, false, "publish"),
            (Some(("a", 10)), "a", 10, false, "unchanged"),
            (Some(("a", 10)), "a", 10, true, "unchanged"),
            (Some(("a", 10)), "b", 12, false, "publish"),
            (Some(("a", 10)), "b", 5, false, "publish"), // exactly 50 %: allowed
            (Some(("a", 10)), "b", 4, false, "blocked"), // 60 %
            (Some(("a", 10)), "b", 4, true, "publish"),
            (Some(("a", 1)), "b", 0, false, "blocked"), // to zero
            (Some(("a", 1)), "b", 0, true, "publish"),
            (Some(("a", 0)), "b", 0, false, "publish"), // nothing to lose
        ];
        for (current, sha, rules, force, expected) in cases {
            assert_eq!(
                check(*current, sha, *rules, *force),
                *expected,
                "{current:?} {sha} {rules} {force}"
            );
        }
    }

    #[test]
    fn blocked_says_why_and_how_to_override() {
        let Decision::Blocked(reason) = decide(
            Some(Current {
                sha256: "a",
                rules: 10,
            }),
            "b",
            2,
            Guard {
                max_drop_percent: 50,
                force: false,
            },
        ) else {
            panic!("expected blocked");
        };
        assert!(reason.contains("from 10 to 2 (80%)"), "{reason}");
        assert!(reason.contains("\"force\": true"), "{reason}");
    }

    #[test]
    fn the_guard_holds_only_the_accounts_that_drop_too_far() {
        let counts = |pairs: &[(&str, usize)]| -> BTreeMap<String, usize> {
            pairs.iter().map(|(a, n)| ((*a).to_owned(), *n)).collect()
        };
        let before = counts(&[("a", 10), ("b", 10), ("c", 1), ("d", 0), ("e", 4)]);
        // a loses 60 %, b exactly 50 %, c goes to zero, d had nothing, e left the listing.
        let after = counts(&[("a", 4), ("b", 5), ("c", 0), ("d", 0), ("f", 100)]);
        let held = |force: &Force| -> Vec<String> {
            holds(&before, &after, 50, force)
                .into_iter()
                .map(|h| h.account)
                .collect()
        };
        assert_eq!(held(&Force::None), ["a", "c", "e"]);
        assert!(held(&Force::All).is_empty());
        let some = Force::Accounts(["a".to_owned(), "e".to_owned()].into());
        assert_eq!(held(&some), ["c"]);
        let reason = holds(&before, &after, 50, &Force::None)[0].to_string();
        assert!(reason.contains("account a"), "{reason}");
        assert!(reason.contains("from 10 to 4 (60%)"), "{reason}");
        assert!(reason.contains("{\"force\": \"a\"}"), "{reason}");
    }

    #[test]
    fn generations_only_grow() {
        const NOW: u64 = 1_795_403_642;
        // published, now, expected.
        let cases: &[(u64, u64, u64)] = &[
            (0, NOW, NOW),                  // nothing published (a reset): the clock
            (3, NOW, NOW),                  // a small counter from before the clock floor
            (NOW - 60, NOW, NOW),           // the last publish a minute ago
            (NOW - 1, NOW, NOW),            // the last publish a second ago
            (NOW, NOW, NOW + 1),            // twice in one second
            (NOW + 5, NOW, NOW + 6),        // the counter ran ahead of the clock
            (NOW + 5, NOW - 3600, NOW + 6), // the clock went back an hour
            (u64::MAX, NOW, u64::MAX),      // no overflow
        ];
        for (published, now, expected) in cases {
            assert_eq!(
                next_generation(*published, *now),
                *expected,
                "published {published}, now {now}"
            );
        }
    }
}
