//! An apply stopped at every point by a cancel (SIGTERM) or SSM's timeout (SIGKILL to the
//! script's process group): HAProxy keeps serving what it ran, the file is what runs or the
//! next apply repairs it, and the fleet record never claims what does not run. Then the
//! findings that the old bash document got wrong: a stopped HAProxy, a cancel during the
//! reload, and reload children that outlived the apply.
//!
//! SIGTERM goes to the agent alone (the child of the stand-in's `sh`), so that the run ends
//! with the agent's own exit status: sent to the whole group, it would also end that `sh` at
//! once, before the agent has rolled back and written its record.
//!
//! The matrix stops the agent with its test hook (`AUTOPROXY_AGENT_PAUSE=<point>`: it logs
//! `autoproxy-apply: pause: before <point>` and sleeps there), so it cannot run against the
//! old document, which has no such hook; what the old one did at each point is argued on the
//! tests below that run without the hook.

use std::os::unix::fs::PermissionsExt;

use super::*;

/// How long a run may take to reach its pause point.
const PAUSE_WAIT: Duration = Duration::from_secs(30);

impl Fixture {
    fn delete_record(&self) {
        let s3 = aws_sdk_s3::Client::new(&self.sdk);
        self.rt
            .block_on(s3.delete_object().bucket(BUCKET).key(RECORD).send())
            .unwrap();
    }

    /// The fleet record as it is now, if there is one.
    fn record(&self) -> Option<serde_json::Value> {
        let s3 = aws_sdk_s3::Client::new(&self.sdk);
        let object = self
            .rt
            .block_on(s3.get_object().bucket(BUCKET).key(RECORD).send())
            .ok()?;
        let bytes = self.rt.block_on(object.body.collect()).unwrap().to_vec();
        Some(serde_json::from_slice(&bytes).unwrap())
    }

    /// Starts an apply of `version` in the background with `env` added.
    fn start_apply(
        &self,
        document: &Document,
        version: &str,
        env: &[(String, String)],
    ) -> Background {
        self.spawn(document, &[("ConfigVersion", version)], env, &[])
            .unwrap()
    }
}

fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

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

/// Whether a failure at the pause rolls back. Before the runtime update the new route maps
/// are in place but neither the config nor HAProxy was touched: the installed config's maps
/// are written back, and nothing changed.
fn installed(point: &str) -> bool {
    after_swap(point)
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

    let mut background = f.start_apply(
        &f.document,
        &version,
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
            let agent = background
                .processes()
                .into_iter()
                .find(|(_, argv)| {
                    argv.first()
                        .is_some_and(|a| a.ends_with("/autoproxy-agent"))
                        && argv.get(1).is_some_and(|a| a == "apply")
                })
                .unwrap_or_else(|| panic!("no agent in {:?}", background.processes()));
            background.signal_process(agent.0, signal);
        }
        // To the whole process group, as SSM's timeout does.
        _ => background.signal_group(signal),
    }
    let run = background.wait(RUN_TIMEOUT);
    assert!(
        !run.timed_out,
        "the run did not end after SIG{signal}:\n{run}"
    );

    let dir = f.haproxy.dir().to_owned();
    match signal {
        "TERM" => {
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
                assert_eq!(f.last_good().as_deref(), Some(first.as_str()), "{run}");
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
            let (routes, _) = MapFiles::route_tables(&first);
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
                artifact::parse_header(&first).unwrap().sha256,
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
        "KILL" => {
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
            let installed = if after_swap(point) { &second } else { &first };
            assert_eq!(&f.installed(), installed, "{run}");
        }
        other => panic!("no such case: SIG{other}"),
    }

    // The next apply of the same version: the lock is free at once, and generation 2 runs.
    let (again, record) = f.apply_and_record(&version);
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

/// A `systemctl` for unit `haproxy` only, first on PATH, behaving as systemd does for this
/// test HAProxy: `reload` of a stopped unit fails, `start` starts it (`reload.sh` starts an
/// HAProxy when no master runs), `restart`, `stop`, `is-active`. Each call is logged.
struct Systemctl {
    dir: tempfile::TempDir,
}

impl Systemctl {
    fn new(haproxy: &Haproxy) -> Systemctl {
        let dir = tempfile::Builder::new()
            .prefix("autoproxy-systemctl-")
            .tempdir()
            .unwrap();
        let script = format!(
            r#"#!/bin/sh
# systemctl stand-in for haproxy.service.
dir='{haproxy}'
echo "$*" >>'{log}'
quiet=
verb=
unit=
for arg in "$@"; do
  case $arg in
    -q|--quiet) quiet=1 ;;
    -*) ;;
    *) if [ -z "$verb" ]; then verb=$arg; elif [ -z "$unit" ]; then unit=${{arg%.service}}; fi ;;
  esac
done
if [ "$unit" != haproxy ]; then
  echo "Unit $unit.service could not be found." >&2
  [ "$verb" = is-active ] && {{ [ -n "$quiet" ] || echo inactive; exit 4; }}
  exit 5
fi
# The master runs: its pid file names a live process (a zombie is not one; `kill -0` would
# say it is, and so would reload.sh: a stale pid file goes before a start).
running() {{
  pid=$(cat "$dir/haproxy.pid" 2>/dev/null) && [ -n "$pid" ] && [ -r "/proc/$pid/stat" ] || return 1
  state=$(sed 's/.*) //' "/proc/$pid/stat" | cut -c1)
  [ "$state" != Z ] && [ "$state" != X ]
}}
start() {{ rm -f "$dir/haproxy.pid"; exec "$dir/reload.sh"; }}
stop() {{
  running || return 0
  kill -TERM "$(cat "$dir/haproxy.pid")"
  n=0
  while running && [ $n -lt 100 ]; do sleep 0.05; n=$((n + 1)); done
}}
case $verb in
  is-active)
    if running; then [ -n "$quiet" ] || echo active; exit 0; fi
    [ -n "$quiet" ] || echo inactive; exit 3 ;;
  start) running && exit 0; start ;;
  reload)
    if ! running; then
      echo "Job for haproxy.service failed: haproxy.service is not active, cannot reload." >&2
      exit 1
    fi
    exec "$dir/reload.sh" ;;
  restart|reload-or-restart)
    [ "$verb" = reload-or-restart ] && running && exec "$dir/reload.sh"
    stop; start ;;
  stop) stop ;;
  *) echo "Unknown command verb $verb." >&2; exit 1 ;;
esac
"#,
            haproxy = haproxy.dir().display(),
            log = dir.path().join("calls.log").display(),
        );
        let path = dir.path().join("systemctl");
        std::fs::write(&path, script).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        Systemctl { dir }
    }

    /// The environment that puts the stand-in first (then the pinned tools, as the agent
    /// stand-in does).
    fn env(&self) -> Vec<(String, String)> {
        let inherited = std::env::var("PATH").unwrap_or_default();
        let tools = autoproxy_tests::moto::tools_bin();
        vec![(
            "PATH".to_owned(),
            format!(
                "{}:{}:{inherited}",
                self.dir.path().display(),
                tools.display()
            ),
        )]
    }

    /// The calls so far, one line of arguments each.
    fn calls(&self) -> Vec<String> {
        std::fs::read_to_string(self.dir.path().join("calls.log"))
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }
}

/// HAProxy stopped (a crash, an operator's `systemctl stop`, a reboot with the unit disabled):
/// the apply starts it, with `systemctl start haproxy` where the reload command is
/// `systemctl reload haproxy` (systemd refuses to reload a unit that is not active).
///
/// The old document ran the reload command whatever the state: `systemctl reload haproxy`
/// failed ("not active"), it restored last-known-good and ran the same reload again, which
/// failed too, so it exited 3 ("the rollback did not complete either") and the instance stayed
/// down until a person came.
#[test]
fn a_stopped_haproxy_is_started_not_reloaded() {
    let f = Fixture::new(&["a", "b"]);
    f.install_first(&f.config(1, &[("g1.test", "a")]));
    let systemctl = Systemctl::new(&f.haproxy);
    let document = f
        .haproxy
        .apply_document_reloading_with("systemctl reload haproxy")
        .unwrap();

    // Running: reloaded through systemctl.
    let version = f.upload(&f.reloading_config(2, &[("g1.test", "a"), ("g2.test", "b")]));
    let run = f
        .try_run(&document, &[("ConfigVersion", &version)], &systemctl.env())
        .unwrap();
    assert!(run.success(), "{run}{}", f.haproxy.log());
    assert_eq!(f.haproxy.running_generation(), Some(2), "{run}");
    assert_eq!(systemctl.calls(), ["reload haproxy"], "{run}");
    assert!(
        f.haproxy.wait_for_generation(2, Duration::from_secs(10)),
        "{run}"
    );

    f.haproxy.stop();
    assert_eq!(f.haproxy.running_generation(), None);
    let third = f.config(3, &[("g1.test", "b"), ("g3.test", "a")]);
    let version = f.upload(&third);
    let run = f
        .try_run(&document, &[("ConfigVersion", &version)], &systemctl.env())
        .unwrap();
    assert_eq!(run.status, Some(0), "{run}{}", f.haproxy.log());
    assert_eq!(
        systemctl.calls(),
        ["reload haproxy", "start haproxy"],
        "started, not reloaded:\n{run}"
    );
    assert_eq!(f.haproxy.running_generation(), Some(3), "{run}");
    f.assert_routes("g1.test", "b");
    f.assert_routes("g3.test", "a");
    assert_eq!(f.installed(), third);
}

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
