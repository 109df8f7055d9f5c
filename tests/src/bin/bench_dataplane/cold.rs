//! The cold first install: a new instance's first apply (no config, no address map, HAProxy
//! not running) of a config whose every route's backend is a host name, then the address
//! service started as the apply's unit starts it. The apply gives new hosts 2 s to resolve
//! and holds the rest; the service puts them in as their names resolve, at its cap. What it
//! costs: the apply's run, the time until every route serves, the DNS queries.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use autoproxy::artifact::MapFiles;
use autoproxy::model::Route;
use autoproxy_tests::dataplane::{self, Design, Target};
use autoproxy_tests::dns::{Query, max_per_second};
use autoproxy_tests::proxy::{Haproxy, HaproxyFiles, probe};
use autoproxy_tests::resolver::{Knobs, Resolver, show_map};
use autoproxy_tests::ssm_agent::Run;

use super::apply::Applier;
use super::env::Env;
use super::report::seconds;

/// Every this-many-th route (in config order) is probed, and the last one.
const SAMPLE_EVERY: usize = 100;
/// Between two rounds of probes over the routes not serving yet.
const ROUND_PAUSE: Duration = Duration::from_millis(20);
/// How long the worker's route maps may take to hold every route once the sample serves.
const MAPS_GRACE: Duration = Duration::from_secs(15);

/// One cold first install.
pub(super) struct Cold {
    routes: usize,
    /// The apply document's whole run (the launcher's start to its exit).
    apply: Duration,
    /// What the apply resolved itself in its 2 s, and how many routes it held (its log).
    resolved_by_apply: Option<usize>,
    held: Option<usize>,
    /// From the apply's start until each sampled route answered with its backend's banner
    /// (`None`: not within the limit).
    served: Vec<Option<Duration>>,
    /// Answers with another backend's banner: a route pointing at a wrong address.
    wrong: usize,
    limit: Duration,
    /// From the apply's start until the worker's route maps held an entry per route, and
    /// how many they held at the end.
    maps_full: Option<Duration>,
    in_maps: usize,
    /// The agent DNS server's queries from the apply's start until every route served.
    queries: usize,
    during_apply: usize,
    names: usize,
    max_per_second: usize,
    /// `/proc/loadavg`'s 1-minute figure before and after.
    load: (String, String),
}

/// A cold first install at each count, printed as it ends.
pub(super) fn cold_installs(env: &Env, counts: &[usize]) -> Vec<Cold> {
    let mut colds = Vec::new();
    for &count in counts {
        println!("\n== cold first install, {count} routes ==");
        let cold = cold_install(env, &dataplane::routes(count));
        println!("{}", table(std::slice::from_ref(&cold)));
        colds.push(cold);
    }
    colds
}

/// The install and the service, probed from the apply's start: see the module.
fn cold_install(env: &Env, routes: &[Route]) -> Cold {
    let sample = sample(env, routes);
    let haproxy = Haproxy::new();
    let (applier, _agent) = Applier::start(&haproxy);
    let options = haproxy.options(env.backends.port);
    let config = dataplane::render(Design::Maps, routes, &[env.agent_dns.addr()], &options, 1);
    // Names ÷ 200 q/s is the expectation; twice that and a minute more is a failure.
    let limit = Duration::from_secs_f64(routes.len() as f64 / 200.0 * 2.0 + 60.0);
    let load = load_average();
    let origin = Instant::now();
    let (run, probed, maps) = std::thread::scope(|scope| {
        let prober = scope.spawn(|| probe_until_served(haproxy.https, &sample, origin + limit));
        let run = applier.run(&config);
        println!(
            "apply: {:.2} s; {:?}; {:?}",
            run.elapsed().as_secs_f64(),
            run.step("addresses"),
            run.step("maps")
        );
        let resolver = Resolver::start(&haproxy.config_path(), Knobs::default());
        let probed = prober.join().expect("the prober");
        let maps = wait_for_full_maps(&haproxy, routes.len(), Instant::now() + MAPS_GRACE);
        drop(resolver);
        (run, probed, maps)
    });
    let since = |at: Instant| at.saturating_duration_since(run.started);
    let served: Vec<Option<Duration>> = probed.served.iter().map(|s| s.map(since)).collect();
    let end = probed
        .served
        .iter()
        .flatten()
        .copied()
        .chain(maps.full)
        .max()
        .unwrap_or(origin + limit);
    let queries: Vec<Query> = env
        .agent_dns
        .queries()
        .into_iter()
        .filter(|q| q.at >= run.started && q.at <= end)
        .collect();
    Cold {
        routes: routes.len(),
        apply: run.elapsed(),
        resolved_by_apply: logged_number(&run, "addresses", ": ", " resolved"),
        held: logged_number(&run, "maps", "; ", " held"),
        served,
        wrong: probed.wrong,
        limit,
        maps_full: maps.full.map(since),
        in_maps: maps.entries,
        queries: queries.len(),
        during_apply: queries.iter().filter(|q| q.at <= run.finished).count(),
        names: distinct_names(&queries),
        max_per_second: max_per_second(&queries),
        load: (load, load_average()),
    }
}

/// Route i's host name answers backend i mod 4 on the agent DNS server (as the rest of the
/// benchmark has it); every [`SAMPLE_EVERY`]th route and the last, as a client reaches them.
fn sample(env: &Env, routes: &[Route]) -> Vec<Target> {
    let list = &env.backends.list;
    let mut sample = Vec::new();
    for (i, route) in routes.iter().enumerate() {
        let backend = &list[i % list.len()];
        let SocketAddr::V4(addr) = backend.addr else {
            unreachable!("IPv4 backends")
        };
        env.agent_dns.set(route.back.as_str(), &[*addr.ip()]);
        if i % SAMPLE_EVERY == 0 || i + 1 == routes.len() {
            sample.push(Target {
                sni: dataplane::client_sni(route),
                banner: backend.banner(),
            });
        }
    }
    sample
}

/// When each sampled route first answered with its banner.
struct Probed {
    served: Vec<Option<Instant>>,
    wrong: usize,
}

/// Rounds of one connection to every sampled route not serving yet (refused while HAProxy
/// does not run, closed while the route is held), until all serve or `deadline`.
fn probe_until_served(https: SocketAddr, sample: &[Target], deadline: Instant) -> Probed {
    let mut served: Vec<Option<Instant>> = vec![None; sample.len()];
    let mut wrong = 0;
    while served.iter().any(Option::is_none) && Instant::now() < deadline {
        for (target, served) in sample.iter().zip(served.iter_mut()) {
            if served.is_some() {
                continue;
            }
            match probe(https, &target.sni) {
                Ok(banner) if banner == target.banner => *served = Some(Instant::now()),
                Ok(_) => wrong += 1,
                Err(_) => {}
            }
        }
        std::thread::sleep(ROUND_PAUSE);
    }
    Probed { served, wrong }
}

/// When the worker's routes and suffixes maps held `routes` entries together.
struct Maps {
    full: Option<Instant>,
    entries: usize,
}

/// Reads both route maps from the worker every 250 ms until they hold `routes` entries
/// together, or `deadline`.
fn wait_for_full_maps(haproxy: &Haproxy, routes: usize, deadline: Instant) -> Maps {
    let files = MapFiles::stable();
    loop {
        let entries = [&files.routes, &files.suffixes]
            .iter()
            .map(|map| show_map(&haproxy.stats_socket(), map).map_or(0, |m| m.len()))
            .sum();
        if entries >= routes {
            return Maps {
                full: Some(Instant::now()),
                entries,
            };
        }
        if Instant::now() >= deadline {
            return Maps {
                full: None,
                entries,
            };
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// The number in a step's log line between `after` and `before`, e.g. `12` in
/// `…: 12 resolved, …`.
fn logged_number(run: &Run, step: &str, after: &str, before: &str) -> Option<usize> {
    run.step(step).iter().find_map(|line| {
        let head = line.split(before).next()?;
        head.rsplit(after).next()?.trim().parse().ok()
    })
}

fn distinct_names(queries: &[Query]) -> usize {
    let names: std::collections::HashSet<&str> = queries.iter().map(|q| q.name.as_str()).collect();
    names.len()
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|text| text.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "?".to_owned())
}

fn optional(value: Option<usize>) -> String {
    value.map_or("?".to_owned(), |v| v.to_string())
}

pub(super) fn table(colds: &[Cold]) -> String {
    let mut out = String::from(
        "| routes | apply | names the apply resolved / routes it held | sampled routes \
         serving: median / last | every route in the worker's maps | DNS queries: total \
         (during the apply) / names / max per s | load before → after |\n\
         |---|---|---|---|---|---|---|\n",
    );
    for cold in colds {
        writeln!(
            out,
            "| {} | {} | {} / {} | {} | {} | {} ({}) / {} / {} | {} → {} |",
            cold.routes,
            seconds(cold.apply),
            optional(cold.resolved_by_apply),
            optional(cold.held),
            sampled(cold),
            cold.maps_full.map_or_else(
                || format!("{} of {} at the end", cold.in_maps, cold.routes),
                seconds
            ),
            cold.queries,
            cold.during_apply,
            cold.names,
            cold.max_per_second,
            cold.load.0,
            cold.load.1,
        )
        .unwrap();
    }
    out
}

/// The sampled routes' times from the apply's start: median and last, or how many served.
fn sampled(cold: &Cold) -> String {
    let mut times: Vec<Duration> = cold.served.iter().flatten().copied().collect();
    times.sort();
    let median = times.get(times.len() / 2).copied().unwrap_or_default();
    let last = times.last().copied().unwrap_or_default();
    let wrong = match cold.wrong {
        0 => String::new(),
        n => format!(", {n} answers from a wrong backend"),
    };
    if times.len() == cold.served.len() {
        format!(
            "{} / {} ({} sampled{wrong})",
            seconds(median),
            seconds(last),
            times.len()
        )
    } else {
        format!(
            "{} of {} within {}{wrong}",
            times.len(),
            cold.served.len(),
            seconds(cold.limit)
        )
    }
}

/// The section's paragraph: the table and how it is measured.
pub(super) fn section(colds: &[Cold]) -> String {
    if colds.is_empty() {
        return String::new();
    }
    format!(
        "\n**Cold first install** (a new instance: no config, no address map, HAProxy not \
         running):\n\n{}\n{HOW}",
        table(colds)
    )
}

const HOW: &str = "The apply document runs as above on a map-based config whose every route's \
backend is a host name that only the agent's DNS server (a counting server of our own) \
answers; the apply gives new hosts 2 s (`ADDRESS_BUDGET`) to resolve, resolving them itself \
at the service's pace, and holds the routes whose host has no address yet. When it returns, \
`autoproxy-agent resolve` starts with its production settings (200 queries/s, every name \
again within 50 s), as the unit the apply installs does, and puts the held routes in as \
their names resolve. From the apply's start, every 100th route (in config order) and the \
last are probed through the proxy, a ClientHello with the route's SNI each 20 ms round, until \
each answers with its backend's banner; then the worker's routes and suffixes maps are read \
(`show map`) every 250 ms until they hold an entry per route. DNS queries are those the \
agent's server saw from the apply's start until both; names the distinct names asked; max \
per s the busiest sliding 1-s window. Expected: the apply in about 2–3 s whatever the count, \
every route serving after about names ÷ 200 q/s.\n";
