//! The resolver's cost: `autoproxy-agent resolve` on a config of N routes (10,000 by
//! default, each its own backend name) against a counting DNS server and a real HAProxy on
//! loopback, with the production knobs. It waits until every name is in HAProxy's map (the
//! start, at the cap), then measures the agent's CPU (`utime + stime` from /proc) and the
//! queries it sends over a steady window, and prints them.
//!
//! `bench_resolver [--routes 10000] [--window 60]`; set `AUTOPROXY_AGENT_BINARY` to the
//! release build (`cargo build --release -p autoproxy-agent`) to measure what ships.
#![allow(clippy::print_stdout, clippy::expect_used, clippy::unwrap_used)]

use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use autoproxy::render::{DEFAULT_TEMPLATE, RenderInput, Renderer};
use autoproxy_tests::dataplane::{self, cpu_ticks};
use autoproxy_tests::dns::{self, DnsServer};
use autoproxy_tests::proxy::{Backends, Haproxy, HaproxyFiles};
use autoproxy_tests::resolver::{self, ADDRESS_MAP, Knobs, Resolver};

/// Clock ticks per second of /proc/<pid>/stat (USER_HZ, 100 on Linux).
const TICKS: f64 = 100.0;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let value = |flag: &str, default: u64| -> u64 {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1))
            .map_or(default, |v| v.parse().expect("a whole number"))
    };
    let count = value("--routes", 10_000) as usize;
    let window = Duration::from_secs(value("--window", 60));
    let knobs = Knobs::default();

    let dns = DnsServer::start(SocketAddr::from((Ipv4Addr::LOCALHOST, 0))).expect("start dns");
    let backends = Backends::start(&["b0"]);
    let haproxy = Haproxy::new();
    let (names, config) = seeded_config(count, &dns, &haproxy, backends.port);
    haproxy.start(&config);
    let binary = autoproxy_tests::agent_binary();
    println!(
        "agent: {} ({} names, refresh {} s, cap {}/s)",
        binary.display(),
        names.len(),
        knobs.refresh_seconds,
        knobs.max_qps
    );

    let started = Instant::now();
    let agent = Resolver::start(&haproxy.config_path(), knobs);
    let socket = haproxy.stats_socket();
    let mapped = || {
        resolver::show_map(&socket, ADDRESS_MAP)
            .unwrap_or_default()
            .len()
    };
    let deadline = started + Duration::from_secs(300);
    while mapped() < names.len() {
        assert!(
            Instant::now() < deadline,
            "only {} of {} names in HAProxy's map after 300 s:\n{}",
            mapped(),
            names.len(),
            agent.output()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let filled = started.elapsed();
    let fill_ticks = cpu_ticks(agent.pid()).expect("the agent's /proc stat");
    println!(
        "start: every name in HAProxy's map after {:.1} s; CPU so far {:.2} s ({:.1}% of a core)",
        filled.as_secs_f64(),
        fill_ticks as f64 / TICKS,
        fill_ticks as f64 / TICKS / filled.as_secs_f64() * 100.0
    );

    steady(&agent, &dns, window, knobs.max_qps);
}

fn rss_kb(pid: u32) -> Option<u64> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// `count` routes' names, each given an address by `dns`, and the default template's config
/// for them.
fn seeded_config(
    count: usize,
    dns: &DnsServer,
    haproxy: &Haproxy,
    backend_port: u16,
) -> (Vec<String>, String) {
    let routes = dataplane::routes(count);
    let mut names: Vec<String> = routes.iter().map(|r| r.back.as_str().to_owned()).collect();
    names.sort();
    names.dedup();
    for (i, name) in names.iter().enumerate() {
        let i = u32::try_from(i).unwrap();
        dns.set(
            name,
            &[Ipv4Addr::from(u32::from(Ipv4Addr::new(10, 64, 0, 0)) + i)],
        );
    }
    let config = Renderer::new(DEFAULT_TEMPLATE)
        .expect("the default template compiles")
        .render(&RenderInput {
            routes: &routes,
            resolvers: &[dns.addr()],
            proxies: &[],
            options: &haproxy.options(backend_port),
            generation: 1,
            generated_at: "2026-01-01T00:00:00Z",
            trigger: "bench",
        })
        .expect("render")
        .text;
    (names, config)
}

/// The agent's CPU and DNS queries over `window` once every name is in HAProxy's map.
fn steady(agent: &Resolver, dns: &DnsServer, window: Duration, max_qps: u32) {
    let from = Instant::now();
    let before = cpu_ticks(agent.pid()).expect("the agent's /proc stat");
    std::thread::sleep(window);
    let after = cpu_ticks(agent.pid()).expect("the agent's /proc stat");
    let to = Instant::now();
    let seconds = to.duration_since(from).as_secs_f64();
    let queries: Vec<dns::Query> = dns
        .queries()
        .into_iter()
        .filter(|q| q.at >= from && q.at < to)
        .collect();
    let cpu = (after - before) as f64 / TICKS;
    println!(
        "steady, {seconds:.0} s: CPU {cpu:.2} s = {:.2}% of a core; {} queries = {:.1}/s \
         (busiest second {}, cap {}); RSS {} kB",
        cpu / seconds * 100.0,
        queries.len(),
        queries.len() as f64 / seconds,
        dns::max_per_second(&queries),
        max_qps,
        rss_kb(agent.pid()).unwrap_or(0)
    );
    println!(
        "queries per second: {:?}",
        dns::per_second(&queries, from, to)
    );
}
