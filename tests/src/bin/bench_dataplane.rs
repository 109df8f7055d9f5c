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
//!                  [--skip-before] [--skip-after] [--no-agent] [--out docs/BENCHMARKS.md]`
//!
//! Needs root: HAProxy runs in a private mount namespace (`unshare -m`) whose resolv.conf
//! points at a counting DNS server on port 53 of a loopback address.
#![allow(clippy::print_stdout, clippy::expect_used, clippy::unwrap_used)]

use std::collections::HashMap;
use std::fmt::Write as _;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use autoproxy::model::Route;
use autoproxy_tests::dataplane::{
    self, Burst, CpuPerConnection, CpuSample, Design, Ends, Proxy, Target, Until, burst, cpu_ticks,
    steady,
};
use autoproxy_tests::dns::{DnsServer, Query};
use autoproxy_tests::estate;
use autoproxy_tests::moto::Moto;
use autoproxy_tests::proxy::{Backends, Haproxy};
use autoproxy_tests::resolver::{Knobs, Resolver};

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
    out: PathBuf,
}

fn args() -> Args {
    let mut args = Args {
        routes: vec![1_000, 10_000],
        designs: vec![Design::PerRoute, Design::Maps],
        window: 10,
        reloads: 20,
        before_reloads: 20,
        no_agent: false,
        out: autoproxy_tests::root().join("docs/BENCHMARKS.md"),
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
            "--out" => args.out = PathBuf::from(value()),
            other => panic!("unknown flag {other}"),
        }
    }
    args
}

/// Everything shared by the runs: the DNS servers, the backends, the clock.
struct Env {
    /// Where HAProxy's resolv.conf (and the per-route template's `resolvers`) point.
    dns: DnsServer,
    /// The map-based design's resolver agent asks this one: its queries are told apart.
    agent_dns: DnsServer,
    backends: Backends,
    ticks: u64,
    window: Duration,
    agent: bool,
}

/// One row of the table.
struct Row {
    routes: usize,
    design: Design,
    exact: [CpuPerConnection; 2],
    suffix: [CpuPerConnection; 2],
    steady: (f64, usize),
    /// HAProxy's own share of the steady rate (the rest is the resolver agent's).
    haproxy_steady: f64,
    check: Burst,
    start: Burst,
    reload: Burst,
    check_time: Duration,
    start_time: Duration,
    reload_time: Duration,
    idle_percent: f64,
    /// autoproxy-resolver's CPU in the same window, when it runs.
    agent_percent: Option<f64>,
    /// At the largest route count only.
    under_load: Option<UnderLoad>,
}

fn main() {
    let args = args();
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
    };
    println!(
        "DNS on {nameserver}:53 (HAProxy) and {} (resolver agent); backends on 127.0.0.2-5:{}",
        env.agent_dns.addr(),
        env.backends.port
    );

    let mut rows = Vec::new();
    let largest = args.routes.iter().copied().max().unwrap_or(0);
    for &count in &args.routes {
        let routes = dataplane::routes(count);
        // Route i's host name resolves to backend i % 4.
        let mut banners = HashMap::new();
        for (i, route) in routes.iter().enumerate() {
            let backend = &env.backends.list[i % env.backends.list.len()];
            let SocketAddr::V4(addr) = backend.addr else {
                unreachable!("IPv4 backends")
            };
            for server in [&env.dns, &env.agent_dns] {
                server.set(route.backend.as_str(), &[*addr.ip()]);
            }
            banners.insert(route.backend.as_str().to_owned(), backend.banner());
        }
        let ends = Ends::find(&routes, |r| banners[r.backend.as_str()].clone());
        for &design in &args.designs {
            let reloads = match design {
                _ if count != largest => 0,
                Design::PerRoute => args.before_reloads,
                Design::Maps => args.reloads,
            };
            println!("\n== {count} routes, {} ==", design.label());
            let row = measure(&env, nameserver, design, &routes, &ends, reloads);
            println!("{}", table(std::slice::from_ref(&row)));
            rows.push(row);
        }
    }

    let apply = (largest > 0 && args.designs.contains(&Design::Maps)).then(|| {
        println!("\n== the apply document, {largest} routes ==");
        let apply = apply_times(&env, &dataplane::routes(largest));
        println!("{}", apply.line());
        apply
    });

    let elapsed = started.elapsed();
    let section = section(&rows, apply.as_ref(), elapsed, ticks, env.window);
    println!("\n{section}");
    let document = std::fs::read_to_string(&args.out).unwrap_or_default();
    std::fs::write(
        &args.out,
        dataplane::splice_section(&document, dataplane::BEGIN, dataplane::END, &section),
    )
    .expect("write the report");
    println!(
        "wrote {} ({:.0} s)",
        args.out.display(),
        started.elapsed().as_secs_f64()
    );
}

fn measure(
    env: &Env,
    nameserver: Ipv4Addr,
    design: Design,
    routes: &[Route],
    ends: &Ends,
    reloads: usize,
) -> Row {
    let mut proxy = Proxy::new(nameserver);
    let resolvers = match design {
        Design::PerRoute => [env.dns.addr()],
        Design::Maps => [env.agent_dns.addr()],
    };
    let config = dataplane::render(
        design,
        routes,
        &resolvers,
        &proxy.options(env.backends.port),
        1,
    );
    proxy.install(&config);
    // A running instance: autoproxy-resolver has resolved every name before, and keeps
    // asking at its steady pace.
    let mut agent = None;
    if design == Design::Maps {
        prefill_addresses(&proxy, routes, env);
        if env.agent {
            agent = Some(Resolver::start(&proxy.config_path(), Knobs::default()));
            std::thread::sleep(Duration::from_secs(1));
        }
    }
    env.dns.clear_log();
    env.agent_dns.clear_log();

    let check_from = Instant::now();
    let (check_time, valid, output) = proxy.check();
    let check_to = Instant::now();
    assert!(valid, "haproxy -c refused the config:\n{output}");
    println!("haproxy -c: {check_time:.2?}");

    let start_from = Instant::now();
    let start_time = proxy.start(&ends.first_exact, Duration::from_secs(60));
    let start_to = start_from + start_time;
    println!("start: {start_time:.2?}");
    // Let the start's own burst pass before the steady window.
    std::thread::sleep(Duration::from_secs(2));

    let worker = proxy.worker().expect("a serving worker");
    let agent_pid = agent.as_ref().map(Resolver::pid);
    let cpu_from = cpu_ticks(worker).expect("worker stat");
    let agent_from = agent_pid.and_then(cpu_ticks);
    let steady_from = Instant::now();
    std::thread::sleep(env.window);
    let steady_to = Instant::now();
    let cpu_to = cpu_ticks(worker).expect("worker stat");
    let agent_to = agent_pid.and_then(cpu_ticks);
    let window = steady_to.duration_since(steady_from).as_secs_f64();
    let idle_ticks_per_second = (cpu_to - cpu_from) as f64 / window;
    let idle_percent = 100.0 * idle_ticks_per_second / env.ticks as f64;
    let agent_percent = agent_from
        .zip(agent_to)
        .map(|(from, to)| 100.0 * (to - from) as f64 / window / env.ticks as f64);
    println!("idle worker: {idle_percent:.1} % of a core; agent {agent_percent:.1?} %");

    // First and last alternate, three rounds each, so that a drift in what else runs on
    // the machine weighs on both alike.
    let until = Until {
        connections: 1_000,
        min_time: Duration::from_millis(400),
        max_time: Duration::from_secs(1),
        stop: Arc::new(AtomicBool::new(false)),
    };
    let pair = |first: &Target, last: &Target| {
        let mut samples = [CpuSample::default(); 2];
        for _round in 0..3 {
            for (sample, target) in samples.iter_mut().zip([first, last]) {
                sample.add(dataplane::cpu_sample(&proxy, target, &until));
            }
        }
        let pair = samples.map(|s| s.per_connection(idle_ticks_per_second, env.ticks));
        for (target, cpu) in [first, last].into_iter().zip(pair) {
            println!(
                "{}: {:.0} µs/connection ({:.0} µs gross) over {} connections",
                target.sni, cpu.micros, cpu.gross_micros, cpu.connections
            );
        }
        pair
    };
    let exact = pair(&ends.first_exact, &ends.last_exact);
    let suffix = pair(&ends.first_suffix, &ends.last_suffix);

    let drops_from = dataplane::udp_receive_drops();
    let reload_from = Instant::now();
    let reload_time = proxy
        .reload(Duration::from_secs(60))
        .expect("the reload completes within 60 s");
    let reload_to = reload_from + reload_time;
    std::thread::sleep(Duration::from_secs(1));
    let drops = dataplane::udp_receive_drops()
        .zip(drops_from)
        .map(|(to, from)| to - from);
    println!("reload: {reload_time:.2?}; UDP datagrams dropped machine-wide meanwhile: {drops:?}");

    let haproxy_queries = env.dns.queries();
    let all = dataplane::merged(haproxy_queries.clone(), env.agent_dns.queries());
    let after = Duration::from_secs(1);
    let row_bursts = |queries: &[Query]| {
        (
            burst(queries, check_from, check_to),
            burst(queries, start_from, start_to + after),
            burst(queries, reload_from, reload_to + after),
        )
    };
    let (check, start, reload) = row_bursts(&all);
    let steady_rate = steady(&all, steady_from, steady_to);
    let haproxy_steady = steady(&haproxy_queries, steady_from, steady_to).0;
    let (own_check, own_start, own_reload) = row_bursts(&haproxy_queries);
    println!(
        "DNS steady {:.0}/s (max {}/s; HAProxy's own {haproxy_steady:.0}/s); \
         HAProxy's own at check {}, start {}, reload {}",
        steady_rate.0, steady_rate.1, own_check.total, own_start.total, own_reload.total
    );

    let under_load = (reloads > 0).then(|| reloads_under_load(&proxy, ends, reloads));
    if let Some(mut agent) = agent {
        assert!(
            agent.is_running(),
            "autoproxy-resolver stopped:\n{}",
            agent.output()
        );
        let _ = agent.terminate();
    }
    drop(proxy);
    Row {
        routes: routes.len(),
        design,
        exact,
        suffix,
        steady: steady_rate,
        haproxy_steady,
        check,
        start,
        reload,
        check_time,
        start_time,
        reload_time,
        idle_percent,
        agent_percent,
        under_load,
    }
}

/// The address map as autoproxy-resolver leaves it once it has resolved every name.
fn prefill_addresses(proxy: &Proxy, routes: &[Route], env: &Env) {
    let mut text = String::new();
    for (i, route) in routes.iter().enumerate() {
        let backend = &env.backends.list[i % env.backends.list.len()];
        writeln!(text, "{} {}", route.backend.as_str(), backend.addr.ip()).unwrap();
    }
    std::fs::write(proxy.addresses_map(), text).expect("write addresses.map");
}

/// The apply document's whole run on one config, as the first install and as the next one.
struct ApplyTimes {
    routes: usize,
    bytes: usize,
    first: Duration,
    next: Duration,
}

impl ApplyTimes {
    fn line(&self) -> String {
        format!(
            "**Apply** ({} routes, a {:.1} MB config): the apply document's whole run took \
             {:.2} s as the first install and {:.2} s for the next generation.",
            self.routes,
            self.bytes as f64 / 1e6,
            self.first.as_secs_f64(),
            self.next.as_secs_f64()
        )
    }
}

/// Runs the apply document on a config of `routes` twice (first install, next generation)
/// against moto as S3 and a real HAProxy on loopback.
fn apply_times(env: &Env, routes: &[Route]) -> ApplyTimes {
    const BUCKET: &str = "autoproxy-config";
    const KEY: &str = "haproxy/haproxy.cfg";
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let moto = Moto::start();
    let sdk = rt.block_on(moto.sdk_config());
    rt.block_on(estate::versioned_bucket(&sdk, BUCKET))
        .expect("the config bucket");
    let haproxy = Haproxy::new();
    let document = haproxy.apply_document().expect("the apply document");
    let options = haproxy.options(env.backends.port);
    let mut times = Vec::new();
    let mut bytes = 0;
    for generation in 1..=2_u64 {
        // The next generation drops the first route: a real change to check and reload.
        let kept = if generation == 1 {
            routes
        } else {
            routes.get(1..).unwrap_or_default()
        };
        let config = dataplane::render(
            Design::Maps,
            kept,
            &[env.agent_dns.addr()],
            &options,
            generation,
        );
        bytes = bytes.max(config.len());
        let version = rt
            .block_on(estate::upload_config(&sdk, BUCKET, KEY, &config))
            .expect("upload the config");
        let run = document
            .run(
                &[
                    ("ConfigBucket", BUCKET),
                    ("ConfigKey", KEY),
                    ("ConfigVersion", version.as_str()),
                ],
                &moto.env(),
                Duration::from_secs(120),
            )
            .expect("run the apply document");
        assert!(
            run.success(),
            "the apply of generation {generation} failed:\n{run}"
        );
        println!("generation {generation}: {:?}", run.step("done"));
        times.push(run.elapsed());
    }
    ApplyTimes {
        routes: routes.len(),
        bytes,
        first: times[0],
        next: times[1],
    }
}

/// What the clients saw while the master reloaded.
struct UnderLoad {
    /// Reloads signalled, and how many of them completed within [`RELOAD_TIMEOUT`].
    sent: usize,
    completed: Vec<Duration>,
    attempts: u64,
    failures: u64,
}

/// How long one reload under load may take before the next one is signalled anyway.
const RELOAD_TIMEOUT: Duration = Duration::from_secs(15);
/// No new reload is signalled after this long (a per-route reload can take seconds).
const RELOADS_CAP: Duration = Duration::from_secs(40);

/// Up to `reloads` reloads about 0.5 s apart (at most until [`RELOADS_CAP`]) while two
/// clients connect to the four end routes, one connection after another.
fn reloads_under_load(proxy: &Proxy, ends: &Ends, reloads: usize) -> UnderLoad {
    let stop = Arc::new(AtomicBool::new(false));
    let until = Until {
        connections: u64::MAX,
        min_time: Duration::ZERO,
        max_time: Duration::from_secs(300),
        stop: Arc::clone(&stop),
    };
    let targets: Vec<Target> = ends.all().into_iter().cloned().collect();
    let addr = proxy.https;
    let clients = std::thread::spawn(move || dataplane::client_loop(addr, &targets, 2, &until));
    std::thread::sleep(Duration::from_millis(500));
    let started = Instant::now();
    let (mut sent, mut completed) = (0, Vec::new());
    while sent < reloads && started.elapsed() < RELOADS_CAP {
        let at = Instant::now();
        sent += 1;
        match proxy.reload(RELOAD_TIMEOUT) {
            Some(took) => completed.push(took),
            None => println!(
                "reload {sent} did not complete in {RELOAD_TIMEOUT:?} ({} HAProxy processes)",
                dataplane::children(proxy.master_pid()).len() + 1
            ),
        }
        let next = at + Duration::from_millis(500);
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
    }
    std::thread::sleep(Duration::from_millis(500));
    stop.store(true, Ordering::SeqCst);
    let tally = clients.join().expect("client loop");
    let times: Vec<String> = completed
        .iter()
        .map(|t| format!("{:.2}", t.as_secs_f64()))
        .collect();
    println!("reload times (s): {}", times.join(" "));
    println!(
        "{} of {sent} reloads completed under load: {} connections, {} failed {:?}",
        completed.len(),
        tally.attempts,
        tally.failures,
        tally.examples
    );
    UnderLoad {
        sent,
        completed,
        attempts: tally.attempts,
        failures: tally.failures,
    }
}

fn under_load(u: &UnderLoad) -> String {
    let reloads = if u.completed.len() == u.sent {
        format!("{} reloads", u.sent)
    } else {
        format!(
            "{} reloads, {} done within {} s",
            u.sent,
            u.completed.len(),
            RELOAD_TIMEOUT.as_secs()
        )
    };
    let fastest = u.completed.iter().min().copied().unwrap_or_default();
    let slowest = u.completed.iter().max().copied().unwrap_or_default();
    format!(
        "{} of {} ({reloads}; {}–{} each)",
        u.failures,
        u.attempts,
        seconds(fastest),
        seconds(slowest)
    )
}

fn micros(value: f64) -> String {
    if value >= 10.0 {
        format!("{value:.0}")
    } else {
        format!("{value:.1}")
    }
}

fn span(pair: &[CpuPerConnection; 2]) -> String {
    let ratio = if pair[0].micros > 0.0 {
        format!("{:.2}×", pair[1].micros / pair[0].micros)
    } else {
        "n/a".to_owned()
    };
    format!(
        "{}→{} µs ({ratio})",
        micros(pair[0].micros),
        micros(pair[1].micros)
    )
}

fn seconds(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s >= 1.0 {
        format!("{s:.1} s")
    } else {
        format!("{:.0} ms", s * 1000.0)
    }
}

fn table(rows: &[Row]) -> String {
    let mut out = String::from(
        "| routes | template | CPU/conn first→last API (ratio) | suffix first→last (ratio) \
         | DNS q/s steady avg / max | DNS during -c / start / reload: total (max per s) \
         | -c / start / reload | idle CPU | failed conns in reloads under load |\n\
         |---|---|---|---|---|---|---|---|---|\n",
    );
    for row in rows {
        let own = match row.design {
            Design::Maps => format!(" (HAProxy {:.0})", row.haproxy_steady),
            Design::PerRoute => String::new(),
        };
        let burst = |b: &Burst| format!("{} ({})", b.total, b.max_per_second);
        let agent = row
            .agent_percent
            .map_or(String::new(), |a| format!(" (+ resolver {a:.1} %)"));
        let under_load = row.under_load.as_ref().map_or("—".to_owned(), under_load);
        writeln!(
            out,
            "| {} | {} | {} | {} | {:.0} / {}{own} | {} / {} / {} | {} / {} / {} | {:.1} %{agent} | {} |",
            row.routes,
            row.design.label(),
            span(&row.exact),
            span(&row.suffix),
            row.steady.0,
            row.steady.1,
            burst(&row.check),
            burst(&row.start),
            burst(&row.reload),
            seconds(row.check_time),
            seconds(row.start_time),
            seconds(row.reload_time),
            row.idle_percent,
            under_load,
        )
        .unwrap();
    }
    out
}

fn machine() -> String {
    let nproc = std::thread::available_parallelism().map_or(0, |n| n.get());
    let haproxy = std::process::Command::new("haproxy")
        .arg("-v")
        .output()
        .ok()
        .and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .next()
                .map(str::to_owned)
        })
        .unwrap_or_else(|| "unknown".to_owned());
    format!("{nproc} cores (nproc); {haproxy}")
}

fn section(
    rows: &[Row],
    apply: Option<&ApplyTimes>,
    elapsed: Duration,
    ticks: u64,
    window: Duration,
) -> String {
    let mut out = String::from("## Data plane\n\n");
    writeln!(
        out,
        "Written by `bench_dataplane` (run by `make bench` after `bench`); {}; {:.0} s.\n",
        machine(),
        elapsed.as_secs_f64()
    )
    .unwrap();
    out.push_str(&table(rows));
    if let Some(apply) = apply {
        writeln!(out, "\n{}", apply.line()).unwrap();
    }
    write!(
        out,
        "
How each figure is measured:

* **Setup**: a real HAProxy in master-worker mode on loopback (maxconn 2,000), once with the
  per-route template the project used before (`tests/data/per-route.cfg.j2`: per route an
  ACL, a `use_backend` and a backend whose server resolves its name every second and is
  health-checked every 10 s) and once with the default template (map lookups, one backend,
  no DNS), both rendered by the real renderer from the same routes: half exact API routes
  `proxy.api.<zone>`, half internal-ingress suffix routes `*.int.<zone>`, in the generator's
  order. Four loopback TCP backends answer with a banner; route *i*'s host name resolves to
  backend *i* mod 4.
* **CPU per connection**: the serving worker's `utime + stime` from `/proc/<pid>/stat`
  ({ticks} ticks/s), divided by the connections made to one route: two clients, one
  connection after another, each a TLS ClientHello with the route's SNI, answered by the
  backend and read to the end; three rounds of up to 1,000 connections (0.4 to 1 s each),
  alternating between the first and the last route. What the idle worker burns in the same
  time is taken off. First and last are the first and last route of each kind in the
  config (the per-route template walks its ACLs in that order).
* **DNS**: counted by a DNS server of our own that answers every backend name. HAProxy, and
  each `haproxy -c`, runs in a private mount namespace whose `/etc/resolv.conf` names only
  that server, which is also the per-route template's `resolvers` nameserver: libc lookups
  at check and start time and run-time resolution are all seen. With the maps,
  `autoproxy-resolver` runs with its production settings (every name once per 50 s, at
  most 200 queries/s) against a second counting server, with the address map already filled
  (a running instance; a new one fills an empty map at the cap, names ÷ 200 seconds); the
  figures are the whole instance's, HAProxy's own share in brackets. Steady state is a
  {window}-s window from 2 s after the start, without traffic: the average and the busiest
  of its 1-s windows. During `-c` is the check itself; during start and reload, from the
  start (or `kill -USR2` to the master) until the new worker serves, plus one second: the
  total and the most in any sliding 1-s window.
* **Times**: `-c` is the wall time of `haproxy -c`; start, until the first route answers
  through HAProxy; reload, from `kill -USR2` until `show info` answers from a new worker.
* **Apply**: the apply document from template.yaml, run as the SSM agent runs it (`sh`,
  parameters in the environment, the AWS CLI against moto as S3), on a map-based config of
  the largest route count: from the script's start to its exit, download, verify, maps,
  `haproxy -c`, swap, reload and the running-generation check included. Once as the first
  install (HAProxy not running yet), then for the next generation (one route fewer) while
  it runs. About 1 s of it is the AWS CLI starting and making its one `get-object` (timed
  once with the script's log lines stamped).
* **Idle CPU**: the worker's CPU (and the resolver's) in the steady-state window, in % of
  one core.
* **Failed connections**: at the largest route count, two clients open connections to the
  four end routes one after another while the master reloads every 0.5 s, or as soon as
  the previous reload is done when it takes longer (20 reloads, none signalled after 40 s,
  none waited for beyond 15 s); a connection fails when it is refused or reset, or closes
  without the backend's banner. The range is the reload times under that load.
* Other processes share the machine's cores; the figures are from one run.
",
        window = window.as_secs()
    )
    .unwrap();
    out
}
