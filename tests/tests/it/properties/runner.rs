//! The runner: a fixed seed, a case count, and a tally of what the cases reached.

use super::*;

/// Runs `check` on `cases` inputs from `strategy` and returns the line to print; panics with
/// the smallest failing input proptest finds.
pub(super) fn check_property<S: Strategy>(
    name: &str,
    cases: u32,
    strategy: S,
    check: impl Fn(S::Value) -> Result<(), TestCaseError>,
) -> String {
    let mut config = Config::default();
    if std::env::var_os("PROPTEST_CASES").is_none() {
        config.cases = cases;
    }
    if config.rng_seed == RngSeed::Random {
        config.rng_seed = RngSeed::Fixed(SEED);
    }
    // The fixed seed reproduces a failure; no regression files in the work tree.
    config.failure_persistence = None;
    config.max_shrink_iters = 2_000;
    let seed = config.rng_seed;
    let (ran, failed) = (Cell::new(0_u32), Cell::new(0_u32));
    let result = TestRunner::new(config).run(&strategy, |input| {
        ran.set(ran.get() + 1);
        let outcome = check(input);
        if outcome.is_err() {
            failed.set(failed.get() + 1);
        }
        outcome
    });
    let line = format!(
        "{name}: {} cases, {} failures (seed {seed})",
        ran.get(),
        failed.get()
    );
    if let Err(err) = result {
        panic!("{line} (failures include shrinking steps)\n{err}");
    }
    line
}

/// How often each outcome came up, to show the generators reach every branch.
#[derive(Default)]
pub(super) struct Tally(pub(super) RefCell<std::collections::BTreeMap<&'static str, usize>>);

impl Tally {
    pub(super) fn add(&self, what: &'static str, n: usize) {
        *self.0.borrow_mut().entry(what).or_default() += n;
    }

    /// Fails unless every outcome in `whats` came up: a generator that stopped reaching a
    /// branch leaves that branch untested. Only on the fixed seed and case counts, where the
    /// counts are fixed too.
    pub(super) fn require(&self, whats: &[&str]) {
        if std::env::var_os("PROPTEST_CASES").is_some()
            || std::env::var_os("PROPTEST_RNG_SEED").is_some()
        {
            return;
        }
        let counts = self.0.borrow();
        let missing: Vec<&&str> = whats
            .iter()
            .filter(|what| counts.get(**what).copied().unwrap_or(0) == 0)
            .collect();
        assert!(missing.is_empty(), "no case reached {missing:?} ({self})");
    }
}

impl std::fmt::Display for Tally {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let counts = self.0.borrow();
        let parts: Vec<String> = counts
            .iter()
            .map(|(what, n)| format!("{what} {n}"))
            .collect();
        f.write_str(&parts.join(", "))
    }
}
