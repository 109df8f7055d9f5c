//! autoproxy-agent resolve: keeps HAProxy's map of backend addresses current, at a steady
//! DNS rate (the systemd service `autoproxy-resolver`, installed by the apply).
//!
//! HAProxy's own `resolvers` cannot pace: every server's query goes out in the same instant
//! each `timeout resolve`, thousands per second at 10,000 routes, while the AWS VPC resolver
//! accepts 1,024 packets per second per network interface. So HAProxy sends no DNS query at
//! all; this service resolves the backend names instead and holds one property: its queries
//! are spread evenly (the names' demand, about names / REFRESH per second) and never more
//! than MAX_QPS in any second, at start, at a reload and when the config changes alike, new
//! names first at the cap, retries, TCP fallbacks and CNAME chases included.
//!
//! Usage: `autoproxy-agent resolve /etc/haproxy/haproxy.cfg`, with `AUTOPROXY_REFRESH_SECONDS`
//! (50), `AUTOPROXY_MAX_QPS` (200), `AUTOPROXY_QUERY_TIMEOUT` (1.0) and
//! `AUTOPROXY_MAX_STALE_SECONDS` (900) in the environment. It reads the names from the
//! config's `#@route`/`#@suffix` lines, the nameservers from its `#@nameserver` lines (only
//! those: never /etc/resolv.conf, and no local cache hides or adds load) and the stats socket
//! from `global`; it looks at the config's inode, size and mtime every second. It writes
//! `<config dir>/autoproxy/addresses.map` (what a starting worker loads; at most once a
//! second, atomically) and pushes each change over the stats socket (what the running worker
//! uses). SIGTERM and SIGINT stop it, after a last write of the map if it changed. It answers
//! the apply's "resolve these names now" on `<config dir>/autoproxy/resolver.sock` (the
//! protocol is in [`control`]).
//!
//! The rules, each a pure function of `schedule` with its table test:
//! * **Which address.** Every A record at the end of the CNAME chain counts (the chain is
//!   followed inside the answer, and a target the answer leaves out is asked for); AAAA is
//!   asked only when there is no A record (asking both would double the queries against the
//!   same cap). The map holds one address: the current one while it is still among the
//!   answers (no flapping between a load balancer's nodes), else the lowest IPv4, else the
//!   lowest IPv6.
//! * **When again.** A name is asked again min(TTL, REFRESH) after its answer (at least 1 s
//!   apart), negative and failed turns after REFRESH. The steady spacing follows the sum of
//!   the names' rates; when that exceeds MAX_QPS, names are asked late, oldest due first.
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

pub mod control;
pub mod dns;
pub mod knobs;
pub mod once;
pub mod schedule;
pub mod service;

mod engine;
mod log;
mod push;

pub use knobs::{KnobError, Knobs};
pub(crate) use log::log;

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot};

use crate::address_map::{self, MapFile, Stamp};
use engine::{Engine, Transport};
use push::Pusher;

/// What the resolver reads from the installed config.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Installed {
    /// The host names to resolve (IP literals are not).
    pub names: BTreeSet<String>,
    /// Hosts that are neither a name nor an IP literal.
    pub ignored: Vec<String>,
    pub nameservers: Vec<SocketAddr>,
    pub ignored_nameservers: Vec<String>,
    /// The `stats socket` of `global`, when it is a path.
    pub stats_socket: Option<PathBuf>,
}

/// Reads what the resolver needs from a config's text.
pub fn read_installed(text: &str) -> Installed {
    let mut installed = Installed::default();
    for host in autoproxy::artifact::route_hosts(text) {
        if host.parse::<IpAddr>().is_ok() {
            continue;
        }
        match autoproxy::names::HostName::parse(&host) {
            Ok(name) => {
                installed.names.insert(name.as_str().to_owned());
            }
            Err(_) => installed.ignored.push(host),
        }
    }
    let nameservers = autoproxy::artifact::nameservers(text);
    installed.nameservers = nameservers.valid;
    installed.ignored_nameservers = nameservers.ignored;
    let mut section = "";
    for line in text.lines() {
        let mut words = line.split_whitespace();
        let Some(first) = words.next() else {
            continue;
        };
        if first.starts_with('#') {
            continue;
        }
        if !line.starts_with(char::is_whitespace) {
            section = first;
        } else if section == "global"
            && first == "stats"
            && words.next() == Some("socket")
            && installed.stats_socket.is_none()
        {
            let target = words.next().unwrap_or_default();
            let target = target.strip_prefix("unix@").unwrap_or(target);
            if target.starts_with('/') {
                installed.stats_socket = Some(PathBuf::from(target));
            }
        }
    }
    installed
}

/// Runs the address service on the installed config at `config`.
pub fn main(config: &Path) -> ExitCode {
    let knobs = match Knobs::from_env() {
        Ok(knobs) => knobs,
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
    match runtime.block_on(run(config, knobs)) {
        Ok(()) => ExitCode::SUCCESS,
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
}

/// The config file as last read.
#[derive(Debug)]
struct Watched {
    path: PathBuf,
    id: Option<(u64, u64, i64, i64)>,
    next_check: Instant,
}

impl Watched {
    /// The config's text when it changed since the last look.
    fn changed(&mut self, now: Instant) -> Option<String> {
        self.next_check = now + Duration::from_secs(1);
        let id = std::fs::metadata(&self.path)
            .map(|m| (m.ino(), m.size(), m.mtime(), m.mtime_nsec()))
            .map_err(|err| {
                if self.id.is_some() {
                    log(format_args!("cannot read {}: {err}", self.path.display()));
                }
                self.id = None;
            })
            .ok()?;
        if Some(id) == self.id {
            return None;
        }
        match std::fs::read_to_string(&self.path) {
            Ok(text) => {
                self.id = Some(id);
                Some(text)
            }
            Err(err) => {
                log(format_args!("cannot read {}: {err}", self.path.display()));
                self.id = None;
                None
            }
        }
    }
}

/// One request on the control socket, waiting for its names.
#[derive(Debug)]
struct Waiter {
    names: Vec<String>,
    deadline: Instant,
    reply: oneshot::Sender<Vec<String>>,
}

/// The map file as the service writes it.
#[derive(Debug)]
struct Output {
    file: MapFile,
    /// What the file held after our last write (another writer changes it).
    stamp: Option<Stamp>,
    /// The last write's content: what HAProxy is brought to.
    written: Arc<BTreeMap<Arc<str>, IpAddr>>,
    next_write: Instant,
}

impl Output {
    /// Writes the engine's map under the lock, taking in what another writer added first.
    fn write(&mut self, engine: &mut Engine, now: Instant) {
        self.next_write = now + Duration::from_secs(1);
        let lock = match self.file.lock() {
            Ok(lock) => lock,
            Err(err) => {
                log(format_args!(
                    "cannot lock {}: {err}",
                    self.file.path().display()
                ));
                return;
            }
        };
        if self.file.stamp() != self.stamp {
            match self.file.read() {
                Ok(entries) => engine.adopt(&entries.addresses, now),
                Err(err) => log(format_args!(
                    "cannot read {}: {err}",
                    self.file.path().display()
                )),
            }
        }
        let snapshot = engine.snapshot();
        let text = address_map::format(snapshot.iter().map(|(n, a)| (n.as_ref(), *a)));
        match self.file.write(&lock, &text) {
            Ok(stamp) => {
                self.stamp = stamp;
                self.written = Arc::new(snapshot);
                engine.dirty = false;
            }
            Err(err) => log(format_args!(
                "cannot write {}: {err}",
                self.file.path().display()
            )),
        }
    }
}

async fn run(config: &Path, knobs: Knobs) -> Result<(), RunError> {
    let config_dir = config.parent().unwrap_or(Path::new(".")).to_path_buf();
    let file = MapFile::in_dir(&config_dir);
    let mut engine = Engine::new(knobs);
    let start = Instant::now();
    let loaded = match file.read() {
        Ok(entries) => {
            for (line, text) in &entries.malformed {
                log(format_args!(
                    "{}:{line}: skipped malformed line {text:?}",
                    file.path().display()
                ));
            }
            entries.addresses
        }
        Err(err) => {
            log(format_args!("cannot read {}: {err}", file.path().display()));
            BTreeMap::new()
        }
    };
    engine.load(&loaded, start);
    let mut output = Output {
        stamp: file.stamp(),
        written: Arc::new(engine.snapshot()),
        file,
        next_write: start,
    };
    let mut transport = Transport::new();
    let (want_tx, mut want_rx) = mpsc::channel::<control::Want>(16);
    let socket_path = config_dir.join(control::SOCKET);
    let listener = listen(&socket_path);
    let mut sigterm = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(RunError::Signals)?;
    let mut sigint = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
        .map_err(RunError::Signals)?;
    log(format_args!(
        "start: config {}, map {}, refresh {}s, max {} queries/s, timeout {}s, max stale {}s, {} addresses known",
        config.display(),
        output.file.path().display(),
        knobs.refresh.as_secs_f64(),
        knobs.max_qps,
        knobs.timeout.as_secs_f64(),
        knobs.max_stale.as_secs_f64(),
        loaded.len()
    ));

    let mut watched = Watched {
        path: config.to_path_buf(),
        id: None,
        next_check: start,
    };
    let mut stats_socket: Option<PathBuf> = None;
    let mut pusher = Some(Pusher::new(None));
    let mut pushing: Option<tokio::task::JoinHandle<(Pusher, bool)>> = None;
    let mut push_due = start;
    let mut waiters: Vec<Waiter> = Vec::new();
    let mut cycle_start = start;
    let mut next_wanted_check = start + Duration::from_secs(5);

    loop {
        let now = Instant::now();
        if now >= watched.next_check
            && let Some(text) = watched.changed(now)
        {
            let installed = read_installed(&text);
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
            engine.set_config_names(&installed.names, now);
            let without = installed
                .names
                .iter()
                .filter(|n| engine.answer(n).is_err())
                .count();
            if stats_socket != installed.stats_socket {
                stats_socket.clone_from(&installed.stats_socket);
                if let Some(task) = pushing.take() {
                    let _ = task.await;
                }
                pusher = Some(Pusher::new(stats_socket.clone()));
                push_due = now;
            }
            log(format_args!(
                "read {}: {} names ({without} without an address), nameservers {}, stats socket {}",
                config.display(),
                installed.names.len(),
                if installed.nameservers.is_empty() {
                    "none".to_owned()
                } else {
                    installed
                        .nameservers
                        .iter()
                        .map(SocketAddr::to_string)
                        .collect::<Vec<_>>()
                        .join(",")
                },
                installed
                    .stats_socket
                    .as_deref()
                    .map_or_else(|| "none".to_owned(), |p| p.display().to_string())
            ));
        }
        transport.drain(&mut engine, now);
        engine.expire(now);
        engine.send_due(now, &transport);
        if now >= next_wanted_check {
            next_wanted_check = now + Duration::from_secs(5);
            engine.expire_wanted(now);
        }

        // Requests whose names all ended their turn (or whose time is up) get their answer,
        // after the file holds what it says.
        let (done, waiting): (Vec<Waiter>, Vec<Waiter>) = waiters
            .into_iter()
            .partition(|w| now >= w.deadline || w.names.iter().all(|n| engine.settled(n)));
        waiters = waiting;
        if !done.is_empty() {
            if engine.dirty {
                output.write(&mut engine, now);
            }
            for waiter in done {
                let lines = waiter
                    .names
                    .iter()
                    .map(|name| match engine.answer(name) {
                        Ok(address) => format!("ok {name} {address}"),
                        Err(why) => format!("missing {name} {why}"),
                    })
                    .collect();
                let _ = waiter.reply.send(lines);
            }
            push_due = now;
        }
        if engine.dirty && now >= output.next_write {
            output.write(&mut engine, now);
            push_due = now;
        }
        if now >= push_due
            && !engine.dirty
            && let Some(mut p) = pusher.take()
        {
            let target = Arc::clone(&output.written);
            pushing = Some(tokio::task::spawn_blocking(move || {
                let ok = p.sync(&target);
                (p, ok)
            }));
            push_due = now + Duration::from_secs(60);
        }
        if now.saturating_duration_since(cycle_start) >= knobs.refresh {
            let stats = std::mem::take(&mut engine.stats);
            if stats.queries > 0 {
                log(format_args!(
                    "cycle: names={} queries={} answered={} changed={} failed={} seconds={:.1}",
                    engine.len(),
                    stats.queries,
                    stats.answered,
                    stats.changed,
                    stats.failed,
                    now.saturating_duration_since(cycle_start).as_secs_f64()
                ));
            }
            cycle_start = now;
        }

        let wake = [
            engine.next_wake(now),
            Some(watched.next_check),
            // A push waits for the file (written at most once a second) and for the last push.
            (!engine.dirty && pusher.is_some()).then_some(push_due),
            engine.dirty.then_some(output.next_write),
            waiters.iter().map(|w| w.deadline).min(),
            Some(cycle_start + knobs.refresh),
        ]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(now + Duration::from_secs(1));
        tokio::select! {
            () = tokio::time::sleep_until(wake.into()) => {}
            Some(done) = transport.tcp_rx.recv() => engine.on_tcp(done, Instant::now()),
            Some(want) = want_rx.recv() => {
                let now = Instant::now();
                engine.want(&want.names, now);
                waiters.push(Waiter {
                    names: want.names,
                    deadline: now + want.wait,
                    reply: want.reply,
                });
            }
            accepted = accept(listener.as_ref()) => {
                if let Ok((stream, _)) = accepted {
                    tokio::spawn(control::serve(stream, want_tx.clone()));
                }
            }
            finished = join(&mut pushing) => {
                pushing = None;
                if let Ok((p, ok)) = finished {
                    if pusher.is_none() {
                        pusher = Some(p);
                    }
                    // Also every few seconds when nothing changed: a reload shows as a new pid.
                    push_due = Instant::now() + Duration::from_secs(if ok { 2 } else { 3 });
                } else {
                    // The push panicked: start over with a fresh view of HAProxy.
                    pusher = Some(Pusher::new(stats_socket.clone()));
                }
            }
            _ = sigterm.recv() => break,
            _ = sigint.recv() => break,
        }
    }
    if engine.dirty {
        output.write(&mut engine, Instant::now());
    }
    if listener.is_some() {
        let _ = std::fs::remove_file(&socket_path);
    }
    log(format_args!("stopped"));
    Ok(())
}

/// Listens on the control socket (only root may connect); none when it cannot.
fn listen(path: &Path) -> Option<tokio::net::UnixListener> {
    if let Some(dir) = path.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    // A socket file left by a stopped resolver refuses connections; an answering one
    // means another resolver runs for this config.
    if std::os::unix::net::UnixStream::connect(path).is_ok() {
        log(format_args!(
            "another resolver answers on {}; not listening",
            path.display()
        ));
        return None;
    }
    let _ = std::fs::remove_file(path);
    match tokio::net::UnixListener::bind(path) {
        Ok(listener) => {
            let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600));
            Some(listener)
        }
        Err(err) => {
            log(format_args!("cannot listen on {}: {err}", path.display()));
            None
        }
    }
}

async fn accept(
    listener: Option<&tokio::net::UnixListener>,
) -> std::io::Result<(tokio::net::UnixStream, tokio::net::unix::SocketAddr)> {
    match listener {
        Some(listener) => listener.accept().await,
        None => std::future::pending().await,
    }
}

async fn join<T>(
    task: &mut Option<tokio::task::JoinHandle<T>>,
) -> Result<T, tokio::task::JoinError> {
    match task.as_mut() {
        Some(task) => task.await,
        None => std::future::pending().await,
    }
}

/// Keeps the address service installed and running for `config`, run from `agent`; one log
/// line per thing it did or could not do. The apply calls this after every successful apply
/// or skip; [`service::ensure`] is the typed form.
pub fn ensure_service(agent: &Path, config: &Path) -> Vec<String> {
    let line = match service::ensure(agent, config, &service::Host::system()) {
        Ok(service::ServiceState::NotRoot) => format!(
            "not root: run '{} resolve {}' yourself",
            agent.display(),
            config.display()
        ),
        Ok(service::ServiceState::NoSystemd) => format!(
            "no systemd here: run '{} resolve {}' yourself",
            agent.display(),
            config.display()
        ),
        Ok(service::ServiceState::Running) => return Vec::new(),
        Ok(service::ServiceState::Started) => "started autoproxy-resolver".to_owned(),
        Ok(service::ServiceState::Installed) => {
            "installed and (re)started autoproxy-resolver".to_owned()
        }
        Err(err) => format!("WARNING: {err}"),
    };
    vec![line]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_installed_config_gives_names_nameservers_and_the_stats_socket() {
        let text = "# generation: 1\nglobal\n    stats socket unix@/run/haproxy/admin.sock mode 660\n\
                    \x20   stats socket /other.sock\n\
                    defaults\n    stats socket /not-global.sock\n\
                    #@route a.example API.x.example.:443 api 1 Z\n\
                    #@route b.example 10.0.0.1:443 api 1 Z\n\
                    #@suffix c.example bad$name.example:443 ingress-int 1 Z\n\
                    #@nameserver 10.0.0.2:53\n#@nameserver nope\n";
        let installed = read_installed(text);
        assert_eq!(
            installed.names.iter().collect::<Vec<_>>(),
            ["api.x.example"]
        );
        assert_eq!(installed.ignored, ["bad$name.example"]);
        assert_eq!(
            installed.nameservers,
            ["10.0.0.2:53".parse::<SocketAddr>().expect("addr")]
        );
        assert_eq!(installed.ignored_nameservers, ["nope"]);
        assert_eq!(
            installed.stats_socket.as_deref(),
            Some(Path::new("/run/haproxy/admin.sock"))
        );
    }
}
