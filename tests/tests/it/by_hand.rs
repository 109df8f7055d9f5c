//! The README's "Invoking by hand" commands, run as written: `make local` (the seeded AWS
//! stand-in and `.local/env`), `cargo lambda watch --env-file .local/env`, then each
//! `cargo lambda invoke` line, whose JSON answers must say what the README says they do.
//! Uses the fixed ports the commands imply (moto 5000, cargo lambda 9000).

use std::net::SocketAddr;
use std::process::Command;
use std::time::Duration;

use autoproxy_tests::pipeline::{Spawned, run_bounded};
use autoproxy_tests::{Listening, root, wait_listening};

/// Where `make local` writes the settings `cargo lambda watch` reads.
const ENV_FILE: &str = autoproxy_tests::local::ENV_FILE;
use serde_json::Value;

/// The command lines of the README's "Invoking by hand" block, comments dropped.
fn readme_commands() -> Vec<String> {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let section = readme
        .split("### Invoking by hand")
        .nth(1)
        .expect("README has an \"Invoking by hand\" section");
    let section = section.split("\n#").next().unwrap_or(section);
    section
        .lines()
        .filter_map(|line| line.strip_prefix("    "))
        .map(|line| line.split('#').next().unwrap_or(line).trim().to_owned())
        .filter(|line| !line.is_empty())
        .collect()
}

fn shell(line: &str) -> Command {
    let mut command = Command::new("sh");
    command.args(["-c", line]).current_dir(root());
    command
}

#[test]
fn the_readme_commands_for_invoking_by_hand_work_as_written() {
    let commands = readme_commands();
    let [local, watch, invokes @ ..] = commands.as_slice() else {
        panic!("expected make local, cargo lambda watch, then invokes: {commands:?}");
    };
    assert_eq!(local, "make local");
    assert!(
        watch.starts_with("cargo lambda watch --env-file .local/env"),
        "{watch}"
    );
    assert!(invokes.len() >= 4, "{invokes:?}");
    // The commands name no ports: moto takes 5000 and cargo lambda 9000. Something else on
    // either would answer in their place.
    for port in [autoproxy_tests::local::DEFAULT_PORT, 9000] {
        assert!(
            std::net::TcpListener::bind(("127.0.0.1", port)).is_ok(),
            "port {port} is taken: the README's commands need it free"
        );
    }
    let logs = tempfile::tempdir().unwrap();
    let env_file = root().join(ENV_FILE);
    let _ = std::fs::remove_file(&env_file);

    let mut stand_in = Spawned::start(shell(local), local, &logs.path().join("local.log")).unwrap();
    // `make local` may build the stand-in first; the env file is written once it is seeded.
    let deadline = std::time::Instant::now() + Duration::from_secs(300);
    while !env_file.exists() && stand_in.alive() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    let env = std::fs::read_to_string(&env_file).unwrap_or_else(|err| {
        let log = std::fs::read_to_string(logs.path().join("local.log")).unwrap_or_default();
        panic!("no {}: {err}\n{log}", env_file.display())
    });
    assert!(
        env.contains("AWS_ENDPOINT_URL=http://127.0.0.1:5000"),
        "{env}"
    );

    let _watch = Spawned::start(shell(watch), watch, &logs.path().join("watch.log")).unwrap();
    let lambda = SocketAddr::from(([127, 0, 0, 1], 9000));
    assert_eq!(
        wait_listening(lambda, Duration::from_secs(120), || false),
        Listening::Yes,
        "cargo lambda watch never listened"
    );

    let mut published = None;
    for line in invokes {
        assert!(line.starts_with("cargo lambda invoke "), "{line}");
        let out = run_bounded(shell(line), line, Duration::from_secs(600)).unwrap_or_else(|err| {
            let log = std::fs::read_to_string(logs.path().join("watch.log")).unwrap_or_default();
            panic!("{line}: {err}\n{log}")
        });
        let reply: Value = serde_json::from_str(out.trim())
            .unwrap_or_else(|err| panic!("{line}: not JSON ({err}): {out}"));
        if line.contains("explain") {
            assert_eq!(reply["routed"], Value::Bool(true), "{line}: {reply}");
            assert!(
                reply["why"].as_array().is_some_and(|why| why
                    .iter()
                    .any(|step| step.as_str().is_some_and(|s| s.contains("routes it")))),
                "{line}: {reply}"
            );
        } else if line.contains("autoproxy-generate") {
            let rules = reply["rules"].as_u64().unwrap_or(0);
            assert!(rules >= 3, "{line}: the sample zones route: {reply}");
            if line.contains("sqs-batch") {
                // One run for the three queued events; every record read (the sample's zones
                // are not the stand-in's: read, found gone, nothing routed from them).
                assert_eq!(reply["queue"]["records"], 3, "{reply}");
                assert_eq!(reply["batchItemFailures"], serde_json::json!([]), "{reply}");
            } else if line.contains("manual-dry-run") {
                assert_eq!(reply["published"], Value::Bool(false), "{reply}");
                assert!(
                    reply["config"]
                        .as_str()
                        .is_some_and(|c| c.contains("#@route"))
                );
            } else if published.is_none() {
                assert_eq!(reply["published"], Value::Bool(true), "{line}: {reply}");
                published = reply["version_id"].as_str().map(str::to_owned);
            }
        } else {
            assert!(line.contains("fleet-report"), "{line}");
            assert!(reply["fleet"].is_array(), "{reply}");
            assert!(
                reply["latest_generation"].as_u64().is_some_and(|g| g > 0),
                "{reply}"
            );
        }
    }
    assert!(published.is_some(), "no invoke published a config");
}
