//! The cold first install: a new instance's first apply (no config, no address map, HAProxy
//! not running) of a config whose every route's backend is a host name, then the address
//! service started as the apply's unit starts it. The apply waits for no address (nothing
//! serves yet) and holds every route; the service puts them in as their names resolve, at its
//! fill pace, and `/ready` answers 200 once its first pass is over. A second apply (two more
//! routes) follows the first by 1 s, during the fill. What it costs: the applies' runs, the
//! time until `/ready` and every route serves, the DNS queries of the fill and after it.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use autoproxy::artifact::MapFiles;
use autoproxy::model::Route;
use autoproxy_tests::dataplane::{self, Design, Target};
use autoproxy_tests::dns::{Query, max_per_second};
use autoproxy_tests::observe::get_unix;
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
/// How long after its first apply the second one starts.
const SECOND_APPLY_AFTER: Duration = Duration::from_secs(1);
/// How long the queries are watched after the fill: past the refresh period (50 s), so the
/// names asked first during the fill come due again.
const STEADY_WATCH: Duration = Duration::from_secs(60);

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
    /// From the first apply's start until `/ready` answered 200.
    ready: Option<Duration>,
    /// The second apply's run, 1 s after the first returned.
    second_apply: Duration,
    /// From the first apply's start until every name had been asked once (the fill's end),
    /// the busiest second until then and the busiest second in [`STEADY_WATCH`] after it.
    fill_end: Option<Duration>,
    fill_busiest: usize,
    steady_busiest: usize,
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
    // A second generation: one zone more (its two routes' hosts are new to it, answered with
    // the first backend; the order of the routes is not that of the first generation).
    let more = dataplane::routes(routes.len() + 2);
    answer_new_hosts(env, routes, &more);
    let haproxy = Haproxy::new();
    let (applier, _agent) = Applier::start(&haproxy);
    let options = haproxy.options(env.backends.port);
    let dns = [env.agent_dns.addr()];
    let config = dataplane::render(Design::Maps, routes, &dns, &options, 1);
    let second = dataplane::render(Design::Maps, &more, &dns, &options, 2);
    // Names ÷ 200 q/s was the expectation before the fill pace; twice that and a minute more
    // is a failure.
    let limit = Duration::from_secs_f64(routes.len() as f64 / 200.0 * 2.0 + 60.0);
    let load = load_average();
    let origin = Instant::now();
    let agent_socket = haproxy
        .stats_socket()
        .with_file_name("autoproxy-agent.sock");
    let runs = std::thread::scope(|scope| {
        let prober = scope.spawn(|| probe_until_served(haproxy.https, &sample, origin + limit));
        let ready = scope.spawn(|| ready_at(&agent_socket, origin + limit));
        let run = applier.run(&config);
        println!(
            "apply: {:.2} s; {:?}; {:?}",
            run.elapsed().as_secs_f64(),
            run.step("addresses"),
            run.step("maps")
        );
        let resolver = Resolver::start(&haproxy.config_path(), Knobs::default());
        std::thread::sleep(
            (run.finished + SECOND_APPLY_AFTER).saturating_duration_since(Instant::now()),
        );
        let second_run = applier.run(&second);
        println!(
            "second apply: {:.2} s; {:?}",
            second_run.elapsed().as_secs_f64(),
            second_run.step("addresses")
        );
        let probed = prober.join().expect("the prober");
        let maps = wait_for_full_maps(&haproxy, more.len(), Instant::now() + MAPS_GRACE);
        let ready = ready.join().expect("the /ready poller");
        let fill_end = fill_end(&env.agent_dns.queries(), run.started);
        std::thread::sleep(
            (fill_end.unwrap_or_else(Instant::now) + STEADY_WATCH)
                .saturating_duration_since(Instant::now()),
        );
        drop(resolver);
        Runs {
            run,
            second_run,
            probed,
            maps,
            ready,
            limit,
            load,
        }
    });
    measured(env, routes.len(), &runs)
}

/// What [`cold_install`] saw, to be measured.
struct Runs {
    run: Run,
    second_run: Run,
    probed: Probed,
    maps: Maps,
    ready: Option<Instant>,
    limit: Duration,
    load: String,
}

/// The figures of one cold install of `routes` routes.
fn measured(env: &Env, routes: usize, runs: &Runs) -> Cold {
    let (run, probed, maps, limit) = (&runs.run, &runs.probed, &runs.maps, runs.limit);
    let since = |at: Instant| at.saturating_duration_since(run.started);
    let served: Vec<Option<Duration>> = probed.served.iter().map(|s| s.map(since)).collect();
    let end = probed
        .served
        .iter()
        .flatten()
        .copied()
        .chain(maps.full)
        .max()
        .unwrap_or(run.started + limit);
    let all: Vec<Query> = env
        .agent_dns
        .queries()
        .into_iter()
        .filter(|q| q.at >= run.started)
        .collect();
    let queries = &all[..all.partition_point(|q| q.at <= end)];
    let fill_end = fill_end(&all, run.started);
    let filling = all.partition_point(|q| fill_end.is_none_or(|e| q.at <= e));
    let steady =
        all.partition_point(|q| fill_end.is_none_or(|e| q.at < e + Duration::from_secs(1)));
    Cold {
        routes,
        apply: run.elapsed(),
        resolved_by_apply: logged_number(run, "addresses", ": ", " resolved").or(Some(0)),
        held: logged_number(run, "maps", "; ", " held"),
        served,
        wrong: probed.wrong,
        limit,
        maps_full: maps.full.map(since),
        in_maps: maps.entries,
        queries: queries.len(),
        during_apply: queries.iter().filter(|q| q.at <= run.finished).count(),
        names: distinct_names(queries.iter()),
        max_per_second: max_per_second(queries),
        load: (runs.load.clone(), load_average()),
        ready: runs.ready.map(since),
        second_apply: runs.second_run.elapsed(),
        fill_end: fill_end.map(since),
        fill_busiest: max_per_second(&all[..filling]),
        steady_busiest: max_per_second(&all[steady..]),
    }
}

/// When every name among `queries` (from `from` on) had been asked once: the fill's end.
fn fill_end(queries: &[Query], from: Instant) -> Option<Instant> {
    let mut first: std::collections::HashMap<&str, Instant> = std::collections::HashMap::new();
    for q in queries.iter().filter(|q| q.at >= from) {
        first.entry(q.name.as_str()).or_insert(q.at);
    }
    first.into_values().max()
}

/// When `/ready` on the agent's socket first answered 200, polled every 50 ms until
/// `deadline`.
fn ready_at(socket: &std::path::Path, deadline: Instant) -> Option<Instant> {
    while Instant::now() < deadline {
        if get_unix(socket, "/ready").is_ok_and(|answer| answer.status == 200) {
            return Some(Instant::now());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    None
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

/// The hosts of `more` that `routes` do not have answer the first backend's address.
fn answer_new_hosts(env: &Env, routes: &[Route], more: &[Route]) {
    let known: std::collections::HashSet<&str> = routes.iter().map(|r| r.back.as_str()).collect();
    let SocketAddr::V4(first) = env.backends.list[0].addr else {
        unreachable!("IPv4 backends")
    };
    for route in more.iter().filter(|r| !known.contains(r.back.as_str())) {
        env.agent_dns.set(route.back.as_str(), &[*first.ip()]);
    }
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

fn distinct_names<'a>(queries: impl Iterator<Item = &'a Query>) -> usize {
    let names: std::collections::HashSet<&str> = queries.map(|q| q.name.as_str()).collect();
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
        "| routes | apply | names the apply resolved / routes it held | `/ready` 200 | \
         sampled routes serving: median / last | every route in the worker's maps | the apply \
         1 s later (2 new routes) | DNS queries: total (during the apply) / names / max per s | \
         fill: every name asked / busiest second | after the fill: busiest second (60 s) | \
         load before → after |\n\
         |---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for cold in colds {
        writeln!(
            out,
            "| {} | {} | {} / {} | {} | {} | {} | {} | {} ({}) / {} / {} | {} / {} | {} | {} → {} |",
            cold.routes,
            seconds(cold.apply),
            optional(cold.resolved_by_apply),
            optional(cold.held),
            cold.ready.map_or_else(|| "not within the limit".to_owned(), seconds),
            sampled(cold),
            cold.maps_full.map_or_else(
                || format!("{} of {} at the end", cold.in_maps, cold.routes),
                seconds
            ),
            seconds(cold.second_apply),
            cold.queries,
            cold.during_apply,
            cold.names,
            cold.max_per_second,
            cold.fill_end.map_or_else(|| "?".to_owned(), seconds),
            cold.fill_busiest,
            cold.steady_busiest,
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
answers; a first install waits for no address (HAProxy serves nothing yet) and holds every \
route. When it returns, `autoproxy-agent resolve` starts with its production settings (a fill \
at up to 800 queries/s while names are new to its map, then at most 200/s, every name again \
within 50 s), as the unit the apply installs does, and puts the held routes in as their names \
resolve. A second apply, one zone more (two routes whose hosts are new), starts 1 s after the \
first returned, during the fill. From the first apply's start, `/ready` on the agent's socket \
is asked every 50 ms until it answers 200, and every 100th route (in config order) and the \
last are probed through the proxy, a ClientHello with the route's SNI each 20 ms round, until \
each answers with its backend's banner; then the worker's routes and suffixes maps are read \
(`show map`) every 250 ms until they hold an entry per route. DNS queries are those the \
agent's server saw from the apply's start until both; names the distinct names asked; max \
per s the busiest sliding 1-s window. The fill ends when every name has been asked once; its \
busiest second is counted until then, and the busiest second after it over the 60 s from 1 s \
after its end (past the refresh period, so the names asked first come due again). Expected: \
the first apply in about 1 s whatever the count, `/ready` within 10 s at 4,000 routes and 15 s \
at 10,000, at most 820 queries in the fill's busiest second and 200 after it, the second \
apply within 0.3 s.\n";
