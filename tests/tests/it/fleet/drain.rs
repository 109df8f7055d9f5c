//! A scale-in drains. The load balancer's deregistration stops new connections to the leaving
//! proxy and lets the open ones run for the deregistration delay, which is HAProxy's
//! `hard-stop-after`; HAProxy's soft stop does the same on the instance (its listeners close,
//! its connections run until `hard-stop-after`). Here: a kubectl watch through a proxy that is
//! soft-stopped keeps streaming until `hard-stop-after` and is cut then, and the leaving proxy
//! accepts no new connection.

use std::net::{Ipv4Addr, TcpStream};
use std::time::{Duration, Instant};

use autoproxy::model::{Route, SniMatch};
use autoproxy::names::HostName;
use autoproxy_tests::proxy::{self, Backends, Haproxy, HaproxyFiles};
use autoproxy_tests::stream::KubectlWatch;

/// Where the Kubernetes API server stand-in listens (no other test backend uses it).
const APISERVER: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 77);
const SNI: &str = "proxy.api.kube.test";
/// The test's `hard-stop-after` (production: 30m, the deregistration delay).
const HARD_STOP_AFTER: Duration = Duration::from_secs(4);

fn route(port: u16) -> Route {
    let zone_name = HostName::parse("kube.test").unwrap();
    Route {
        rule: "api".to_owned(),
        account: autoproxy_tests::moto::OWN_ACCOUNT.to_owned(),
        zone_id: "ZKUBE".to_owned(),
        sni: SNI.to_owned(),
        sni_match: SniMatch::Exact,
        back: HostName::parse(&APISERVER.to_string()).unwrap(),
        port,
        records: vec![zone_name.with_prefix("api")],
        zone_name,
    }
}

/// Waits (`timeout` at most) until `done` holds; whether it did.
fn wait_until(timeout: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if done() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_soft_stopped_proxy_keeps_a_watch_until_hard_stop_after_and_takes_no_new_connection() {
    let backends = Backends::start(&["unused"]);
    let haproxy = Haproxy::new();
    let mut options = haproxy.options(backends.port);
    options.hard_stop_after = format!("{}s", HARD_STOP_AFTER.as_secs());
    haproxy.start(&proxy::render(1, &[route(backends.port)], &options));
    let mut watch = KubectlWatch::start(APISERVER, backends.port, haproxy.https, SNI)
        .expect("kubectl and the API server stand-in (kubectl is on the image)");
    assert!(
        wait_until(Duration::from_secs(10), || watch.events() >= 5),
        "the watch streams through the proxy: {} events\n{}",
        watch.events(),
        haproxy.log()
    );

    // The soft stop: SIGUSR1 to the master, which passes it to its workers.
    let master = std::fs::read_to_string(haproxy.dir().join("haproxy.pid")).unwrap();
    let stopped = Instant::now();
    let status = std::process::Command::new("kill")
        .args(["-USR1", master.trim()])
        .status()
        .unwrap();
    assert!(status.success());

    // No new connection: the listener is gone.
    assert!(
        wait_until(Duration::from_secs(2), || TcpStream::connect_timeout(
            &haproxy.https,
            Duration::from_millis(200)
        )
        .is_err()),
        "the leaving proxy still accepts connections"
    );
    // The open watch streams on until hard-stop-after.
    let before = watch.events();
    std::thread::sleep(HARD_STOP_AFTER.saturating_sub(stopped.elapsed() + Duration::from_secs(1)));
    assert_eq!(
        watch.exited(),
        None,
        "kubectl's watch was cut before hard-stop-after"
    );
    let during = watch.events();
    assert!(
        during >= before + 10,
        "events kept arriving during the drain: {before} then {during}"
    );
    assert!(
        TcpStream::connect_timeout(&haproxy.https, Duration::from_millis(200)).is_err(),
        "a new connection during the drain"
    );

    // Then it ends: hard-stop-after cuts what is left, and the proxy is gone.
    assert!(
        wait_until(Duration::from_secs(10), || watch.exited().is_some()),
        "the watch outlived hard-stop-after"
    );
    let ended = stopped.elapsed();
    assert!(
        ended >= HARD_STOP_AFTER - Duration::from_millis(500),
        "the watch ended {ended:?} after the soft stop, before hard-stop-after"
    );
    assert!(
        wait_until(Duration::from_secs(5), || haproxy.processes().is_empty()),
        "HAProxy left processes: {:?}",
        haproxy.processes()
    );
}
