//! autoproxy-agent: wiring only. `apply` (the apply document's work), `resolve` (the address
//! service), `version`.

use std::process::ExitCode;

const USAGE: &str = "usage: autoproxy-agent apply | resolve <haproxy.cfg> | version";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        ["apply"] => autoproxy_agent::apply::main(),
        ["resolve", config] => autoproxy_agent::resolve::main(std::path::Path::new(config)),
        ["version"] | ["--version"] => {
            autoproxy_agent::apply::say(&format!("autoproxy-agent {}", env!("CARGO_PKG_VERSION")));
            ExitCode::SUCCESS
        }
        _ => {
            eprintln!("{USAGE}");
            ExitCode::from(64)
        }
    }
}
