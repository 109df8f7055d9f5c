//! autoproxy-agent resolve: keeps HAProxy's map of backend addresses current, at a steady
//! DNS rate (the systemd service `autoproxy-resolver`, installed by the apply).
//!
//! HAProxy's own `resolvers` cannot pace: every server's query goes out in the same instant
//! each `timeout resolve`, thousands per second at 10,000 routes, while the AWS VPC resolver
//! accepts 1,024 packets per second per network interface. So HAProxy sends no DNS query at
//! all; this service resolves the backend names instead and holds one property: its queries
//! are spread evenly (the names' demand, about names / REFRESH per second) and never more
//! than the cap that applies in any second, at start, at a reload and when the config changes
//! alike, new names first at the cap, retries, TCP fallbacks and CNAME chases included. The
//! cap is FILL_QPS while names are new to the map (a cold start, a generation that adds many
//! hosts; halved, down to MAX_QPS, while time-outs climb: the resolver drops what exceeds its
//! budget), MAX_QPS once each has ended its first turn ([`crate::dns::schedule::FillPace`]).
//!
//! Usage: `autoproxy-agent resolve /etc/haproxy/haproxy.cfg`, with `AUTOPROXY_REFRESH_SECONDS`
//! (50), `AUTOPROXY_MAX_QPS` (200), `AUTOPROXY_FILL_QPS` (800), `AUTOPROXY_QUERY_TIMEOUT` (1.0) and
//! `AUTOPROXY_MAX_STALE_SECONDS` (900) in the environment. It reads the names from the
//! config's `#@route`/`#@suffix` lines, the nameservers from its `#@nameserver` lines (only
//! those: never /etc/resolv.conf, and no local cache hides or adds load) and the stats socket
//! from `global`; it looks at the config's inode, size and mtime every second. It writes
//! `<config dir>/autoproxy/addresses.map` (what a starting worker loads; at most once a
//! second, atomically) and pushes each change over the stats socket (what the running worker
//! uses). SIGTERM and SIGINT stop it, after a last write of the map if it changed. It answers
//! the apply's "resolve these names now" on `<config dir>/autoproxy/resolver.sock` (the
//! protocol is in [`control`]). It shows the instance ([`observe`]): `/ready` and
//! `/agent/metrics` on the HTTP socket the config's `backend autoproxy_agent` names, and
//! CloudWatch metrics every `AUTOPROXY_METRICS_SECONDS` (60; 0: off).
//!
//! The rules, each a pure function of `schedule` with its table test:
//! * **Which address.** Every A record at the end of the CNAME chain counts (the chain is
//!   followed inside the answer, and a target the answer leaves out is asked for); AAAA is
//!   asked only when there is no A record (asking both would double the queries against the
//!   same cap). The map holds one address: the current one while it is still among the
//!   answers (no flapping between a load balancer's nodes), else the lowest IPv4, else the
//!   lowest IPv6.
//! * **When again.** A name is asked again min(TTL, REFRESH) after its answer (at least
//!   REFRESH / 5 apart), negative and failed turns after REFRESH. The steady spacing follows
//!   the sum of the names' rates; when that exceeds MAX_QPS, names are asked late, each
//!   member (the account of the name's routes) getting its share of the queries
//!   ([`crate::dns::engine::shares`]). A due time is a deadline: names due together are
//!   spread over the time before it.
//! * **Truncated answers.** Queries carry EDNS0 (1,232 bytes); an answer with the TC bit is
//!   asked again over TCP (one more query under the cap), never used in part.
//! * **Dead names.** NXDOMAIN, or no A and no AAAA record, is a final negative answer: the
//!   address goes after 3 consecutive ones spanning at least one REFRESH period (a record
//!   deleted for good; the generator drops its route soon anyway). Time-outs, SERVFAIL and
//!   other codes are no answer (three tries a turn, each to the next nameserver): the address
//!   is kept until no answer has confirmed it for MAX_STALE (15 min), then dropped — a
//!   resolver outage does not blank the map at once, nor keep a dead address forever.
//! * **Wanted names** (from the control socket, or entries an apply merged into the file
//!   when no resolver answered) are resolved at the cap and kept, and refreshed, for 10
//!   minutes even when the config does not name them (yet).
//!
//! Cost: at 200 queries a second the work per query is small; the wake-ups are what costs.
//! So the loop runs on 25-ms ticks while queries are in flight (sending what the schedule
//! owes, reading every reply waiting on the non-blocking sockets, expiring), and when none
//! are, sleeps until the next name is due, the 1-s config check or the 2-s HAProxy check.
//! `tests/src/bin/bench_resolver.rs` measures it at 10,000 names.

pub mod observe;

mod config;
mod held;
mod output;
mod push;
mod pushing;
mod single;
mod wants;

pub use crate::dns::knobs::{KnobError, Knobs};
pub(crate) use crate::log::log;

use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use tokio::signal::unix::{Signal, SignalKind, signal};

use crate::address_map::MapFile;
use crate::control::{self, Control};
use crate::dns::engine::{Engine, Transport};
use crate::dns::knobs;
use config::{Installed, Watched};
use observe::Observer;
use output::Output;
use pushing::Pushing;
use wants::Wants;

/// Runs the address service on the installed config at `config`.
pub fn main(config: &Path) -> ExitCode {
    let read = Knobs::from_env().and_then(|knobs| {
        Ok((
            knobs,
            knobs::metrics_period(|name| std::env::var(name).ok())?,
        ))
    });
    let (knobs, metrics) = match read {
        Ok(read) => read,
        Err(err) => {
            log(format_args!("{err}"));
            return ExitCode::from(78);
        }
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .max_blocking_threads(2)
        .build();
    let runtime = match runtime {
        Ok(runtime) => runtime,
        Err(err) => {
            log(format_args!("cannot start: {err}"));
            return ExitCode::from(70);
        }
    };
    match runtime.block_on(run(config, knobs, metrics)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err @ RunError::Single(single::SingleError::Held { .. })) => {
            log(format_args!("{err}"));
            ExitCode::from(1)
        }
        Err(err) => {
            log(format_args!("{err}"));
            ExitCode::from(70)
        }
    }
}

/// Why the service cannot run.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("cannot listen for signals: {0}")]
    Signals(#[source] std::io::Error),
    #[error("{0}")]
    Single(#[from] single::SingleError),
}

/// How often wanted names whose time is up are forgotten.
const WANTED_CHECK: Duration = Duration::from_secs(5);

async fn run(config: &Path, knobs: Knobs, metrics: Option<Duration>) -> Result<(), RunError> {
    let config_dir = config.parent().unwrap_or(Path::new(".")).to_path_buf();
    // First: one service per config, or none of what follows.
    let _single = single::Single::take(&crate::address_map::maps_dir(config))?;
    let start = Instant::now();
    let mut engine = Engine::new(knobs);
    let (mut output, known) = Output::open(MapFile::in_dir(&config_dir), &mut engine, start);
    let mut transport = Transport::new();
    let mut control = Control::listen(&config_dir.join(control::SOCKET));
    let mut stop = Stop::listen()?;
    log_start(config, output.path(), &knobs, known);
    let mut watched = Watched::new(config, start);
    let mut wants = Wants::default();
    let mut pushing = Pushing::new(config, start);
    let mut observer = Observer::start(config, knobs.refresh, metrics, start);
    let mut cycle = Cycle::new(start);
    let mut next_wanted_check = start + WANTED_CHECK;
    let mut watchdog = Watchdog::new();
    loop {
        let now = Instant::now();
        if let Some(installed) = watched.poll(now) {
            follow(config, &installed, &mut engine, &mut transport, now);
            observer.follow(&installed, now);
            pushing.set_stats_socket(installed.stats_socket, now);
        }
        // Ready once the config was read (or found missing); then alive while this loop turns:
        // a wedged loop stops the pings and systemd restarts the unit (WatchdogSec=).
        watchdog.turned(now);
        // The pacer counts the cap on the time the queries leave, not on when this turn began:
        // reading a config and asking HAProxy above can take tens of milliseconds.
        engine.step(Instant::now(), &mut transport);
        if now >= next_wanted_check {
            next_wanted_check = now + WANTED_CHECK;
            engine.expire_wanted(now);
        }
        wants.answer(&mut engine, &mut output, now);
        let wrote = output.write_due(&mut engine, now);
        if wants.push_wanted() || wrote {
            pushing.due_now(now);
        }
        // What was written goes out when an apply waits for it, even though the fill has
        // answered more since (the file holds what the answers say; the rest follows).
        let pushable = !engine.dirty || wants.push_wanted();
        if pushing.start(output.written(), pushable, now) {
            wants.push_started();
        }
        cycle.report(&mut engine, knobs.refresh, now);
        let pushed = pushing.holds(output.written());
        observer.update(&mut engine, output.written(), pushed, now);
        let wake = [
            engine.next_wake(now),
            Some(watched.next_check()),
            pushing.next_wake(!engine.dirty || wants.push_wanted()),
            output.next_write(&engine),
            wants.next_deadline(),
            Some(cycle.start + knobs.refresh),
        ]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(now + Duration::from_secs(1));
        tokio::select! {
            () = tokio::time::sleep_until(wake.into()) => {}
            Some(done) = transport.tcp_rx.recv() => engine.on_tcp(done, Instant::now()),
            want = control.next() => wants.add(want, &mut engine, Instant::now()),
            pushed = pushing.finished() => {
                let failed = pushing.ended(pushed, Instant::now());
                wants.push_ended(failed.as_deref());
            }
            () = stop.signalled() => break,
        }
    }
    if engine.dirty {
        output.write(&mut engine, Instant::now());
    }
    control.close();
    observer.close();
    log(format_args!("stopped"));
    Ok(())
}

fn log_start(config: &Path, map: &Path, knobs: &Knobs, known: usize) {
    log(format_args!(
        "start: config {}, map {}, refresh {}s, max {} queries/s (fill {}), timeout {}s, max stale {}s, {known} addresses known",
        config.display(),
        map.display(),
        knobs.refresh.as_secs_f64(),
        knobs.max_qps,
        knobs.fill_qps,
        knobs.timeout.as_secs_f64(),
        knobs.max_stale.as_secs_f64(),
    ));
}

/// Takes in what the config at `config` holds now: its nameservers and names.
fn follow(
    config: &Path,
    installed: &Installed,
    engine: &mut Engine,
    transport: &mut Transport,
    now: Instant,
) {
    for host in &installed.ignored {
        log(format_args!("ignored host name {host:?}"));
    }
    for ns in &installed.ignored_nameservers {
        log(format_args!("ignored nameserver {ns:?}"));
    }
    for (server, why) in transport.set_nameservers(&installed.nameservers) {
        log(format_args!(
            "cannot open a socket to nameserver {server}: {why}"
        ));
    }
    engine.set_nameservers(installed.nameservers.clone());
    engine.set_own(installed.own.clone());
    engine.set_fences(installed.fences.clone());
    engine.set_accounts(&installed.accounts);
    engine.set_config_names(&installed.names, now);
    let without = installed
        .names
        .iter()
        .filter(|n| engine.answer(n).is_err())
        .count();
    let nameservers = if installed.nameservers.is_empty() {
        "none".to_owned()
    } else {
        let shown: Vec<String> = installed
            .nameservers
            .iter()
            .map(|s| s.to_string())
            .collect();
        shown.join(",")
    };
    log(format_args!(
        "read {}: {} names ({without} without an address), nameservers {nameservers}, stats socket {}",
        config.display(),
        installed.names.len(),
        installed
            .stats_socket
            .as_deref()
            .map_or_else(|| "none".to_owned(), |p| p.display().to_string())
    ));
}

/// systemd's view of the service (`Type=notify`): `READY=1` at the first turn of the loop,
/// `WATCHDOG=1` from its turns, at most once a second. Nothing without `NOTIFY_SOCKET`.
struct Watchdog {
    ready: bool,
    last: Option<Instant>,
}

impl Watchdog {
    /// How often the loop tells systemd it turns; the unit's `WatchdogSec=` is 30 s, and the
    /// loop turns at least every second (the config check).
    const EVERY: Duration = Duration::from_secs(1);

    fn new() -> Watchdog {
        Watchdog {
            ready: false,
            last: None,
        }
    }

    fn turned(&mut self, now: Instant) {
        if !self.ready {
            self.ready = true;
            let _ = sd_notify::notify(false, &[sd_notify::NotifyState::Ready]);
        }
        if self.last.is_none_or(|last| now >= last + Self::EVERY) {
            self.last = Some(now);
            let _ = sd_notify::notify(false, &[sd_notify::NotifyState::Watchdog]);
        }
    }
}

/// SIGTERM and SIGINT, which stop the service.
struct Stop {
    term: Signal,
    int: Signal,
}

impl Stop {
    fn listen() -> Result<Stop, RunError> {
        Ok(Stop {
            term: signal(SignalKind::terminate()).map_err(RunError::Signals)?,
            int: signal(SignalKind::interrupt()).map_err(RunError::Signals)?,
        })
    }

    /// Once either came.
    async fn signalled(&mut self) {
        tokio::select! {
            _ = self.term.recv() => {}
            _ = self.int.recv() => {}
        }
    }
}

/// One refresh period's counters, logged as one line at its end.
struct Cycle {
    start: Instant,
}

impl Cycle {
    fn new(start: Instant) -> Cycle {
        Cycle { start }
    }

    /// Logs and starts over the engine's counters once a period of `refresh` is over.
    fn report(&mut self, engine: &mut Engine, refresh: Duration, now: Instant) {
        let seconds = now.saturating_duration_since(self.start);
        if seconds < refresh {
            return;
        }
        let stats = std::mem::take(&mut engine.stats);
        if stats.queries > 0 {
            log(format_args!(
                "cycle: names={} queries={} answered={} changed={} failed={} timeouts={} backoffs={} seconds={:.1}",
                engine.len(),
                stats.queries,
                stats.answered,
                stats.changed,
                stats.failed,
                stats.timeouts,
                stats.backoffs,
                seconds.as_secs_f64()
            ));
        }
        self.start = now;
    }
}
