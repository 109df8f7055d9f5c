//! The apply's test hooks (docs/ARCHITECTURE.md, "Tests"): a pause before a named step, and,
//! with it, a shorter deadline for the steps under the lock. Nothing sets them in production.

use std::time::Duration;

use super::{LOCK_WAIT, LOCKED_BUDGET, Run, log};

/// Names the apply can stop at before a step, for the fault tests (`AUTOPROXY_AGENT_PAUSE`),
/// for `AUTOPROXY_AGENT_PAUSE_SECONDS` (120).
const PAUSE_VARIABLE: &str = "AUTOPROXY_AGENT_PAUSE";

/// [`LOCKED_BUDGET`]; a fault test that pauses the apply (and only such a test) may shorten
/// it with `AUTOPROXY_AGENT_LOCKED_BUDGET_SECONDS`, to see the deadline stop a run.
pub(super) fn locked_budget() -> Duration {
    std::env::var_os(PAUSE_VARIABLE)
        .and_then(|_| std::env::var("AUTOPROXY_AGENT_LOCKED_BUDGET_SECONDS").ok())
        .and_then(|seconds| seconds.parse().ok())
        .map_or(LOCKED_BUDGET, Duration::from_secs)
}

/// [`LOCK_WAIT`]; the test of a busy apply shortens it with
/// `AUTOPROXY_AGENT_LOCK_WAIT_SECONDS`, rather than wait 300 s for a lock it holds.
pub(super) fn lock_wait() -> Duration {
    std::env::var("AUTOPROXY_AGENT_LOCK_WAIT_SECONDS")
        .ok()
        .and_then(|seconds| seconds.parse().ok())
        .map_or(LOCK_WAIT, Duration::from_secs)
}

impl Run {
    pub(super) async fn pause(&mut self, step: &'static str) {
        self.step = step;
        if std::env::var(PAUSE_VARIABLE).is_ok_and(|v| v == step) {
            let seconds = std::env::var(format!("{PAUSE_VARIABLE}_SECONDS"))
                .ok()
                .and_then(|s| s.parse().ok())
                .unwrap_or(120);
            log("pause", &format!("before {step}"));
            tokio::time::sleep(Duration::from_secs(seconds)).await;
        }
    }
}
