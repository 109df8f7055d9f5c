//! The floor's section of docs/BENCHMARKS.md: CPU per connection step by step, the added
//! latency, what each piece is worth, and how long a session lasts with the deployed settings.

use std::fmt::Write as _;
use std::time::Duration;

use autoproxy::render::{DEFAULT_TEMPLATE, RenderOptions};

use super::floor::{Floor, Step};
use super::latency::{CLIENTS, LOAD_SHARE, Paths, Percentiles};
use super::report::micros;

/// The section's markers: after the main data-plane ones, so that `bench` keeps it.
pub(super) fn markers(branch: Option<&str>) -> (String, String) {
    let name = branch.map_or("floor".to_owned(), |b| format!("floor haproxy-{b}"));
    let marker = autoproxy_tests::dataplane::MARKER;
    (
        format!("{marker} {name}:begin -->"),
        format!("{marker} {name}:end -->"),
    )
}

/// The whole section.
pub(super) fn section(floors: &[Floor], elapsed: Duration, branch: Option<&str>) -> String {
    let mut out = match branch {
        None => String::from("## The HAProxy floor\n\n"),
        Some(branch) => format!("## The HAProxy floor on HAProxy {branch}\n\n"),
    };
    let counts: Vec<String> = floors.iter().map(|f| f.routes.to_string()).collect();
    writeln!(
        out,
        "Written by `bench_dataplane --floor {}` (run by `make bench`); {}; {:.0} s.\n",
        counts.join(","),
        autoproxy_tests::bench::machine(""),
        elapsed.as_secs_f64()
    )
    .unwrap();
    out.push_str(&cpu_table(floors));
    out.push('\n');
    out.push_str(&latency_table(floors));
    out.push_str(&worth());
    out.push_str(&long_sessions());
    out.push_str(HOW);
    out
}

fn cpu_table(floors: &[Floor]) -> String {
    let mut out = String::from("| config, each step against the one before |");
    let mut rule = String::from("|---|");
    for floor in floors {
        write!(
            out,
            " {r} routes: worker CPU per connection (µs) | {r} routes: time to first byte, idle, p50 / p99 (µs) |",
            r = floor.routes
        )
        .unwrap();
        rule.push_str("---|---|");
    }
    writeln!(out, "\n{rule}").unwrap();
    let mut before = None;
    for (index, step) in Step::ALL.into_iter().enumerate() {
        write!(out, "| {} |", step.label()).unwrap();
        for floor in floors {
            let now = floor.cpu_of(step).micros;
            let against = match step {
                Step::Floor => None,
                Step::TcpLog | Step::Ring => {
                    Some((floor.cpu_of(Step::Published).micros, "the published"))
                }
                _ => before.map(|b| (floor.cpu_of(b).micros, "")),
            };
            match against {
                None => write!(out, " {} |", micros(now)).unwrap(),
                Some((then, "")) => write!(out, " {} ({:+.0}) |", micros(now), now - then).unwrap(),
                Some((then, name)) => {
                    write!(
                        out,
                        " {} ({:+.0} against {name}) |",
                        micros(now),
                        now - then
                    )
                    .unwrap();
                }
            }
            let first_byte = floor.first_byte[index];
            write!(out, " {} / {} |", us(first_byte.p50), us(first_byte.p99)).unwrap();
        }
        out.push('\n');
        if !step.is_aside() {
            before = Some(step);
        }
    }
    out.push_str("| **the published config ÷ the floor** |");
    for floor in floors {
        write!(out, " **{:.2}×** | |", floor.ratio()).unwrap();
    }
    out.push_str("\n| connections per config |");
    for floor in floors {
        let idle = floor.first_byte.first().map_or(0, |p| p.count);
        write!(out, " {} | {idle} |", floor.cpu_of(Step::Floor).connections).unwrap();
    }
    out.push('\n');
    out
}

fn latency_table(floors: &[Floor]) -> String {
    let mut out =
        String::from("| time to the backend's first byte, p50 / p99 (µs; added over direct) |");
    let mut rule = String::from("|---|");
    for floor in floors {
        write!(
            out,
            " {r} routes, idle | {r} routes, {:.0} connections/s |",
            floor.latency.rate,
            r = floor.routes
        )
        .unwrap();
        rule.push_str("---|---|");
    }
    writeln!(out, "\n{rule}").unwrap();
    let all: Vec<&Paths> = floors
        .iter()
        .flat_map(|f| [&f.latency.idle, &f.latency.loaded])
        .collect();
    let rows: [(&str, Pick); 3] = [
        ("direct to the backend", |p| p.direct),
        ("through the minimal config", |p| p.floor),
        ("through the published config", |p| p.published),
    ];
    for (label, pick) in rows {
        write!(out, "| {label} |").unwrap();
        for paths in &all {
            let (p, direct) = (pick(paths), paths.direct);
            write!(out, " {} / {}", us(p.p50), us(p.p99)).unwrap();
            if p != direct {
                write!(
                    out,
                    " ({:+.0} / {:+.0})",
                    added(p.p50, direct.p50),
                    added(p.p99, direct.p99)
                )
                .unwrap();
            }
            out.push_str(" |");
        }
        out.push('\n');
    }
    out.push_str("| **what the published config adds ÷ what the minimal one adds, p50** |");
    for paths in &all {
        let floor = added(paths.floor.p50, paths.direct.p50);
        let published = added(paths.published.p50, paths.direct.p50);
        if floor > 0.0 {
            write!(out, " **{:.2}×** |", published / floor).unwrap();
        } else {
            out.push_str(" n/a |");
        }
    }
    let reached: Vec<String> = floors
        .iter()
        .map(|f| format!("{:.0} at {} routes", f.latency.capacity, f.routes))
        .collect();
    let logged: Vec<String> = floors
        .iter()
        .map(|f| format!("{} at {} routes", f.logged, f.routes))
        .collect();
    if let Some(first) = floors.first() {
        let l = &first.latency;
        writeln!(
            out,
            "\n\nThe loaded columns: {CLIENTS} clients starting connections evenly spaced, in all \
             {:.0} % of what {CLIENTS} clients connecting one after another each reached through \
             the published config (connections/s: {}); per path {} connections idle, {} loaded \
             (at {} routes). The published config logged every connection (lines: {}).",
            LOAD_SHARE * 100.0,
            reached.join(", "),
            l.idle.direct.count,
            l.loaded.direct.count,
            first.routes,
            logged.join(", "),
        )
        .unwrap();
    }
    out
}

/// One path's figures out of the three.
type Pick = fn(&Paths) -> Percentiles;

fn us(d: Duration) -> String {
    micros(d.as_secs_f64() * 1e6)
}

fn added(through: Duration, direct: Duration) -> f64 {
    (through.as_secs_f64() - direct.as_secs_f64()) * 1e6
}

fn worth() -> String {
    String::from(
        "
What each piece buys, for what it costs a connection (the table's steps):

* **Routing** (the SNI map, the suffix maps up to eight labels, the address map, `set-dst`) is
  the proxy's job itself: one config for every route, no reload when routes change. Without it
  a static config needs a proxy (or a backend and a reload) per cluster.
* **The route share** (one lookup and one decrement in the route stick table) keeps one
  member's loop through its own load balancer, or a runaway client, from taking every slot of
  `maxconn`: the other routes keep theirs. Worth it as long as a single route can fill the
  proxy, which is the case the table exists for.
* **The reject counters** cost a routed connection two tests of a variable; they make every
  refused connection a session of `reject_no_route` or `reject_no_address` (the stats socket,
  `/metrics`), the only signal that a member sends names no route serves.
* **The log line** names each connection's SNI, route, chosen address, bytes, times and how it
  ended: the NLB writes no access log for a TCP listener, so it is the only record of who
  reached which cluster. The aside shows what HAProxy's own `tcplog` line costs instead: the
  difference is the fields this project adds.
* **Where the line goes.** The ring aside keeps each line in an in-memory ring instead of
  writing it to stdout (the journal, as deployed): its difference from the published config
  is what the write per connection costs. Where that difference is within the run's noise,
  the line's cost is building it, not writing it, and the journal stays the target: a ring
  would need a reader on every instance to keep the record.

Under load, what a config spends per connection weighs more than idle: at one connection rate
near the proxy's capacity, the config that spends more per connection is busier and its
connections wait longer for the worker, so the loaded columns' ratio can exceed the CPU ratio.
",
    )
}

/// The value of `timeout <what>` in the default template's `defaults`, if set.
fn template_timeout(what: &str) -> Option<String> {
    let prefix = format!("timeout {what} ");
    DEFAULT_TEMPLATE
        .lines()
        .find_map(|line| line.trim().strip_prefix(prefix.as_str()).map(str::to_owned))
}

/// The `tcp.idle_timeout.seconds` the stack's listener sets, in seconds: the `Value` on the line
/// after its `Key`.
fn nlb_idle_timeout(stack: &str) -> Option<u64> {
    let mut lines = stack.lines();
    lines.find(|line| line.trim().trim_start_matches("- ") == "Key: tcp.idle_timeout.seconds")?;
    let value = lines.next()?.trim().strip_prefix("Value:")?.trim();
    value.trim_matches('"').parse().ok()
}

/// How long a session lasts with the deployed template and settings, and what ends it.
fn long_sessions() -> String {
    let tunnel = template_timeout("tunnel");
    let client = template_timeout("client").unwrap_or_else(|| "none".to_owned());
    let server = template_timeout("server").unwrap_or_else(|| "none".to_owned());
    let idle = match &tunnel {
        Some(tunnel) => format!("`timeout tunnel {tunnel}`"),
        None => format!(
            "`timeout client {client}` and `timeout server {server}` (the template sets no \
             `timeout tunnel`, so these stand for it)"
        ),
    };
    let hard_stop = RenderOptions::default().hard_stop_after;
    let stack =
        std::fs::read_to_string(autoproxy_tests::root().join("template.yaml")).unwrap_or_default();
    let nlb = match nlb_idle_timeout(&stack) {
        Some(seconds) => format!(
            "{seconds} s ({} min), the TCP idle timeout the stack sets on the NLB's listener \
             (`tcp.idle_timeout.seconds`: AWS allows 60 to 6000 s, 350 s if unset)",
            seconds / 60
        ),
        None if stack.contains("tcp.idle_timeout.seconds") => {
            "the NLB's TCP idle timeout as the stack sets it (`tcp.idle_timeout.seconds`)"
                .to_owned()
        }
        None => "350 s, the NLB's default TCP idle timeout (the stack's listener leaves \
                 `tcp.idle_timeout.seconds` unset)"
            .to_owned(),
    };
    format!(
        "
**Long sessions** (a `kubectl exec`, a `kubectl get -w`, a controller's watch), with the \
deployed template and settings: HAProxy ends one only when it has been idle both ways for \
{idle}; bytes either way keep it (a watch whose server alone speaks, too). A route change \
never ends it (no reload). A reload (a setting or the template changed) leaves it on the old \
worker, which `hard-stop-after` ({hard_stop} by default) ends at the latest. In front of a \
fleet the stack creates, an idle one ends first at {nlb}. So a session that carries a byte at \
least every few minutes lasts until a structural change plus {hard_stop}, or until its client \
or server ends it (the API server ends a watch after its own request timeout). \
`it::apply::long_sessions` holds one across a route change and a reload with the timeouts \
shortened, and sees it end when idle for them.
",
    )
}

const HOW: &str = "
How it is measured: seven HAProxies on loopback at once, on the same routes (half exact API
routes, half suffix routes, rendered by the real renderer), every route's host in the address
map at one backend that answers once it has read the ClientHello: the floor (a hand-written
config: `tcp-request inspect-delay`, `reject unless { req.ssl_hello_type 1 }`, one static
server, no log), the default template with its log line, reject rules and route share taken
off, each step putting one back, and two asides on the published config: `option tcplog` for
its `log-format`, and its lines kept in a 1 MB in-memory ring (`log ring@`) instead of written
to stdout. Logs go to stdout as deployed (here HAProxy's log file). The published config
checks no server's health (one server for every route), so no health check is measured. CPU per connection as in
[Data plane](#data-plane): two clients, one connection after another, each a ClientHello with the
route's SNI read to the end; 4 rounds over the first exact and the last suffix route, every
config once per route and round, whoever goes first rotating; each one's idle CPU over one
window taken off. A step's figure in brackets is its difference from the step before, within the
run's noise when it is a few µs. Latency: from the client's connect to the first byte of the
backend's answer, the ClientHello sent at once; 5 turns of each path (direct, the minimal
config, the published config) in rotation, idle 200 connections one after another per turn,
loaded 1 s per turn; the first table's idle times the same, through every config in rotation.
";
