//! A held route comes in within one refresh period of its host starting to resolve, without
//! another apply: the address service asks every name again within the period it promises,
//! also the names that came due together (an apply's new hosts, answered in the same second).

use autoproxy_tests::resolver::{Knobs, Resolver};

use super::held::{QUICK, ip, named_config, wait_until};
use super::*;

/// The refresh period here: long enough that names asked one after another at the steady
/// spacing after their due (20 of them over about one more period) come in visibly late.
const REFRESH_SECONDS: f64 = 6.0;
/// From a write of the address map to the held route in the worker: the map is written at
/// most once a second and each write is pushed, the held routes released after it.
const PUSH_SLACK: Duration = Duration::from_millis(2500);

#[test]
fn held_routes_come_in_within_one_refresh_of_their_hosts_resolving() {
    let f = Fixture::new(&["a", "b"]);
    let dns = DnsServer::start("127.0.0.1:0".parse().unwrap()).unwrap();
    // Generation 1: one route, its host resolving (the service's nameserver comes from it).
    dns.set("h0.named.test", &[ip(&f, "a")]);
    f.install_first(&named_config(&f, &dns, 1, 1));
    let knobs = Knobs {
        refresh_seconds: REFRESH_SECONDS,
        ..QUICK
    };
    let resolver = Resolver::start(&f.haproxy.config_path(), knobs);
    let socket = f.haproxy.dir().join(autoproxy_agent::control::SOCKET);
    assert!(
        wait_until(Duration::from_secs(10), || socket.exists()),
        "the service listens: {}",
        resolver.output()
    );

    // 20 new routes whose hosts answer NXDOMAIN: the apply asks the service for them, each is
    // answered at once, so all 20 come due again together, one refresh later.
    let count = 20;
    let run = f.apply(&f.upload(&named_config(&f, &dns, 2, count + 1)));
    assert!(run.success(), "{run}");
    assert!(
        run.stdout
            .contains("20 new host(s): 0 resolved, 20 without an address yet"),
        "{run}"
    );
    let keys: Vec<String> = (1..=count)
        .map(|i| format!("proxy.api.n{i}.test"))
        .collect();
    assert!(keys.iter().all(|key| f.haproxy.probe(key).is_err()), "held");

    // Their hosts resolve: every route serves within one refresh period (and the push).
    let resolved = std::time::Instant::now();
    for i in 1..=count {
        dns.set(&format!("h{i}.named.test"), &[ip(&f, "b")]);
    }
    let within = Duration::from_secs_f64(REFRESH_SECONDS) + PUSH_SLACK;
    let banner = f.backends.get("b").banner();
    let mut waiting: Vec<&String> = keys.iter().collect();
    let all_in = wait_until(within, || {
        waiting.retain(|key| !f.haproxy.probe(key).is_ok_and(|b| b == banner));
        waiting.is_empty()
    });
    assert!(
        all_in,
        "{} of {count} held routes still out {:?} after their hosts resolved (first: {}):\n{}",
        waiting.len(),
        resolved.elapsed(),
        waiting[0],
        resolver.output()
    );
    assert_eq!(f.haproxy.running_generation(), Some(2), "no further apply");
}
