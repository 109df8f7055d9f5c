//! The functions: in-process handlers (tests) or the Lambda runtime (`cargo lambda watch`).

use super::*;

/// How the two functions run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Runner {
    /// `autoproxy_generate::handler::handle` and `autoproxy_configure::handler::handle`,
    /// called directly (no cargo-lambda: the test needs only cargo).
    InProcess,
    /// The real binaries under `cargo lambda watch`, invoked with `cargo lambda invoke`.
    LambdaRuntime,
}

/// `cargo lambda watch` serving both functions.
#[derive(Debug)]
pub(super) struct LambdaWatch {
    /// Held for its drop: stops the runtime and the functions.
    pub(super) _process: Spawned,
    pub(super) port: u16,
}

impl LambdaWatch {
    pub(super) fn start(
        dir: &Path,
        env: &[(String, String)],
    ) -> Result<LambdaWatch, PipelineError> {
        let port = crate::moto::free_port();
        let mut command = Command::new(crate::tool("cargo-lambda"));
        // --ignore-changes: other edits in the checkout must not restart a function mid-run.
        // --timeout 900: the functions' Timeout in template.yaml. cargo-lambda passes the
        // timeout itself as the invocation's deadline (900,000 ms: a time in 1970), so both
        // functions take a deadline already past as none: the generator sweeps without a time
        // budget and the configure function follows its command for up to 890 s.
        command
            .args([
                "lambda",
                "watch",
                "--ignore-changes",
                "--timeout",
                "900",
                "-A",
                "127.0.0.1",
                "-P",
                &port.to_string(),
            ])
            .current_dir(crate::root())
            .env("CARGO_TERM_COLOR", "never")
            .envs(env.iter().map(|(k, v)| (k, v)));
        let process = Spawned::start(command, "cargo lambda watch", &dir.join("lambda.log"))?;
        wait_listening(
            SocketAddr::from((Ipv4Addr::LOCALHOST, port)),
            "cargo lambda watch",
            Duration::from_secs(30),
        )?;
        Ok(LambdaWatch {
            _process: process,
            port,
        })
    }

    pub(super) fn invoke(
        &self,
        dir: &Path,
        function: &str,
        payload_file: &Path,
    ) -> Result<Value, PipelineError> {
        let _ = dir;
        let mut command = Command::new(crate::tool("cargo-lambda"));
        command
            .args([
                "lambda",
                "invoke",
                function,
                "-A",
                "127.0.0.1",
                "-P",
                &self.port.to_string(),
            ])
            .arg("--data-file")
            .arg(payload_file)
            .args(["--output-format", "json"])
            .current_dir(crate::root())
            .env("CARGO_TERM_COLOR", "never");
        // The first invocation may compile the function (the demo builds it beforehand).
        let out = run_bounded(
            command,
            &format!("cargo lambda invoke {function}"),
            Duration::from_secs(600),
        )?;
        serde_json::from_str(out.trim())
            .map_err(|e| step_error(format!("{function} answered"), format!("{e}: {out}")))
    }
}
