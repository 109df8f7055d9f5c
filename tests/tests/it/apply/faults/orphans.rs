//! The reload command's children never outlive the apply: not after SSM's timeout kills the
//! script's group, not after a cancel stops the apply during the reload.

use std::os::unix::fs::PermissionsExt;

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

/// Generation 1 runs; an apply of generation 2 (a setting changed: it reloads) starts in the
/// background, reloading with `reload` (a command that sleeps before it reloads) and its
/// processes marked with the returned `AUTOPROXY_TEST_RUN=…`, with no fleet record before it.
/// Returns generation 1's config, generation 2's version id, the marker and the run.
fn slow_reload(f: &Fixture, reload: &str) -> (String, String, String, Background) {
    let first = f.config(1, &[("g1.test", "a")]);
    f.install_first(&first);
    let second = f.reloading_config(2, &[("g1.test", "b"), ("g2.test", "b")]);
    let version = f.upload(&second);
    let slow = f.haproxy.apply_document_reloading_with(reload).unwrap();
    let marker = format!(
        "AUTOPROXY_TEST_RUN={}",
        f.haproxy.dir().file_name().unwrap().to_string_lossy()
    );
    let (key, value) = marker.split_once('=').unwrap();
    f.delete_record();
    let background = f.start_apply(&slow, &version, &env(&[(key, value)]));
    (first, version, marker, background)
}

/// A reload command whose first run sleeps `delay` seconds before it runs `reload.sh`, and
/// whose later runs (a rollback's) reload at once.
fn slow_first_reload(f: &Fixture, delay: u32) -> String {
    let dir = f.haproxy.dir();
    let path = dir.join("slow-first-reload.sh");
    let script = format!(
        "#!/bin/sh\nif [ ! -e '{slept}' ]; then : >'{slept}'; sleep {delay}; fi\nexec {reload}\n",
        slept = dir.join("slept-once").display(),
        reload = f.haproxy.reload_command(&[]),
    );
    std::fs::write(&path, script).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path.display().to_string()
}

/// Waits until the run's reload command runs and has started its sleep.
fn wait_for_reload(marker: &str, background: &Background) {
    let deadline = std::time::Instant::now() + PAUSE_WAIT;
    loop {
        let running = processes_of_run(marker);
        let reload = running.iter().any(|(_, cmd)| cmd.contains("reload.sh"));
        let sleep = running.iter().any(|(_, cmd)| cmd.starts_with("sleep"));
        if reload && sleep {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the reload never ran: {running:?}\n{}",
            background.stdout_so_far()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The run's processes still alive `grace` after `since` (a SIGKILL takes effect
/// asynchronously); any found are killed, so that a failing test leaves none behind.
fn left_after(marker: &str, since: std::time::Instant, grace: Duration) -> Vec<(u32, String)> {
    let mut left = processes_of_run(marker);
    while !left.is_empty() && since.elapsed() < grace {
        std::thread::sleep(Duration::from_millis(20));
        left = processes_of_run(marker);
    }
    for (pid, _) in &left {
        let _ = std::process::Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status();
    }
    left
}

/// SSM's timeout kills the script's process group: the reload command and whatever it
/// started (here `reload.sh` sleeping before its USR2) go with it, so nothing reloads HAProxy
/// after the apply died and the next apply takes the lock at once.
///
/// The old document ran each child under `timeout(1)`, which moves it into a process group of
/// its own: the kill missed `timeout`, `reload.sh` and its `sleep`, which lived on for the rest
/// of their 30 s and then reloaded HAProxy with whatever file was in place, after the apply
/// (and its record) had ended.
#[test]
fn no_child_outlives_a_killed_apply() {
    let f = Fixture::new(&["a", "b"]);
    let (_, version, marker, background) = slow_reload(&f, &f.haproxy.reload_command(&["30"]));
    wait_for_reload(&marker, &background);
    background.signal_group("KILL");
    let killed = std::time::Instant::now();
    let run = background.wait(RUN_TIMEOUT);
    assert_eq!(run.status, None, "{run}");

    let left = left_after(&marker, killed, Duration::from_secs(1));
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

/// SSM's cancel while the reload command runs (sleeping 30 s before its USR2), sent to the
/// apply (the one child of the stand-in's `sh`): the agent stops the reload with
/// its children, so none outlives the apply and the new config never serves; it rolls back,
/// exits 2, and the record says generation 1, which is what runs.
///
/// The children are looked for right after the apply ends, while a reload left behind would
/// still sleep (the rollback's own reload does not sleep): `reload.sh` reads the config only
/// when it wakes, and by then the rollback has put generation 1 back, so what serves
/// afterwards cannot tell a stopped reload from one that lived on.
///
/// The old document (checked with `AUTOPROXY_TEMPLATE` set to it) failed every part: bash ran
/// its EXIT trap at once with `$?` 0, so it reported `applied` with the generation it meant to
/// install (2) while HAProxy still ran 1, and exited 143 without a rollback; the reload it left
/// behind (`timeout`, in a process group of its own) then made generation 2 live when it woke.
#[test]
fn sigterm_during_the_reload_stops_it_and_the_record_tells_the_truth() {
    let f = Fixture::new(&["a", "b"]);
    let (first, _, marker, background) = slow_reload(&f, &slow_first_reload(&f, 30));
    wait_for_reload(&marker, &background);
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
    let (run, left) = std::thread::scope(|scope| {
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
        let left = left_after(&marker, std::time::Instant::now(), Duration::from_secs(1));
        // HAProxy watched a while after the rollback's reload.
        std::thread::sleep(Duration::from_secs(2));
        done.store(true, Ordering::SeqCst);
        (run, left)
    });
    assert!(
        left.is_empty(),
        "the stopped reload's processes outlived the apply: {left:?}\n{run}"
    );
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
}
