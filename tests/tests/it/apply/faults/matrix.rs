//! The fault matrix: an apply of generation 2 stopped at each point by SIGTERM (a cancel) or
//! SIGKILL to the script's group (SSM's timeout), then the apply again.

use super::*;

/// Hidden entries (staging files and directories) left in `dir`.
fn debris(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|entry| entry.file_name().to_string_lossy().into_owned())
                .filter(|name| name.starts_with('.'))
                .collect()
        })
        .unwrap_or_default()
}

/// Where the pause sits relative to the swap (the rename that installs the new file).
fn after_swap(point: &str) -> bool {
    matches!(point, "swap" | "reload" | "verify")
}

/// Whether a failure at the pause rolls back. Before the swap the new route maps may be in
/// place but neither the config nor HAProxy was touched: the installed config's maps are
/// written back, and nothing changed. The `update` point sits inside the runtime update,
/// between its two commits: the worker holds one new table and not the other, so a failure
/// there rolls back.
fn installed(point: &str) -> bool {
    after_swap(point) || point == "update"
}

/// Generation 1 runs; an apply of generation 2 is stopped by `signal` at `point`; then a
/// normal apply of generation 2. Generation 2 changes only routes when the point is the
/// runtime update, and a setting too (it reloads) at every other point.
fn stopped_at(point: &str, signal: &str) {
    let f = Fixture::new(&["a", "b"]);
    let first = f.config(1, &[("g1.test", "a")]);
    f.install_first(&first);
    // Generation 2 moves g1.test to b and adds g2.test: which one serves is visible.
    let routes = [("g1.test", "b"), ("g2.test", "b")];
    let second = if point == "update" {
        f.config(2, &routes)
    } else {
        f.reloading_config(2, &routes)
    };
    let version = f.upload(&second);
    f.delete_record();
    let run = stop(&f, &version, point, signal);
    match signal {
        "TERM" => after_sigterm(&f, point, &first, &run),
        "KILL" => after_sigkill(&f, point, [&first, &second], &run),
        other => panic!("no such case: SIG{other}"),
    }
    next_apply_repairs(&f, &version, &second, point, signal);
}

/// An apply of `version` started, paused before `point`, and sent `signal`: how it ended.
fn stop(f: &Fixture, version: &str, point: &str, signal: &str) -> Run {
    let mut background = f.start_apply(
        &f.document,
        version,
        &env(&[("AUTOPROXY_AGENT_PAUSE", point)]),
    );
    let pause = format!("autoproxy-apply: pause: before {point}");
    assert!(
        background.wait_for_line(&pause, PAUSE_WAIT),
        "no '{pause}' within {PAUSE_WAIT:?}:\n{}",
        background.stdout_so_far()
    );
    match signal {
        // To the agent only (the launcher's `sh` may run it as its child): the run then ends
        // with the agent's own exit status.
        "TERM" => {
            background.signal_process(agent_pid(&background), signal);
        }
        // To the whole process group, as SSM's timeout does.
        _ => background.signal_group(signal),
    }
    let run = background.wait(RUN_TIMEOUT);
    assert!(
        !run.timed_out,
        "the run did not end after SIG{signal}:\n{run}"
    );
    run
}

/// Ended by SIGTERM at `point`.
fn after_sigterm(f: &Fixture, point: &str, first: &str, run: &Run) {
    let dir = f.haproxy.dir().to_owned();
    // Ended like a failure at that step: nothing changed before the swap, rolled back
    // after it, and generation 1 serves either way.
    let want = if installed(point) { 2 } else { 1 };
    assert_eq!(run.status, Some(want), "SIGTERM at {point}:\n{run}");
    let failure = run
        .failure()
        .unwrap_or_else(|| panic!("no FAILED line:\n{run}"));
    assert!(failure.starts_with("interrupted by SIGTERM"), "{run}");
    if installed(point) {
        assert!(
            failure.ends_with("; restored last-known-good generation 1"),
            "{run}"
        );
        assert_eq!(f.last_good().as_deref(), Some(first), "{run}");
    } else {
        assert!(failure.contains("; nothing changed"), "{run}");
    }
    // Settled: not a worker on its way out still answering for generation 1.
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        f.haproxy.wait_for_generation(1, Duration::from_secs(5)),
        "HAProxy runs generation {:?} after the run ended, not 1:\n{run}{}",
        f.haproxy.running_generation(),
        f.haproxy.log()
    );
    f.assert_routes("g1.test", "a");
    f.assert_no_route("g2.test");
    assert_eq!(f.installed(), first, "the file is what runs:\n{run}");
    let (routes, _) = MapFiles::route_tables(first);
    let on_disk = std::fs::read_to_string(dir.join("autoproxy/routes.map")).unwrap();
    assert_eq!(on_disk, routes, "the maps on disk are what runs:\n{run}");
    let record = f
        .record()
        .unwrap_or_else(|| panic!("the interrupted run wrote no fleet record:\n{run}"));
    assert_eq!(
        record["generation"], 1,
        "the record says what HAProxy runs, never the generation the run meant to install: {record}\n{run}"
    );
    assert_eq!(
        record["sha256"],
        artifact::parse_header(first).unwrap().sha256,
        "{record}"
    );
    let result = if installed(point) {
        "rolled_back"
    } else {
        "failed"
    };
    assert_eq!(
        record["result"], result,
        "an interrupted run is not a config haproxy -c rejected: {record}\n{run}"
    );
    let maps = dir.join("autoproxy");
    let left: Vec<String> = debris(&dir).into_iter().chain(debris(&maps)).collect();
    assert!(
        left.is_empty(),
        "staging files left behind: {left:?}\n{run}"
    );
}

/// Ended by SIGKILL to the whole group at `point`; `configs` are generations 1 and 2.
fn after_sigkill(f: &Fixture, point: &str, configs: [&str; 2], run: &Run) {
    let [first, second] = configs;
    // Nothing of the run is left to report: no record at all, so none claims 2.
    assert_eq!(run.status, None, "{run}");
    let record = f.record();
    assert!(
        record.is_none(),
        "a run killed at {point} left a record: {record:?}\n{run}"
    );
    // What serves: generation 1 until the reload, generation 2 once it has happened.
    let serving = if point == "verify" { 2 } else { 1 };
    assert!(
        f.haproxy
            .wait_for_generation(serving, Duration::from_secs(10)),
        "HAProxy runs {:?}, expected {serving}:\n{run}",
        f.haproxy.running_generation()
    );
    let installed = if after_swap(point) { second } else { first };
    assert_eq!(f.installed(), installed, "{run}");
}

/// The next apply of the same version: the lock is free at once, and generation 2 runs.
fn next_apply_repairs(f: &Fixture, version: &str, second: &str, point: &str, signal: &str) {
    let dir = f.haproxy.dir().to_owned();
    let (again, record) = f.apply_and_record(version);
    assert!(
        again.success(),
        "the apply after SIG{signal} at {point}:\n{again}"
    );
    assert!(
        lock_wait(&again) < Duration::from_millis(500),
        "the lock was still held:\n{again}"
    );
    assert_eq!(f.haproxy.running_generation(), Some(2), "{again}");
    f.assert_routes("g1.test", "b");
    f.assert_routes("g2.test", "b");
    assert_eq!(f.installed(), second);
    assert_eq!(record["generation"], 2, "{record}");
    // What a killed run staged is gone after the next one.
    let left: Vec<String> = debris(&dir)
        .into_iter()
        .chain(debris(&dir.join("autoproxy")))
        .collect();
    assert!(left.is_empty(), "staging left behind: {left:?}\n{again}");
    if signal == "KILL" && point == "verify" {
        // HAProxy already ran generation 2 from the same file.
        assert_eq!(record["result"], "skipped", "{record}\n{again}");
    } else {
        assert_eq!(record["result"], "applied", "{record}\n{again}");
    }
}

macro_rules! matrix {
    ($($name:ident: $point:literal, $signal:literal;)*) => {
        $(
            #[test]
            fn $name() {
                stopped_at($point, $signal);
            }
        )*
    };
}

matrix! {
    sigterm_before_download: "download", "TERM";
    sigterm_before_check: "check", "TERM";
    sigterm_after_swap: "swap", "TERM";
    sigterm_before_reload: "reload", "TERM";
    sigterm_after_reload: "verify", "TERM";
    sigterm_before_update: "update", "TERM";
    sigkill_before_download: "download", "KILL";
    sigkill_before_check: "check", "KILL";
    sigkill_after_swap: "swap", "KILL";
    sigkill_before_reload: "reload", "KILL";
    sigkill_after_reload: "verify", "KILL";
    sigkill_before_update: "update", "KILL";
}
