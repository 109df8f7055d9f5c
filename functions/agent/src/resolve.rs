//! autoproxy-agent resolve: placeholder until the resolver lands in this module.

use std::path::Path;
use std::process::ExitCode;

/// Runs the address service on the installed config at `config`.
pub fn main(config: &Path) -> ExitCode {
    eprintln!("autoproxy-resolver: not built yet ({})", config.display());
    ExitCode::from(70)
}

/// Keeps the address service installed and running for `config`, run from `agent`; one log
/// line per thing it did or could not do. (Placeholder: the apply calls this after every
/// successful apply or skip.)
pub fn ensure_service(_agent: &Path, _config: &Path) -> Vec<String> {
    Vec::new()
}
