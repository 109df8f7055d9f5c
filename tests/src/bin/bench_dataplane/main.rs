//! `make bench` (after `bench`): the data-plane benchmark. For 1,000 and 10,000 routes (half
//! exact API routes, half internal-ingress suffix routes) and for both templates (the
//! per-route one the project used before, and the map-based default), it runs a real HAProxy
//! on loopback and measures the worker's CPU per connection on the first and last route of
//! each kind, the DNS queries the instance sends (at check, start, reload and in steady
//! state), the check, start and reload times, the idle worker's CPU, and (at 10,000 routes)
//! the connections that fail across reloads under load. Prints a table and writes it to
//! `docs/BENCHMARKS.md` between markers, after whatever `bench` wrote.
//!
//! `bench_dataplane [--routes 1000,10000] [--window 10] [--reloads 20] [--before-reloads 20]
//!                  [--skip-before] [--skip-after] [--no-agent] [--cold 4000,10000]
//!                  [--counters 10000] [--share 10000] [--out docs/BENCHMARKS.md]
//!                  [--floor 4000,10000] [--haproxy-section]`
//! (`--cold`: the route counts of the cold first install, `cold.rs`, `0` for none; it runs
//! alone with `--skip-before --skip-after`; `--counters`: the route counts at which the reject
//! counters' cost per connection is measured, the default template against the map-based one
//! before them, side by side, `counters.rs`, `0` for none; `--share`: the same for each route's
//! share of `maxconn`, the default template against it without the stick table's two rules;
//! `--floor`: the route counts at which the published config is measured against a minimal
//! hand-written one, and each of its pieces, side by side, `floor.rs`, with the added latency,
//! `latency.rs`, into a section of its own; none by default, `make bench` runs it alone with
//! `--skip-before --skip-after --cold 0 --counters 0 --share 0 --no-agent`)
//!
//! The HAProxy measured is the `haproxy` first on PATH (the harness and the agent both run
//! that one); `AUTOPROXY_EXPECT_HAPROXY=3.0` makes any other version an error. With
//! `--haproxy-section` the report goes to a section of its own for that HAProxy branch
//! (`## Data plane on HAProxy 3.0`), after the main one: `make bench` runs it once on the
//! distribution's HAProxy, then with 3.0 first on PATH.
//!
//! Needs root: HAProxy runs in a private mount namespace (`unshare -m`) whose resolv.conf
//! points at a counting DNS server on port 53 of a loopback address.
#![allow(clippy::print_stdout, clippy::expect_used, clippy::unwrap_used)]

mod apply;
mod cold;
mod counters;
mod env;
mod floor;
mod floor_report;
mod latency;
mod measure;
mod report;
mod under_load;

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use autoproxy::model::Route;
use autoproxy_tests::dataplane::{self, Design, Ends};
use autoproxy_tests::dns::DnsServer;
use autoproxy_tests::haproxy_version;
use autoproxy_tests::proxy::Backends;

use apply::apply_times;
use env::Env;
use measure::{Row, measure};
use report::{Runs, section, table};

/// Where a resolv.conf can point (port 53); the first free one is used.
const NAMESERVERS: [Ipv4Addr; 3] = [
    Ipv4Addr::new(127, 0, 0, 2),
    Ipv4Addr::new(127, 0, 0, 53),
    Ipv4Addr::new(127, 0, 1, 53),
];

struct Args {
    routes: Vec<usize>,
    designs: Vec<Design>,
    /// Length of the steady-state window (DNS rate and idle CPU), in seconds.
    window: u64,
    /// Reloads under load with the map-based design (at the largest route count).
    reloads: usize,
    /// The same with the per-route design (each takes seconds at 10,000 routes).
    before_reloads: usize,
    /// Measure the map-based design without autoproxy-resolver (HAProxy alone).
    no_agent: bool,
    /// Route counts of the cold first install.
    cold: Vec<usize>,
    /// Route counts of the reject counters' comparison.
    counters: Vec<usize>,
    /// Route counts of the route share's comparison.
    shares: Vec<usize>,
    /// Route counts of the published config against the floor.
    floor: Vec<usize>,
    out: PathBuf,
    /// Report in the section for this HAProxy's branch instead of the main one.
    haproxy_section: bool,
}

fn args() -> Args {
    let mut args = Args {
        routes: vec![1_000, 10_000],
        designs: vec![Design::PerRoute, Design::Maps],
        window: 10,
        reloads: 20,
        before_reloads: 20,
        no_agent: false,
        cold: vec![4_000, 10_000],
        counters: vec![10_000],
        shares: vec![10_000],
        floor: Vec::new(),
        out: autoproxy_tests::root().join("docs/BENCHMARKS.md"),
        haproxy_section: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        let number = |value: String| -> usize {
            value
                .parse()
                .unwrap_or_else(|_| panic!("{flag}: expected a number, got {value:?}"))
        };
        match flag.as_str() {
            "--routes" => {
                args.routes = value()
                    .split(',')
                    .map(|n| number(n.trim().to_owned()))
                    .collect();
            }
            "--window" => args.window = number(value()) as u64,
            "--reloads" => args.reloads = number(value()),
            "--before-reloads" => args.before_reloads = number(value()),
            "--skip-before" => args.designs.retain(|d| *d != Design::PerRoute),
            "--skip-after" => args.designs.retain(|d| *d != Design::Maps),
            "--no-agent" => args.no_agent = true,
            "--cold" => args.cold = counts(&flag, &value()),
            "--counters" => args.counters = counts(&flag, &value()),
            "--share" => args.shares = counts(&flag, &value()),
            "--floor" => args.floor = counts(&flag, &value()),
            "--out" => args.out = PathBuf::from(value()),
            "--haproxy-section" => args.haproxy_section = true,
            other => panic!("unknown flag {other}"),
        }
    }
    args
}

/// The counts of a flag such as `--cold 4000,10000`; `0` stands for none.
fn counts(flag: &str, value: &str) -> Vec<usize> {
    value
        .split(',')
        .map(|n| {
            n.trim()
                .parse()
                .unwrap_or_else(|_| panic!("{flag}: expected numbers, got {value:?}"))
        })
        .filter(|n| *n > 0)
        .collect()
}

fn main() {
    let args = args();
    let haproxy = haproxy_version::check_expected().unwrap_or_else(|e| panic!("{e}"));
    println!("{}", haproxy.line);
    let started = Instant::now();
    let ticks = dataplane::clock_ticks();
    let (dns, nameserver) = NAMESERVERS
        .iter()
        .find_map(|ip| {
            DnsServer::start(SocketAddr::from((*ip, 53)))
                .ok()
                .map(|s| (s, *ip))
        })
        .expect("a free loopback address for DNS on port 53 (run as root)");
    let agent_dns = DnsServer::start("127.0.0.1:0".parse().unwrap()).expect("start agent DNS");
    let backends = Backends::start(&["b0", "b1", "b2", "b3"]);
    let env = Env {
        dns,
        agent_dns,
        backends,
        ticks,
        window: Duration::from_secs(args.window),
        agent: !args.no_agent,
        moto: (!args.no_agent).then(autoproxy_tests::moto::Moto::start),
    };
    println!(
        "DNS on {nameserver}:53 (HAProxy) and {} (resolver agent); backends on 127.0.0.2-5:{}",
        env.agent_dns.addr(),
        env.backends.port
    );

    let rows = rows(&args, &env, nameserver);
    let mut applies = Vec::new();
    if args.designs.contains(&Design::Maps) {
        for &count in &args.routes {
            println!("\n== the apply document, {count} routes ==");
            let apply = apply_times(&env, &dataplane::routes(count));
            println!("{}", apply.line());
            applies.push(apply);
        }
    }
    let parts = [
        (counters::Part::Counters, &args.counters),
        (counters::Part::RouteShare, &args.shares),
    ];
    let counters: Vec<counters::Counters> = parts
        .into_iter()
        .flat_map(|(part, counts)| counts.iter().map(move |&count| (part, count)))
        .map(|(part, count)| {
            println!("\n== {part:?}, {count} routes: with and without, side by side ==");
            let routes = dataplane::routes(count);
            let ends = resolve_routes(&env, &routes);
            counters::compare(&env, nameserver, part, &routes, &ends)
        })
        .collect();
    let colds = cold::cold_installs(&env, &args.cold);
    let runs = Runs {
        rows: &rows,
        applies: &applies,
        counters: &counters,
        colds: &colds,
    };
    if !(rows.is_empty() && applies.is_empty() && counters.is_empty() && colds.is_empty()) {
        write_report(&args, &env, &runs, started);
    }
    floors(&args, &env, nameserver);
}

/// The published config against the floor at each `--floor` count, in a section of its own.
fn floors(args: &Args, env: &Env, nameserver: Ipv4Addr) {
    let started = Instant::now();
    let floors: Vec<floor::Floor> = args
        .floor
        .iter()
        .map(|&count| {
            println!("\n== {count} routes: the published config against the floor ==");
            floor::floor(env, nameserver, count)
        })
        .collect();
    if !floors.is_empty() {
        write_floor(args, &floors, started);
    }
}

/// A row per route count and design, reloads under load at the largest count only.
fn rows(args: &Args, env: &Env, nameserver: Ipv4Addr) -> Vec<Row> {
    let mut rows = Vec::new();
    let largest = args.routes.iter().copied().max().unwrap_or(0);
    for &count in &args.routes {
        let routes = dataplane::routes(count);
        let ends = resolve_routes(env, &routes);
        for &design in &args.designs {
            let reloads = match design {
                _ if count != largest => 0,
                Design::PerRoute => args.before_reloads,
                Design::Maps => args.reloads,
            };
            println!("\n== {count} routes, {} ==", design.label());
            let row = measure(env, nameserver, design, &routes, &ends, reloads);
            println!("{}", table(std::slice::from_ref(&row)));
            rows.push(row);
        }
    }
    rows
}

/// Route i's host name resolves to backend i % 4 on both DNS servers; the end routes of
/// each kind.
fn resolve_routes(env: &Env, routes: &[Route]) -> Ends {
    let mut banners = HashMap::new();
    for (i, route) in routes.iter().enumerate() {
        let backend = &env.backends.list[i % env.backends.list.len()];
        let SocketAddr::V4(addr) = backend.addr else {
            unreachable!("IPv4 backends")
        };
        for server in [&env.dns, &env.agent_dns] {
            server.set(route.back.as_str(), &[*addr.ip()]);
        }
        banners.insert(route.back.as_str().to_owned(), backend.banner());
    }
    Ends::find(routes, |r| banners[r.back.as_str()].clone())
}

/// The section, printed and spliced into the report file.
fn write_report(args: &Args, env: &Env, runs: &Runs<'_>, started: Instant) {
    let elapsed = started.elapsed();
    let branch = branch(args);
    let section = section(runs, (elapsed, env.ticks, env.window), branch.as_deref());
    splice(
        args,
        dataplane::markers(branch.as_deref()),
        &section,
        started,
    );
}

/// The floor's section, printed and spliced into the report file.
fn write_floor(args: &Args, floors: &[floor::Floor], started: Instant) {
    let branch = branch(args);
    let section = floor_report::section(floors, started.elapsed(), branch.as_deref());
    splice(
        args,
        floor_report::markers(branch.as_deref()),
        &section,
        started,
    );
}

/// The HAProxy branch of a section of its own (`--haproxy-section`), else `None`.
fn branch(args: &Args) -> Option<String> {
    args.haproxy_section
        .then(|| haproxy_version::check_expected().map(|h| h.branch()))
        .transpose()
        .unwrap_or_else(|e| panic!("{e}"))
}

/// `section` printed and put between `markers` in the report file.
fn splice(args: &Args, (begin, end): (String, String), section: &str, started: Instant) {
    println!("\n{section}");
    let document = std::fs::read_to_string(&args.out).unwrap_or_default();
    std::fs::write(
        &args.out,
        dataplane::splice_section(&document, &begin, &end, section),
    )
    .expect("write the report");
    println!(
        "wrote {} ({:.0} s)",
        args.out.display(),
        started.elapsed().as_secs_f64()
    );
}
