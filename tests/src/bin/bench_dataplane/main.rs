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
//!                  [--skip-before] [--skip-after] [--no-agent] [--out docs/BENCHMARKS.md]
//!                  [--haproxy-section]`
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
use autoproxy_tests::haproxy_version;
use autoproxy_tests::moto::Moto;
use autoproxy_tests::proxy::{Backends, Haproxy};
use autoproxy_tests::resolver::{Knobs, Resolver};
use autoproxy_tests::stream::{Held, KubectlWatch, streamer};

/// Where a resolv.conf can point (port 53); the first free one is used.
mod report;

use autoproxy_tests::proxy::HaproxyFiles;
use report::*;
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
            "--out" => args.out = PathBuf::from(value()),
            "--haproxy-section" => args.haproxy_section = true,
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
    let haproxy = haproxy_version::check_expected().unwrap_or_else(|e| panic!("{e}"));
    println!("{}", haproxy.line);
    let branch = args.haproxy_section.then(|| haproxy.branch());
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

    let mut applies = Vec::new();
    if args.designs.contains(&Design::Maps) {
        for &count in &args.routes {
            println!("\n== the apply document, {count} routes ==");
            let apply = apply_times(&env, &dataplane::routes(count));
            println!("{}", apply.line());
            applies.push(apply);
        }
    }

    let elapsed = started.elapsed();
    let section = section(
        &rows,
        &applies,
        elapsed,
        ticks,
        env.window,
        branch.as_deref(),
    );
    println!("\n{section}");
    let document = std::fs::read_to_string(&args.out).unwrap_or_default();
    let (begin, end) = dataplane::markers(branch.as_deref());
    std::fs::write(
        &args.out,
        dataplane::splice_section(&document, &begin, &end, &section),
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

    let worker = proxy.worker_pid().expect("a serving worker");
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

/// Route changes published one after another.
const CHANGES: usize = 20;
/// Connections held open through the proxy while they are applied.
const HELD: usize = 10;
/// Where the held connections' backend listens (the backends' port).
const STREAMER: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 60);
/// Where the Kubernetes API stand-in that kubectl watches listens (the backends' port).
const APISERVER: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 61);

/// The apply document's whole run on one config, as the first install, then [`CHANGES`]
/// route-only generations and one that changes a setting, with connections held through
/// the proxy; what the agent and the document cost.
struct ApplyTimes {
    routes: usize,
    bytes: usize,
    first: Duration,
    /// Each route-only generation's whole run.
    changes: Vec<Duration>,
    /// From each route-only generation's return to its new route serving (`None`: not
    /// within 5 s).
    serving: Vec<Option<Duration>>,
    /// Reloads the route-only generations caused (reload lines in their logs, and worker
    /// PIDs that changed).
    reloads: usize,
    worker_changes: usize,
    /// HAProxy workers (old ones included) after the route-only generations.
    workers: usize,
    /// Held connections still flowing after them.
    held_alive: usize,
    /// How the kubectl watch through the proxy fared, as a phrase.
    kubectl: String,
    /// The generation that changes a setting: its whole run (a reload).
    structural: Duration,
    /// The agent's peak resident memory during the last route-only apply, as it logged it.
    peak_memory: String,
    agent_bytes: u64,
    document_bytes: usize,
}

fn median(times: &[Duration]) -> Duration {
    let mut sorted = times.to_vec();
    sorted.sort();
    sorted.get(sorted.len() / 2).copied().unwrap_or_default()
}

fn ms(time: Duration) -> String {
    format!("{:.0} ms", time.as_secs_f64() * 1000.0)
}

impl ApplyTimes {
    fn line(&self) -> String {
        let served: Vec<Duration> = self.serving.iter().flatten().copied().collect();
        let serving = if served.len() == self.serving.len() {
            format!(
                "median {}, at most {}",
                ms(median(&served)),
                ms(served.iter().max().copied().unwrap_or_default())
            )
        } else {
            format!("{} of {} within 5 s", served.len(), self.serving.len())
        };
        format!(
            "**Apply** ({} routes, a {:.1} MB config): the apply document's whole run took \
             {:.2} s as the first install. Then {} route-only generations, one after another \
             (each adds a route whose host the apply resolves): whole run median {:.2} s, at \
             most {:.2} s; the new route served {serving} after the apply returned; reloads \
             {} (worker PIDs changed {} times); HAProxy workers afterwards {}; {} of {} \
             connections held through the proxy still flowing; {}. A generation that changes \
             a setting reloads: {:.2} s. autoproxy-agent: {:.1} MB binary, peak memory {} \
             during the apply; the document's Content is {} bytes as JSON.",
            self.routes,
            self.bytes as f64 / 1e6,
            self.first.as_secs_f64(),
            self.changes.len(),
            median(&self.changes).as_secs_f64(),
            self.changes
                .iter()
                .max()
                .copied()
                .unwrap_or_default()
                .as_secs_f64(),
            self.reloads,
            self.worker_changes,
            self.workers,
            self.held_alive,
            HELD,
            self.kubectl,
            self.structural.as_secs_f64(),
            self.agent_bytes as f64 / 1e6,
            self.peak_memory,
            self.document_bytes,
        )
    }
}

/// One apply of a config through the document as the SSM agent runs it.
struct Applier {
    rt: tokio::runtime::Runtime,
    moto: Moto,
    sdk: aws_config::SdkConfig,
    document: autoproxy_tests::ssm_agent::Document,
}

impl Applier {
    const BUCKET: &'static str = "autoproxy-config";
    const KEY: &'static str = "haproxy/haproxy.cfg";

    fn run(&self, config: &str) -> autoproxy_tests::ssm_agent::Run {
        let version = self
            .rt
            .block_on(estate::upload_config(
                &self.sdk,
                Self::BUCKET,
                Self::KEY,
                config,
            ))
            .expect("upload the config");
        let run = self
            .document
            .run(
                &[
                    ("ConfigBucket", Self::BUCKET),
                    ("ConfigKey", Self::KEY),
                    ("ConfigVersion", version.as_str()),
                ],
                &self.moto.env(),
                Duration::from_secs(120),
            )
            .expect("run the apply document");
        assert!(run.success(), "the apply failed:\n{run}");
        run
    }
}

/// Runs the apply document against moto as S3 and a real HAProxy on loopback: the first
/// install of all routes but [`CHANGES`] (their addresses known, as the resolver would have
/// them) plus a route to a streaming backend, [`HELD`] connections opened through it, then
/// one generation per withheld route, then one with another `maxconn`.
fn apply_times(env: &Env, routes: &[Route]) -> ApplyTimes {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let moto = Moto::start();
    let sdk = rt.block_on(moto.sdk_config());
    rt.block_on(estate::versioned_bucket(&sdk, Applier::BUCKET))
        .expect("the config bucket");
    let agent = rt.block_on(autoproxy_tests::agent::Published::publish(
        &sdk,
        Applier::BUCKET,
    ));
    let haproxy = Haproxy::new();
    let applier = Applier {
        document: haproxy.apply_document().expect("the apply document"),
        rt,
        moto,
        sdk,
    };
    let mut options = haproxy.options(env.backends.port);
    let _streamer = streamer(STREAMER, env.backends.port).expect("the streaming backend");
    let literal_route = |sni: &str, ip: Ipv4Addr| {
        let mut route = routes[0].clone();
        route.sni = sni.to_owned();
        route.backend = autoproxy::names::HostName::parse(&ip.to_string()).expect("an IP");
        route
    };
    let hold = literal_route("proxy.api.hold.bench", STREAMER);
    let kube = literal_route("proxy.api.kube.bench", APISERVER);
    let (withheld, kept) = routes.split_at(CHANGES.min(routes.len() - 1));
    let mut known = String::new();
    for (i, route) in routes.iter().enumerate().skip(withheld.len()) {
        let backend = &env.backends.list[i % env.backends.list.len()];
        writeln!(known, "{} {}", route.backend.as_str(), backend.addr.ip()).unwrap();
    }
    let maps = haproxy.dir().join("autoproxy");
    std::fs::create_dir_all(&maps).expect("the maps directory");
    std::fs::write(maps.join("addresses.map"), known).expect("write addresses.map");
    let render =
        |installed: &[Route], generation: u64, options: &autoproxy::render::RenderOptions| {
            let mut all = vec![hold.clone(), kube.clone()];
            all.extend_from_slice(installed);
            dataplane::render(
                Design::Maps,
                &all,
                &[env.agent_dns.addr()],
                options,
                generation,
            )
        };

    let config = render(kept, 1, &options);
    let mut bytes = config.len();
    let first = applier.run(&config).elapsed();
    let mut held: Vec<Held> = (0..HELD)
        .map(|_| Held::open(haproxy.https, &hold.sni).expect("a held connection"))
        .collect();
    // kubectl and openssl are not the project's tools: without them, the rest is measured.
    let watch = KubectlWatch::start(APISERVER, env.backends.port, haproxy.https, &kube.sni);
    let (mut changes, mut serving) = (Vec::new(), Vec::new());
    let (mut reloads, mut worker_changes) = (0, 0);
    let mut peak_memory = String::new();
    let mut worker = haproxy.worker_pid();
    for (index, added) in withheld.iter().rev().enumerate() {
        let generation = 2 + index as u64;
        let config = render(&routes[withheld.len() - 1 - index..], generation, &options);
        bytes = bytes.max(config.len());
        let run = applier.run(&config);
        let returned = Instant::now();
        serving.push(served_within(
            &haproxy,
            &added.sni,
            returned,
            Duration::from_secs(5),
        ));
        changes.push(run.elapsed());
        reloads += run.step("reload").len();
        let now = haproxy.worker_pid();
        worker_changes += usize::from(now != worker);
        worker = now;
        peak_memory = run
            .step("done")
            .first()
            .and_then(|done| done.split("peak memory ").nth(1))
            .map(|m| m.trim_end_matches(')').to_owned())
            .unwrap_or_default();
        println!("generation {generation}: {:?}", run.step("done"));
    }
    std::thread::sleep(Duration::from_millis(500));
    let workers = haproxy.processes().len().saturating_sub(1);
    let held_alive = held
        .iter_mut()
        .map(|h| h.alive().is_ok())
        .filter(|ok| *ok)
        .count();
    let kubectl = watch.map_or_else(
        |why| format!("no kubectl watch measured ({why})"),
        |watch| kubectl_phrase(&watch.end()),
    );
    println!("kubectl watch: {kubectl}");

    options.maxconn -= 1;
    let structural_config = render(routes, 2 + withheld.len() as u64, &options);
    let run = applier.run(&structural_config);
    assert_eq!(run.step("reload").len(), 1, "a setting reloads:\n{run}");
    ApplyTimes {
        routes: routes.len(),
        bytes,
        first,
        changes,
        serving,
        reloads,
        worker_changes,
        workers,
        held_alive,
        kubectl,
        structural: run.elapsed(),
        peak_memory,
        agent_bytes: std::fs::metadata(&agent.binary).map_or(0, |m| m.len()),
        document_bytes: serde_json::to_string(&applier.document.content).map_or(0, |s| s.len()),
    }
}

/// How the kubectl watch fared, as the report says it.
fn kubectl_phrase(end: &autoproxy_tests::stream::WatchEnd) -> String {
    if end.survived && end.status == Some(0) {
        format!(
            "kubectl watching through the proxy (`kubectl get --raw …?watch=true`, one event \
             every 100 ms) still connected, then read {} events over {:.1} s and exited 0",
            end.events,
            end.watched.as_secs_f64()
        )
    } else {
        format!(
            "kubectl watching through the proxy was cut (still running: {}, exit {:?}, {} \
             events over {:.1} s)",
            end.survived,
            end.status,
            end.events,
            end.watched.as_secs_f64()
        )
    }
}

/// How long after `returned` a ClientHello for `sni` first got a backend's answer, probed
/// every 5 ms; `None` if not within `limit`.
fn served_within(
    haproxy: &Haproxy,
    sni: &str,
    returned: Instant,
    limit: Duration,
) -> Option<Duration> {
    while returned.elapsed() < limit {
        if haproxy.probe(sni).is_ok() {
            return Some(returned.elapsed());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    None
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
