//! The generator as tests run it: one run of a payload at a time stamp the test chooses.

use autoproxy::time::Stamp;
use autoproxy_generate::handler::{self, Deps, GenerateError, InvocationError, Summary};
use autoproxy_generate::trigger;
use serde_json::Value;
use tokio::time::Instant;

/// One run of `payload` (the schedule, a manual object, one CloudTrail event) as the handler
/// makes it, but stamped `at` (RFC 3339), starting no zone read after `deadline`. A payload of
/// no trigger's shape fails as the handler's parse fails it.
pub async fn run_at(
    deps: &Deps,
    payload: &Value,
    at: &str,
    deadline: Option<Instant>,
) -> Result<Summary, GenerateError> {
    let trigger = trigger::parse(payload).map_err(InvocationError::from)?;
    let at = Stamp::parse(at).unwrap_or_else(|| panic!("{at:?}: not an RFC 3339 time"));
    handler::run(deps, &trigger, at, deadline).await
}
