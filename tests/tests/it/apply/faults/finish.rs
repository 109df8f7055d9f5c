//! A signal while the apply finishes (its rollback and its record) is never swallowed: both
//! finish within their bound, then the agent exits with the signal's code.

use std::time::Instant;

use super::*;

/// A reload that fails rolls back; SIGTERM comes after the rollback's restore, before the
/// record (the test hook pauses there for 3 s): the rollback completes, the record says
/// `rolled_back` and what runs, and the exit status is SIGTERM's, 143, within 20 s.
#[test]
fn sigterm_while_finishing_lets_the_rollback_and_record_end_then_exits_143() {
    let f = Fixture::new(&["a", "b"]);
    let (first, version, flaky) = f.before_a_failing_reload();
    f.delete_record();
    let mut background = f.start_apply(
        &flaky,
        &version,
        &env(&[
            ("AUTOPROXY_AGENT_PAUSE", "record"),
            ("AUTOPROXY_AGENT_PAUSE_SECONDS", "3"),
        ]),
    );
    let pause = "autoproxy-apply: pause: before record";
    assert!(
        background.wait_for_line(pause, PAUSE_WAIT),
        "no '{pause}' within {PAUSE_WAIT:?}:\n{}",
        background.stdout_so_far()
    );
    let signalled = Instant::now();
    background.signal_process(agent_pid(&background), "TERM");
    let run = background.wait(RUN_TIMEOUT);
    let took = signalled.elapsed();
    assert_eq!(run.status, Some(143), "{run}");
    assert!(took < Duration::from_secs(20), "{took:?}\n{run}");
    assert!(run.stdout.contains("SIGTERM while finishing"), "{run}");
    assert_eq!(f.installed(), first);
    assert_eq!(f.haproxy.running_generation(), Some(1));
    f.assert_routes("g1.test", "a");
    let record = f.record().expect("a record");
    assert_eq!(record["result"], "rolled_back", "{record}\n{run}");
    assert_eq!(record["generation"], 1, "{record}");
}
