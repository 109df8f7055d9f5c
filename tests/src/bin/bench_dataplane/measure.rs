//! One row of the table: a design at one route count, measured on a real HAProxy in its
//! private mount namespace (check, start, idle window, CPU per connection, reload, and the DNS
//! queries of each phase).

use std::fmt::Write as _;
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use autoproxy::model::Route;
use autoproxy_tests::dataplane::{
    self, Burst, CpuPerConnection, CpuSample, Design, Ends, Proxy, Target, Until, burst, cpu_ticks,
    steady,
};
use autoproxy_tests::dns::Query;
use autoproxy_tests::moto::Moto;
use autoproxy_tests::proxy::HaproxyFiles;
use autoproxy_tests::resolver::{Knobs, Resolver};

use super::env::{Env, METRICS_SECONDS};
use super::under_load::{UnderLoad, reloads_under_load};

/// One row of the table.
pub(super) struct Row {
    pub(super) routes: usize,
    pub(super) design: Design,
    pub(super) exact: [CpuPerConnection; 2],
    pub(super) suffix: [CpuPerConnection; 2],
    pub(super) steady: (f64, usize),
    /// HAProxy's own share of the steady rate (the rest is the resolver agent's).
    pub(super) haproxy_steady: f64,
    pub(super) check: Burst,
    pub(super) start: Burst,
    pub(super) reload: Burst,
    pub(super) check_time: Duration,
    pub(super) start_time: Duration,
    pub(super) reload_time: Duration,
    pub(super) idle_percent: f64,
    /// autoproxy-resolver's CPU in the same window, when it runs.
    pub(super) agent_percent: Option<f64>,
    /// At the largest route count only.
    pub(super) under_load: Option<UnderLoad>,
}

/// When each phase ran, to count the DNS queries that came in it.
struct Phases {
    check: (Instant, Instant),
    start: (Instant, Instant),
    steady: (Instant, Instant),
    reload: (Instant, Instant),
}

/// The worker's (and the resolver's) CPU in the steady-state window, without traffic.
struct Idle {
    window: (Instant, Instant),
    ticks_per_second: f64,
    percent: f64,
    agent_percent: Option<f64>,
}

/// The DNS figures of a row.
struct Dns {
    check: Burst,
    start: Burst,
    reload: Burst,
    steady: (f64, usize),
    haproxy_steady: f64,
}

pub(super) fn measure(
    env: &Env,
    nameserver: Ipv4Addr,
    design: Design,
    routes: &[Route],
    ends: &Ends,
    reloads: usize,
) -> Row {
    let (mut proxy, agent) = install(env, nameserver, design, routes);
    env.dns.clear_log();
    env.agent_dns.clear_log();

    let check_from = Instant::now();
    let (check_time, valid, output) = proxy.check();
    let check = (check_from, Instant::now());
    assert!(valid, "haproxy -c refused the config:\n{output}");
    println!("haproxy -c: {check_time:.2?}");

    let start_from = Instant::now();
    let start_time = proxy.start(&ends.first_exact, Duration::from_secs(60));
    let start = (start_from, start_from + start_time);
    println!("start: {start_time:.2?}");
    // Let the start's own burst pass before the steady window.
    std::thread::sleep(Duration::from_secs(2));

    let idle = idle(env, &proxy, agent.as_ref());
    let exact = cpu_pair(&proxy, [&ends.first_exact, &ends.last_exact], &idle, env);
    let suffix = cpu_pair(&proxy, [&ends.first_suffix, &ends.last_suffix], &idle, env);
    let (reload_time, reload) = reload(&proxy);
    let phases = Phases {
        check,
        start,
        steady: idle.window,
        reload,
    };
    let dns = dns_figures(env, &phases);

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
        steady: dns.steady,
        haproxy_steady: dns.haproxy_steady,
        check: dns.check,
        start: dns.start,
        reload: dns.reload,
        check_time,
        start_time,
        reload_time,
        idle_percent: idle.percent,
        agent_percent: idle.agent_percent,
        under_load,
    }
}

/// The design's config rendered and installed; with the maps, a running instance:
/// autoproxy-resolver has resolved every name before, and keeps asking at its steady pace.
fn install(
    env: &Env,
    nameserver: Ipv4Addr,
    design: Design,
    routes: &[Route],
) -> (Proxy, Option<Resolver>) {
    let proxy = Proxy::new(nameserver);
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
    let mut agent = None;
    if design == Design::Maps {
        prefill_addresses(&proxy, routes, env);
        if env.agent {
            agent = Some(start_resolver(env, &proxy));
            std::thread::sleep(Duration::from_secs(1));
        }
    }
    (proxy, agent)
}

/// autoproxy-resolver with its production settings, publishing its CloudWatch metrics to the
/// benchmark's moto every [`METRICS_SECONDS`].
fn start_resolver(env: &Env, proxy: &Proxy) -> Resolver {
    let mut vars = env.moto.as_ref().map(Moto::env).unwrap_or_default();
    vars.push((
        "AUTOPROXY_METRICS_SECONDS".to_owned(),
        METRICS_SECONDS.to_string(),
    ));
    vars.push(("AUTOPROXY_INSTANCE_ID".to_owned(), "i-0bench".to_owned()));
    Resolver::start_with(&proxy.config_path(), Knobs::default(), &vars)
}

/// The address map as autoproxy-resolver leaves it once it has resolved every name.
pub(super) fn prefill_addresses(proxy: &Proxy, routes: &[Route], env: &Env) {
    let mut text = String::new();
    for (i, route) in routes.iter().enumerate() {
        let backend = &env.backends.list[i % env.backends.list.len()];
        writeln!(text, "{} {}", route.back.as_str(), backend.addr.ip()).unwrap();
    }
    std::fs::write(proxy.addresses_map(), text).expect("write addresses.map");
}

/// The steady-state window: what the idle worker (and the resolver) burn.
fn idle(env: &Env, proxy: &Proxy, agent: Option<&Resolver>) -> Idle {
    let worker = proxy.worker_pid().expect("a serving worker");
    let agent_pid = agent.map(Resolver::pid);
    let cpu_from = cpu_ticks(worker).expect("worker stat");
    let agent_from = agent_pid.and_then(cpu_ticks);
    let steady_from = Instant::now();
    std::thread::sleep(env.window);
    let steady_to = Instant::now();
    let cpu_to = cpu_ticks(worker).expect("worker stat");
    let agent_to = agent_pid.and_then(cpu_ticks);
    let window = steady_to.duration_since(steady_from).as_secs_f64();
    let ticks_per_second = (cpu_to - cpu_from) as f64 / window;
    let percent = 100.0 * ticks_per_second / env.ticks as f64;
    let agent_percent = agent_from
        .zip(agent_to)
        .map(|(from, to)| 100.0 * (to - from) as f64 / window / env.ticks as f64);
    println!(
        "idle worker: {percent:.1} % of a core; resolver {agent_percent:.2?} % (publishing to CloudWatch every {METRICS_SECONDS} s)"
    );
    Idle {
        window: (steady_from, steady_to),
        ticks_per_second,
        percent,
        agent_percent,
    }
}

/// CPU per connection on the first and last of `targets`. They alternate, three rounds each,
/// so that a drift in what else runs on the machine weighs on both alike.
fn cpu_pair(proxy: &Proxy, targets: [&Target; 2], idle: &Idle, env: &Env) -> [CpuPerConnection; 2] {
    let until = Until::cpu_sample();
    let mut samples = [CpuSample::default(); 2];
    for _round in 0..3 {
        for (sample, target) in samples.iter_mut().zip(targets) {
            sample.add(dataplane::cpu_sample(proxy, target, &until));
        }
    }
    let pair = samples.map(|s| s.per_connection(idle.ticks_per_second, env.ticks));
    for (target, cpu) in targets.into_iter().zip(pair) {
        println!(
            "{}: {:.0} µs/connection ({:.0} µs gross) over {} connections",
            target.sni, cpu.micros, cpu.gross_micros, cpu.connections
        );
    }
    pair
}

/// One reload: its time, and when it ran.
fn reload(proxy: &Proxy) -> (Duration, (Instant, Instant)) {
    let drops_from = dataplane::udp_receive_drops();
    let reload_from = Instant::now();
    let reload_time = proxy
        .reload(Duration::from_secs(60))
        .expect("the reload completes within 60 s");
    std::thread::sleep(Duration::from_secs(1));
    let drops = dataplane::udp_receive_drops()
        .zip(drops_from)
        .map(|(to, from)| to - from);
    println!("reload: {reload_time:.2?}; UDP datagrams dropped machine-wide meanwhile: {drops:?}");
    (reload_time, (reload_from, reload_from + reload_time))
}

/// The queries of each phase, the whole instance's and HAProxy's own.
fn dns_figures(env: &Env, phases: &Phases) -> Dns {
    let haproxy_queries = env.dns.queries();
    let all = dataplane::merged(haproxy_queries.clone(), env.agent_dns.queries());
    let after = Duration::from_secs(1);
    let bursts = |queries: &[Query]| {
        (
            burst(queries, phases.check.0, phases.check.1),
            burst(queries, phases.start.0, phases.start.1 + after),
            burst(queries, phases.reload.0, phases.reload.1 + after),
        )
    };
    let (check, start, reload) = bursts(&all);
    let (steady_from, steady_to) = phases.steady;
    let steady_rate = steady(&all, steady_from, steady_to);
    let haproxy_steady = steady(&haproxy_queries, steady_from, steady_to).0;
    let (own_check, own_start, own_reload) = bursts(&haproxy_queries);
    println!(
        "DNS steady {:.0}/s (max {}/s; HAProxy's own {haproxy_steady:.0}/s); \
         HAProxy's own at check {}, start {}, reload {}",
        steady_rate.0, steady_rate.1, own_check.total, own_start.total, own_reload.total
    );
    Dns {
        check,
        start,
        reload,
        steady: steady_rate,
        haproxy_steady,
    }
}
