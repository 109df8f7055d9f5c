//! Whether a rendered config goes out: publish only on change, and never a sudden mass
//! deletion without `force` (docs/ARCHITECTURE.md, "Safety"); and which generation it carries.

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
