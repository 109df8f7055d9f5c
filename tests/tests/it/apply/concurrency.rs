//! Applies at once and under load: the lock, its bounds, and reloads that drop no connection.

use super::*;

/// Waits until an apply holds the lock beside the config: `flock -n` on it fails.
fn wait_until_locked(f: &Fixture, timeout: Duration) -> bool {
    let lock = PathBuf::from(format!("{}.lock", f.haproxy.config_path().display()));
    let deadline = std::time::Instant::now() + timeout;
    while std::time::Instant::now() < deadline {
        let held = std::process::Command::new("flock")
            .arg("-n")
            .arg(&lock)
            .arg("true")
            .status()
            .is_ok_and(|status| !status.success());
        if held {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

#[test]
fn two_runs_at_once_are_serialised() {
    let f = Fixture::new(&["a", "b"]);
    f.install_first(&f.config(1, &[("g1.test", "a")]));
    let second = f.upload(&f.reloading_config(2, &[("g1.test", "a"), ("g2.test", "b")]));
    let third_text = f.config(3, &[("g1.test", "a"), ("g2.test", "b"), ("g3.test", "a")]);
    let third = f.upload(&third_text);

    // The first run holds the lock for at least the 2 s its reload sleeps.
    let slow = f
        .haproxy
        .apply_document_reloading_with(&f.haproxy.reload_command(&["2"]))
        .unwrap();
    let (first_run, second_run) = std::thread::scope(|scope| {
        let a = scope.spawn(|| f.run_deployed(&slow, &[("ConfigVersion", &second)]));
        assert!(
            wait_until_locked(&f, Duration::from_secs(20)),
            "the first run never took the lock"
        );
        let b = scope.spawn(|| f.apply(&third));
        (a.join().unwrap(), b.join().unwrap())
    });
    assert!(first_run.success(), "{first_run}");
    assert!(second_run.success(), "{second_run}");
    assert!(first_run.started < second_run.started);
    assert!(
        lock_wait(&first_run) < Duration::from_millis(500),
        "{first_run}"
    );
    let acquired = second_run.started + lock_wait(&second_run);
    assert!(
        acquired >= first_run.started + Duration::from_secs(2),
        "the second run got the lock while the first was still reloading:\n{first_run}{second_run}"
    );
    assert!(second_run.finished > first_run.finished);
    assert_eq!(f.installed(), third_text);
    assert_eq!(f.haproxy.running_generation(), Some(3));
    f.assert_routes("g3.test", "a");
}

#[test]
fn reload_under_load() {
    const RELOADS: u64 = 20;
    const MAX_CONNECTIONS: usize = 12_000;
    let f = Fixture::new(&["a", "b"]);
    f.install_first(&f.config(1, &[("steady.test", "a")]));

    let stop = AtomicBool::new(false);
    let total = AtomicUsize::new(0);
    let failures = Mutex::new(Vec::new());
    let mut durations = Vec::new();
    std::thread::scope(|scope| {
        for _ in 0..2 {
            scope.spawn(|| {
                while !stop.load(Ordering::SeqCst)
                    && total.fetch_add(1, Ordering::SeqCst) < MAX_CONNECTIONS
                {
                    match f.haproxy.probe("proxy.api.steady.test") {
                        Ok(banner) if banner == "backend a" => {}
                        other => failures.lock().unwrap().push(format!("{other:?}")),
                    }
                    std::thread::sleep(Duration::from_millis(2));
                }
            });
        }
        for generation in 2..=RELOADS + 1 {
            let zone = format!("g{generation}.test");
            let text = f.config(generation, &[("steady.test", "a"), (&zone, "b")]);
            let run = f.apply(&f.upload(&text));
            assert!(run.success(), "generation {generation}:\n{run}");
            durations.push(run.elapsed());
        }
        stop.store(true, Ordering::SeqCst);
    });
    let total = total.load(Ordering::SeqCst).min(MAX_CONNECTIONS);
    let failures = failures.into_inner().unwrap();
    durations.sort();
    let median = durations[durations.len() / 2];
    println!(
        "reload under load: {} failed / {total} connections, {RELOADS} reloads, one apply takes {} ms (median)",
        failures.len(),
        median.as_millis()
    );
    assert_eq!(f.haproxy.running_generation(), Some(RELOADS + 1));
    f.assert_routes(&format!("g{}.test", RELOADS + 1), "b");
    assert!(
        total > 100,
        "the load was too light to mean anything: {total}"
    );
    assert!(
        failures.is_empty(),
        "failed connections: {:?}",
        &failures[..failures.len().min(10)]
    );
}

/// The document's timeout outlasts a lock wait and a whole apply: the two deadlines the agent
/// holds itself to (its steps under the lock, its ending). The agent ending within them is
/// measured in `apply::bounds`.
#[test]
fn the_document_outlasts_a_lock_wait_and_a_whole_apply() {
    use autoproxy_agent::apply::{APPLY_LOCK_WAIT, FINISH_BUDGET, LOCKED_BUDGET};
    let text = std::fs::read_to_string(autoproxy_tests::root().join("template.yaml")).unwrap();
    let timeout: u64 = text
        .lines()
        .find_map(|line| line.trim().strip_prefix("timeoutSeconds: "))
        .and_then(|value| value.trim_matches('"').parse().ok())
        .expect("the document's timeoutSeconds");
    let (wait, apply) = (
        APPLY_LOCK_WAIT.as_secs(),
        LOCKED_BUDGET.as_secs() + FINISH_BUDGET.as_secs(),
    );
    assert!(
        wait + apply < timeout,
        "a wait ({wait} s) and a whole apply ({apply} s) exceed timeoutSeconds {timeout}"
    );
}

/// An apply that never gets the lock reports nothing: the fleet record, local and in S3, is
/// the lock holder's to write, and a busy run's failure must not overwrite it.
#[test]
fn a_busy_apply_leaves_the_holders_fleet_record() {
    let f = Fixture::new(&["a"]);
    f.install_first(&f.config(1, &[("g1.test", "a")]));
    let (run, before) = f.apply_and_record(&f.upload(&f.config(2, &[("g1.test", "a")])));
    assert!(run.success(), "{run}");
    let local = f.haproxy.dir().join("autoproxy/last-apply.json");
    let local_before = std::fs::read(&local).unwrap();

    // The holder: the lock taken here, as a running apply holds it.
    let lock = PathBuf::from(format!("{}.lock", f.haproxy.config_path().display()));
    let held = std::fs::File::open(&lock).unwrap();
    held.try_lock().unwrap();
    let version = f.upload(&f.config(3, &[("g3.test", "a")]));
    let env = [(
        "AUTOPROXY_AGENT_LOCK_WAIT_SECONDS".to_owned(),
        "1".to_owned(),
    )];
    let busy = f
        .try_run(&f.document, &[("ConfigVersion", &version)], &env)
        .unwrap();
    drop(held);
    assert!(!busy.success(), "{busy}");
    assert!(
        busy.stderr.contains("another apply held"),
        "not a busy run:\n{busy}"
    );
    assert_eq!(
        std::fs::read(&local).unwrap(),
        local_before,
        "the busy run rewrote {}:\n{busy}",
        local.display()
    );
    let s3 = aws_sdk_s3::Client::new(&f.sdk);
    let object =
        f.rt.block_on(s3.get_object().bucket(BUCKET).key(RECORD).send())
            .unwrap();
    let bytes = f.rt.block_on(object.body.collect()).unwrap().to_vec();
    let after: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(after["apply_id"], before["apply_id"], "{after}\n{busy}");
    assert_eq!(f.haproxy.running_generation(), Some(2));
}
