//! One route's share of the proxy, on a real HAProxy with the default template: a route holds
//! at most its share of `maxconn` (a tenth by default), so connections held open on one route
//! (a member's loop through its own load balancer, a runaway client) leave every other route
//! served. The connections past the share are refused, counted by route (`show table
//! route_connections`), in the reject backend's sessions (`show stat`, `/metrics`) and in
//! the log line, which names the route.

use std::collections::BTreeMap;
use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::Ordering;
use std::time::Duration;

use autoproxy::names::HostName;
use autoproxy_tests::prometheus;
use autoproxy_tests::proxy::{self, Backend, Haproxy, HaproxyFiles};

/// The proxy's connection limit, and the connections held open on one route: more than it.
const MAXCONN: u32 = 300;
const HELD: usize = 400;
/// A tenth of `MAXCONN`: the default share.
const SHARE: usize = 30;

/// A backend that answers with its banner and holds the connection open until the client
/// closes it (or the backend is dropped): a long-lived tunnel, a Kubernetes watch.
fn holding(name: &str) -> Backend {
    let listener = TcpListener::bind("127.0.0.3:0").unwrap();
    let banner = format!("backend {name}\n");
    Backend::serving(name, listener, move |mut stream, stop| {
        let _ = stream.write_all(banner.as_bytes());
        let _ = stream.set_read_timeout(Some(Duration::from_millis(200)));
        let mut sink = [0u8; 4096];
        loop {
            match stream.read(&mut sink) {
                Ok(0) => return,
                Ok(_) => {}
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    if stop.load(Ordering::SeqCst) {
                        return;
                    }
                }
                Err(_) => return,
            }
        }
    })
}

/// An API route of `zone` to `backend`, at its own port.
fn route(zone: &str, backend: &Backend) -> autoproxy::model::Route {
    let mut route = proxy::api_route(zone, backend);
    route.port = backend.addr.port();
    route.back = HostName::parse(&backend.addr.ip().to_string()).unwrap();
    route
}

/// Opens a connection with a ClientHello for `sni` and leaves it open.
fn open(haproxy: &Haproxy, sni: &str) -> TcpStream {
    let mut stream = TcpStream::connect_timeout(&haproxy.https, Duration::from_secs(2)).unwrap();
    stream.write_all(&proxy::client_hello(sni)).unwrap();
    stream
}

/// Whether a held connection was served (it read the backend's banner) rather than refused
/// (closed without a byte).
fn served(mut stream: &TcpStream) -> bool {
    stream
        .set_read_timeout(Some(Duration::from_secs(2)))
        .unwrap();
    let mut first = [0u8; 64];
    matches!(stream.read(&mut first), Ok(n) if n > 0)
}

/// `show table route_connections`: each route's fields (`conn_cur`, `gpc0`), by key.
fn route_table(haproxy: &Haproxy) -> BTreeMap<String, BTreeMap<String, u64>> {
    let answer = haproxy
        .stats_command("show table route_connections")
        .unwrap();
    answer
        .lines()
        .filter(|line| !line.starts_with('#') && !line.trim().is_empty())
        .filter_map(|line| {
            let mut key = None;
            let mut fields = BTreeMap::new();
            for word in line.split_whitespace() {
                let Some((name, value)) = word.split_once('=') else {
                    continue;
                };
                if name == "key" {
                    key = Some(value.to_owned());
                } else if let Ok(value) = value.parse() {
                    fields.insert(name.to_owned(), value);
                }
            }
            Some((key?, fields))
        })
        .collect()
}

/// 400 connections held open on one route of a proxy whose `maxconn` is 300: the route keeps
/// its 30 (a tenth), the other 370 are refused and counted, and another route serves.
#[test]
fn a_route_holds_at_most_its_share_and_the_others_serve() {
    let busy = holding("busy");
    let other = Backend::start("other", TcpListener::bind("127.0.0.2:0").unwrap());
    let haproxy = Haproxy::new();
    let log = UdpSocket::bind("127.0.0.1:0").unwrap();
    let mut options = haproxy.options(0);
    options.backend_port = None;
    options.maxconn = MAXCONN;
    options.log = format!("{} local0", log.local_addr().unwrap());
    let routes = [route("busy.test", &busy), route("other.test", &other)];
    haproxy.start(&proxy::render(1, &routes, &options));

    let held: Vec<TcpStream> = (0..HELD)
        .map(|_| open(&haproxy, "proxy.api.busy.test"))
        .collect();
    let answer = haproxy.probe("proxy.api.other.test");
    assert_eq!(
        answer.as_deref().ok(),
        Some(other.banner().as_str()),
        "another route, while {HELD} connections are held on one: {answer:?}"
    );
    let kept = held.iter().filter(|stream| served(stream)).count();
    assert_eq!(kept, SHARE, "connections served on the busy route");

    let refused = (HELD - SHARE) as u64;
    let busy_key = busy.addr.to_string();
    let table = route_table(&haproxy);
    let counts = table
        .get(&busy_key)
        .unwrap_or_else(|| panic!("no {busy_key} in the route table: {table:?}"));
    assert_eq!(counts.get("conn_cur"), Some(&(SHARE as u64)), "{table:?}");
    assert_eq!(
        counts.get("gpc0"),
        Some(&refused),
        "refusals by route: {table:?}"
    );
    let stat = crate::metrics::backend_sessions(&haproxy);
    assert_eq!(stat.get("reject_route_full"), Some(&refused), "{stat:?}");
    let metrics = prometheus::get(haproxy.stats, "/metrics").unwrap().body;
    let samples = prometheus::samples(&metrics).unwrap();
    assert_eq!(
        samples.get("haproxy_backend_sessions_total{proxy=\"reject_route_full\"}"),
        Some(&(refused as f64)),
    );
    // Each refused connection's line names its route. A burst of log datagrams loses some
    // (UDP): the exact counts are the table's and the backend's above.
    let lines = crate::metrics::log_lines(&log, HELD - SHARE + 1, Duration::from_secs(3));
    let route = format!("route={busy_key} ");
    let logged: Vec<&String> = lines
        .iter()
        .filter(|l| l.contains(" reject_route_full/<NOSRV> "))
        .collect();
    assert!(
        !logged.is_empty() && logged.iter().all(|l| l.contains(&route)),
        "{lines:#?}"
    );
    drop(held);
}
