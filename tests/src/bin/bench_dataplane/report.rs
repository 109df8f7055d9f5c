//! The benchmark's report: the table of figures and the section of docs/BENCHMARKS.md around it.

use std::fmt::Write as _;
use std::time::Duration;

use autoproxy_tests::dataplane::{Burst, CpuPerConnection, Design};

use super::apply::ApplyTimes;
use super::cold::{self, Cold};
use super::counters::Counters;
use super::measure::Row;
use super::under_load::{RELOAD_TIMEOUT, UnderLoad};

pub(super) fn under_load(u: &UnderLoad) -> String {
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

pub(super) fn micros(value: f64) -> String {
    if value >= 10.0 {
        format!("{value:.0}")
    } else {
        format!("{value:.1}")
    }
}

pub(super) fn span(pair: &[CpuPerConnection; 2]) -> String {
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

pub(super) fn seconds(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s >= 1.0 {
        format!("{s:.1} s")
    } else {
        format!("{:.0} ms", s * 1000.0)
    }
}

pub(super) fn table(rows: &[Row]) -> String {
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
            .map_or(String::new(), |a| format!(" (+ resolver {a:.2} %)"));
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

/// What one run measured.
pub(super) struct Runs<'a> {
    pub(super) rows: &'a [Row],
    pub(super) applies: &'a [ApplyTimes],
    pub(super) counters: &'a [Counters],
    pub(super) colds: &'a [Cold],
}

/// The report's section; `run` is (how long the run took, clock ticks per second, the
/// measuring window); `branch` names the HAProxy branch of a section of its own.
pub(super) fn section(
    runs: &Runs<'_>,
    run: (Duration, u64, Duration),
    branch: Option<&str>,
) -> String {
    let Runs {
        rows,
        applies,
        counters,
        colds,
    } = *runs;
    let (elapsed, ticks, window) = run;
    let mut out = match branch {
        None => String::from("## Data plane\n\n"),
        Some(branch) => format!("## Data plane on HAProxy {branch}\n\n"),
    };
    writeln!(
        out,
        "Written by `bench_dataplane` (run by `make bench` after `bench`); {}; {:.0} s.\n",
        autoproxy_tests::bench::machine(""),
        elapsed.as_secs_f64()
    )
    .unwrap();
    out.push_str(&table(rows));
    for apply in applies {
        writeln!(out, "\n{}", apply.line()).unwrap();
    }
    for comparison in counters {
        writeln!(out, "\n{}", comparison.line()).unwrap();
    }
    if let Some(branch) = branch {
        writeln!(
            out,
            "\nThe same runs as in [Data plane](#data-plane), with HAProxy {branch} first on PATH \
             (`make bench` builds it with `.ci/tools.sh`); how each figure is measured is said \
             there."
        )
        .unwrap();
        out.push_str(&cold::section(colds));
        return out;
    }
    out.push_str(&how_measured(ticks, window));
    out.push_str(&cold::section(colds));
    out
}

/// How each figure is measured, as the section explains it.
fn how_measured(ticks: u64, window: Duration) -> String {
    format!(
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
* **Apply**: the apply document from template.yaml, run as the SSM agent runs it (the
  agent's download from moto as S3, then `sh`, parameters in the environment), with the
  release build of autoproxy-agent the stack ships, on a map-based config of each route
  count, timed from the launcher's start to its exit. First the install of all routes but
  20 (HAProxy not running yet, their addresses already known, as a running resolver has
  them); then 20 generations, each adding one of those routes while HAProxy runs (the
  apply resolves its host, gives the running worker its address and the new route tables
  over the stats socket: no reload), each followed by probing the new route every 5 ms
  from the apply's return until it serves; then one generation with another `maxconn`,
  which reloads. Throughout the 20 changes, 10 connections are held through the proxy to
  a backend that writes a line every 100 ms, and `kubectl get --raw
  '/api/v1/namespaces/default/pods?watch=true'` watches a Kubernetes API stand-in
  (`tests/data/watch-apiserver.py`, TLS, one event every 100 ms) through the proxy's SNI
  route; after them, each held connection must still deliver, kubectl must still run,
  and, once the stand-in ends its stream cleanly, exit 0. Reloads are the reload lines in
  the apply's log, checked against the worker's PID; workers are the HAProxy processes
  but the master. Peak memory is the agent's own `VmHWM`, as its last log line reports
  it; the document's size is its `Content` as compact JSON, as CloudFormation sends it to
  SSM (whose cap is 64 KB).
* **Idle CPU**: the worker's CPU (and the resolver's) in the steady-state window, in % of
  one core. The resolver publishes its CloudWatch metrics meanwhile, to a local moto, every
  {metrics} s (the production period is 60 s): its figure is an upper bound.
* **Reject counters**: what sending rejects to their own backends (`reject_no_route`,
  `reject_no_address`, counted in their sessions) and the stats listener's exporter and agent
  backend cost a routed connection: the default template against the map-based template as it
  was before them (`tests/data/maps-before-counters.cfg.j2`, rejects closed in the frontend),
  on the same routes and address map, both HAProxies running at once, no resolver. CPU per
  connection as above, over 5 rounds of the four end routes, the two HAProxies taking
  turns on each route (who goes first alternating by round), each one's idle CPU over one
  window taken off. The target: within 3 %.
* **Route share**: what counting each route's connections in a stick table and refusing the
  one past its share costs a routed connection: the default template against itself without
  the `track-sc0` and `use_backend reject_route_full` rules, measured as the reject counters.
* **Failed connections**: at the largest route count, two clients open connections to the
  four end routes one after another while the master reloads every 0.5 s, or as soon as
  the previous reload is done when it takes longer (20 reloads, none signalled after 40 s,
  none waited for beyond 15 s); a connection fails when it is refused or reset, or closes
  without the backend's banner. The range is the reload times under that load.
* Other processes share the machine's cores; the figures are from one run.
",
        window = window.as_secs(),
        metrics = super::env::METRICS_SECONDS,
    )
}
