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

/// Every duration the agent's apply module declares (`[pub] const NAME: Duration =
/// Duration::from_secs(N)` or `from_millis`), by name, read from its source: the private
/// ones too, which a test cannot import.
fn apply_durations() -> BTreeMap<String, Duration> {
    let dir = autoproxy_tests::root().join("functions/agent/src");
    let mut files = vec![dir.join("apply.rs")];
    let mut inner: Vec<PathBuf> = std::fs::read_dir(dir.join("apply"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "rs"))
        .collect();
    inner.sort();
    files.extend(inner);
    let mut durations = BTreeMap::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        for line in text.lines() {
            let line = line.trim_start();
            let line = line.strip_prefix("pub ").unwrap_or(line);
            let Some(rest) = line.strip_prefix("const ") else {
                continue;
            };
            let Some((name, value)) = rest.split_once(": Duration = Duration::from_") else {
                continue;
            };
            let (unit, number) = value
                .strip_suffix(");")
                .and_then(|v| v.split_once('('))
                .unwrap_or_else(|| panic!("{}: cannot read {line}", file.display()));
            let number: u64 = number.replace('_', "").parse().unwrap();
            let duration = match unit {
                "secs" => Duration::from_secs(number),
                "millis" => Duration::from_millis(number),
                other => panic!("{}: {name} in {other}", file.display()),
            };
            durations.insert(name.to_owned(), duration);
        }
    }
    durations
}

/// A push that meets another apply's lock (an association run) waits longer than that apply
/// can hold it, and the wait plus a whole apply still fits the document's timeout. The hold
/// adds up every bounded step of a run under the lock, each from the agent's own constant;
/// every duration the apply module declares is either counted or named as no step under the
/// lock, so a step added with a budget of its own fails here until it is counted.
#[test]
fn a_lock_wait_outlasts_any_apply_that_holds_the_lock() {
    use autoproxy_agent::apply::{
        ADDRESS_BUDGET, CHECK_TIMEOUT, DOWNLOAD_TIMEOUT, LOCK_WAIT, RECORD_TIMEOUT, RELOAD_TIMEOUT,
        RUNNING_TIMEOUT, UPDATE_BUDGET,
    };
    let declared = apply_durations();
    // Not public: the agent's time-out for one command on HAProxy's stats socket.
    let socket = *declared
        .get("SOCKET_TIMEOUT")
        .expect("SOCKET_TIMEOUT in the source");
    // Each step and how often a run can take it. A child past its limit is killed at once. The
    // runtime update checks its budget before every command, so it ends within the budget
    // plus one socket time-out; when it fails the apply reloads instead. A failed reload (or
    // its wait for the new worker) rolls back, which reloads and waits again.
    let steps = [
        ("DOWNLOAD_TIMEOUT", DOWNLOAD_TIMEOUT, 1u32),
        ("ADDRESS_BUDGET", ADDRESS_BUDGET, 1),
        ("CHECK_TIMEOUT", CHECK_TIMEOUT, 1),
        ("UPDATE_BUDGET", UPDATE_BUDGET, 1),
        ("SOCKET_TIMEOUT", socket, 1),
        ("RELOAD_TIMEOUT", RELOAD_TIMEOUT, 2),
        ("RUNNING_TIMEOUT", RUNNING_TIMEOUT, 2),
        ("RECORD_TIMEOUT", RECORD_TIMEOUT, 1),
    ];
    // The wait for the lock is spent before the lock is held.
    let not_steps = [("LOCK_WAIT", LOCK_WAIT)];
    for (name, value) in steps
        .iter()
        .map(|(name, value, _)| (name, value))
        .chain(not_steps.iter().map(|(name, value)| (name, value)))
    {
        assert_eq!(
            declared.get(*name),
            Some(value),
            "{name} as the source declares it"
        );
    }
    let named: Vec<&str> = steps
        .iter()
        .map(|(name, _, _)| *name)
        .chain(not_steps.iter().map(|(name, _)| *name))
        .collect();
    let uncounted: Vec<&String> = declared
        .keys()
        .filter(|name| !named.contains(&name.as_str()))
        .collect();
    assert!(
        uncounted.is_empty(),
        "durations of the apply neither counted in its hold of the lock nor named as no step \
         under it: {uncounted:?}"
    );

    let hold: Duration = steps
        .iter()
        .map(|(_, budget, times)| *budget * *times)
        .sum();
    let text = std::fs::read_to_string(autoproxy_tests::root().join("template.yaml")).unwrap();
    let wait = LOCK_WAIT;
    assert!(wait > hold, "lock wait {wait:?}, longest hold {hold:?}");
    let timeout: u64 = text
        .lines()
        .find_map(|line| line.trim().strip_prefix("timeoutSeconds: "))
        .and_then(|value| value.trim_matches('"').parse().ok())
        .expect("the document's timeoutSeconds");
    assert!(
        wait + hold < Duration::from_secs(timeout),
        "a wait ({wait:?}) and a whole apply ({hold:?}) exceed timeoutSeconds {timeout}"
    );
}
