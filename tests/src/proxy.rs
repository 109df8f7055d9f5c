//! A real HAProxy in master-worker mode on loopback, the TCP backends it routes to, and a
//! client that speaks just enough TLS (a ClientHello with an SNI) to be routed.
//!
//! Backends are distinct loopback addresses (127.0.0.2, 127.0.0.3, …) sharing one port: the
//! renderer's `backend_port` is global, and an IP literal is a valid host name for a route's
//! backend, so test configs come from the real renderer and template and need no DNS (HAProxy
//! resolves nothing for an address literal).

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use autoproxy::artifact::MapFiles;
use autoproxy::model::{Route, SniMatch};
use autoproxy::names::HostName;
use autoproxy::render::{DEFAULT_TEMPLATE, RenderInput, RenderOptions, Renderer};

use crate::agent;
pub use crate::backends::{Backend, Backends};
use crate::moto::free_port;
use crate::ssm_agent::{self, AgentError, Document};

/// Stand-in for `systemctl reload haproxy`: USR2 to the master (HAProxy re-executes itself
/// with the new config; the new worker takes the listening sockets over from the old one),
/// or a start when no master runs yet, as `systemctl reload-or-restart` would. Its optional
/// argument is a delay in seconds (so a test can hold the apply lock for a while), or
/// `fail-once`: exit 1 the first time, reload every time after.
const RELOAD_SH: &str = r#"#!/bin/sh
set -eu
dir=$(dirname "$0")
case ${1:-} in
  "") ;;
  fail-once)
    if [ ! -e "$dir/failed-once" ]; then : >"$dir/failed-once"; echo "reload refused (test)" >&2; exit 1; fi ;;
  *) sleep "$1" ;;
esac
pid=$(cat "$dir/haproxy.pid" 2>/dev/null || true)
# A master that was killed may linger as a zombie: kill -0 succeeds on it, USR2 does nothing.
state=$(sed -n 's/^[0-9]* (.*) \(.\).*/\1/p' "/proc/${pid:-0}/stat" 2>/dev/null || true)
# A stale pid file may name any process once the pid is reused (pid_max can be 32768): only a
# process that reads this config is this HAProxy's master.
ours() { tr '\0' '\n' 2>/dev/null <"/proc/$pid/cmdline" | grep -qxF "$dir/haproxy.cfg"; }
if [ -n "$pid" ] && [ -n "$state" ] && [ "$state" != Z ] && ours; then
  exec kill -USR2 "$pid"
fi
cd /
exec haproxy -W -D -S "$dir/master.sock" -f "$dir/haproxy.cfg" -p "$dir/haproxy.pid" </dev/null >>"$dir/haproxy.log" 2>&1
"#;

/// One HAProxy (master and workers) in its own temp dir; every process is killed on drop.
#[derive(Debug)]
pub struct Haproxy {
    dir: tempfile::TempDir,
    pub https: SocketAddr,
    pub http: SocketAddr,
    pub stats: SocketAddr,
}

/// Where an HAProxy under test keeps its files: one directory, the same names in it (the
/// config is the stack's `ProxyConfigPath`, the stats socket the template's default name).
pub trait HaproxyFiles {
    fn dir(&self) -> &Path;

    fn config_path(&self) -> PathBuf {
        self.dir().join("haproxy.cfg")
    }

    fn stats_socket(&self) -> PathBuf {
        self.dir().join("admin.sock")
    }

    /// The master CLI socket every start of this HAProxy gives (`-S`).
    fn master_socket(&self) -> PathBuf {
        self.dir().join("master.sock")
    }

    /// One command on the stats socket; its answer.
    fn stats_command(&self, command: &str) -> std::io::Result<String> {
        socket_command(&self.stats_socket(), command)
    }

    /// The PID of the worker that serves (the one answering `show info`).
    fn worker_pid(&self) -> Option<u32> {
        self.stats_command("show info")
            .ok()?
            .lines()
            .find_map(|line| line.strip_prefix("Pid: "))?
            .trim()
            .parse()
            .ok()
    }

    /// Whether the master lists `worker` among its current workers in `show proc` on its
    /// CLI, which only a master back in its loop answers. A new worker serves before its
    /// master gets there, and HAProxy 2.6 loses a USR2 that arrives in between: the next
    /// reload must wait for this.
    fn master_has_taken_in(&self, worker: u32) -> bool {
        // The master CLI keeps a connection open after answering: `quit` closes it.
        let Ok(answer) = socket_command(&self.master_socket(), "show proc; quit") else {
            return false;
        };
        let mut current = false;
        for line in answer.lines() {
            if line.starts_with('#') {
                current = line.trim() == "# workers";
            } else if current && line.split_whitespace().next() == Some(&worker.to_string()) {
                return true;
            }
        }
        false
    }
}

/// One command on an HAProxy CLI socket; its answer, read until HAProxy closes.
fn socket_command(socket: &Path, command: &str) -> std::io::Result<String> {
    let mut stream = UnixStream::connect(socket)?;
    stream.set_read_timeout(Some(Duration::from_secs(2)))?;
    stream.write_all(format!("{command}\n").as_bytes())?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer)?;
    Ok(answer)
}

/// Render options for an unprivileged HAProxy on loopback: `[https, http, stats]` binds, its
/// stats socket (the agent's socket beside it, `autoproxy-agent.sock`), every backend on
/// `backend_port`; no user, group or chroot; a maxconn within
/// this machine's FD limit; logs sent where nobody listens (the tests do not read them, and
/// every template logs at the same cost).
pub fn loopback_options(
    binds: [SocketAddr; 3],
    stats_socket: &Path,
    backend_port: u16,
) -> RenderOptions {
    let [https, http, stats] = binds;
    RenderOptions {
        https_bind: https.to_string(),
        http_bind: http.to_string(),
        stats_bind: stats.to_string(),
        stats_socket: stats_socket.display().to_string(),
        agent_socket: stats_socket
            .with_file_name("autoproxy-agent.sock")
            .display()
            .to_string(),
        user: String::new(),
        group: String::new(),
        chroot: String::new(),
        log: "127.0.0.1:9 local0".to_owned(),
        maxconn: 2_000,
        route_maxconn: None,
        hard_stop_after: "30s".to_owned(),
        backend_port: Some(backend_port),
        prometheus_exporter: true,
    }
}

impl HaproxyFiles for Haproxy {
    fn dir(&self) -> &Path {
        self.dir.path()
    }
}

impl Haproxy {
    /// Prepares the directory, ports and `reload.sh`; nothing runs until the first reload.
    pub fn new() -> Haproxy {
        // No leading dot: the ProxyConfigPath pattern refuses hidden components.
        let dir = tempfile::Builder::new()
            .prefix("autoproxy-haproxy-")
            .tempdir()
            .expect("temp dir");
        let reload = dir.path().join("reload.sh");
        std::fs::write(&reload, RELOAD_SH).expect("write reload.sh");
        std::fs::set_permissions(&reload, std::fs::Permissions::from_mode(0o755))
            .expect("chmod reload.sh");
        let local = |port| SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        Haproxy {
            https: local(free_port()),
            http: local(free_port()),
            stats: local(free_port()),
            dir,
        }
    }

    /// The reload command for this HAProxy (a `ProxyReloadCommand`); `args` go to
    /// `reload.sh` (a delay in seconds, or `fail-once`).
    pub fn reload_command(&self, args: &[&str]) -> String {
        let mut words = vec![self.dir().join("reload.sh").display().to_string()];
        words.extend(args.iter().map(|a| (*a).to_owned()));
        words.join(" ")
    }

    /// The apply document as a stack deployed for this HAProxy holds it: `ConfigPath` fixed
    /// to [`Haproxy::config_path`], `ReloadCommand` to [`Haproxy::reload_command`], the agent
    /// cached under [`Haproxy::agent_directory`] and published to [`agent::BUCKET`].
    pub fn apply_document(&self) -> Result<Document, AgentError> {
        self.apply_document_reloading_with(&self.reload_command(&[]))
    }

    /// The same, deployed with another reload command.
    pub fn apply_document_reloading_with(&self, reload: &str) -> Result<Document, AgentError> {
        self.deploy_document(agent::BUCKET, reload)
    }

    /// The same, with the agent published to `bucket`.
    pub fn apply_document_in(&self, bucket: &str) -> Result<Document, AgentError> {
        self.deploy_document(bucket, &self.reload_command(&[]))
    }

    fn deploy_document(&self, bucket: &str, reload: &str) -> Result<Document, AgentError> {
        let path = self.config_path().display().to_string();
        let agent_dir = self.agent_directory().display().to_string();
        Document::from_workspace_with(
            &[
                (ssm_agent::CONFIG_PATH_PARAMETER, &path),
                (ssm_agent::RELOAD_COMMAND_PARAMETER, reload),
                (ssm_agent::AGENT_DIRECTORY_PARAMETER, &agent_dir),
            ],
            &agent::Published::describe(bucket).attributes(),
        )
    }

    /// Where this instance's apply document downloads and caches the agent.
    pub fn agent_directory(&self) -> PathBuf {
        self.dir().join("agent")
    }

    /// Render options for an unprivileged HAProxy on this instance's loopback ports.
    pub fn options(&self, backend_port: u16) -> RenderOptions {
        loopback_options(
            [self.https, self.http, self.stats],
            &self.stats_socket(),
            backend_port,
        )
    }

    /// Installs `config` directly and starts HAProxy on it (for tests that do not begin with
    /// the apply document's first install); waits until it serves that generation.
    pub fn start(&self, config: &str) {
        install_config(self.dir(), config);
        let status = Command::new(self.dir().join("reload.sh"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("run reload.sh");
        assert!(status.success(), "haproxy did not start:\n{}", self.log());
        let generation = autoproxy::artifact::parse_header(config)
            .expect("a config with a header")
            .generation;
        assert!(
            self.wait_for_generation(generation, Duration::from_secs(10)),
            "haproxy did not report generation {generation} within 10 s:\n{}",
            self.log()
        );
    }

    /// HAProxy's own output (startup alerts and warnings).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir().join("haproxy.log")).unwrap_or_default()
    }

    /// The generation HAProxy runs: its generation map's, else the `description` in
    /// `show info` (a config without a generation map).
    pub fn running_generation(&self) -> Option<u64> {
        if let Some(map) = MapFiles::stable().generation
            && let Ok(answer) = self.stats_command(&format!("show map {map}"))
            && let Some(generation) = answer.lines().find_map(|line| {
                let mut words = line.split_whitespace().skip(1);
                (words.next() == Some(autoproxy::artifact::GENERATION_KEY))
                    .then(|| words.next()?.parse().ok())?
            })
        {
            return Some(generation);
        }
        let info = self.stats_command("show info").ok()?;
        info.lines()
            .find_map(|line| line.strip_prefix("description: autoproxy generation "))?
            .trim()
            .parse()
            .ok()
    }

    /// Waits until `generation` runs and its worker's master takes the next reload.
    pub fn wait_for_generation(&self, generation: u64, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            if self.running_generation() == Some(generation)
                && self
                    .worker_pid()
                    .is_some_and(|worker| self.master_has_taken_in(worker))
            {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Opens a TLS connection with this SNI through the passthrough frontend; the backend's
    /// banner, or why there was none.
    pub fn probe(&self, sni: &str) -> Result<String, ProbeError> {
        probe(self.https, sni)
    }

    /// The PIDs of this HAProxy's master and workers (old ones included): every process
    /// whose command line reads this instance's config, as the agent finds them.
    pub fn processes(&self) -> Vec<u32> {
        autoproxy_agent::apply::processes_reading(&self.config_path())
    }

    /// Stops every process of this HAProxy: TERM, then KILL what is left after 3 s.
    pub fn stop(&self) {
        for (signal, grace) in [("-TERM", 3), ("-KILL", 2)] {
            let pids = self.processes();
            if pids.is_empty() {
                return;
            }
            let _ = Command::new("kill")
                .arg(signal)
                .args(pids.iter().map(ToString::to_string))
                .stderr(Stdio::null())
                .status();
            let deadline = Instant::now() + Duration::from_secs(grace);
            while !self.processes().is_empty() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

impl Default for Haproxy {
    fn default() -> Self {
        Haproxy::new()
    }
}

impl Drop for Haproxy {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Writes `config` as `dir/haproxy.cfg` with its map files beside it, the way the apply
/// document lays them out (the route maps of its generation, and an address map, created
/// empty if there is none yet).
pub fn install_config(dir: &Path, config: &str) {
    write_maps(dir, config);
    std::fs::write(dir.join("haproxy.cfg"), config).expect("write haproxy.cfg");
}

/// Writes the map files `config` names into `dir`, without the config itself.
pub fn write_maps(dir: &Path, config: &str) {
    let generation = autoproxy::artifact::parse_header(config).map_or(0, |h| h.generation);
    let maps = MapFiles::named_by(config, generation);
    let (routes, suffixes) = MapFiles::route_tables(config);
    let mut tables = vec![
        (maps.routes.clone(), routes),
        (maps.suffixes.clone(), suffixes),
    ];
    if let Some(path) = &maps.generation {
        tables.push((path.clone(), MapFiles::generation_table(generation)));
    }
    for (path, text) in tables {
        let path = dir.join(path);
        std::fs::create_dir_all(path.parent().expect("a map path has a directory"))
            .expect("create the map directory");
        std::fs::write(path, text).expect("write a route map");
    }
    let addresses = dir.join(&maps.addresses);
    // Only a config that routes through the address map needs one (a per-route config does
    // not, and the apply document seeds the map when it first meets one).
    if config.contains(&maps.addresses) && !addresses.exists() {
        std::fs::write(addresses, "").expect("create the address map");
    }
}

/// A route as the rules would produce it for zone `zone`: SNI `proxy.api.<zone>` to the
/// backend's loopback address.
pub fn api_route(zone: &str, backend: &Backend) -> Route {
    let zone_name = HostName::parse(zone).expect("a valid zone name");
    Route {
        rule: "api".to_owned(),
        account: crate::moto::OWN_ACCOUNT.to_owned(),
        zone_id: format!("Z{}", zone.replace('.', "").to_uppercase()),
        sni: format!("proxy.api.{zone}"),
        sni_match: SniMatch::Exact,
        back: HostName::parse(&backend.addr.ip().to_string()).expect("an IP is a host name"),
        port: 443,
        records: vec![zone_name.with_prefix("api")],
        zone_name,
    }
}

/// Renders a config with the real renderer and the default template.
pub fn render(generation: u64, routes: &[Route], options: &RenderOptions) -> String {
    render_with(
        generation,
        routes,
        options,
        &[SocketAddr::from((Ipv4Addr::LOCALHOST, 53))],
    )
}

/// `render`, with these nameservers.
pub fn render_with(
    generation: u64,
    routes: &[Route],
    options: &RenderOptions,
    resolvers: &[SocketAddr],
) -> String {
    render_template(DEFAULT_TEMPLATE, generation, routes, options, resolvers)
}

/// `routes` rendered with `template` through the real renderer.
pub fn render_template(
    template: &str,
    generation: u64,
    routes: &[Route],
    options: &RenderOptions,
    resolvers: &[SocketAddr],
) -> String {
    Renderer::new(template)
        .expect("the template compiles")
        .render(&RenderInput {
            routes,
            resolvers,
            proxies: &[],
            options,
            generation,
            generated_at: "2026-01-01T00:00:00Z",
            trigger: "test",
        })
        .expect("render")
        .text
}

/// Why a probe got no banner.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error("cannot connect to {addr}: {source}")]
    Connect {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("the connection failed: {0}")]
    Io(#[from] std::io::Error),
    #[error("HAProxy closed the connection without an answer (no route for this SNI?)")]
    Closed,
}

/// Connects, sends a ClientHello carrying `sni`, and reads the answer until the peer closes.
pub fn probe(addr: SocketAddr, sni: &str) -> Result<String, ProbeError> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2))
        .map_err(|source| ProbeError::Connect { addr, source })?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    stream.set_write_timeout(Some(Duration::from_secs(2)))?;
    stream.write_all(&client_hello(sni))?;
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer)?;
    if answer.is_empty() {
        return Err(ProbeError::Closed);
    }
    Ok(String::from_utf8_lossy(&answer).trim_end().to_owned())
}

/// A minimal TLS 1.2 ClientHello with one cipher suite and a server_name extension: all
/// HAProxy needs for `req.ssl_hello_type 1` and `req.ssl_sni`.
pub fn client_hello(sni: &str) -> Vec<u8> {
    let name = sni.as_bytes();
    let len16 = |n: usize| u16::try_from(n).expect("short").to_be_bytes();

    let mut server_name = vec![0u8]; // host_name
    server_name.extend(len16(name.len()));
    server_name.extend(name);
    let mut server_name_list = len16(server_name.len()).to_vec();
    server_name_list.extend(server_name);
    let mut extensions = vec![0, 0]; // server_name
    extensions.extend(len16(server_name_list.len()));
    extensions.extend(server_name_list);

    let mut hello = vec![3, 3]; // TLS 1.2
    hello.extend([0x5a; 32]); // random
    hello.push(0); // no session id
    hello.extend([0, 2, 0x00, 0x2f]); // one suite: TLS_RSA_WITH_AES_128_CBC_SHA
    hello.extend([1, 0]); // null compression
    hello.extend(len16(extensions.len()));
    hello.extend(extensions);

    let mut handshake = vec![1]; // client_hello
    handshake.extend(&u32::try_from(hello.len()).expect("short").to_be_bytes()[1..]);
    handshake.extend(hello);

    let mut record = vec![22, 3, 1]; // handshake, TLS 1.0 record version
    record.extend(len16(handshake.len()));
    record.extend(handshake);
    record
}
