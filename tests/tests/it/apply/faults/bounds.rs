//! The apply's bounds, measured where they bite: a worker frozen for the whole apply, an S3
//! that answers every call late, a reload that fails. Each run ends within its bound, with an
//! exit status and a fleet record that say what is true; the figures are printed.
//!
//! The agent holds itself to two deadlines (`LOCKED_BUDGET` for the steps under the lock,
//! `FINISH_BUDGET` for the rollback, the record and the service), each step to its own; these
//! runs show how far below them the real worst cases stay, and that none waits out a bound it
//! does not have to.

use autoproxy_agent::apply::{QUESTION_TIMEOUT, SILENT_BUDGET};
use autoproxy_tests::freeze::Frozen;
use autoproxy_tests::recording_proxy::RecordingProxy;

use super::*;

/// The bound for a worker frozen throughout: the whole document run, two silent budgets and
/// room to spare.
const FROZEN_BOUND: Duration = Duration::from_secs(20);
/// How late the slow S3 answers each call.
const S3_DELAY: Duration = Duration::from_secs(2);

fn took(run: &Run) -> Duration {
    run.finished.duration_since(run.started)
}

/// A worker frozen (SIGSTOP) from before the apply until after it: the apply cannot learn
/// what runs, so it changes nothing. It asks for `SILENT_BUDGET` at the start and again for
/// the record, each question cut at its deadline rather than waited out per command: the run
/// ends within 20 s with exit 1, a `failed` record that says the generation is unknown, and
/// the previous generation still serving once the worker thaws.
#[test]
fn a_worker_frozen_for_the_whole_apply_ends_it_within_20_s_and_the_record_says_unknown() {
    let f = Fixture::new(&["a", "b"]);
    let first = f.config(1, &[("g1.test", "a")]);
    f.install_first(&first);
    let worker = f.haproxy.worker_pid().unwrap();
    let version = f.upload(&f.reloading_config(2, &[("g1.test", "b"), ("g2.test", "b")]));
    f.delete_record();

    let frozen = Frozen::stop(worker);
    let run = f.apply(&version);
    drop(frozen);
    let took = took(&run);
    println!(
        "a worker frozen for the whole apply: exit {:?} after {:.1} s (bound {} s; two silent budgets of {} s)",
        run.status,
        took.as_secs_f64(),
        FROZEN_BOUND.as_secs(),
        SILENT_BUDGET.as_secs()
    );
    assert_eq!(run.status, Some(1), "{run}");
    assert!(took <= FROZEN_BOUND, "{took:?}:\n{run}");
    // It asked for the whole budget before it gave up: the freeze was met, not skipped.
    assert!(took >= SILENT_BUDGET, "{took:?}:\n{run}");
    assert!(
        run.failure()
            .is_some_and(|f| f.contains("did not answer") && f.contains("nothing changed")),
        "{run}"
    );
    let record = f.record().expect("a fleet record");
    assert_eq!(record["result"], "failed", "{record}");
    assert_eq!(record["generation"], 0, "{record}");
    assert!(
        record["unconfirmed"]
            .as_str()
            .is_some_and(|u| u.contains("unknown")),
        "{record}"
    );
    assert_eq!(f.installed(), first);
    assert_eq!(f.haproxy.worker_pid(), Some(worker), "no reload happened");
    assert_eq!(f.haproxy.running_generation(), Some(1));
    f.assert_routes("g1.test", "a");
}

/// An S3 that answers every call `S3_DELAY` late (a relay in front of moto holds each
/// request): the download and the record each wait, nothing gives up early, nothing waits a
/// time-out; the new generation is applied and the record says so.
#[test]
fn an_s3_that_answers_late_slows_the_apply_by_its_delay_and_no_more() {
    let f = Fixture::new(&["a", "b"]);
    f.install_first(&f.config(1, &[("g1.test", "a")]));
    let version = f.upload(&f.config(2, &[("g1.test", "b"), ("g2.test", "a")]));
    f.delete_record();
    let upstream: SocketAddr = format!("127.0.0.1:{}", f.moto.port).parse().unwrap();
    let slow = RecordingProxy::start_slow(upstream, S3_DELAY);

    let env = env(&[("AWS_ENDPOINT_URL", &slow.endpoint())]);
    let run = f.start_apply(&f.document, &version, &env).wait(RUN_TIMEOUT);
    let calls = slow.take().len();
    let took = took(&run);
    let bound = S3_DELAY * u32::try_from(calls).unwrap() + Duration::from_secs(5);
    println!(
        "an S3 answering {} s late: {calls} calls, exit {:?} after {:.1} s (bound: the calls' delays + 5 s = {} s)",
        S3_DELAY.as_secs(),
        run.status,
        took.as_secs_f64(),
        bound.as_secs()
    );
    assert_eq!(run.status, Some(0), "{run}");
    // The download and the record both went through the slow endpoint.
    assert!(calls >= 2, "{calls} calls:\n{run}");
    assert!(took >= S3_DELAY * 2, "{took:?}:\n{run}");
    assert!(took <= bound, "{took:?} for {calls} calls:\n{run}");
    let record = f.record().expect("a fleet record");
    assert_eq!(record["result"], "applied", "{record}");
    assert_eq!(record["generation"], 2, "{record}");
    f.assert_routes("g1.test", "b");
    f.assert_routes("g2.test", "a");
}

/// A reload that fails, then one whose rollback's reload fails too (the longest way through:
/// reload, restore, reload again): each ends within a few socket questions of its reloads,
/// with exit 2 then 3, a record that says `rolled_back` then `failed`, and generation 1
/// serving throughout.
#[test]
fn a_failing_reload_ends_the_apply_within_its_bound_with_a_true_record() {
    let f = Fixture::new(&["a", "b"]);
    let (first, version, flaky) = f.before_a_failing_reload();
    // One question's worth per step that asks HAProxy, and the rollback's 1-s settle.
    let bound = QUESTION_TIMEOUT * 4 + Duration::from_secs(2);
    let always = f.haproxy.apply_document_reloading_with("false").unwrap();
    let cases = [
        ("once", flaky, 2, "rolled_back"),
        ("always", always, 3, "failed"),
    ];
    for (fails, document, status, result) in cases {
        f.delete_record();
        let run = f.run_deployed(&document, &[("ConfigVersion", &version)]);
        let took = took(&run);
        println!(
            "a reload that fails {fails}: exit {:?} after {:.2} s (bound {} s)",
            run.status,
            took.as_secs_f64(),
            bound.as_secs()
        );
        assert_eq!(run.status, Some(status), "{run}");
        assert!(took <= bound, "{took:?}:\n{run}");
        let record = f.record().expect("a fleet record");
        assert_eq!(record["result"], result, "{record}");
        assert_eq!(record["generation"], 1, "{record}");
        assert_eq!(f.installed(), first);
        assert_eq!(f.haproxy.running_generation(), Some(1));
        f.assert_routes("g1.test", "a");
    }
}

/// The steps' deadline itself: a run paused after its reload (HAProxy runs generation 2 and
/// the run has not yet checked it) for longer than the deadline, shortened to 3 s by the test
/// hook. The deadline stops it where it is, and the ending rolls back: exit 2, generation 1
/// serving again, a record that says so. Without the deadline the run would sit out its pause
/// (30 s) and end applied.
#[test]
fn the_steps_deadline_stops_a_run_where_it_is_and_the_ending_undoes_it() {
    const BUDGET: Duration = Duration::from_secs(3);
    let f = Fixture::new(&["a", "b"]);
    let first = f.config(1, &[("g1.test", "a")]);
    f.install_first(&first);
    let version = f.upload(&f.reloading_config(2, &[("g1.test", "b"), ("g2.test", "b")]));
    f.delete_record();
    let env = env(&[
        ("AUTOPROXY_AGENT_PAUSE", "verify"),
        ("AUTOPROXY_AGENT_PAUSE_SECONDS", "30"),
        (
            "AUTOPROXY_AGENT_LOCKED_BUDGET_SECONDS",
            &BUDGET.as_secs().to_string(),
        ),
    ]);
    let run = f.start_apply(&f.document, &version, &env).wait(RUN_TIMEOUT);
    let took = took(&run);
    // The deadline, then the rollback's reload and running check, and the record.
    let bound = BUDGET + Duration::from_secs(7);
    println!(
        "the steps' deadline ({} s) during a pause: exit {:?} after {:.1} s (bound {} s)",
        BUDGET.as_secs(),
        run.status,
        took.as_secs_f64(),
        bound.as_secs()
    );
    assert_eq!(run.status, Some(2), "{run}");
    assert!(
        run.failure().is_some_and(|f| f.contains(&format!(
            "did not end within {} s (stopped at step verify)",
            BUDGET.as_secs()
        ))),
        "{run}"
    );
    assert!(took >= BUDGET && took <= bound, "{took:?}:\n{run}");
    let record = f.record().expect("a fleet record");
    assert_eq!(record["result"], "rolled_back", "{record}");
    assert_eq!(record["generation"], 1, "{record}");
    assert_eq!(f.installed(), first);
    assert_eq!(f.haproxy.running_generation(), Some(1));
    f.assert_routes("g1.test", "a");
}

/// The download reads no more than its limit: an object S3 says is larger is refused before
/// its body is read, and one within it arrives whole. The apply's own limit is
/// `MAX_CONFIG_BYTES`; a small one here keeps the object small.
#[tokio::test]
async fn a_download_larger_than_its_limit_is_refused_and_one_within_it_arrives_whole() {
    let moto = tokio::task::spawn_blocking(Moto::start).await.unwrap();
    let s3 = aws_sdk_s3::Client::new(&moto.sdk_config().await);
    s3.create_bucket().bucket("bounded").send().await.unwrap();
    let body = vec![b'#'; 2048];
    s3.put_object()
        .bucket("bounded")
        .key("haproxy.cfg")
        .body(body.clone().into())
        .send()
        .await
        .unwrap();
    let get = |limit| autoproxy::s3::get_bytes(&s3, "bounded", "haproxy.cfg", None, limit);
    let refused = get(1024)
        .await
        .expect_err("2048 bytes against a limit of 1024");
    assert_eq!(
        refused,
        "expected an object of at most 1024 bytes, got 2048 bytes"
    );
    let (got, _) = get(2048).await.unwrap();
    assert_eq!(got, body);
}
