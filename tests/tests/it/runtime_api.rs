//! autoproxy-agent's runtime-API client against a real HAProxy (master-worker, on loopback):
//! what `show info` gives, typed map changes over one `prompt` connection (a version prepared,
//! filled and committed), HAProxy's refusals surfacing as errors, and a word that would be
//! read as two never reaching the socket.

use std::time::Duration;

use autoproxy_agent::haproxy::{MapChange, RuntimeApi, RuntimeError};
use autoproxy_tests::proxy::{self, Backends, Haproxy, HaproxyFiles};

const ADDRESSES: &str = "autoproxy/addresses.map";

/// An HAProxy running `generation` with one route, and its backend.
fn started(generation: u64) -> (Backends, Haproxy) {
    let backends = Backends::start(&["a"]);
    let haproxy = Haproxy::new();
    let options = haproxy.options(backends.port);
    let config = proxy::render(
        generation,
        &[proxy::api_route("one.test", backends.get("a"))],
        &options,
    );
    haproxy.start(&config);
    (backends, haproxy)
}

#[tokio::test]
async fn the_client_reads_and_changes_a_running_haproxy() {
    let (_backends, haproxy) = started(7);
    let api = RuntimeApi::new(haproxy.stats_socket(), Duration::from_secs(2));

    let info = api.info().await.unwrap();
    assert_eq!(info.generation(), Some(7), "{info:?}");
    assert_eq!(Some(info.pid), haproxy.worker_pid(), "{info:?}");

    let mut session = api.session().await.unwrap();
    assert_eq!(
        session.info().await.unwrap(),
        info,
        "prompt mode answers the same"
    );
    let add = |key, value| MapChange::Add {
        map: ADDRESSES,
        key,
        value,
    };
    session
        .change(add("api.one.test", "127.0.0.9"))
        .await
        .unwrap();
    session
        .change(MapChange::Set {
            map: ADDRESSES,
            key: "api.one.test",
            value: "127.0.0.10",
        })
        .await
        .unwrap();
    session
        .change(add("api.two.test", "127.0.0.11"))
        .await
        .unwrap();
    session
        .change(MapChange::Delete {
            map: ADDRESSES,
            key: "api.two.test",
        })
        .await
        .unwrap();
    let entries = session.show_map(ADDRESSES).await.unwrap();
    assert_eq!(
        entries,
        vec![("api.one.test".to_owned(), "127.0.0.10".to_owned())]
    );

    // A new version, filled and committed: the map is replaced as a whole.
    let version = session.prepare_map(ADDRESSES).await.unwrap();
    session
        .fill_map(
            ADDRESSES,
            version,
            "api.three.test 127.0.0.12\napi.four.test 127.0.0.13\n",
        )
        .await
        .unwrap();
    assert_eq!(session.show_map(ADDRESSES).await.unwrap().len(), 1);
    session
        .change(MapChange::Commit {
            map: ADDRESSES,
            version,
        })
        .await
        .unwrap();
    let mut entries = session.show_map(ADDRESSES).await.unwrap();
    entries.sort();
    assert_eq!(
        entries,
        vec![
            ("api.four.test".to_owned(), "127.0.0.13".to_owned()),
            ("api.three.test".to_owned(), "127.0.0.12".to_owned())
        ]
    );

    // HAProxy's own refusals come back as errors naming the command, and the session goes on.
    let refused = session
        .change(MapChange::Add {
            map: "autoproxy/no-such.map",
            key: "a",
            value: "b",
        })
        .await;
    assert!(
        matches!(&refused, Err(RuntimeError::Refused { command, .. }) if command.contains("no-such")),
        "{refused:?}"
    );
    let unknown = session.show_map("autoproxy/no-such.map").await;
    assert!(
        matches!(unknown, Err(RuntimeError::Unexpected { .. })),
        "{unknown:?}"
    );
    assert_eq!(session.info().await.unwrap().pid, info.pid);

    // Never sent: HAProxy would run the second command, or read a key and a value.
    for key in [
        "api.three.test;shutdown sessions",
        "api.three.test 127.0.0.1",
    ] {
        let two = session
            .change(MapChange::Delete {
                map: ADDRESSES,
                key,
            })
            .await;
        assert!(
            matches!(two, Err(RuntimeError::NotOneWord { .. })),
            "{two:?}"
        );
    }
    assert_eq!(session.show_map(ADDRESSES).await.unwrap().len(), 2);
}

#[tokio::test]
async fn nothing_listening_is_a_connect_error() {
    let dir = tempfile::tempdir().unwrap();
    let api = RuntimeApi::new(dir.path().join("none.sock"), Duration::from_secs(1));
    assert!(
        matches!(api.info().await, Err(ref err @ RuntimeError::Connect { .. }) if err.nothing_listens())
    );
}

/// A worker that is busy (here: stopped with SIGSTOP) leaves its socket silent: the client
/// gives up at its deadline with a time-out, which is not "nothing listens".
#[tokio::test]
async fn a_frozen_worker_is_a_time_out_not_a_stopped_haproxy() {
    let backends = Backends::start(&["a"]);
    let haproxy = Haproxy::new();
    let options = haproxy.options(backends.port);
    let config = proxy::render(
        3,
        &[proxy::api_route("one.test", backends.get("a"))],
        &options,
    );
    haproxy.start(&config);
    let worker = haproxy.worker_pid().unwrap();
    let api = RuntimeApi::new(haproxy.stats_socket(), Duration::from_millis(500));
    let _frozen = autoproxy_tests::freeze::Frozen::stop(worker);
    let started = std::time::Instant::now();
    let answer = api.info().await;
    assert!(
        matches!(&answer, Err(err @ RuntimeError::Timeout { .. }) if !err.nothing_listens()),
        "{answer:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "one deadline for the whole command: {:?}",
        started.elapsed()
    );
}
