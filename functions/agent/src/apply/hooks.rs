//! The apply's test hooks (docs/ARCHITECTURE.md, "Tests"): a pause before a named step, and,
//! with it, a shorter deadline for the steps under the lock; a shorter wait for the lock.
//! Read only when built with the `test-hooks` feature, which the test harness's build of the
//! agent enables: the release binary reads none of these variables, nor holds their names.

use std::time::Duration;

use super::{APPLY_LOCK_WAIT, LOCKED_BUDGET, Run, log};

/// Where a variable's value comes from (the environment, or a test's table).
type Get<'a> = &'a dyn Fn(&str) -> Option<String>;

/// The hooks, each an environment variable.
#[derive(Debug, Clone, Copy)]
enum Hook {
    /// `AUTOPROXY_AGENT_PAUSE=<step>`: the fault tests stop the apply before that step...
    Pause,
    /// ... for `AUTOPROXY_AGENT_PAUSE_SECONDS` (120).
    PauseSeconds,
    /// With a pause, and only then, [`LOCKED_BUDGET`] shortened, to see the deadline stop a run.
    LockedBudgetSeconds,
    /// [`APPLY_LOCK_WAIT`] shortened: the test of a busy apply need not wait 300 s.
    LockWaitSeconds,
}

/// The value of `hook`: none unless the hooks are built in.
#[cfg(feature = "test-hooks")]
fn hook(get: Get<'_>, hook: Hook) -> Option<String> {
    get(match hook {
        Hook::Pause => "AUTOPROXY_AGENT_PAUSE",
        Hook::PauseSeconds => "AUTOPROXY_AGENT_PAUSE_SECONDS",
        Hook::LockedBudgetSeconds => "AUTOPROXY_AGENT_LOCKED_BUDGET_SECONDS",
        Hook::LockWaitSeconds => "AUTOPROXY_AGENT_LOCK_WAIT_SECONDS",
    })
}

/// The value of `hook`: none unless the hooks are built in.
#[cfg(not(feature = "test-hooks"))]
fn hook(_: Get<'_>, _: Hook) -> Option<String> {
    None
}

fn seconds(get: Get<'_>, which: Hook) -> Option<Duration> {
    hook(get, which)
        .and_then(|seconds| seconds.parse().ok())
        .map(Duration::from_secs)
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

fn locked_budget_from(get: Get<'_>) -> Duration {
    hook(get, Hook::Pause)
        .and_then(|_| seconds(get, Hook::LockedBudgetSeconds))
        .unwrap_or(LOCKED_BUDGET)
}

fn lock_wait_from(get: Get<'_>) -> Duration {
    seconds(get, Hook::LockWaitSeconds).unwrap_or(APPLY_LOCK_WAIT)
}

/// How long to stop before `step`, when a fault test named it.
fn pause_from(get: Get<'_>, step: &str) -> Option<Duration> {
    hook(get, Hook::Pause)
        .is_some_and(|named| named == step)
        .then(|| seconds(get, Hook::PauseSeconds).unwrap_or(Duration::from_secs(120)))
}

/// [`LOCKED_BUDGET`], unless a test build's paused run shortens it.
pub(super) fn locked_budget() -> Duration {
    locked_budget_from(&env)
}

/// [`APPLY_LOCK_WAIT`], unless a test build shortens it.
pub(super) fn lock_wait() -> Duration {
    lock_wait_from(&env)
}

impl Run {
    /// Enters `step`; in a test build, first stops there when a fault test named it.
    pub(super) async fn pause(&mut self, step: &'static str) {
        self.step = step;
        if let Some(wait) = pause_from(&env, step) {
            log("pause", &format!("before {step}"));
            tokio::time::sleep(wait).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every hook set: only a build with the `test-hooks` feature takes any (the harness
    /// builds the agent so); `cargo test` of this crate, as a release build, takes none.
    #[test]
    fn the_hooks_are_read_only_when_built_in() {
        let all = |name: &str| {
            Some(
                if name.ends_with("PAUSE") {
                    "check"
                } else {
                    "1"
                }
                .to_owned(),
            )
        };
        let built_in = cfg!(feature = "test-hooks");
        let one = Duration::from_secs(1);
        let expected =
            |hooked: Duration, default: Duration| if built_in { hooked } else { default };
        assert_eq!(lock_wait_from(&all), expected(one, APPLY_LOCK_WAIT));
        assert_eq!(locked_budget_from(&all), expected(one, LOCKED_BUDGET));
        assert_eq!(pause_from(&all, "check"), built_in.then_some(one));
        assert_eq!(pause_from(&all, "swap"), None);
    }
}
