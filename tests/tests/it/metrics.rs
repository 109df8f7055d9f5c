//! The data plane seen from outside, on a real HAProxy with the default template: connections
//! with a routed, an unrouted and an unresolved SNI are counted by reason in HAProxy's own
//! Prometheus exporter (`/metrics` on the stats listener, checked by `promtool check metrics`)
//! and in `show stat`; each one's log line says what happened to it; `/ready` and
//! `/agent/metrics` reach the agent's socket, and HAProxy answers 503 when nothing listens
//! there; off loopback only `/ready` and `/metrics` answer; the exporter can be left out.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, UdpSocket};
use std::os::unix::net::UnixListener;
use std::time::{Duration, Instant};

use autoproxy::artifact::MapFiles;
use autoproxy::model::{Route, SniMatch};
use autoproxy::names::HostName;
use autoproxy_tests::check::assert_valid;
use autoproxy_tests::prometheus;
use autoproxy_tests::proxy::{self, Backends, Haproxy, HaproxyFiles, ProbeError};

const ROUTED: usize = 7;
const UNROUTED: usize = 5;
const UNRESOLVED: usize = 3;

/// HAProxy's own lint findings in its exporter's names, which promtool reports and nothing
/// here can change (the text still parses).
const HAPROXY_LINT: &[&str] =
    &["haproxy_process_failed_resolutions counter metrics should have \"_total\" suffix"];

/// An API route of `zone` whose backend is the host name `api.<zone>`.
fn route(zone: &str) -> Route {
    let zone_name = HostName::parse(zone).unwrap();
    let backend = zone_name.with_prefix("api");
    Route {
        rule: "api".to_owned(),
        account: "111111111111".to_owned(),
        zone_id: format!("Z{}", zone.len()),
        sni: format!("proxy.api.{zone}"),
        sni_match: SniMatch::Exact,
        records: vec![backend.clone()],
        back: backend,
        port: 443,
        zone_name,
    }
}

/// An HAProxy with two routes, only the first of whose hosts has an address, logging to
/// `log`; the backend it routes to.
fn started(log: &UdpSocket) -> (Haproxy, Backends) {
    let backends = Backends::start(&["a"]);
    let haproxy = Haproxy::new();
    let routes = [route("resolved.test"), route("unresolved.test")];
    let mut options = haproxy.options(backends.port);
    options.log = format!("{} local0", log.local_addr().unwrap());
    let config = proxy::render(1, &routes, &options);
    let addresses = haproxy.dir().join(MapFiles::stable().addresses);
    std::fs::create_dir_all(addresses.parent().unwrap()).unwrap();
    let ip = backends.get("a").addr.ip();
    std::fs::write(&addresses, format!("api.resolved.test {ip}\n")).unwrap();
    haproxy.start(&config);
    (haproxy, backends)
}

/// The `stot` (cumulative sessions) of each BACKEND row of `show stat`.
pub(crate) fn backend_sessions(haproxy: &Haproxy) -> BTreeMap<String, u64> {
    sessions(haproxy, "BACKEND")
}

/// The `stot` (cumulative sessions) of each `show stat` row of `kind` (`FRONTEND`,
/// `BACKEND`), by proxy name.
pub(crate) fn sessions(haproxy: &Haproxy, kind: &str) -> BTreeMap<String, u64> {
    let csv = haproxy.stats_command("show stat").unwrap();
    let mut lines = csv.lines();
    let header: Vec<&str> = lines
        .next()
        .unwrap()
        .trim_start_matches("# ")
        .split(',')
        .collect();
    let stot = header.iter().position(|h| *h == "stot").unwrap();
    lines
        .map(|line| line.split(',').collect::<Vec<_>>())
        .filter(|fields| fields.get(1) == Some(&kind))
        .map(|fields| (fields[0].to_owned(), fields[stot].parse().unwrap()))
        .collect()
}

/// The connections' log lines received within `wait`, until `count` of them came. The stats
/// listener's own lines (a `/metrics` scrape is logged too) are left out: they are not
/// connections through the proxy, and counting one would end the wait a line early.
pub(crate) fn log_lines(log: &UdpSocket, count: usize, wait: Duration) -> Vec<String> {
    let deadline = Instant::now() + wait;
    let mut lines = Vec::new();
    let mut buf = [0u8; 4096];
    while lines.len() < count && Instant::now() < deadline {
        log.set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        if let Ok(n) = log.recv(&mut buf) {
            let line = String::from_utf8_lossy(&buf[..n]).trim_end().to_owned();
            if !line.contains("] stats ") {
                lines.push(line);
            }
        }
    }
    lines
}

#[test]
fn rejects_are_counted_by_reason_in_metrics_and_show_stat_and_logged_with_it() {
    let log = UdpSocket::bind("127.0.0.1:0").unwrap();
    let (haproxy, backends) = started(&log);
    for _ in 0..ROUTED {
        let banner = haproxy.probe("proxy.api.resolved.test").unwrap();
        assert_eq!(banner, backends.get("a").banner());
    }
    for (count, sni) in [
        (UNROUTED, "proxy.api.nowhere.test"),
        (UNRESOLVED, "proxy.api.unresolved.test"),
    ] {
        for _ in 0..count {
            let answer = haproxy.probe(sni);
            assert!(
                matches!(answer, Err(ProbeError::Closed)),
                "{sni}: {answer:?}"
            );
        }
    }

    let answer = prometheus::get(haproxy.stats, "/metrics").unwrap();
    assert_eq!(answer.status, 200, "{answer:?}");
    let lint = prometheus::promtool_lint(&answer.body).unwrap_or_else(|e| panic!("{e}"));
    let unexpected: Vec<&String> = lint
        .iter()
        .filter(|l| !HAPROXY_LINT.contains(&l.as_str()))
        .collect();
    assert!(unexpected.is_empty(), "promtool: {unexpected:#?}");
    let samples = prometheus::samples(&answer.body).unwrap();
    let sample = |series: &str| {
        *samples
            .get(series)
            .unwrap_or_else(|| panic!("no {series} in /metrics:\n{}", answer.body))
    };
    let backend = |name: &str| {
        sample(&format!(
            "haproxy_backend_sessions_total{{proxy=\"{name}\"}}"
        ))
    };
    assert_eq!(backend("reject_no_route"), UNROUTED as f64);
    assert_eq!(backend("reject_no_address"), UNRESOLVED as f64);
    assert_eq!(backend("passthrough"), ROUTED as f64);
    assert_eq!(
        sample("haproxy_frontend_sessions_total{proxy=\"tls_passthrough\"}"),
        (ROUTED + UNROUTED + UNRESOLVED) as f64
    );

    let stat = backend_sessions(&haproxy);
    assert_eq!(stat["reject_no_route"], UNROUTED as u64, "{stat:?}");
    assert_eq!(stat["reject_no_address"], UNRESOLVED as u64, "{stat:?}");
    assert_eq!(stat["passthrough"], ROUTED as u64, "{stat:?}");

    // One line per connection, each with its backend: the reason of a reject.
    let lines = log_lines(&log, ROUTED + UNROUTED + UNRESOLVED, Duration::from_secs(5));
    let with = |needle: &str| lines.iter().filter(|l| l.contains(needle)).count();
    assert_eq!(with(" reject_no_route/<NOSRV> "), UNROUTED, "{lines:#?}");
    assert_eq!(
        with(" reject_no_address/<NOSRV> "),
        UNRESOLVED,
        "{lines:#?}"
    );
    assert_eq!(with(" passthrough/route "), ROUTED, "{lines:#?}");
    let unresolved = lines
        .iter()
        .find(|l| l.contains("reject_no_address"))
        .unwrap();
    let port = backends.port;
    let expected = format!("sni=proxy.api.unresolved.test route=api.unresolved.test:{port} addr=-");
    assert!(unresolved.contains(&expected), "{unresolved}");
    let routed = lines
        .iter()
        .find(|l| l.contains("passthrough/route"))
        .unwrap();
    let dst = format!(
        "addr={ip} dst={ip}:{port}",
        ip = backends.get("a").addr.ip()
    );
    assert!(routed.contains(&dst), "{routed}");
}

/// A stand-in for the address service's HTTP socket: answers every request with `200` and
/// the path it was asked for.
fn agent_stand_in(path: &std::path::Path) -> std::thread::JoinHandle<()> {
    let listener = UnixListener::bind(path).unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming().take(2) {
            let mut stream = stream.unwrap();
            let mut request = [0u8; 1024];
            let n = stream.read(&mut request).unwrap();
            let text = String::from_utf8_lossy(&request[..n]);
            let path = text.split_whitespace().nth(1).unwrap_or("").to_owned();
            let body = format!("stand-in {path}\n");
            let answer = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\
                 Connection: close\r\n\r\n{body}",
                body.len()
            );
            stream.write_all(answer.as_bytes()).unwrap();
        }
    })
}

#[test]
fn ready_and_agent_metrics_reach_the_agent_socket_or_answer_503() {
    let log = UdpSocket::bind("127.0.0.1:0").unwrap();
    let (haproxy, _backends) = started(&log);
    let socket = haproxy
        .stats_socket()
        .with_file_name("autoproxy-agent.sock");
    assert!(
        std::fs::read_to_string(haproxy.config_path())
            .unwrap()
            .contains(&format!("server agent unix@{}\n", socket.display()))
    );
    for path in ["/ready", "/agent/metrics"] {
        let answer = prometheus::get(haproxy.stats, path).unwrap();
        assert_eq!(answer.status, 503, "nothing listens yet: {answer:?}");
    }
    let stats = prometheus::get(haproxy.stats, "/stats").unwrap();
    assert_eq!(stats.status, 200);
    assert_eq!(stats.header("x-autoproxy-routes"), Some("1"));

    let agent = agent_stand_in(&socket);
    for path in ["/ready", "/agent/metrics"] {
        let answer = prometheus::get(haproxy.stats, path).unwrap();
        assert_eq!(answer.status, 200, "{answer:?}");
        assert_eq!(answer.body, format!("stand-in {path}\n"));
    }
    agent.join().unwrap();
}

/// The stats listener bound on loopback and on another address: only 127.0.0.1 and ::1 count
/// as loopback, so 127.0.0.2 stands for the instance's VPC address (a load balancer's health
/// check, a VPC's Prometheus). There it answers `/ready` and `/metrics` and refuses the rest.
#[test]
fn off_loopback_the_stats_listener_answers_only_ready_and_metrics() {
    let backends = Backends::start(&["a"]);
    let haproxy = Haproxy::new();
    let mut options = haproxy.options(backends.port);
    let other = SocketAddr::from(([127, 0, 0, 2], haproxy.stats.port()));
    options.stats_bind = format!("{},{other}", haproxy.stats);
    let config = proxy::render(1, &[route("resolved.test")], &options);
    assert_valid(&config);
    haproxy.start(&config);
    for (addr, path, expected) in [
        (haproxy.stats, "/stats", 200),
        (haproxy.stats, "/metrics", 200),
        (other, "/stats", 403),
        (other, "/stats;csv", 403),
        (other, "/stats?stats", 403),
        (other, "/agent/metrics", 403),
        (other, "/", 403),
        (other, "/metrics", 200),
        // Nothing listens on the agent's socket here: HAProxy answers for it.
        (other, "/ready", 503),
    ] {
        let answer = prometheus::get(addr, path).unwrap();
        assert_eq!(answer.status, expected, "{addr}{path}: {answer:?}");
        if expected == 403 {
            assert!(!answer.body.contains("Statistics Report"), "{answer:?}");
        }
        // Every answer names the generation whose routes the proxy serves, refusals too.
        assert_eq!(answer.header("x-autoproxy-routes"), Some("1"), "{path}");
    }
}

/// Without the Prometheus exporter (a HAProxy built without it), the config names no such
/// service, still passes `haproxy -c`, and `/metrics` answers 503.
#[test]
fn without_the_exporter_the_config_still_checks_and_metrics_answers_503() {
    let backends = Backends::start(&["a"]);
    let haproxy = Haproxy::new();
    let mut options = haproxy.options(backends.port);
    options.prometheus_exporter = false;
    let config = proxy::render(1, &[route("resolved.test")], &options);
    assert!(!config.contains("prometheus-exporter"), "{config}");
    assert_valid(&config);
    haproxy.start(&config);
    assert_eq!(
        prometheus::get(haproxy.stats, "/metrics").unwrap().status,
        503
    );
    assert_eq!(
        prometheus::get(haproxy.stats, "/stats").unwrap().status,
        200
    );
}
