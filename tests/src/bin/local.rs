//! `make local`: the AWS stand-in for invoking the functions by hand. Starts moto on
//! 127.0.0.1:5000 (`--port` to change), seeds it, writes `.local/env` for
//! `cargo lambda watch --env-file .local/env`, and runs until Ctrl-C.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::path::PathBuf;

use autoproxy_tests::local::{DEFAULT_PORT, ENV_FILE, StandIn};

#[tokio::main]
async fn main() {
    let mut port = DEFAULT_PORT;
    let mut env_file = autoproxy_tests::root().join(ENV_FILE);
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match (arg.as_str(), args.next()) {
            ("--port", Some(value)) => {
                port = value.parse().unwrap_or_else(|_| {
                    eprintln!("local: --port: expected a port number, got {value:?}");
                    std::process::exit(2);
                });
            }
            ("--env-file", Some(value)) => env_file = PathBuf::from(value),
            _ => {
                eprintln!("usage: local [--port PORT] [--env-file PATH]");
                std::process::exit(2);
            }
        }
    }
    let stand_in = match StandIn::start(port).await {
        Ok(stand_in) => stand_in,
        Err(err) => {
            eprintln!("local: seeding the stand-in failed: {err}");
            std::process::exit(1);
        }
    };
    if let Err(err) = stand_in.write_env_file(&env_file) {
        eprintln!("local: writing {}: {err}", env_file.display());
        std::process::exit(1);
    }
    println!(
        "local: moto on {} (Route53, S3, SSM, STS, EC2) seeded with the sample zones; settings \
         in {}\nIn another terminal:\n    cargo lambda watch --env-file {ENV_FILE}\nthen invoke \
         (README, \"Invoking by hand\"). Ctrl-C stops moto.",
        stand_in.moto.endpoint(),
        env_file.display()
    );
    let _ = tokio::signal::ctrl_c().await;
    drop(stand_in);
    println!("local: stopped");
}
