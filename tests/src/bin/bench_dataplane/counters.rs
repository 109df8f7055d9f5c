//! What a part of the default template costs a routed connection, the default template against
//! one without that part, on the same routes: the reject counters (rejects sent to
//! `reject_no_route` / `reject_no_address`, the stats listener's exporter and agent backend;
//! against the map-based template as it was before them,
//! `tests/data/maps-before-counters.cfg.j2`), and each route's share of `maxconn` (the stick
//! table on the route; against the default template without its two lines,
//! [`without_route_share`]). Both HAProxies run at once and are measured in alternation, route
//! by route and round by round, so that whatever else the machine does weighs on both alike.

use std::net::Ipv4Addr;
use std::time::Duration;

use autoproxy::model::Route;
use autoproxy_tests::dataplane::{
    self, CpuPerConnection, CpuSample, Ends, MAPS_BEFORE_COUNTERS_TEMPLATE, Proxy, Until, cpu_ticks,
};
use autoproxy_tests::proxy::HaproxyFiles;

use super::env::Env;
use super::measure::prefill_addresses;

/// Rounds over the four end routes, each proxy once per route and round.
const ROUNDS: usize = 5;

/// What a comparison measures: the reject counters, or the route's share.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Part {
    Counters,
    RouteShare,
}

impl Part {
    fn label(self) -> &'static str {
        match self {
            Part::Counters => "Reject counters",
            Part::RouteShare => "Route share (stick table on the route)",
        }
    }

    /// The templates without and with the part.
    fn templates(self) -> (String, &'static str) {
        let default = autoproxy::render::DEFAULT_TEMPLATE;
        match self {
            Part::Counters => (MAPS_BEFORE_COUNTERS_TEMPLATE.to_owned(), default),
            Part::RouteShare => (without_route_share(default), default),
        }
    }
}

/// `template` without the rules that count each route's connections and refuse the one past
/// its share (the table's backend stays: unused, it costs a connection nothing).
pub(super) fn without_route_share(template: &str) -> String {
    let kept: Vec<&str> = template
        .lines()
        .filter(|line| {
            !line.contains("track-sc0 var(txn.route)")
                && !line.contains("use_backend reject_route_full")
        })
        .collect();
    assert_eq!(
        template.lines().count() - kept.len(),
        2,
        "the default template's route share is two lines"
    );
    kept.join("\n") + "\n"
}

/// The comparison at one route count.
pub(super) struct Counters {
    pub(super) part: Part,
    pub(super) routes: usize,
    pub(super) before: CpuPerConnection,
    pub(super) after: CpuPerConnection,
}

impl Counters {
    /// How much more (or less) a connection costs with the counters, in percent.
    pub(super) fn change_percent(&self) -> f64 {
        if self.before.micros > 0.0 {
            100.0 * (self.after.micros - self.before.micros) / self.before.micros
        } else {
            f64::NAN
        }
    }

    pub(super) fn line(&self) -> String {
        format!(
            "{}, {} routes: {:.0} µs per routed connection with it, {:.0} µs \
             without ({:+.1} %; {} and {} connections).",
            self.part.label(),
            self.routes,
            self.after.micros,
            self.before.micros,
            self.change_percent(),
            self.after.connections,
            self.before.connections,
        )
    }
}

/// Both templates of `part` on `routes`, measured side by side.
pub(super) fn compare(
    env: &Env,
    nameserver: Ipv4Addr,
    part: Part,
    routes: &[Route],
    ends: &Ends,
) -> Counters {
    let (without, with) = part.templates();
    let mut before = start(env, nameserver, &without, routes, ends);
    let mut after = start(env, nameserver, with, routes, ends);
    // Let both starts settle, then what each idle worker burns.
    std::thread::sleep(Duration::from_secs(2));
    let idle = idle_ticks_per_second(&[&before, &after], env.window);
    let until = Until::cpu_sample();
    let mut samples = [CpuSample::default(); 2];
    for round in 0..ROUNDS {
        for target in ends.all() {
            // Who goes first alternates too.
            let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
            for index in order {
                let proxy = if index == 0 { &before } else { &after };
                samples[index].add(dataplane::cpu_sample(proxy, target, &until));
            }
        }
    }
    before.stop();
    after.stop();
    let [b, a] = [0, 1].map(|i| samples[i].per_connection(idle[i], env.ticks));
    let counters = Counters {
        part,
        routes: routes.len(),
        before: b,
        after: a,
    };
    println!("{}", counters.line());
    counters
}

/// A running HAProxy on `template`, its address map as a running resolver leaves it.
fn start(env: &Env, nameserver: Ipv4Addr, template: &str, routes: &[Route], ends: &Ends) -> Proxy {
    let mut proxy = Proxy::new(nameserver);
    let config = autoproxy_tests::proxy::render_template(
        template,
        1,
        routes,
        &proxy.options(env.backends.port),
        &[env.agent_dns.addr()],
    );
    proxy.install(&config);
    prefill_addresses(&proxy, routes, env);
    proxy.start(&ends.first_exact, Duration::from_secs(60));
    proxy
}

/// Each proxy's worker CPU without traffic, in ticks per second, over one `window`.
fn idle_ticks_per_second(proxies: &[&Proxy; 2], window: Duration) -> [f64; 2] {
    let workers = proxies.map(|p| p.worker_pid().expect("a serving worker"));
    let from = workers.map(|w| cpu_ticks(w).expect("worker stat"));
    std::thread::sleep(window);
    let to = workers.map(|w| cpu_ticks(w).expect("worker stat"));
    [0, 1].map(|i| (to[i] - from[i]) as f64 / window.as_secs_f64())
}
