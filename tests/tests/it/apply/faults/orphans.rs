//! The reload command's children never outlive the apply: not after SSM's timeout kills the
//! script's group, not after a cancel stops the apply during the reload.

use super::*;

/// The processes started by a run: every process whose environment carries `marker`, but
/// HAProxy's (a reload may start it: a daemon that is meant to outlive the apply), and no
/// zombie.
fn processes_of_run(marker: &str) -> Vec<(u32, String)> {
    let needle = marker.as_bytes();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| {
            let environ = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
            if !environ.split(|b| *b == 0).any(|var| var == needle) {
                return None;
            }
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            let (comm, rest) = stat.split_once(" (")?.1.rsplit_once(") ")?;
            if comm == "haproxy" || rest.starts_with('Z') || rest.starts_with('X') {
                return None;
            }
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            Some((pid, cmdline.trim_end().to_owned()))
        })
        .collect()
}

/// SSM's timeout kills the script's process group: the reload command and whatever it
/// started (here `reload.sh` sleeping before its USR2) go with it, so nothing reloads HAProxy
/// after the apply died and the next apply takes the lock at once.
///
/// The old document ran each child under `timeout(1)`, which moves it into a process group of
/// its own: the kill missed `timeout`, `reload.sh` and its `sleep`, which lived on for the rest
/// of their 30 s and then reloaded HAProxy with whatever file was in place, after the apply
/// (and its record) had ended.
/// Generation 1 runs; an apply of generation 2 (a setting changed: it reloads) starts in the
/// background, its reload command sleeping `delay` seconds and its processes marked with the
/// returned `AUTOPROXY_TEST_RUN=…`, with no fleet record before it. Returns generation 1's
/// config, generation 2's version id, the marker and the run.
fn slow_reload(f: &Fixture, delay: &str) -> (String, String, String, Background) {
    let first = f.config(1, &[("g1.test", "a")]);
    f.install_first(&first);
    let second = f.reloading_config(2, &[("g1.test", "b"), ("g2.test", "b")]);
    let version = f.upload(&second);
    let slow = f
        .haproxy
        .apply_document_reloading_with(&f.haproxy.reload_command(&[delay]))
        .unwrap();
    let marker = format!(
        "AUTOPROXY_TEST_RUN={}",
        f.haproxy.dir().file_name().unwrap().to_string_lossy()
    );
    let (key, value) = marker.split_once('=').unwrap();
    f.delete_record();
    let background = f.start_apply(&slow, &version, &env(&[(key, value)]));
    (first, version, marker, background)
}

#[test]
fn no_child_outlives_a_killed_apply() {
    let f = Fixture::new(&["a", "b"]);
    let (_, version, marker, background) = slow_reload(&f, "30");

    // Wait until the reload command runs (and has started its sleep).
    let deadline = std::time::Instant::now() + PAUSE_WAIT;
    loop {
        let running = processes_of_run(&marker);
        let reload = running.iter().any(|(_, cmd)| cmd.contains("reload.sh"));
        let sleep = running.iter().any(|(_, cmd)| cmd.starts_with("sleep"));
        if reload && sleep {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the reload never ran: {running:?}\n{}",
            background.stdout_so_far()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    background.signal_group("KILL");
    let killed = std::time::Instant::now();
    let run = background.wait(RUN_TIMEOUT);
    assert_eq!(run.status, None, "{run}");

    let mut left = processes_of_run(&marker);
    while !left.is_empty() && killed.elapsed() < Duration::from_secs(1) {
        std::thread::sleep(Duration::from_millis(20));
        left = processes_of_run(&marker);
    }
    assert!(
        left.is_empty(),
        "still running 1 s after the kill: {left:?}\n{run}"
    );
    assert_eq!(f.haproxy.running_generation(), Some(1), "{run}");

    // The next apply (the association's, with the normal reload): the lock at once, and it
    // repairs the file HAProxy does not run.
    let again = f.apply(&version);
    assert!(again.success(), "{again}");
    assert!(
        lock_wait(&again) < Duration::from_millis(500),
        "the lock was still held:\n{again}"
    );
    assert_eq!(f.haproxy.running_generation(), Some(2), "{again}");
    f.assert_routes("g2.test", "b");
}

/// The parent of a process, from `/proc/<pid>/stat`.
fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(") ")?.1.split(' ').nth(1)?.parse().ok()
}

/// SSM's cancel while the reload command runs (`reload.sh` sleeping 2 s before its USR2), sent
/// to the apply (the one child of the stand-in's `sh`): the agent stops the reload with its
/// children, so the new config never serves, rolls back, exits 2, and the record says
/// generation 1, which is what runs.
///
/// The old document (checked with `AUTOPROXY_TEMPLATE` set to it) failed every part: bash ran
/// its EXIT trap at once with `$?` 0, so it reported `applied` with the generation it meant to
/// install (2) while HAProxy still ran 1, and exited 143 without a rollback; the reload it left
/// behind (`timeout`, in a process group of its own) then made generation 2 live 2 s later.
#[test]
fn sigterm_during_the_reload_stops_it_and_the_record_tells_the_truth() {
    let f = Fixture::new(&["a", "b"]);
    let (first, _, marker, background) = slow_reload(&f, "2");

    let deadline = std::time::Instant::now() + PAUSE_WAIT;
    while !processes_of_run(&marker)
        .iter()
        .any(|(_, cmd)| cmd.starts_with("sleep"))
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the reload never ran:\n{}",
            background.stdout_so_far()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // The apply itself: the one child of the stand-in's `sh`.
    let script = background.pid();
    let apply: Vec<u32> = background
        .processes()
        .into_iter()
        .map(|(pid, _)| pid)
        .filter(|&pid| parent_of(pid) == Some(script))
        .collect();
    let [apply] = apply.as_slice() else {
        panic!(
            "expected one child of {script}: {:?}",
            background.processes()
        )
    };

    let seen = Mutex::new(Vec::new());
    let done = AtomicBool::new(false);
    let run = std::thread::scope(|scope| {
        scope.spawn(|| {
            while !done.load(Ordering::SeqCst) {
                if let Some(generation) = f.haproxy.running_generation() {
                    seen.lock().unwrap().push(generation);
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        background.signal_process(*apply, "TERM");
        let run = background.wait(RUN_TIMEOUT);
        // Longer than the stopped reload would have slept.
        std::thread::sleep(Duration::from_secs(3));
        done.store(true, Ordering::SeqCst);
        run
    });
    let seen = seen.into_inner().unwrap();
    assert!(
        !seen.contains(&2),
        "generation 2 served after the cancel: {seen:?}\n{run}"
    );
    assert_eq!(run.status, Some(2), "{run}");
    assert!(
        f.haproxy.wait_for_generation(1, Duration::from_secs(5)),
        "HAProxy runs {:?}:\n{run}",
        f.haproxy.running_generation()
    );
    assert_eq!(f.installed(), first);
    let record = f.record().expect("a record");
    assert_eq!(record["generation"], 1, "{record}\n{run}");
    assert_eq!(record["result"], "rolled_back", "{record}\n{run}");
    let left = processes_of_run(&marker);
    assert!(left.is_empty(), "still running: {left:?}\n{run}");
}
