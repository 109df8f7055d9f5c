//! autoproxy-agent's runtime-API client against a real HAProxy (master-worker, on loopback):
//! what `show info` gives, map changes over one `prompt` connection, HAProxy's refusals
//! surfacing as errors, and a command that would be two never reaching the socket.

use std::time::Duration;

use autoproxy_agent::haproxy::{RuntimeApi, RuntimeError};
use autoproxy_tests::proxy::{self, Backends, Haproxy, HaproxyFiles};

const ADDRESSES: &str = "autoproxy/addresses.map";

#[test]
fn the_client_reads_and_changes_a_running_haproxy() {
    let backends = Backends::start(&["a"]);
    let haproxy = Haproxy::new();
    let options = haproxy.options(backends.port);
    let config = proxy::render(
        7,
        &[proxy::api_route("one.test", backends.get("a"))],
        &options,
    );
    haproxy.start(&config);
    let api = RuntimeApi::new(haproxy.stats_socket(), Duration::from_secs(2));

    let info = api.info().unwrap();
    assert_eq!(info.generation(), Some(7), "{info:?}");
    assert_eq!(Some(info.pid), haproxy.worker_pid(), "{info:?}");

    let mut session = api.session().unwrap();
    assert_eq!(
        session.info().unwrap(),
        info,
        "prompt mode answers the same"
    );
    session
        .change(&format!("add map {ADDRESSES} api.one.test 127.0.0.9"))
        .unwrap();
    session
        .change(&format!("set map {ADDRESSES} api.one.test 127.0.0.10"))
        .unwrap();
    session
        .change(&format!("add map {ADDRESSES} api.two.test 127.0.0.11"))
        .unwrap();
    session
        .change(&format!("del map {ADDRESSES} api.two.test"))
        .unwrap();
    let entries = session.show_map(ADDRESSES).unwrap();
    assert_eq!(
        entries,
        vec![("api.one.test".to_owned(), "127.0.0.10".to_owned())]
    );

    // HAProxy's own refusals come back as errors naming the command, and the session goes on.
    let refused = session.change("add map autoproxy/no-such.map a b");
    assert!(
        matches!(&refused, Err(RuntimeError::Refused { command, .. }) if command.contains("no-such")),
        "{refused:?}"
    );
    let unknown = session.show_map("autoproxy/no-such.map");
    assert!(
        matches!(unknown, Err(RuntimeError::Unexpected { .. })),
        "{unknown:?}"
    );
    assert_eq!(session.info().unwrap().pid, info.pid);

    // Never sent: HAProxy would run the second command.
    let two = session.change(&format!(
        "del map {ADDRESSES} api.one.test;shutdown sessions"
    ));
    assert!(matches!(two, Err(RuntimeError::Unsafe { .. })), "{two:?}");
    assert_eq!(session.show_map(ADDRESSES).unwrap().len(), 1);
}

#[test]
fn nothing_listening_is_a_connect_error() {
    let dir = tempfile::tempdir().unwrap();
    let api = RuntimeApi::new(dir.path().join("none.sock"), Duration::from_secs(1));
    assert!(matches!(api.info(), Err(RuntimeError::Connect { .. })));
}
