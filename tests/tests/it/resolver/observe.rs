//! What the address service shows of the instance: `/ready` and `/agent/metrics` on its HTTP
//! socket, and the CloudWatch metrics it publishes (to moto) — equal to what was sent, and
//! never in the way of the resolving and pushing when CloudWatch is gone.

use std::net::Ipv4Addr;
use std::time::Duration;

use autoproxy_tests::hanging_endpoint::HangingEndpoint;
use autoproxy_tests::moto::REGION;
use autoproxy_tests::observe::{Answer, CloudWatch, Points, get_unix, sample};
use autoproxy_tests::prometheus;
use autoproxy_tests::proxy::HaproxyFiles;
use autoproxy_tests::resolver::Resolver;

use super::fixture::{Fixture, QUICK, expected, host, sni};

const INSTANCE: &str = "i-0observed";

/// The resolver publishing to `cloudwatch` every second, as instance [`INSTANCE`].
fn publishing(f: &Fixture, cloudwatch: &CloudWatch) -> Resolver {
    publishing_with(f, cloudwatch.env())
}

/// The resolver publishing every second as instance [`INSTANCE`], AWS as `env` says.
fn publishing_with(f: &Fixture, mut env: Vec<(String, String)>) -> Resolver {
    env.push(("AUTOPROXY_METRICS_SECONDS".to_owned(), "1".to_owned()));
    env.push(("AUTOPROXY_INSTANCE_ID".to_owned(), INSTANCE.to_owned()));
    Resolver::start_with(&f.haproxy.config_path(), QUICK, &env)
}

/// Route 0's host routed to `first`, then `line` in the service's log (`what` it shows).
fn routing_first_then_logged(
    f: &Fixture,
    resolver: &Resolver,
    first: Ipv4Addr,
    line: &str,
    what: &str,
) {
    f.assert_running_map(
        Duration::from_secs(10),
        &expected(&[(host(0), first)]),
        "the first address",
        resolver,
    );
    f.assert_routes(0, "first");
    assert!(
        f.wait_until(Duration::from_secs(10), |_| resolver
            .output()
            .contains(line)),
        "{what}:\n{}",
        resolver.output()
    );
}

/// What moto holds of `metric` for [`INSTANCE`].
fn published(cloudwatch: &CloudWatch, metric: &str) -> Points {
    cloudwatch
        .points(metric, INSTANCE)
        .unwrap_or_else(|err| panic!("{metric}: {err}"))
}

/// `GET path` on the service's socket (an error reads as status 0).
fn get(f: &Fixture, path: &str) -> Answer {
    get_unix(&f.agent_socket(), path).unwrap_or_else(|err| Answer {
        status: 0,
        body: err.to_string(),
    })
}

/// Route 0's host, served at `first` and routed there, moves to `second` while publishing
/// fails (`how`): the address is pushed, connections follow it, `/ready` answers 200 and the
/// service runs on.
fn routing_goes_on(f: &Fixture, resolver: &mut Resolver, second: Ipv4Addr, how: &str) {
    f.dns.set(&host(0), &[second]);
    f.assert_running_map(
        Duration::from_secs(6),
        &expected(&[(host(0), second)]),
        &format!("the new address, pushed while publishing {how}"),
        resolver,
    );
    f.assert_routes(0, "second");
    assert_eq!(get(f, "/ready").status, 200, "{:?}", get(f, "/ready"));
    assert!(resolver.is_running(), "{}", resolver.output());
}

/// A new instance whose one route's host is never answered: `/ready` answers 200 once that
/// host's first turn has spent its tries (a member's broken record is never the proxy's
/// unreadiness), and counts the route as unresolved until its address arrives.
/// `/agent/metrics` says the same in numbers, in a text promtool accepts; both also through
/// HAProxy's stats listener.
#[test]
fn ready_answers_200_after_the_first_pass_and_counts_a_held_route() {
    let f = Fixture::start(3, &["b"]);
    let b = f.backend_ip("b");
    for i in 0..3 {
        f.dns.set(&host(i), &[b]);
    }
    f.dns.drop_queries(&host(2), true);
    let resolver = f.resolver(QUICK);
    assert!(
        f.wait_until(Duration::from_secs(10), |f| get(f, "/ready").status == 200),
        "200 with one route held: {:?}\n{}",
        get(&f, "/ready"),
        resolver.output()
    );
    // The same through HAProxy's stats listener, which forwards to the socket.
    let forwarded = prometheus::get(f.haproxy.stats, "/ready").expect("the stats listener");
    assert_eq!(
        (forwarded.status, forwarded.body.as_str()),
        (200, "ready\n")
    );
    let metrics = get(&f, "/agent/metrics");
    assert_eq!(metrics.status, 200);
    assert_eq!(sample(&metrics.body, "autoproxy_routes"), Some(3.0));
    assert_eq!(
        sample(&metrics.body, "autoproxy_unresolved_routes"),
        Some(1.0)
    );
    assert_eq!(sample(&metrics.body, "autoproxy_ready"), Some(1.0));
    assert!(
        resolver.output().contains(&format!(
            "held routes: 1 of 3 routes have a host without an address: {} (1 route: timeout",
            host(2)
        )),
        "the log names the held host and why:\n{}",
        resolver.output()
    );

    f.dns.drop_queries(&host(2), false);
    assert!(
        f.wait_until(Duration::from_secs(10), |f| sample(
            &get(f, "/agent/metrics").body,
            "autoproxy_unresolved_routes"
        ) == Some(0.0)),
        "every host has an address: {:?}\n{}",
        get(&f, "/agent/metrics"),
        resolver.output()
    );
    assert_eq!(get(&f, "/ready").body, "ready\n");
    let metrics = prometheus::get(f.haproxy.stats, "/agent/metrics")
        .expect("the stats listener")
        .body;
    assert_eq!(
        prometheus::promtool_lint(&metrics),
        Ok(Vec::new()),
        "{metrics}"
    );
    for (name, want) in [
        ("autoproxy_unresolved_routes", 0.0),
        ("autoproxy_ready", 1.0),
        ("autoproxy_haproxy_up", 1.0),
        ("autoproxy_running_generation", 1.0),
        ("autoproxy_installed_generation", 1.0),
    ] {
        assert_eq!(sample(&metrics, name), Some(want), "{name} in\n{metrics}");
    }
    assert!(
        sample(&metrics, "autoproxy_resolver_queries_total").is_some_and(|q| q >= 3.0),
        "{metrics}"
    );
    f.assert_routes(2, "b");
}

/// Connections rejected for no route and for no address, counted by HAProxy and published
/// as per-interval increases: within one publish interval, CloudWatch holds what was sent.
#[test]
fn the_cloudwatch_figures_equal_what_was_sent() {
    let cloudwatch = CloudWatch::start();
    let f = Fixture::start(2, &["b"]);
    f.dns.set(&host(0), &[f.backend_ip("b")]);
    // Route 1's host never answers: its connections have a route but no address.
    f.dns.drop_queries(&host(1), true);
    let resolver = publishing(&f, &cloudwatch);
    let first = |f: &Fixture| {
        published(&cloudwatch, "HAProxyUp").count >= 1.0 && f.running_map().len() == 1
    };
    assert!(
        f.wait_until(Duration::from_secs(15), first),
        "a first publish:\n{}",
        resolver.output()
    );
    let (unrouted, unresolved) = (7, 4);
    for _ in 0..unrouted {
        assert!(f.haproxy.probe("nobody.test.internal").is_err());
    }
    for _ in 0..unresolved {
        assert!(f.haproxy.probe(&sni(1)).is_err());
    }
    f.assert_routes(0, "b");
    let sums = || {
        (
            published(&cloudwatch, "RejectedNoRoute").sum,
            published(&cloudwatch, "RejectedNoAddress").sum,
        )
    };
    let want = (f64::from(unrouted), f64::from(unresolved));
    // One interval (1 s) and the publish itself.
    assert!(
        f.wait_until(Duration::from_secs(3), |_| sums() == want),
        "rejects published {:?}, sent {want:?}\n{}",
        sums(),
        resolver.output()
    );
    // And stays so: later publishes add nothing for what was counted once.
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(
        sums(),
        want,
        "rejects published again\n{}",
        resolver.output()
    );
    let up = published(&cloudwatch, "HAProxyUp");
    assert_eq!(
        (up.sum, up.max),
        (up.count, 1.0),
        "HAProxy up at every publish"
    );
    assert_eq!(published(&cloudwatch, "Workers").max, 1.0);
    // 1 while route 1's host does not answer; 2 at a publish before route 0's answered.
    let unresolved = published(&cloudwatch, "UnresolvedRoutes").max;
    assert!((1.0..=2.0).contains(&unresolved), "{unresolved}");
    assert!(published(&cloudwatch, "CurrentConnections").count >= 1.0);
    assert!(published(&cloudwatch, "ConnectionRate").count >= 1.0);

    // The failed lookups of route 1's host, per interval, add up to the service's count
    // once it answers.
    f.dns.drop_queries(&host(1), false);
    f.dns.set(&host(1), &[f.backend_ip("b")]);
    assert!(f.wait_until(Duration::from_secs(10), |f| f.running_map().len() == 2));
    std::thread::sleep(Duration::from_secs(3));
    let failures = sample(
        &get(&f, "/agent/metrics").body,
        "autoproxy_resolver_failures_total",
    );
    assert!(failures.is_some_and(|n| n >= 1.0), "{failures:?}");
    assert_eq!(
        Some(published(&cloudwatch, "ResolverFailures").sum),
        failures
    );
}

/// CloudWatch gone (moto stopped): publishing fails and says so, and nothing else changes —
/// addresses are still pushed, connections still flow, `/ready` still answers 200.
#[test]
fn a_failed_publish_leaves_routing_untouched() {
    let cloudwatch = CloudWatch::start();
    let f = Fixture::start(1, &["first", "second"]);
    let (first, second) = (f.backend_ip("first"), f.backend_ip("second"));
    f.dns.set(&host(0), &[first]);
    let mut resolver = publishing(&f, &cloudwatch);
    assert!(
        f.wait_until(Duration::from_secs(15), |_| published(
            &cloudwatch,
            "HAProxyUp"
        )
        .count
            >= 1.0),
        "a first publish:\n{}",
        resolver.output()
    );
    drop(cloudwatch);
    let failed = "CloudWatch metrics not published";
    routing_first_then_logged(&f, &resolver, first, failed, "the failed publish is logged");
    routing_goes_on(&f, &mut resolver, second, "fails");
    assert!(
        f.wait_until(Duration::from_secs(10), |_| resolver
            .output()
            .matches(failed)
            .count()
            >= 2),
        "retried every interval:\n{}",
        resolver.output()
    );
}

/// CloudWatch hanging (a loopback endpoint that accepts and never answers), where the test
/// above only meets a refusal: each publish gives up within its bound (the period, 1 s here)
/// and the next one starts, while addresses are still pushed, connections still flow and
/// `/ready` still answers 200.
#[test]
fn a_hanging_publish_leaves_routing_untouched() {
    // A publish ends within the period; the next starts at the next tick, at once when the
    // last one used the whole period. A margin for two loaded cores.
    const BOUND: Duration = Duration::from_secs(1);
    const PERIOD: Duration = Duration::from_secs(1);
    const MARGIN: Duration = Duration::from_secs(1);
    let hanging = HangingEndpoint::start().expect("a hanging endpoint");
    let f = Fixture::start(1, &["first", "second"]);
    let (first, second) = (f.backend_ip("first"), f.backend_ip("second"));
    f.dns.set(&host(0), &[first]);
    let env = [
        ("AWS_ENDPOINT_URL", hanging.url()),
        ("AWS_ACCESS_KEY_ID", "testing".to_owned()),
        ("AWS_SECRET_ACCESS_KEY", "testing".to_owned()),
        ("AWS_REGION", REGION.to_owned()),
        ("AWS_EC2_METADATA_DISABLED", "true".to_owned()),
    ];
    let env = env.map(|(name, value)| (name.to_owned(), value));
    let mut resolver = publishing_with(&f, env.to_vec());
    let gave_up = "CloudWatch metrics not published: no answer within 1s";
    routing_first_then_logged(
        &f,
        &resolver,
        first,
        gave_up,
        "a publish that hangs is given up",
    );
    routing_goes_on(&f, &mut resolver, second, "hangs");

    // Every publish reached the endpoint and hung there: one connection each. The next
    // connection comes only once the last publish gave up, so the gaps are its time.
    std::thread::sleep(Duration::from_secs(4));
    let accepted = hanging.accepted();
    let gaps: Vec<Duration> = accepted.windows(2).map(|w| w[1] - w[0]).collect();
    let longest = gaps.iter().max().copied().unwrap_or_default();
    println!(
        "hanging publishes: {} connections, longest gap {:.2}s (bound {}s + period {}s)",
        accepted.len(),
        longest.as_secs_f64(),
        BOUND.as_secs(),
        PERIOD.as_secs()
    );
    assert!(
        accepted.len() >= 4,
        "a publish every period, each given up: {} connections\n{}",
        accepted.len(),
        resolver.output()
    );
    assert!(
        longest <= BOUND + PERIOD + MARGIN,
        "a publish hung for {longest:?}, past its bound of {BOUND:?}: {gaps:?}\n{}",
        resolver.output()
    );
    assert!(
        resolver.output().matches(gave_up).count() + 1 >= accepted.len(),
        "each hanging publish is logged:\n{}",
        resolver.output()
    );
}
