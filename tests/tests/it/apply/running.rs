//! What runs, asked where it can be known: the service for "does HAProxy run", the stats
//! socket for "which generation". Where users start (a hand-written config without a stats
//! socket, under systemd) and where workers are busy (a worker stopped with SIGSTOP, the
//! faithful stand-in for one that does not answer for seconds), the apply decides nothing from
//! a guess, never installs an older generation, and its fleet record says what is true.

use autoproxy_tests::freeze::Frozen;
use autoproxy_tests::systemctl::Systemctl;

use super::*;

/// How long the tests freeze a worker: longer than one question on the socket
/// (`QUESTION_TIMEOUT`, 2 s), shorter than the agent's budget for a silent socket
/// (`SILENT_BUDGET`, 6 s).
const FROZEN: Duration = Duration::from_secs(3);
/// How long a paused apply waits at its point.
const PAUSE: Duration = Duration::from_secs(1);

impl Fixture {
    /// The fleet record as it is now.
    fn fleet_record(&self) -> serde_json::Value {
        let s3 = aws_sdk_s3::Client::new(&self.sdk);
        let object = self
            .rt
            .block_on(s3.get_object().bucket(BUCKET).key(RECORD).send())
            .unwrap();
        let bytes = self.rt.block_on(object.body.collect()).unwrap().to_vec();
        serde_json::from_slice(&bytes).unwrap()
    }

    /// An apply of `version` started in the background, paused for [`PAUSE`] before `point`.
    fn paused_at(&self, version: &str, point: &str) -> Background {
        let env = [
            ("AUTOPROXY_AGENT_PAUSE".to_owned(), point.to_owned()),
            (
                "AUTOPROXY_AGENT_PAUSE_SECONDS".to_owned(),
                PAUSE.as_secs().to_string(),
            ),
        ];
        let mut background = self
            .spawn(&self.document, &[("ConfigVersion", version)], &env, &[])
            .unwrap();
        let pause = format!("autoproxy-apply: pause: before {point}");
        assert!(
            background.wait_for_line(&pause, RUN_TIMEOUT),
            "no '{pause}':\n{}",
            background.stdout_so_far()
        );
        background
    }

    /// A config as people write it by hand: no stats socket, no description, one frontend
    /// on this HAProxy's https port to backend `a`.
    fn hand_written(&self) -> String {
        let backend = self.backends.get("a");
        format!(
            "global\n    maxconn 200\n\ndefaults\n    mode tcp\n    timeout connect 5s\n    timeout client 30s\n    timeout server 30s\n\nfrontend hand\n    bind {}\n    default_backend hand\n\nbackend hand\n    server a {}\n",
            self.haproxy.https, backend.addr
        )
    }
}

/// Where users start: HAProxy runs under systemd on a hand-written config that declares no
/// stats socket. Nothing answers on a socket, yet HAProxy runs: the apply reloads it (a
/// `systemctl start` of an active unit would do nothing, and every apply would time out and
/// roll back, forever). The hand-written config is last-known-good.
#[test]
fn the_first_install_over_a_running_hand_written_config_without_a_stats_socket_reloads_it() {
    let f = Fixture::new(&["a", "b"]);
    let hand = f.hand_written();
    std::fs::write(f.haproxy.config_path(), &hand).unwrap();
    let systemctl = Systemctl::new(&f.haproxy);
    let document = f
        .haproxy
        .apply_document_reloading_with("systemctl reload haproxy")
        .unwrap();
    // Started as systemd would have started it, before autoproxy came.
    let started = std::process::Command::new(f.haproxy.dir().join("reload.sh"))
        .status()
        .unwrap();
    assert!(started.success(), "{}", f.haproxy.log());
    assert!(f.haproxy.worker_pid().is_none(), "no stats socket answers");

    let first = f.config(1, &[("g1.test", "b")]);
    let version = f.upload(&first);
    let run = f
        .try_run(&document, &[("ConfigVersion", &version)], &systemctl.env())
        .unwrap();
    assert_eq!(run.status, Some(0), "{run}{}", f.haproxy.log());
    let calls = systemctl.calls();
    assert!(
        calls.iter().any(|c| c == "reload haproxy") && !calls.iter().any(|c| c == "start haproxy"),
        "reloaded, not started: {calls:?}\n{run}"
    );
    assert!(
        f.haproxy.wait_for_generation(1, Duration::from_secs(10)),
        "{run}"
    );
    f.assert_routes("g1.test", "b");
    assert_eq!(f.installed(), first);
    assert_eq!(f.last_good().as_deref(), Some(hand.as_str()), "{run}");
    let record = f.fleet_record();
    assert_eq!(record["result"], "applied", "{record}");
    assert_eq!(record["generation"], 1, "{record}");
    assert_eq!(record["path"], "reload", "{record}");
}

/// A worker that does not answer for 3 s when the apply first asks what runs: the apply asks
/// again within its budget instead of reading "generation 0, not running", so last-known-good
/// is refreshed, the change goes in without a reload, and the record is true.
#[test]
fn a_worker_frozen_during_the_first_question_delays_the_apply_but_changes_no_decision() {
    let f = Fixture::new(&["a", "b"]);
    let first = f.config(1, &[("g1.test", "a")]);
    f.install_first(&first);
    let worker = f.haproxy.worker_pid().unwrap();
    let second = f.config(2, &[("g1.test", "b"), ("g2.test", "a")]);
    let version = f.upload(&second);

    let frozen_at = std::time::Instant::now();
    let thaw = Frozen::stop_for(worker, FROZEN);
    let run = f.apply(&version);
    let took = frozen_at.elapsed();
    thaw.join().unwrap();
    assert_eq!(run.status, Some(0), "{run}{}", f.haproxy.log());
    // The apply could not end before the worker thawed: a question met the freeze. Not the
    // update's (that would have reloaded, below), so the first one, which asked again.
    assert!(
        took >= FROZEN,
        "the apply ended {took:?} after the freeze, before the thaw:\n{run}"
    );
    assert!(
        FROZEN > autoproxy_agent::apply::QUESTION_TIMEOUT
            && FROZEN < autoproxy_agent::apply::SILENT_BUDGET,
        "the freeze outlasts one question and not the budget"
    );
    assert!(
        run.stdout.contains("no reload"),
        "the same worker took the routes:\n{run}"
    );
    assert_eq!(f.haproxy.worker_pid(), Some(worker), "{run}");
    assert_eq!(f.last_good().as_deref(), Some(first.as_str()), "{run}");
    f.assert_routes("g1.test", "b");
    f.assert_routes("g2.test", "a");
    let record = f.fleet_record();
    assert_eq!(record["generation"], 2, "{record}");
    assert_eq!(record["unconfirmed"], "", "{record}");
    assert_eq!(record["path"], "runtime", "{record}");
}

/// A worker that stops answering half-way through a runtime update (one table committed):
/// the update gives up at its per-command deadline and the apply reloads, as HAProxy running
/// (not started); the new worker runs the new generation and the record says so. The next
/// change goes in without a reload again.
#[test]
fn a_worker_frozen_during_a_runtime_update_is_reloaded_and_the_record_is_true() {
    let f = Fixture::new(&["a", "b"]);
    f.install_first(&f.config(1, &[("g1.test", "a")]));
    let worker = f.haproxy.worker_pid().unwrap();
    let version = f.upload(&f.config(2, &[("g1.test", "b"), ("g2.test", "a")]));
    let background = f.paused_at(&version, "update");
    // Frozen from the pause's line until well after the update's question has timed out: the
    // pause, then one question, then 1.5 s. Frozen for 3 s, the thaw and the question's
    // timeout fell within milliseconds of each other, and the worker answered now and then.
    let frozen = PAUSE + autoproxy_agent::apply::QUESTION_TIMEOUT + Duration::from_millis(1500);
    assert!(frozen < autoproxy_agent::apply::SILENT_BUDGET);
    let thaw = Frozen::stop_for(worker, frozen);
    let run = background.wait(RUN_TIMEOUT);
    thaw.join().unwrap();
    assert_eq!(run.status, Some(0), "{run}{}", f.haproxy.log());
    assert!(run.stdout.contains("reloading"), "{run}");
    assert!(
        f.haproxy.wait_for_generation(2, Duration::from_secs(10)),
        "{run}"
    );
    f.assert_routes("g1.test", "b");
    f.assert_routes("g2.test", "a");
    let record = f.fleet_record();
    assert_eq!(record["generation"], 2, "{record}");
    assert_eq!(record["path"], "reload", "{record}");

    let version = f.upload(&f.config(3, &[("g1.test", "a")]));
    let run = f.apply(&version);
    assert_eq!(run.status, Some(0), "{run}");
    assert!(run.stdout.contains("no reload"), "{run}");
    f.assert_routes("g1.test", "a");
}

/// A worker silent when the record is written, for longer than the agent asks: the record
/// keeps the generation HAProxy reported during the run and says it is unconfirmed, never 0.
#[test]
fn a_worker_silent_at_the_end_leaves_a_record_of_what_it_reported_last_never_zero() {
    let f = Fixture::new(&["a", "b"]);
    f.install_first(&f.config(1, &[("g1.test", "a")]));
    let worker = f.haproxy.worker_pid().unwrap();
    let version = f.upload(&f.config(2, &[("g1.test", "b")]));
    let background = f.paused_at(&version, "record");
    let frozen = Frozen::stop(worker);
    let run = background.wait(RUN_TIMEOUT);
    drop(frozen);
    assert_eq!(run.status, Some(0), "{run}");
    let record = f.fleet_record();
    assert_eq!(record["generation"], 2, "{record}");
    assert_eq!(record["result"], "applied", "{record}");
    let unconfirmed = record["unconfirmed"].as_str().unwrap_or_default();
    assert!(
        unconfirmed.contains("did not answer") && unconfirmed.contains("update"),
        "{record}"
    );
}

/// `rejected` is HAProxy's verdict only: a check that was killed judged nothing, and the
/// record says `failed`.
#[test]
fn a_check_that_could_not_judge_is_a_failure_not_a_rejection() {
    let f = Fixture::new(&["a"]);
    f.install_first(&f.config(1, &[("g1.test", "a")]));
    let stand_in = tempfile::tempdir().unwrap();
    let haproxy = stand_in.path().join("haproxy");
    std::fs::write(&haproxy, "#!/bin/sh\nkill -KILL $$\n").unwrap();
    std::fs::set_permissions(
        &haproxy,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let path = format!(
        "{}:{}:{}",
        stand_in.path().display(),
        autoproxy_tests::moto::tools_bin().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let version = f.upload(&f.config(2, &[("g2.test", "a")]));
    let run = f
        .try_run(
            &f.document,
            &[("ConfigVersion", &version)],
            &[("PATH".to_owned(), path)],
        )
        .unwrap();
    assert_eq!(run.status, Some(1), "{run}");
    assert!(run.stderr.contains("did not judge"), "{run}");
    let record = f.fleet_record();
    assert_eq!(record["result"], "failed", "{record}");
    assert_eq!(record["generation"], 1, "{record}");
}
