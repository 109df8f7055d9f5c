//! The document as a launcher: it runs the agent the stack published, and nothing else.

use super::*;

use autoproxy_tests::agent::Published;

/// Puts `bytes` at the published agent's key, as anyone with write access to the bucket could.
fn overwrite_agent(f: &Fixture, bytes: Vec<u8>) {
    let agent = Published::describe(BUCKET);
    let s3 = aws_sdk_s3::Client::new(&f.sdk);
    f.rt.block_on(
        s3.put_object()
            .bucket(BUCKET)
            .key(&agent.key)
            .body(bytes.into())
            .send(),
    )
    .unwrap();
}

/// A binary at the published key that is not the one the stack fixed never runs, and a cached
/// copy that no longer matches is replaced by the published one before it runs.
#[test]
fn only_the_agent_whose_sha256_the_stack_fixed_runs() {
    let f = Fixture::new(&["a"]);
    let first = f.config(1, &[("one.test", "a")]);
    let version = f.upload(&first);

    // Something else at the agent's key: a script that would report success.
    overwrite_agent(
        &f,
        b"#!/bin/sh\necho autoproxy-apply: done: pretend\nexit 0\n".to_vec(),
    );
    let run = f.apply(&version);
    assert_eq!(run.status, Some(1), "{run}");
    let failure = run.failure().unwrap();
    assert!(
        failure.contains("hashes to") && failure.contains("the stack published"),
        "{run}"
    );
    assert!(
        f.haproxy.running_generation().is_none(),
        "nothing ran:\n{run}"
    );
    assert!(!f.haproxy.config_path().exists(), "nothing written:\n{run}");

    // The real one again: installed, cached, runs.
    let agent = Published::describe(BUCKET);
    overwrite_agent(&f, std::fs::read(&agent.binary).unwrap());
    let run = f.apply(&version);
    assert!(run.success(), "{run}");
    let cached = f
        .haproxy
        .agent_directory()
        .join("agent")
        .join(&agent.sha256)
        .join("autoproxy-agent");
    assert_eq!(
        artifact::sha256_hex(&std::fs::read(&cached).unwrap()),
        agent.sha256
    );
    assert_eq!(run.step("agent").len(), 1, "cached once:\n{run}");

    // A cached copy changed on disk is not run: the published one replaces it.
    std::fs::write(&cached, b"#!/bin/sh\nexit 0\n").unwrap();
    let second = f.config(2, &[("two.test", "a")]);
    let run = f.apply(&f.upload(&second));
    assert!(run.success(), "{run}");
    assert_eq!(f.haproxy.running_generation(), Some(2), "{run}");
    assert_eq!(
        artifact::sha256_hex(&std::fs::read(&cached).unwrap()),
        agent.sha256
    );
    // Downloads are not kept: the cache is the one copy.
    assert!(
        !f.haproxy
            .agent_directory()
            .join("download")
            .join(&agent.sha256)
            .exists(),
        "{run}"
    );
}

/// A stack whose agent was built for another machine says so, and nothing runs.
#[test]
fn an_agent_built_for_another_machine_is_refused_with_both_names() {
    let f = Fixture::new(&["a"]);
    let mut agent = Published::describe(BUCKET);
    agent.architecture = if std::env::consts::ARCH == "aarch64" {
        "x86_64".to_owned()
    } else {
        "aarch64".to_owned()
    };
    let path = f.haproxy.config_path().display().to_string();
    let reload = f.haproxy.reload_command(&[]);
    let agent_dir = f.haproxy.agent_directory().display().to_string();
    let document = Document::from_workspace_with(
        &[
            (autoproxy_tests::ssm_agent::CONFIG_PATH_PARAMETER, &path),
            (
                autoproxy_tests::ssm_agent::RELOAD_COMMAND_PARAMETER,
                &reload,
            ),
            (
                autoproxy_tests::ssm_agent::AGENT_DIRECTORY_PARAMETER,
                &agent_dir,
            ),
        ],
        &agent.attributes(),
    )
    .unwrap();
    let version = f.upload(&f.config(1, &[("one.test", "a")]));
    let run = f.run_deployed(&document, &[("ConfigVersion", &version)]);
    assert_eq!(run.status, Some(1), "{run}");
    let failure = run.failure().unwrap();
    assert!(
        failure.contains(&format!("built for {}", agent.architecture))
            && failure.contains(&format!("this instance is {}", std::env::consts::ARCH)),
        "{run}"
    );
    assert!(f.haproxy.running_generation().is_none(), "{run}");
}
