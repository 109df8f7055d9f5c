//! The data-plane benchmark's building blocks: a real HAProxy on loopback inside a private
//! mount namespace whose `/etc/resolv.conf` points at a counting DNS server (so every query
//! it sends, libc lookups at check and start time included, is seen), the synthetic routes,
//! the worker's CPU from `/proc`, and client loops of TLS ClientHellos.
//!
//! Two designs are compared on the same routes: the per-route template the project used
//! before (an ACL, a `use_backend` and a resolving, health-checked backend per route; kept
//! verbatim in `tests/data/per-route.cfg.j2`) and the map-based default template.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use autoproxy::artifact::MapFiles;
use autoproxy::model::{Route, SniMatch};
use autoproxy::names::HostName;
use autoproxy::render::{DEFAULT_TEMPLATE, RenderInput, RenderOptions, Renderer};
use autoproxy::rules::resolve;

use crate::dns::{Query, max_per_second, per_second};
use crate::moto::free_port;
use crate::proxy::probe;

/// The template before the map-based design: one ACL, `use_backend` and backend per route.
pub const PER_ROUTE_TEMPLATE: &str = include_str!("../data/per-route.cfg.j2");

/// Which template a run measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Design {
    /// `tests/data/per-route.cfg.j2`: the template as it was.
    PerRoute,
    /// The default template: map lookups, one backend, addresses from autoproxy-resolver.
    Maps,
}

impl Design {
    pub fn label(self) -> &'static str {
        match self {
            Design::PerRoute => "before: per route",
            Design::Maps => "after: maps",
        }
    }

    pub fn template(self) -> &'static str {
        match self {
            Design::PerRoute => PER_ROUTE_TEMPLATE,
            Design::Maps => DEFAULT_TEMPLATE,
        }
    }
}

/// Synthetic routes for `count / 2` zones `z00000.bench.internal`, …: each zone has an API
/// route (SNI `proxy.api.<zone>` to `api.<zone>`) and an internal-ingress suffix route
/// (`*.int.<zone>` to `ingress-int.<zone>`), in the generator's order (exact routes first).
pub fn routes(count: usize) -> Vec<Route> {
    let zones = count.div_ceil(2);
    let mut candidates = Vec::with_capacity(2 * zones);
    for i in 0..zones {
        let zone = format!("z{i:05}.bench.internal");
        let zone_name = HostName::parse(&zone).expect("a valid zone name");
        let route = |rule: &str, sni: String, sni_match, backend: &str| Route {
            rule: rule.to_owned(),
            account: format!("{:012}", 100_000_000_000u64 + (i % 50) as u64),
            zone_id: format!("Z{i:06}"),
            zone_name: zone_name.clone(),
            sni,
            sni_match,
            backend: zone_name.with_prefix(backend),
            port: 443,
            records: vec![],
        };
        candidates.push(route(
            "api",
            format!("proxy.api.{zone}"),
            SniMatch::Exact,
            "api",
        ));
        candidates.push(route(
            "ingress-int",
            format!(".int.{zone}"),
            SniMatch::Suffix,
            "ingress-int",
        ));
    }
    candidates.truncate(count);
    resolve(candidates).0
}

/// The SNI a client sends to reach `route`: the name itself, or a name under the suffix.
pub fn client_sni(route: &Route) -> String {
    match route.sni_match {
        SniMatch::Exact => route.sni.clone(),
        SniMatch::Suffix => format!("web{}", route.sni),
    }
}

/// One route a client exercises, and what it must read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub sni: String,
    /// The banner of the backend the route's host name resolves to.
    pub banner: String,
}

/// The first and last exact route and the first and last suffix route, in config order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ends {
    pub first_exact: Target,
    pub last_exact: Target,
    pub first_suffix: Target,
    pub last_suffix: Target,
}

impl Ends {
    pub fn find(routes: &[Route], banner: impl Fn(&Route) -> String) -> Ends {
        let target = |route: &Route| Target {
            sni: client_sni(route),
            banner: banner(route),
        };
        let of = |kind| routes.iter().filter(move |r| r.sni_match == kind);
        let pick = |kind, last: bool| {
            let route = if last {
                of(kind).next_back()
            } else {
                of(kind).next()
            };
            target(route.expect("routes of both kinds"))
        };
        Ends {
            first_exact: pick(SniMatch::Exact, false),
            last_exact: pick(SniMatch::Exact, true),
            first_suffix: pick(SniMatch::Suffix, false),
            last_suffix: pick(SniMatch::Suffix, true),
        }
    }

    pub fn all(&self) -> [&Target; 4] {
        [
            &self.first_exact,
            &self.last_exact,
            &self.first_suffix,
            &self.last_suffix,
        ]
    }
}

/// Renders `routes` with `design`'s template through the real renderer.
pub fn render(
    design: Design,
    routes: &[Route],
    resolvers: &[SocketAddr],
    options: &RenderOptions,
    generation: u64,
) -> String {
    Renderer::new(design.template())
        .expect("the template compiles")
        .render(&RenderInput {
            routes,
            resolvers,
            options,
            generation,
            generated_at: "2026-01-01T00:00:00Z",
            trigger: "bench",
        })
        .expect("render")
        .text
}

/// Clock ticks per second, the unit of `utime` and `stime` in `/proc/<pid>/stat`.
pub fn clock_ticks() -> u64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|out| String::from_utf8_lossy(&out.stdout).trim().parse().ok())
        .unwrap_or(100)
}

/// The fields of `/proc/<pid>/stat` after the command name (field 3, the state, first).
fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = stat.rsplit_once(") ")?.1;
    Some(rest.split_whitespace().map(str::to_owned).collect())
}

/// `utime + stime` of a process (every thread), in clock ticks.
pub fn cpu_ticks(pid: u32) -> Option<u64> {
    let fields = stat_fields(pid)?;
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

/// Live (not zombie) children of `parent`.
pub fn children(parent: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            stat_fields(*pid).is_some_and(|f| {
                f.first().map(String::as_str) != Some("Z")
                    && f.get(1).and_then(|p| p.parse::<u32>().ok()) == Some(parent)
            })
        })
        .collect()
}

/// An HAProxy master (`-W`, in the foreground) and its workers, run in a private mount
/// namespace whose `/etc/resolv.conf` names `nameserver` only. Its directory holds the
/// config, the map files, the stats socket and HAProxy's output; every process and the
/// directory go when it is dropped.
#[derive(Debug)]
pub struct Proxy {
    dir: tempfile::TempDir,
    pub https: SocketAddr,
    master: Option<Child>,
}

impl Proxy {
    pub fn new(nameserver: Ipv4Addr) -> Proxy {
        let dir = tempfile::Builder::new()
            .prefix("autoproxy-dataplane-")
            .tempdir()
            .expect("temp dir");
        std::fs::write(
            dir.path().join("resolv.conf"),
            format!("nameserver {nameserver}\n"),
        )
        .expect("write resolv.conf");
        Proxy {
            dir,
            https: SocketAddr::from((Ipv4Addr::LOCALHOST, free_port())),
            master: None,
        }
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    pub fn config_path(&self) -> PathBuf {
        self.dir().join("haproxy.cfg")
    }

    pub fn stats_socket(&self) -> PathBuf {
        self.dir().join("admin.sock")
    }

    /// The addresses map autoproxy-resolver keeps, beside the config.
    pub fn addresses_map(&self) -> PathBuf {
        self.dir()
            .join(MapFiles::for_generation(0).addresses.as_str())
    }

    /// Render options for an unprivileged HAProxy on loopback (maxconn stays within the FD
    /// limit here).
    pub fn options(&self, backend_port: u16) -> RenderOptions {
        let local = |port| SocketAddr::from((Ipv4Addr::LOCALHOST, port)).to_string();
        RenderOptions {
            https_bind: self.https.to_string(),
            http_bind: local(free_port()),
            stats_bind: local(free_port()),
            stats_socket: self.stats_socket().display().to_string(),
            user: String::new(),
            group: String::new(),
            chroot: String::new(),
            // Nobody listens there: both templates log every connection, at the same cost.
            log: "127.0.0.1:9 local0".to_owned(),
            maxconn: 2_000,
            hard_stop_after: "30s".to_owned(),
            backend_port: Some(backend_port),
        }
    }

    /// Installs `config` with its map files beside it, as the apply document does.
    pub fn install(&self, config: &str) {
        crate::proxy::install_config(self.dir(), config);
    }

    /// `haproxy` with `args`, in the private mount namespace.
    fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new("unshare");
        command
            .args([
                "-m",
                "sh",
                "-c",
                "mount --bind \"$1\" /etc/resolv.conf && shift && exec haproxy \"$@\"",
                "sh",
            ])
            .arg(self.dir().join("resolv.conf"))
            .args(args)
            .current_dir(self.dir())
            .stdin(Stdio::null());
        command
    }

    /// `haproxy -c` on the installed config: wall time, and whether it is valid.
    pub fn check(&self) -> (Duration, bool, String) {
        let config = self.config_path().display().to_string();
        let started = Instant::now();
        let output = self
            .command(&["-c", "-f", &config])
            .output()
            .expect("run unshare + haproxy -c");
        let took = started.elapsed();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        (took, output.status.success(), text)
    }

    /// Starts the master on the installed config; the time until `target` is routed.
    pub fn start(&mut self, target: &Target, timeout: Duration) -> Duration {
        assert!(self.master.is_none(), "already started");
        let config = self.config_path().display().to_string();
        let log = std::fs::File::create(self.dir().join("haproxy.log")).expect("haproxy.log");
        let started = Instant::now();
        let child = self
            .command(&["-W", "-f", &config])
            .stdout(log.try_clone().expect("clone the log file"))
            .stderr(log)
            .spawn()
            .expect("start unshare + haproxy");
        self.master = Some(child);
        loop {
            if matches!(probe(self.https, &target.sni), Ok(ref b) if *b == target.banner) {
                return started.elapsed();
            }
            assert!(
                started.elapsed() < timeout,
                "HAProxy did not route {} within {timeout:?}:\n{}",
                target.sni,
                self.log()
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// HAProxy's own output.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir().join("haproxy.log")).unwrap_or_default()
    }

    pub fn master_pid(&self) -> u32 {
        self.master.as_ref().expect("started").id()
    }

    /// The PID of the worker that serves (the one answering `show info`).
    pub fn worker(&self) -> Option<u32> {
        let info = self.stats_command("show info").ok()?;
        info.lines()
            .find_map(|line| line.strip_prefix("Pid: "))?
            .trim()
            .parse()
            .ok()
    }

    /// One command on the stats socket; its answer.
    pub fn stats_command(&self, command: &str) -> std::io::Result<String> {
        let mut socket = UnixStream::connect(self.stats_socket())?;
        socket.set_read_timeout(Some(Duration::from_secs(2)))?;
        socket.write_all(format!("{command}\n").as_bytes())?;
        let mut answer = String::new();
        socket.read_to_string(&mut answer)?;
        Ok(answer)
    }

    /// `kill -USR2` to the master; the time until a new worker answers, or `None` after
    /// `timeout`.
    pub fn reload(&self, timeout: Duration) -> Option<Duration> {
        let old = self.worker();
        let started = Instant::now();
        let status = Command::new("kill")
            .args(["-USR2", &self.master_pid().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -USR2 failed");
        while started.elapsed() < timeout {
            if let Some(now) = self.worker()
                && Some(now) != old
            {
                return Some(started.elapsed());
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        None
    }

    /// Stops the master and every worker: TERM, then KILL what is left after 3 s.
    pub fn stop(&mut self) {
        let Some(mut master) = self.master.take() else {
            return;
        };
        let pid = master.id();
        let workers = children(pid);
        let _ = Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .stderr(Stdio::null())
            .status();
        let deadline = Instant::now() + Duration::from_secs(3);
        while Instant::now() < deadline && !matches!(master.try_wait(), Ok(Some(_))) {
            std::thread::sleep(Duration::from_millis(20));
        }
        if !matches!(master.try_wait(), Ok(Some(_))) {
            let _ = master.kill();
            let _ = master.wait();
        }
        for worker in workers {
            if stat_fields(worker).is_some() {
                let _ = Command::new("kill")
                    .args(["-KILL", &worker.to_string()])
                    .stderr(Stdio::null())
                    .status();
            }
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop();
    }
}

/// What a client loop saw.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tally {
    pub attempts: u64,
    pub failures: u64,
    /// The first few failures, for the log.
    pub examples: Vec<String>,
}

/// When a client loop ends: after `connections` (and at least `min_time`), or at
/// `max_time`, or when `stop` is set.
#[derive(Debug, Clone)]
pub struct Until {
    pub connections: u64,
    pub min_time: Duration,
    pub max_time: Duration,
    pub stop: Arc<AtomicBool>,
}

/// `threads` clients, each opening one connection after another with a ClientHello for
/// `targets` in turn and reading the backend's banner until the peer closes.
pub fn client_loop(addr: SocketAddr, targets: &[Target], threads: usize, until: &Until) -> Tally {
    let started = Instant::now();
    let attempts = AtomicU64::new(0);
    let failures = AtomicU64::new(0);
    let examples = std::sync::Mutex::new(Vec::new());
    let done = || {
        let elapsed = started.elapsed();
        until.stop.load(Ordering::SeqCst)
            || elapsed >= until.max_time
            || (attempts.load(Ordering::SeqCst) >= until.connections && elapsed >= until.min_time)
    };
    std::thread::scope(|scope| {
        for thread in 0..threads {
            let (attempts, failures, examples, done) = (&attempts, &failures, &examples, &done);
            scope.spawn(move || {
                let mut next = thread;
                while !done() {
                    let target = &targets[next % targets.len()];
                    next += 1;
                    attempts.fetch_add(1, Ordering::SeqCst);
                    let failure = match probe(addr, &target.sni) {
                        Ok(banner) if banner == target.banner => None,
                        Ok(banner) => Some(format!("{}: read {banner:?}", target.sni)),
                        Err(err) => Some(format!("{}: {err}", target.sni)),
                    };
                    if let Some(failure) = failure {
                        failures.fetch_add(1, Ordering::SeqCst);
                        let mut examples = examples.lock().expect("examples");
                        if examples.len() < 5 {
                            examples.push(failure);
                        }
                    }
                }
            });
        }
    });
    Tally {
        attempts: attempts.into_inner(),
        failures: failures.into_inner(),
        examples: examples.into_inner().expect("examples"),
    }
}

/// The worker CPU that connections to one route cost.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CpuPerConnection {
    pub connections: u64,
    /// Worker CPU per connection, minus what the idle worker burns in the same time.
    pub micros: f64,
    /// Without subtracting the idle worker's share.
    pub gross_micros: f64,
}

/// Connections made to one route, and the worker CPU and wall time they took.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CpuSample {
    pub connections: u64,
    pub ticks: u64,
    pub elapsed: Duration,
}

impl CpuSample {
    pub fn add(&mut self, other: CpuSample) {
        self.connections += other.connections;
        self.ticks += other.ticks;
        self.elapsed += other.elapsed;
    }

    /// Per connection, with `idle_ticks_per_second` (the worker's CPU without traffic)
    /// taken off.
    pub fn per_connection(
        &self,
        idle_ticks_per_second: f64,
        ticks_per_second: u64,
    ) -> CpuPerConnection {
        let per = |ticks: f64| {
            ticks.max(0.0) * 1e6 / ticks_per_second as f64 / self.connections.max(1) as f64
        };
        let ticks = self.ticks as f64;
        CpuPerConnection {
            connections: self.connections,
            micros: per(ticks - idle_ticks_per_second * self.elapsed.as_secs_f64()),
            gross_micros: per(ticks),
        }
    }
}

/// Runs `until`'s connections to `target` (two clients); the serving worker's CPU meanwhile.
/// Panics when a connection fails: the figure would not be the route's.
pub fn cpu_sample(proxy: &Proxy, target: &Target, until: &Until) -> CpuSample {
    let worker = proxy.worker().expect("a serving worker");
    let before = cpu_ticks(worker).expect("worker stat");
    let started = Instant::now();
    let tally = client_loop(proxy.https, std::slice::from_ref(target), 2, until);
    let elapsed = started.elapsed();
    let after = cpu_ticks(worker).expect("worker stat");
    assert_eq!(
        tally.failures, 0,
        "connections to {} failed: {:?}",
        target.sni, tally.examples
    );
    CpuSample {
        connections: tally.attempts,
        ticks: after - before,
        elapsed,
    }
}

/// UDP datagrams the kernel dropped for a full receive buffer, machine-wide, so far
/// (`RcvbufErrors` in `/proc/net/snmp`).
pub fn udp_receive_drops() -> Option<u64> {
    let snmp = std::fs::read_to_string("/proc/net/snmp").ok()?;
    let mut udp = snmp.lines().filter(|line| line.starts_with("Udp: "));
    let (names, values) = (udp.next()?, udp.next()?);
    let at = names.split_whitespace().position(|n| n == "RcvbufErrors")?;
    values.split_whitespace().nth(at)?.parse().ok()
}

/// Queries in a phase: how many, and the most in any 1-s window (sliding).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Burst {
    pub total: usize,
    pub max_per_second: usize,
}

/// The queries received in `[from, to)`.
pub fn burst(queries: &[Query], from: Instant, to: Instant) -> Burst {
    let inside: Vec<Query> = queries
        .iter()
        .filter(|q| q.at >= from && q.at < to)
        .cloned()
        .collect();
    Burst {
        total: inside.len(),
        max_per_second: max_per_second(&inside),
    }
}

/// Steady-state rate over `[from, to)`: the average per second and the most in one of the
/// consecutive 1-s windows from `from`.
pub fn steady(queries: &[Query], from: Instant, to: Instant) -> (f64, usize) {
    let windows = per_second(queries, from, to);
    let total: usize = windows.iter().sum();
    let seconds = to.saturating_duration_since(from).as_secs_f64();
    let average = if seconds > 0.0 {
        total as f64 / seconds
    } else {
        0.0
    };
    (average, windows.into_iter().max().unwrap_or(0))
}

/// Both logs in arrival order, as one.
pub fn merged(a: Vec<Query>, b: Vec<Query>) -> Vec<Query> {
    let mut all = a;
    all.extend(b);
    all.sort_by_key(|q| q.at);
    all
}

/// Where the data-plane section of docs/BENCHMARKS.md starts and ends: `bench` rewrites the
/// rest of the file and keeps this part.
pub const BEGIN: &str = "<!-- dataplane:begin -->";
pub const END: &str = "<!-- dataplane:end -->";

/// Puts `section` between the `begin` and `end` marker lines of `document`, replacing what
/// was there; without markers, a section under the same `## ` heading as `section`'s first
/// line (up to the next `## ` heading) is dropped, and the marked section is appended.
pub fn splice_section(document: &str, begin: &str, end: &str, section: &str) -> String {
    let block = format!("{begin}\n{}\n{end}\n", section.trim_end());
    if let (Some(start), Some(stop)) = (document.find(begin), document.find(end))
        && start < stop
    {
        let after = document[stop + end.len()..].trim_start_matches('\n');
        let mut out = document[..start].to_owned();
        out.push_str(&block);
        if !after.is_empty() {
            out.push('\n');
            out.push_str(after);
        }
        return out;
    }
    let mut kept = document.to_owned();
    let heading = section.lines().next().unwrap_or_default();
    if heading.starts_with("## ")
        && let Some(at) = document.lines().position(|line| line == heading)
    {
        let lines: Vec<&str> = document.lines().collect();
        let next = lines[at + 1..]
            .iter()
            .position(|line| line.starts_with("## "))
            .map_or(lines.len(), |n| at + 1 + n);
        kept = lines[..at]
            .iter()
            .chain(&lines[next..])
            .map(|line| format!("{line}\n"))
            .collect();
    }
    let mut out = kept.trim_end().to_owned();
    if !out.is_empty() {
        out.push_str("\n\n");
    }
    out.push_str(&block);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_are_half_exact_half_suffix_in_generator_order() {
        let routes = routes(6);
        assert_eq!(routes.len(), 6);
        let kinds: Vec<SniMatch> = routes.iter().map(|r| r.sni_match).collect();
        assert_eq!(kinds.iter().filter(|k| **k == SniMatch::Exact).count(), 3);
        assert_eq!(kinds[0], SniMatch::Exact);
        assert_eq!(kinds[5], SniMatch::Suffix);
        assert_eq!(routes[0].sni, "proxy.api.z00000.bench.internal");
        assert_eq!(routes[0].backend.as_str(), "api.z00000.bench.internal");
        let ends = Ends::find(&routes, |r| r.backend.as_str().to_owned());
        assert_eq!(ends.last_exact.sni, "proxy.api.z00002.bench.internal");
        assert!(ends.first_suffix.sni.starts_with("web.int.z0000"));
    }

    #[test]
    fn the_section_is_replaced_or_appended() {
        let (b, e) = ("<!-- b -->", "<!-- e -->");
        let appended = splice_section("# Title\n\ntext\n", b, e, "## S\nv1\n");
        assert_eq!(
            appended,
            "# Title\n\ntext\n\n<!-- b -->\n## S\nv1\n<!-- e -->\n"
        );
        let replaced = splice_section(&appended, b, e, "## S\nv2");
        assert_eq!(
            replaced,
            "# Title\n\ntext\n\n<!-- b -->\n## S\nv2\n<!-- e -->\n"
        );
        let middle = format!("{replaced}\n## Later\n");
        assert_eq!(
            splice_section(&middle, b, e, "## S\nv3"),
            "# Title\n\ntext\n\n<!-- b -->\n## S\nv3\n<!-- e -->\n\n## Later\n"
        );
        // An unmarked section of the same name is replaced, what follows it kept.
        let unmarked = "# Title\n\n## S\nold\n\n## Later\nx\n";
        assert_eq!(
            splice_section(unmarked, b, e, "## S\nnew"),
            "# Title\n\n## Later\nx\n\n<!-- b -->\n## S\nnew\n<!-- e -->\n"
        );
    }
}
