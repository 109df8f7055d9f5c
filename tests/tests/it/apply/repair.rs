//! What HAProxy runs decides, not the file: an apply that died after its swap is repaired, and a config that never ran is never last-known-good; rollbacks.

use super::*;

/// The state an apply leaves when it dies after its swap (SSM's timeout, an agent restart, a
/// reboot): `config` in the file with its maps, last-known-good kept, HAProxy never reloaded.
fn died_after_swap(f: &Fixture, kept: &str, config: &str) {
    std::fs::write(
        f.haproxy.config_path().with_extension("cfg.last-good"),
        kept,
    )
    .unwrap();
    proxy::install_config(f.haproxy.dir(), config);
}

#[test]
fn a_file_haproxy_does_not_run_is_installed_again_not_skipped() {
    let f = Fixture::new(&["a", "b"]);
    let first = f.config(1, &[("g1.test", "a")]);
    f.install_first(&first);
    let second = f.config(2, &[("g1.test", "a"), ("g2.test", "b")]);
    let version = f.upload(&second);
    died_after_swap(&f, &first, &second);
    assert_eq!(f.haproxy.running_generation(), Some(1));

    // The retry (or the association's next run) of the same version.
    let run = f.apply(&version);
    assert!(run.success(), "{run}{}", f.haproxy.log());
    assert!(run.step("skip").is_empty(), "not skipped:\n{run}");
    assert!(
        run.step("state")[0].contains("holds generation 2 but HAProxy runs generation 1"),
        "{run}"
    );
    assert_eq!(f.haproxy.running_generation(), Some(2), "{run}");
    f.assert_routes("g2.test", "b");
    assert_eq!(
        f.last_good().as_deref(),
        Some(first.as_str()),
        "last-known-good is what ran, not the file that never did:\n{run}"
    );

    // Now the file is what runs: the same version again is skipped.
    let run = f.apply(&version);
    assert!(run.success(), "{run}");
    assert!(
        run.step("skip")[0].contains("not newer than the running generation 2"),
        "{run}"
    );
}

#[test]
fn a_file_that_never_ran_is_not_kept_as_last_known_good() {
    let f = Fixture::new(&["a", "b"]);
    let first = f.config(1, &[("g1.test", "a")]);
    f.install_first(&first);
    let second = f.config(2, &[("g1.test", "a"), ("g2.test", "b")]);
    died_after_swap(&f, &first, &second);

    // The next generation cannot start (its HTTP port is taken): the rollback must bring
    // back what ran, generation 1, not the unverified generation 2 from the file.
    let squatter = TcpListener::bind("127.0.0.1:0").unwrap();
    let mut options = f.haproxy.options(f.backends.port);
    options.http_bind = squatter.local_addr().unwrap().to_string();
    let third = f.config_with(3, &[("g3.test", "a")], &options);
    let run = f.apply(&f.upload(&third));
    assert_eq!(run.status, Some(2), "{run}");
    assert!(
        run.step("keep")[0].contains("generation 2 in")
            && run.step("keep")[0].contains("never ran here"),
        "{run}"
    );
    assert!(
        run.failure()
            .unwrap()
            .ends_with("; restored last-known-good generation 1"),
        "{run}"
    );
    assert_eq!(f.installed(), first);
    assert_eq!(f.last_good().as_deref(), Some(first.as_str()));
    assert_eq!(f.haproxy.running_generation(), Some(1));
    f.assert_routes("g1.test", "a");
    drop(squatter);
}

#[test]
fn a_config_that_cannot_start_is_rolled_back_to_the_last_known_good() {
    let f = Fixture::new(&["a", "b"]);
    let first = f.config(1, &[("g1.test", "a")]);
    f.install_first(&first);

    // Valid for `haproxy -c` (which binds nothing), but its HTTP port is taken: the new
    // worker cannot start, and the old one keeps serving.
    let squatter = TcpListener::bind("127.0.0.1:0").unwrap();
    let mut options = f.haproxy.options(f.backends.port);
    options.http_bind = squatter.local_addr().unwrap().to_string();
    let second = f.config_with(2, &[("g1.test", "a"), ("g2.test", "b")], &options);
    let run = f.apply(&f.upload(&second));
    assert_eq!(run.status, Some(2), "{run}");
    let failure = run.failure().unwrap();
    assert!(
        failure.contains("HAProxy did not report generation 2"),
        "{run}"
    );
    assert!(
        failure.ends_with("; restored last-known-good generation 1"),
        "{run}"
    );
    assert_eq!(
        run.stderr.lines().filter(|l| l.contains("FAILED")).count(),
        1,
        "{run}"
    );
    assert_eq!(f.installed(), first);
    assert_eq!(f.last_good().as_deref(), Some(first.as_str()));
    assert_eq!(f.haproxy.running_generation(), Some(1));
    f.assert_routes("g1.test", "a");
    f.assert_no_route("g2.test");
    drop(squatter);
}

#[test]
fn a_failing_reload_command_is_rolled_back() {
    let f = Fixture::new(&["a", "b"]);
    // Fails once: the rollback's own reload works.
    let (first, version, flaky) = f.before_a_failing_reload();
    let run = f.run_deployed(&flaky, &[("ConfigVersion", &version)]);
    assert_eq!(run.status, Some(2), "{run}");
    let failure = run.failure().unwrap();
    assert!(failure.contains("exited with 1"), "{run}");
    assert!(
        failure.ends_with("; restored last-known-good generation 1"),
        "{run}"
    );
    assert_eq!(f.installed(), first);
    assert_eq!(f.haproxy.running_generation(), Some(1));
    f.assert_routes("g1.test", "a");

    // Always fails: the file is restored, and the run says the rollback is incomplete.
    let failing = f.haproxy.apply_document_reloading_with("false").unwrap();
    let run = f.run_deployed(&failing, &[("ConfigVersion", &version)]);
    assert_eq!(run.status, Some(3), "{run}");
    assert!(
        run.failure().unwrap().contains("its reload failed too"),
        "{run}"
    );
    assert_eq!(f.installed(), first);
    assert_eq!(f.haproxy.running_generation(), Some(1));
    f.assert_routes("g1.test", "a");
}
