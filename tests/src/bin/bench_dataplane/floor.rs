//! The HAProxy floor: the config the generator publishes (the real renderer, the default
//! template, its maps, log line, reject counters and route share, as deployed) against a
//! minimal hand-written config doing the same passthrough (one frontend that waits for the
//! ClientHello, one static server, nothing else), on the same machine and in the same run.
//! Between them, the default template with its per-connection pieces taken off, so that each
//! step adds one piece to the one before: what each piece costs a connection. Every config
//! runs at once, all routed to one backend that answers once it has read the ClientHello;
//! they are measured in turns, target by target and round by round, whoever goes first
//! rotating, so that whatever else the machine does weighs on all alike.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddr, TcpListener};
use std::time::Duration;

use autoproxy::model::Route;
use autoproxy::render::{DEFAULT_TEMPLATE, RenderOptions};
use autoproxy_tests::dataplane::{
    self, CpuPerConnection, CpuSample, Ends, Proxy, Target, Until, cpu_ticks,
};
use autoproxy_tests::proxy::{Backend, HaproxyFiles};

use super::counters::without_route_share;
use super::env::Env;
use super::latency::{self, Latency, Percentiles};

/// Rounds over the targets, each config once per target and round.
const ROUNDS: usize = 4;

/// The configs measured side by side: the floor, each step adding one piece of the published
/// config to the one before, and two asides on the published config: HAProxy's own TCP log
/// format for its `log-format`, and its log lines kept in an in-memory ring instead of
/// written to stdout (what the write per connection costs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Step {
    Floor,
    Routing,
    Share,
    Rejects,
    Published,
    TcpLog,
    Ring,
}

impl Step {
    pub(super) const ALL: [Step; 7] = [
        Step::Floor,
        Step::Routing,
        Step::Share,
        Step::Rejects,
        Step::Published,
        Step::TcpLog,
        Step::Ring,
    ];

    /// A variant of the published config, measured against it rather than a step of the
    /// ladder.
    pub(super) fn is_aside(self) -> bool {
        matches!(self, Step::TcpLog | Step::Ring)
    }

    pub(super) fn label(self) -> &'static str {
        match self {
            Step::Floor => "the floor: one frontend waiting for the ClientHello, one static server",
            Step::Routing => "+ routing: the SNI and address maps, `set-dst`",
            Step::Share => "+ the route share: `track-sc0` in the route stick table",
            Step::Rejects => {
                "+ the reject counters: `use_backend reject_no_route`, `reject_no_address`"
            }
            Step::Published => "+ the log line (`log-format`): the published config",
            Step::TcpLog => "aside: the published config with `option tcplog` for its `log-format`",
            Step::Ring => {
                "aside: the published config logging to an in-memory ring (`log ring@`), not stdout"
            }
        }
    }

    /// The template of a step on the default template; `None` for the hand-written floor.
    fn template(self) -> Option<String> {
        let full = DEFAULT_TEMPLATE;
        match self {
            Step::Floor => None,
            Step::Routing => Some(no_log(&without_rejects(&without_route_share(full)))),
            Step::Share => Some(no_log(&without_rejects(full))),
            Step::Rejects => Some(no_log(full)),
            Step::Published => Some(full.to_owned()),
            Step::TcpLog => Some(log_line(full, "    option tcplog")),
            Step::Ring => Some(logging_to_a_ring(full)),
        }
    }
}

/// `template` whose global `log` target is an in-memory ring of 1 MB: each line is copied
/// there, with no write to a file descriptor. Nothing reads it here (HAProxy's CLI could, with
/// `show events`).
fn logging_to_a_ring(template: &str) -> String {
    let target = "    log {{ options.log }}";
    assert_eq!(
        template.lines().filter(|line| *line == target).count(),
        1,
        "the default template has one global log line"
    );
    let lines: Vec<&str> = template
        .lines()
        .map(|line| {
            if line == target {
                "    log ring@lines format raw local0"
            } else {
                line
            }
        })
        .collect();
    lines.join("\n") + "\n\nring lines\n    format raw\n    size 1048576\n"
}

/// `template` with its frontend's `log-format` line replaced by `with`.
fn log_line(template: &str, with: &str) -> String {
    let is_format = |line: &str| line.trim_start().starts_with("log-format ");
    assert_eq!(
        template.lines().filter(|line| is_format(line)).count(),
        1,
        "the default template has one log-format line"
    );
    let lines: Vec<&str> = template
        .lines()
        .map(|line| if is_format(line) { with } else { line })
        .collect();
    lines.join("\n") + "\n"
}

/// `template` whose TLS frontend logs nothing.
fn no_log(template: &str) -> String {
    log_line(template, "    no log")
}

/// `template` without the rules that send a connection with no route or no address to the
/// reject backends that count it (a routed connection skips them; the backends stay).
fn without_rejects(template: &str) -> String {
    let kept: Vec<&str> = template
        .lines()
        .filter(|line| {
            !line.contains("use_backend reject_no_route")
                && !line.contains("use_backend reject_no_address")
        })
        .collect();
    assert_eq!(
        template.lines().count() - kept.len(),
        2,
        "the default template's reject rules are two lines"
    );
    kept.join("\n") + "\n"
}

/// The hand-written floor: what any HAProxy passing TLS through needs, and a stats socket
/// (the harness reads the worker's PID there; it costs a connection nothing).
fn floor_config(proxy: &Proxy, server: SocketAddr, maxconn: u32) -> String {
    format!(
        "global\n    master-worker\n    maxconn {maxconn}\n    stats socket {socket} mode 660 level admin\n\n\
         defaults\n    mode tcp\n    timeout connect 5s\n    timeout client 4h\n    timeout server 4h\n\n\
         frontend tls_passthrough\n    bind {bind}\n    tcp-request inspect-delay 5s\n    \
         tcp-request content reject unless {{ req.ssl_hello_type 1 }}\n    default_backend static\n\n\
         backend static\n    server only {server}\n",
        socket = proxy.stats_socket().display(),
        bind = proxy.https,
    )
}

/// What the run at one route count measured.
pub(super) struct Floor {
    pub(super) routes: usize,
    /// Per [`Step::ALL`], in that order.
    pub(super) cpu: Vec<CpuPerConnection>,
    pub(super) latency: Latency,
    /// The lines the published config logged (one per connection: the log is on).
    pub(super) logged: usize,
    /// Idle time to the backend's first byte through each step, per [`Step::ALL`].
    pub(super) first_byte: Vec<Percentiles>,
}

impl Floor {
    pub(super) fn cpu_of(&self, step: Step) -> CpuPerConnection {
        let at = Step::ALL.iter().position(|s| *s == step).expect("a step");
        self.cpu[at]
    }

    /// The published config's CPU per connection over the floor's.
    pub(super) fn ratio(&self) -> f64 {
        let floor = self.cpu_of(Step::Floor).micros;
        if floor > 0.0 {
            self.cpu_of(Step::Published).micros / floor
        } else {
            f64::NAN
        }
    }
}

/// A backend that answers once it has read a whole TLS record (the ClientHello), as a TLS
/// server does: its banner, then it reads until the client closes.
pub(super) fn hello_backend() -> Backend {
    let listener = TcpListener::bind((Ipv4Addr::new(127, 0, 0, 2), 0)).expect("bind 127.0.0.2");
    Backend::serving("hello", listener, |mut stream, _| {
        let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
        let _ = stream.set_nodelay(true);
        let mut header = [0u8; 5];
        if stream.read_exact(&mut header).is_err() {
            return;
        }
        let mut body = vec![0u8; usize::from(u16::from_be_bytes([header[3], header[4]]))];
        if stream.read_exact(&mut body).is_err() {
            return;
        }
        let _ = stream.write_all(b"backend hello\n");
        let _ = stream.shutdown(Shutdown::Write);
        let mut sink = [0u8; 1024];
        while matches!(stream.read(&mut sink), Ok(n) if n > 0) {}
    })
}

/// Every step at `count` routes, measured side by side: CPU per connection, then latency.
pub(super) fn floor(env: &Env, nameserver: Ipv4Addr, count: usize) -> Floor {
    let routes = dataplane::routes(count);
    let hello = hello_backend();
    let ends = Ends::find(&routes, |_| hello.banner());
    let mut proxies: Vec<Proxy> = Step::ALL
        .iter()
        .map(|&step| start(step, nameserver, &routes, &hello, &ends))
        .collect();
    // Let the starts settle, then what each idle worker burns.
    std::thread::sleep(Duration::from_secs(2));
    let idle = idle_ticks_per_second(&proxies, env.window);
    let targets = [&ends.first_exact, &ends.last_suffix];
    let cpu = cpu_in_turns(&proxies, &targets, &idle, env.ticks);
    for (step, cpu) in Step::ALL.iter().zip(&cpu) {
        println!(
            "{count} routes, {}: {:.0} µs/connection ({:.0} gross) over {} connections",
            step.label(),
            cpu.micros,
            cpu.gross_micros,
            cpu.connections
        );
    }
    let at = |step: Step| Step::ALL.iter().position(|s| *s == step).expect("a step");
    let first_byte = latency::idle_each(&proxies, &targets);
    let latency = latency::measure(
        hello.addr,
        &proxies[at(Step::Published)],
        &proxies[at(Step::Floor)],
        &targets,
    );
    for proxy in &mut proxies {
        proxy.stop();
    }
    let logged = proxies[at(Step::Published)]
        .log()
        .lines()
        .filter(|line| line.contains(" sni="))
        .count();
    println!("the published config logged {logged} connections");
    Floor {
        routes: count,
        cpu,
        latency,
        logged,
        first_byte,
    }
}

/// A running HAProxy on `step`'s config, every route's host at the hello backend's address.
fn start(
    step: Step,
    nameserver: Ipv4Addr,
    routes: &[Route],
    hello: &Backend,
    ends: &Ends,
) -> Proxy {
    let mut proxy = Proxy::new(nameserver);
    let mut options = proxy.options(hello.addr.port());
    // As deployed: one line per connection on stdout (the journal; here HAProxy's log file).
    options.log = RenderOptions::default().log;
    let config = match step.template() {
        None => floor_config(&proxy, hello.addr, options.maxconn),
        Some(template) => autoproxy_tests::proxy::render_template(
            &template,
            1,
            routes,
            &options,
            &[SocketAddr::from((Ipv4Addr::LOCALHOST, 53))],
        ),
    };
    proxy.install(&config);
    if step != Step::Floor {
        let ip = hello.addr.ip();
        let text: String = routes
            .iter()
            .map(|route| format!("{} {ip}\n", route.back.as_str()))
            .collect();
        std::fs::write(proxy.addresses_map(), text).expect("write addresses.map");
    }
    proxy.start(&ends.first_exact, Duration::from_secs(60));
    proxy
}

/// Each proxy's worker CPU without traffic, in ticks per second, over one `window`.
fn idle_ticks_per_second(proxies: &[Proxy], window: Duration) -> Vec<f64> {
    let workers: Vec<u32> = proxies
        .iter()
        .map(|p| p.worker_pid().expect("a serving worker"))
        .collect();
    let from: Vec<u64> = workers
        .iter()
        .map(|w| cpu_ticks(*w).expect("stat"))
        .collect();
    std::thread::sleep(window);
    workers
        .iter()
        .zip(from)
        .map(|(w, from)| (cpu_ticks(*w).expect("stat") - from) as f64 / window.as_secs_f64())
        .collect()
}

/// CPU per connection of each proxy: [`ROUNDS`] rounds over `targets`, every proxy once per
/// target and round, the first of each turn rotating.
fn cpu_in_turns(
    proxies: &[Proxy],
    targets: &[&Target],
    idle: &[f64],
    ticks: u64,
) -> Vec<CpuPerConnection> {
    let until = Until::cpu_sample();
    let mut samples = vec![CpuSample::default(); proxies.len()];
    let mut turn = 0;
    for _round in 0..ROUNDS {
        for target in targets {
            for offset in 0..proxies.len() {
                let index = (turn + offset) % proxies.len();
                samples[index].add(dataplane::cpu_sample(&proxies[index], target, &until));
            }
            turn += 1;
        }
    }
    samples
        .iter()
        .zip(idle)
        .map(|(sample, idle)| sample.per_connection(*idle, ticks))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether `template` holds each piece: the log line, the route share, the reject rules.
    fn pieces(template: &str) -> [bool; 3] {
        [
            template.contains("    log-format \""),
            template.contains("track-sc0 var(txn.route)"),
            template.contains("use_backend reject_no_route"),
        ]
    }

    #[test]
    fn each_step_puts_one_piece_back_and_compiles() {
        let expected = [
            (Step::Routing, [false, false, false]),
            (Step::Share, [false, true, false]),
            (Step::Rejects, [false, true, true]),
            (Step::Published, [true, true, true]),
            (Step::TcpLog, [false, true, true]),
            (Step::Ring, [true, true, true]),
        ];
        for (step, has) in expected {
            let template = step.template().expect("a template");
            assert_eq!(pieces(&template), has, "{step:?}");
            assert!(
                template.contains("map_str(") && template.contains("set-dst "),
                "{step:?} routes"
            );
            autoproxy::render::Renderer::new(&template).unwrap_or_else(|e| panic!("{step:?}: {e}"));
        }
        assert!(
            Step::TcpLog
                .template()
                .unwrap()
                .contains("    option tcplog\n")
        );
        let ring = Step::Ring.template().unwrap();
        assert!(ring.contains("    log ring@lines format raw local0\n"));
        assert!(ring.ends_with("\nring lines\n    format raw\n    size 1048576\n"));
        assert!(Step::Floor.template().is_none());
    }
}
