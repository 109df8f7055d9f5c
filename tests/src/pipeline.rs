//! The whole pipeline on one machine, shared by `make demo` (`src/bin/demo.rs`) and the
//! end-to-end test (`tests/it/e2e.rs`):
//!
//! Route53 in moto (two accounts) ─▶ autoproxy-generate ─▶ haproxy.cfg in moto's S3
//! ─▶ autoproxy-configure ─▶ `ssm:SendCommand` recorded by moto ─▶ the SSM-agent stand-in runs
//! the apply document from template.yaml with that command's parameters ─▶ a real HAProxy on
//! loopback ─▶ TLS backends (`openssl s_server`, one certificate per backend).
//!
//! Names resolve the way they do in the VPC: a dnsmasq on a loopback port serves the Route53
//! records of both accounts (regenerated whenever the estate changes), plus the names AWS
//! itself answers for (the ELBs, the peering proxy). autoproxy-resolver (the program the apply
//! document installs on an instance) resolves the routes' names through it into HAProxy's
//! address map, and the client resolves `proxy.api.<zone>` through it before connecting.
//!
//! moto runs nothing for `SendCommand`, so the stand-in reads the command back (`ListCommands`:
//! document and parameters) and runs it; both moto instances tagged as peering proxies are
//! served by the one local HAProxy, so the second run finds the generation installed and
//! skips, as an instance that already converged does.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use aws_config::SdkConfig;
use aws_sdk_route53::types::RrType;
use serde_json::{Value, json};

use crate::estate::{self, Account, Record, ZoneSpec};
use crate::moto::{Moto, OWN_ACCOUNT};
use crate::proxy::Haproxy;
use crate::resolver::{Knobs, Resolver as AddressAgent};
use crate::ssm_agent::{AgentError, Document, Run};

/// The name every rule CNAME must point at.
pub const PROXY_HOSTNAME: &str = "peering-proxy.tools.example.com";
/// A proxy that is not ours: zones pointing there must not match.
pub const OTHER_PROXY: &str = "old-proxy.tools.example.com";
/// The member account scanned through an assumed role.
pub const MEMBER_ACCOUNT: &str = "210987654321";
pub const BUCKET: &str = "autoproxy-config-demo";
pub const CONFIG_KEY: &str = "haproxy/haproxy.cfg";
/// The apply document's name in moto's SSM.
pub const DOCUMENT: &str = "autoproxy-apply-config";
pub const TAG_KEY: &str = "Role";
pub const TAG_VALUE: &str = "peering-proxy";
/// Peering-proxy instances created in moto's EC2.
pub const INSTANCES: usize = 2;
/// The address the peering proxy's name resolves to.
pub const PROXY_IP: Ipv4Addr = Ipv4Addr::LOCALHOST;
/// How long an apply may run.
const APPLY_TIMEOUT: Duration = Duration::from_secs(120);

/// A Kubernetes cluster of the sample estate: its private zone carries both rules' records,
/// its API server and its internal ingress are TLS backends on their own loopback addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cluster {
    pub name: &'static str,
    pub account: &'static str,
    /// Where its `proxy.api` and `*.int` CNAMEs point.
    pub proxy: &'static str,
    /// Distinct per cluster: the backends' last address bytes derive from it.
    pub index: u8,
}

impl Cluster {
    pub fn zone(&self) -> String {
        format!("{}.example.internal", self.name)
    }

    /// The SNI of the Kubernetes API rule.
    pub fn api_sni(&self) -> String {
        format!("proxy.api.{}", self.zone())
    }

    /// An SNI the internal-ingress rule covers (an app under `*.int`).
    pub fn ingress_sni(&self) -> String {
        format!("demo.int.{}", self.zone())
    }

    /// The API server's name, which is also its certificate's CN.
    pub fn api_backend(&self) -> String {
        format!("api.{}", self.zone())
    }

    /// The internal ingress' name, which is also its certificate's CN.
    pub fn ingress_backend(&self) -> String {
        format!("ingress-int.{}", self.zone())
    }

    pub fn api_ip(&self) -> Ipv4Addr {
        Ipv4Addr::new(127, 0, 0, 10 + 2 * self.index)
    }

    pub fn ingress_ip(&self) -> Ipv4Addr {
        Ipv4Addr::new(127, 0, 0, 11 + 2 * self.index)
    }

    /// The internal ELB in front of the ingress controller (answered by the VPC resolver).
    pub fn elb(&self) -> String {
        format!(
            "internal-k8s-{}-ingress.us-east-1.elb.amazonaws.com",
            self.name
        )
    }

    /// The zone's records: both rules, pointing at `self.proxy`.
    pub fn records(&self) -> Vec<Record> {
        let zone = self.zone();
        vec![
            Record::a(format!("api.{zone}"), self.api_ip().to_string()),
            Record::cname(format!("proxy.api.{zone}"), self.proxy),
            Record::cname(format!("*.int.{zone}"), self.proxy),
            Record::cname(format!("ingress-int.{zone}"), self.elb()),
        ]
    }
}

/// Two clusters in the own account, one in the member account.
pub const PROD: Cluster = Cluster {
    name: "prod",
    account: OWN_ACCOUNT,
    proxy: PROXY_HOSTNAME,
    index: 0,
};
pub const STAGING: Cluster = Cluster {
    name: "staging",
    account: OWN_ACCOUNT,
    proxy: PROXY_HOSTNAME,
    index: 1,
};
pub const PAYMENTS: Cluster = Cluster {
    name: "payments",
    account: MEMBER_ACCOUNT,
    proxy: PROXY_HOSTNAME,
    index: 2,
};
/// A zone whose CNAMEs point at another proxy: it must never be routed.
pub const LEGACY: Cluster = Cluster {
    name: "legacy",
    account: OWN_ACCOUNT,
    proxy: OTHER_PROXY,
    index: 3,
};
/// Added while the pipeline runs, in the member account.
pub const ANALYTICS: Cluster = Cluster {
    name: "analytics",
    account: MEMBER_ACCOUNT,
    proxy: PROXY_HOSTNAME,
    index: 4,
};
/// Every cluster that has backends (all of them from the start: the services exist, only
/// their DNS comes and goes).
pub const ALL: [Cluster; 5] = [PROD, STAGING, PAYMENTS, LEGACY, ANALYTICS];
/// The clusters seeded at the start.
pub const INITIAL: [Cluster; 4] = [PROD, STAGING, PAYMENTS, LEGACY];

/// Why a step of the pipeline failed.
#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    #[error(transparent)]
    Estate(#[from] estate::EstateError),
    #[error(transparent)]
    Agent(#[from] AgentError),
    #[error("{what}: {detail}")]
    Step { what: String, detail: String },
}

// By value: every caller hands over an error it is done with (`map_err(|e| step_error(.., e))`).
#[allow(clippy::needless_pass_by_value)]
fn step_error(what: impl Into<String>, detail: impl ToString) -> PipelineError {
    PipelineError::Step {
        what: what.into(),
        detail: detail.to_string(),
    }
}

// ---------------------------------------------------------------------------------------
// Processes: each in its own process group, registered so an interrupt can stop them all.

/// What an interrupt must stop: process groups and HAProxy directories (HAProxy daemonises
/// into its own session; its master's pid file is in its directory).
#[derive(Debug)]
enum Started {
    Group(u32),
    Pid(u32),
    Haproxy(PathBuf),
}

static STARTED: Mutex<Vec<Started>> = Mutex::new(Vec::new());

fn register(started: Started) {
    STARTED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .push(started);
}

/// Stops everything the pipeline started (for Ctrl-C: the normal path stops each piece when
/// it is dropped). Safe to call twice.
pub fn stop_everything() {
    let started = std::mem::take(
        &mut *STARTED
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner),
    );
    for item in started.iter().rev() {
        let target = match item {
            Started::Group(pgid) => format!("-{pgid}"),
            Started::Pid(pid) => pid.to_string(),
            Started::Haproxy(dir) => match std::fs::read_to_string(dir.join("haproxy.pid")) {
                Ok(pid) => pid.trim().to_owned(),
                Err(_) => continue,
            },
        };
        let _ = Command::new("kill")
            .args(["-TERM", "--", &target])
            .stderr(Stdio::null())
            .status();
    }
}

/// A child process leading its own process group; the group is killed on drop.
#[derive(Debug)]
struct Spawned {
    child: Child,
}

impl Spawned {
    fn start(mut command: Command, what: &str, log: &Path) -> Result<Spawned, PipelineError> {
        let out = std::fs::File::create(log)
            .map_err(|e| step_error(format!("create {}", log.display()), e))?;
        let err = out
            .try_clone()
            .map_err(|e| step_error(format!("create {}", log.display()), e))?;
        let child = command
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .process_group(0)
            .spawn()
            .map_err(|e| step_error(format!("start {what}"), e))?;
        register(Started::Group(child.id()));
        Ok(Spawned { child })
    }

    fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", "--", &format!("-{}", self.child.id())])
            .stderr(Stdio::null())
            .status();
        let deadline = Instant::now() + Duration::from_secs(3);
        while self.alive() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        if self.alive() {
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{}", self.child.id())])
                .stderr(Stdio::null())
                .status();
            let _ = self.child.wait();
        }
    }
}

/// Runs a command to its end within `timeout`; its stdout, or why not.
fn run_bounded(
    mut command: Command,
    what: &str,
    timeout: Duration,
) -> Result<String, PipelineError> {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .map_err(|e| step_error(format!("run {what}"), e))?;
    let (mut stdout, mut stderr) = (child.stdout.take(), child.stderr.take());
    let out = std::thread::spawn(move || {
        let mut text = String::new();
        if let Some(pipe) = stdout.as_mut() {
            let _ = pipe.read_to_string(&mut text);
        }
        text
    });
    let err = std::thread::spawn(move || {
        let mut text = String::new();
        if let Some(pipe) = stderr.as_mut() {
            let _ = pipe.read_to_string(&mut text);
        }
        text
    });
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
            _ => {
                let _ = Command::new("kill")
                    .args(["-KILL", "--", &format!("-{}", child.id())])
                    .status();
                let _ = child.wait();
                return Err(step_error(what, format!("no answer within {timeout:?}")));
            }
        }
    };
    let stdout = out.join().unwrap_or_default();
    let stderr = err.join().unwrap_or_default();
    if status.success() {
        Ok(stdout)
    } else {
        Err(step_error(
            what,
            format!("{status}: {}{}", stderr.trim(), stdout.trim()),
        ))
    }
}

fn wait_listening(addr: SocketAddr, what: &str, timeout: Duration) -> Result<(), PipelineError> {
    let deadline = Instant::now() + timeout;
    while TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
        if Instant::now() >= deadline {
            return Err(step_error(
                what,
                format!("not listening on {addr} after {timeout:?}"),
            ));
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// The resolver.

/// dnsmasq on a loopback port: the VPC resolver. Its hosts file is rewritten and re-read
/// (SIGHUP) whenever Route53 changes.
#[derive(Debug)]
pub struct Resolver {
    process: Spawned,
    pub addr: SocketAddr,
    hosts: PathBuf,
    serial: u16,
}

/// A name whose answer changes with every reload, so a reload can be waited for.
const SERIAL_NAME: &str = "serial.resolver.invalid";

impl Resolver {
    pub fn start(
        dir: &Path,
        hosts: &BTreeMap<String, Ipv4Addr>,
    ) -> Result<Resolver, PipelineError> {
        let path = dir.join("hosts");
        let mut last = None;
        for _attempt in 0..10 {
            let port = free_udp_and_tcp_port()?;
            let resolver = Resolver {
                addr: SocketAddr::from((Ipv4Addr::LOCALHOST, port)),
                hosts: path.clone(),
                serial: 0,
                process: {
                    write_hosts(&path, hosts, 0)?;
                    let user = whoami();
                    let mut command = Command::new("dnsmasq");
                    command.args([
                        "--no-daemon",
                        "--conf-file=/dev/null",
                        &format!("--port={port}"),
                        "--listen-address=127.0.0.1",
                        "--bind-interfaces",
                        "--no-resolv",
                        "--no-hosts",
                        "--pid-file=",
                        &format!("--user={user}"),
                        &format!("--addn-hosts={}", path.display()),
                    ]);
                    Spawned::start(command, "dnsmasq", &dir.join("dnsmasq.log"))?
                },
            };
            if resolver.wait_serial(Duration::from_secs(3)) {
                return Ok(resolver);
            }
            last = Some(std::fs::read_to_string(dir.join("dnsmasq.log")).unwrap_or_default());
        }
        Err(step_error(
            "start dnsmasq",
            format!("it never answered: {}", last.unwrap_or_default()),
        ))
    }

    /// Replaces the names it serves and waits until it answers with them.
    pub fn reload(&mut self, hosts: &BTreeMap<String, Ipv4Addr>) -> Result<(), PipelineError> {
        self.serial = self.serial.wrapping_add(1);
        write_hosts(&self.hosts, hosts, self.serial)?;
        let _ = Command::new("kill")
            .args(["-HUP", &self.process.child.id().to_string()])
            .status();
        if self.wait_serial(Duration::from_secs(3)) {
            Ok(())
        } else {
            Err(step_error(
                "reload dnsmasq",
                "the new hosts file was not read within 3 s",
            ))
        }
    }

    fn wait_serial(&self, timeout: Duration) -> bool {
        let want = serial_ip(self.serial);
        let deadline = Instant::now() + timeout;
        loop {
            if lookup(self.addr, SERIAL_NAME) == Some(want) {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn lookup(&self, name: &str) -> Option<Ipv4Addr> {
        lookup(self.addr, name)
    }

    /// The file it serves (for a person to read).
    pub fn hosts_path(&self) -> &Path {
        &self.hosts
    }
}

fn serial_ip(serial: u16) -> Ipv4Addr {
    let [hi, lo] = serial.to_be_bytes();
    Ipv4Addr::new(127, 254, hi, lo)
}

fn write_hosts(
    path: &Path,
    hosts: &BTreeMap<String, Ipv4Addr>,
    serial: u16,
) -> Result<(), PipelineError> {
    let mut text = format!(
        "# the VPC resolver's view, generated from moto's Route53 (both accounts)\n{} {SERIAL_NAME}\n",
        serial_ip(serial)
    );
    for (name, ip) in hosts {
        text.push_str(&format!("{ip} {name}\n"));
    }
    let temp = path.with_extension("new");
    std::fs::write(&temp, text).map_err(|e| step_error("write the hosts file", e))?;
    std::fs::rename(&temp, path).map_err(|e| step_error("write the hosts file", e))
}

fn whoami() -> String {
    Command::new("id")
        .arg("-un")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "nobody".to_owned())
}

fn free_udp_and_tcp_port() -> Result<u16, PipelineError> {
    for _ in 0..50 {
        let udp = UdpSocket::bind("127.0.0.1:0").map_err(|e| step_error("find a port", e))?;
        let port = udp
            .local_addr()
            .map_err(|e| step_error("find a port", e))?
            .port();
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return Ok(port);
        }
    }
    Err(step_error(
        "find a port",
        "no loopback port free for both UDP and TCP",
    ))
}

/// One A query over UDP; the first address of the answer.
pub fn lookup(server: SocketAddr, name: &str) -> Option<Ipv4Addr> {
    let socket = UdpSocket::bind("127.0.0.1:0").ok()?;
    socket
        .set_read_timeout(Some(Duration::from_millis(500)))
        .ok()?;
    let id: u16 = 0x4150;
    let mut query = Vec::with_capacity(64);
    query.extend_from_slice(&id.to_be_bytes());
    query.extend_from_slice(&[0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0]);
    for label in name.trim_end_matches('.').split('.') {
        query.push(u8::try_from(label.len()).ok()?);
        query.extend_from_slice(label.as_bytes());
    }
    query.extend_from_slice(&[0, 0, 1, 0, 1]);
    socket.send_to(&query, server).ok()?;
    let mut answer = [0u8; 1500];
    let len = socket.recv(&mut answer).ok()?;
    let answer = &answer[..len];
    if len < 12 || answer[..2] != id.to_be_bytes() || answer[3] & 0x0f != 0 {
        return None;
    }
    let count = u16::from_be_bytes([answer[6], answer[7]]);
    // Skip the question (our own, uncompressed) then walk the answers.
    let mut at = 12 + query.len() - 12;
    for _ in 0..count {
        at = skip_name(answer, at)?;
        let fixed = answer.get(at..at + 10)?;
        let rtype = u16::from_be_bytes([fixed[0], fixed[1]]);
        let rdlen = usize::from(u16::from_be_bytes([fixed[8], fixed[9]]));
        at += 10;
        let data = answer.get(at..at + rdlen)?;
        if rtype == 1 && rdlen == 4 {
            return Some(Ipv4Addr::new(data[0], data[1], data[2], data[3]));
        }
        at += rdlen;
    }
    None
}

fn skip_name(packet: &[u8], mut at: usize) -> Option<usize> {
    loop {
        let len = *packet.get(at)?;
        match len {
            0 => return Some(at + 1),
            l if l & 0xc0 == 0xc0 => return Some(at + 2),
            l => at += 1 + usize::from(l),
        }
    }
}

/// The names the VPC resolver answers: every A and CNAME of every zone in moto's Route53 for
/// these accounts, CNAMEs followed to an address (through the other records, or the names AWS
/// answers for itself: the ELBs and the peering proxy). A wildcard `*.x` is served as the
/// sample app name `demo.x` (a hosts file has no wildcards).
pub async fn vpc_names(accounts: &[&Account]) -> Result<BTreeMap<String, Ipv4Addr>, PipelineError> {
    enum Target {
        Ip(Ipv4Addr),
        Name(String),
    }
    let clean = |name: &str| {
        let name = name
            .trim_end_matches('.')
            .to_ascii_lowercase()
            .replace("\\052", "*");
        match name.strip_prefix("*.") {
            Some(rest) => format!("demo.{rest}"),
            None => name,
        }
    };
    let mut records: BTreeMap<String, Target> = BTreeMap::new();
    records.insert(PROXY_HOSTNAME.to_owned(), Target::Ip(PROXY_IP));
    for cluster in ALL {
        records.insert(cluster.elb(), Target::Ip(cluster.ingress_ip()));
    }
    for account in accounts {
        let zones = account
            .route53()
            .list_hosted_zones()
            .into_paginator()
            .items()
            .send()
            .collect::<Result<Vec<_>, _>>()
            .await
            .map_err(|e| {
                step_error(
                    "ListHostedZones",
                    aws_sdk_route53::error::DisplayErrorContext(e),
                )
            })?;
        for zone in zones {
            let id = autoproxy::route53::bare_zone_id(zone.id()).to_owned();
            for set in account.record_sets(&id).await? {
                let name = clean(set.name());
                let first = set.resource_records().first().map(|r| r.value().to_owned());
                let target = match (set.r#type(), first) {
                    (RrType::A, Some(ip)) => ip.parse().ok().map(Target::Ip),
                    (RrType::A, None) => set
                        .alias_target()
                        .map(|alias| Target::Name(clean(alias.dns_name()))),
                    (RrType::Cname, Some(target)) => Some(Target::Name(clean(&target))),
                    _ => None,
                };
                if let Some(target) = target {
                    records.insert(name, target);
                }
            }
        }
    }
    let mut names = BTreeMap::new();
    for name in records.keys() {
        let mut here = name;
        for _hop in 0..8 {
            match records.get(here) {
                Some(Target::Ip(ip)) => {
                    names.insert(name.clone(), *ip);
                    break;
                }
                Some(Target::Name(next)) => here = next,
                None => break,
            }
        }
    }
    Ok(names)
}

// ---------------------------------------------------------------------------------------
// Backends and the client.

/// One `openssl s_server` per backend, each on its own loopback address and all on one
/// port, each with a self-signed certificate whose CN is the backend's name: the client
/// tells which backend answered from the certificate it is shown.
#[derive(Debug)]
pub struct TlsBackends {
    pub port: u16,
    processes: Vec<Spawned>,
}

impl TlsBackends {
    /// `backends`: (name = CN, address).
    pub fn start(
        dir: &Path,
        backends: &[(String, Ipv4Addr)],
    ) -> Result<TlsBackends, PipelineError> {
        let certs = dir.join("certs");
        std::fs::create_dir_all(&certs).map_err(|e| step_error("create the certs dir", e))?;
        for (name, _) in backends {
            let mut command = Command::new("openssl");
            command.args([
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
            ]);
            command.args(["-nodes", "-days", "2", "-subj", &format!("/CN={name}")]);
            command
                .arg("-keyout")
                .arg(certs.join(format!("{name}.key")));
            command.arg("-out").arg(certs.join(format!("{name}.crt")));
            run_bounded(command, "openssl req", Duration::from_secs(20))?;
        }
        let ips: Vec<Ipv4Addr> = backends.iter().map(|(_, ip)| *ip).collect();
        let port = shared_port(&ips)?;
        let mut processes = Vec::new();
        for (name, ip) in backends {
            let mut command = Command::new("openssl");
            command.args(["s_server", "-accept", &format!("{ip}:{port}"), "-www"]);
            command.arg("-cert").arg(certs.join(format!("{name}.crt")));
            command.arg("-key").arg(certs.join(format!("{name}.key")));
            let log = dir.join(format!("backend-{name}.log"));
            processes.push(Spawned::start(
                command,
                &format!("openssl s_server {name}"),
                &log,
            )?);
        }
        for (name, ip) in backends {
            wait_listening(
                SocketAddr::from((*ip, port)),
                &format!("backend {name}"),
                Duration::from_secs(10),
            )?;
        }
        Ok(TlsBackends { port, processes })
    }

    /// How many are running.
    pub fn running(&mut self) -> usize {
        self.processes
            .iter_mut()
            .map(Spawned::alive)
            .filter(|alive| *alive)
            .count()
    }
}

fn shared_port(ips: &[Ipv4Addr]) -> Result<u16, PipelineError> {
    for _ in 0..50 {
        let port = crate::moto::free_port();
        let all_free = ips.iter().all(|ip| TcpListener::bind((*ip, port)).is_ok());
        if all_free {
            return Ok(port);
        }
    }
    Err(step_error(
        "find a port",
        "no port free on every backend address",
    ))
}

/// What a TLS client saw: where the name resolved and which backend's certificate it got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probe {
    pub sni: String,
    /// The address the SNI name resolved to through the resolver, if it did.
    pub resolved: Option<Ipv4Addr>,
    /// The CN of the certificate presented; `None` when HAProxy closed the connection.
    pub backend: Option<String>,
}

impl std::fmt::Display for Probe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let resolved = self
            .resolved
            .map_or("does not resolve".to_owned(), |ip| format!("→ {ip}"));
        match &self.backend {
            Some(cn) => write!(f, "{} ({resolved}) reached backend {cn}", self.sni),
            None => write!(
                f,
                "{} ({resolved}): no route, HAProxy closed the connection",
                self.sni
            ),
        }
    }
}

/// Connects with `openssl s_client` and returns the CN of the certificate presented.
pub fn tls_peer(addr: SocketAddr, sni: &str) -> Option<String> {
    let mut command = Command::new("openssl");
    command.args([
        "s_client",
        "-connect",
        &addr.to_string(),
        "-servername",
        sni,
    ]);
    let output = match run_bounded(command, "openssl s_client", Duration::from_secs(10)) {
        Ok(out) => out,
        Err(PipelineError::Step { detail, .. }) => detail,
        Err(_) => return None,
    };
    output.lines().find_map(|line| {
        let subject = line.strip_prefix("subject=")?;
        subject
            .split(',')
            .find_map(|part| {
                part.trim()
                    .strip_prefix("CN")?
                    .trim_start()
                    .strip_prefix('=')
            })
            .map(|cn| cn.trim().to_owned())
    })
}

// ---------------------------------------------------------------------------------------
// The functions: in-process handlers (tests) or the Lambda runtime (`cargo lambda watch`).

/// How the two functions run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Runner {
    /// `autoproxy_generate::handler::handle` and `autoproxy_configure::handler::handle`,
    /// called directly (no cargo-lambda: the test needs only cargo).
    InProcess,
    /// The real binaries under `cargo lambda watch`, invoked with `cargo lambda invoke`.
    LambdaRuntime,
}

/// `cargo lambda watch` serving both functions.
#[derive(Debug)]
struct LambdaWatch {
    /// Held for its drop: stops the runtime and the functions.
    _process: Spawned,
    port: u16,
}

impl LambdaWatch {
    fn start(dir: &Path, env: &[(String, String)]) -> Result<LambdaWatch, PipelineError> {
        let port = crate::moto::free_port();
        let mut command = Command::new(crate::tool("cargo-lambda"));
        // --ignore-changes: other edits in the checkout must not restart a function mid-run.
        // --timeout 900: the functions' Timeout in template.yaml. cargo-lambda passes the
        // timeout itself as the invocation's deadline (900,000 ms: a time in 1970), so both
        // functions take a deadline already past as none: the generator sweeps without a time
        // budget and the configure function follows its command for up to 890 s.
        command
            .args([
                "lambda",
                "watch",
                "--ignore-changes",
                "--timeout",
                "900",
                "-A",
                "127.0.0.1",
                "-P",
                &port.to_string(),
            ])
            .current_dir(crate::root())
            .env("CARGO_TERM_COLOR", "never")
            .envs(env.iter().map(|(k, v)| (k, v)));
        let process = Spawned::start(command, "cargo lambda watch", &dir.join("lambda.log"))?;
        wait_listening(
            SocketAddr::from((Ipv4Addr::LOCALHOST, port)),
            "cargo lambda watch",
            Duration::from_secs(30),
        )?;
        Ok(LambdaWatch {
            _process: process,
            port,
        })
    }

    fn invoke(
        &self,
        dir: &Path,
        function: &str,
        payload_file: &Path,
    ) -> Result<Value, PipelineError> {
        let _ = dir;
        let mut command = Command::new(crate::tool("cargo-lambda"));
        command
            .args([
                "lambda",
                "invoke",
                function,
                "-A",
                "127.0.0.1",
                "-P",
                &self.port.to_string(),
            ])
            .arg("--data-file")
            .arg(payload_file)
            .args(["--output-format", "json"])
            .current_dir(crate::root())
            .env("CARGO_TERM_COLOR", "never");
        // The first invocation may compile the function (the demo builds it beforehand).
        let out = run_bounded(
            command,
            &format!("cargo lambda invoke {function}"),
            Duration::from_secs(600),
        )?;
        serde_json::from_str(out.trim())
            .map_err(|e| step_error(format!("{function} answered"), format!("{e}: {out}")))
    }
}

// ---------------------------------------------------------------------------------------
// The pipeline.

/// The command autoproxy-configure sent, as moto recorded it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SentCommand {
    pub command_id: String,
    pub document: String,
    pub parameters: BTreeMap<String, String>,
    pub targets: Vec<String>,
    pub instance_ids: Vec<String>,
}

/// One pass of the pipeline for one event.
#[derive(Debug)]
pub struct Rollout {
    /// The generator's summary.
    pub summary: Value,
    /// The generation of the config published, read back from S3 (the summary does not carry
    /// it).
    pub generation: Option<u64>,
    pub generate_time: Duration,
    /// The configure function's outcome, when a config was published.
    pub outcome: Option<Value>,
    pub configure_time: Duration,
    pub command: Option<SentCommand>,
    /// The apply document's runs, per instance, in order (the first failure stops the rest).
    pub runs: Vec<(String, Run)>,
    pub apply_time: Duration,
}

impl Rollout {
    pub fn published(&self) -> bool {
        self.summary["published"] == json!(true)
    }

    /// The rule count of the rendered config.
    pub fn rules(&self) -> u64 {
        self.summary["rules"].as_u64().unwrap_or(0)
    }

    pub fn applied(&self) -> bool {
        !self.runs.is_empty() && self.runs.iter().all(|(_, run)| run.success())
    }
}

/// Everything running, wired together.
#[derive(Debug)]
pub struct Pipeline {
    pub dir: PathBuf,
    pub runner: Runner,
    pub haproxy: Haproxy,
    /// autoproxy-resolver, keeping HAProxy's address map.
    pub addresses: AddressAgent,
    pub resolver: Resolver,
    pub backends: TlsBackends,
    pub document: Document,
    pub instance_ids: Vec<String>,
    /// Zone ids of the clusters that exist now.
    pub zones: BTreeMap<&'static str, String>,
    /// Environment of both functions (moto endpoint and credentials, settings).
    pub env: Vec<(String, String)>,
    pub own: Account,
    pub member: Account,
    pub sdk: SdkConfig,
    lambda: Option<LambdaWatch>,
    events: AtomicU32,
    // Last: dropped after everything that talks to it.
    pub moto: Moto,
    _temp: Option<tempfile::TempDir>,
}

impl Pipeline {
    /// Starts everything. `dir` holds the run's files (a temp dir when `None`); `say` gets a
    /// line per step.
    pub async fn start(
        runner: Runner,
        dir: Option<PathBuf>,
        say: &dyn Fn(&str),
    ) -> Result<Pipeline, PipelineError> {
        let (dir, temp) = match dir {
            Some(dir) => {
                let _ = std::fs::remove_dir_all(&dir);
                std::fs::create_dir_all(&dir).map_err(|e| step_error("create the work dir", e))?;
                (dir, None)
            }
            None => {
                let temp = tempfile::Builder::new()
                    .prefix("autoproxy-e2e-")
                    .tempdir()
                    .map_err(|e| step_error("create a temp dir", e))?;
                (temp.path().to_owned(), Some(temp))
            }
        };
        std::fs::create_dir_all(dir.join("events"))
            .map_err(|e| step_error("create the work dir", e))?;

        let moto = Moto::start();
        register(Started::Pid(moto.pid()));
        say(&format!(
            "moto (S3, Route53, STS, SSM, EC2) on {}",
            moto.endpoint()
        ));
        let sdk = moto.sdk_config().await;

        estate::versioned_bucket(&sdk, BUCKET).await?;
        let own = Account::own(&sdk);
        let member = Account::assume(&sdk, MEMBER_ACCOUNT).await?;
        let mut zones = BTreeMap::new();
        for cluster in INITIAL {
            let account = if cluster.account == OWN_ACCOUNT {
                &own
            } else {
                &member
            };
            let seeded = account
                .seed_zone(ZoneSpec::private(cluster.zone(), cluster.records()))
                .await?;
            zones.insert(cluster.name, seeded.id);
        }
        say(&format!(
            "estate: {} in account {OWN_ACCOUNT}, {} in account {MEMBER_ACCOUNT} (assumed role), \
             {} pointing at {OTHER_PROXY} (must not match); bucket s3://{BUCKET} (versioned)",
            names_in(OWN_ACCOUNT, &[PROD, STAGING]),
            names_in(MEMBER_ACCOUNT, &[PAYMENTS]),
            LEGACY.zone(),
        ));

        // The stack deployed for the HAProxy on this machine: its ConfigPath and ReloadCommand
        // are the only ones the document accepts.
        let haproxy = Haproxy::new();
        register(Started::Haproxy(haproxy.dir().to_owned()));
        let document = haproxy.apply_document()?;
        create_document(&sdk, &document).await?;
        let instance_ids = run_instances(&moto)?;
        say(&format!(
            "fleet: SSM document {DOCUMENT} (ApplyConfigDocument from template.yaml); EC2 \
             instances {} tagged {TAG_KEY}={TAG_VALUE}",
            instance_ids.join(", ")
        ));

        let resolver = Resolver::start(&dir, &vpc_names(&[&own, &member]).await?)?;
        say(&format!(
            "VPC resolver: dnsmasq on {} serving {}",
            resolver.addr,
            resolver.hosts_path().display()
        ));

        let mut list = Vec::new();
        for cluster in ALL {
            list.push((cluster.api_backend(), cluster.api_ip()));
            list.push((cluster.ingress_backend(), cluster.ingress_ip()));
        }
        let backends = TlsBackends::start(&dir, &list)?;
        say(&format!(
            "backends: {} openssl s_server on 127.0.0.10-{}:{} (certificate CN = backend name)",
            list.len(),
            list.last().map_or(0, |(_, ip)| ip.octets()[3]),
            backends.port
        ));

        say(&format!(
            "peering proxy: HAProxy (master-worker) prepared in {}; TLS on {}; not running \
             until the first config arrives",
            haproxy.dir().display(),
            haproxy.https
        ));

        // What the apply document installs as a service on an instance: it resolves the routes'
        // names through the VPC resolver into the address map HAProxy routes with.
        let addresses = AddressAgent::start(
            &haproxy.config_path(),
            Knobs {
                refresh_seconds: 5.0,
                ..Knobs::default()
            },
        );
        register(Started::Pid(addresses.pid()));
        say(&format!(
            "address agent: autoproxy-resolver (from the apply document) on {}, every name \
             resolved through {} every 5 s",
            haproxy.config_path().display(),
            resolver.addr
        ));

        let options = haproxy.options(backends.port);
        let mut env = moto.env();
        env.extend(
            [
                ("CONFIG_BUCKET", BUCKET.to_owned()),
                ("CONFIG_KEY", CONFIG_KEY.to_owned()),
                ("PEERING_PROXY_HOSTNAME", PROXY_HOSTNAME.to_owned()),
                ("ACCOUNT_ROLE_ARNS", estate::role_arn(MEMBER_ACCOUNT)),
                ("DNS_RESOLVERS", resolver.addr.to_string()),
                (
                    "RENDER_OPTIONS",
                    serde_json::to_string(&options).map_err(|e| step_error("RENDER_OPTIONS", e))?,
                ),
                ("ROUTE53_REQUESTS_PER_SECOND", "50".to_owned()),
                ("APPLY_DOCUMENT", DOCUMENT.to_owned()),
                ("TARGET_TAG_KEY", TAG_KEY.to_owned()),
                ("TARGET_TAG_VALUE", TAG_VALUE.to_owned()),
                ("MAX_CONCURRENCY", "1".to_owned()),
                ("MAX_ERRORS", "0".to_owned()),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v)),
        );
        let lambda = match runner {
            Runner::InProcess => None,
            Runner::LambdaRuntime => {
                let watch = LambdaWatch::start(&dir, &env)?;
                say(&format!(
                    "Lambda runtime: cargo lambda watch on 127.0.0.1:{} (function logs: {})",
                    watch.port,
                    dir.join("lambda.log").display()
                ));
                Some(watch)
            }
        };
        Ok(Pipeline {
            dir,
            runner,
            haproxy,
            addresses,
            resolver,
            backends,
            document,
            instance_ids,
            zones,
            env,
            own,
            member,
            sdk,
            lambda,
            events: AtomicU32::new(0),
            moto,
            _temp: temp,
        })
    }

    fn account(&self, account: &str) -> &Account {
        if account == OWN_ACCOUNT {
            &self.own
        } else {
            &self.member
        }
    }

    /// Runs one function with `payload`; its JSON result, or its error.
    pub async fn invoke(
        &self,
        function: &str,
        payload: &Value,
        extra_env: &[(&str, &str)],
    ) -> Result<Value, PipelineError> {
        let n = self.events.fetch_add(1, Ordering::SeqCst) + 1;
        let file = self
            .dir
            .join("events")
            .join(format!("{n:02}-{function}.json"));
        let text = serde_json::to_string_pretty(payload).map_err(|e| step_error("event", e))?;
        std::fs::write(&file, text).map_err(|e| step_error("write the event", e))?;
        if let Some(watch) = &self.lambda {
            if !extra_env.is_empty() {
                return Err(step_error(
                    function,
                    "per-invocation settings need the in-process runner",
                ));
            }
            return watch.invoke(&self.dir, function, &file);
        }
        let lookup = |name: &str| {
            extra_env
                .iter()
                .rev()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| (*v).to_owned())
                .or_else(|| {
                    self.env
                        .iter()
                        .find(|(k, _)| k == name)
                        .map(|(_, v)| v.clone())
                })
        };
        match function {
            "autoproxy-generate" => {
                use autoproxy_generate::handler;
                let settings = autoproxy::settings::GenerateSettings::from_lookup(lookup)
                    .map_err(|e| step_error(function, e))?;
                let deps = handler::Deps::new(settings, &self.sdk, OWN_ACCOUNT)
                    .await
                    .map_err(|e| step_error(function, e))?;
                let summary = handler::handle(&deps, payload, &handler::now_rfc3339())
                    .await
                    .map_err(|e| step_error(function, e))?;
                serde_json::to_value(summary).map_err(|e| step_error(function, e))
            }
            "autoproxy-configure" => {
                use autoproxy_configure::handler;
                let settings = autoproxy::settings::ConfigureSettings::from_lookup(lookup)
                    .map_err(|e| step_error(function, e))?;
                let deps = handler::Deps {
                    settings,
                    s3: aws_sdk_s3::Client::new(&self.sdk),
                    ssm: aws_sdk_ssm::Client::new(&self.sdk),
                    poll_every: Duration::from_millis(100),
                };
                let until = tokio::time::Instant::now() + Duration::from_secs(30);
                let outcome = handler::handle(&deps, payload, until)
                    .await
                    .map_err(|e| step_error(function, e))?;
                serde_json::to_value(outcome).map_err(|e| step_error(function, e))
            }
            other => Err(step_error(other, "no such function")),
        }
    }

    /// The whole path for one event: generate; when it published, the S3 ObjectCreated event
    /// of that version to configure; the command it sent, read back from moto; the apply
    /// document run for each targeted instance, one at a time, stopping at the first failure.
    pub async fn roll_out(
        &self,
        event: &Value,
        extra_env: &[(&str, &str)],
    ) -> Result<Rollout, PipelineError> {
        let started = Instant::now();
        let summary = self.invoke("autoproxy-generate", event, extra_env).await?;
        let generate_time = started.elapsed();
        let mut rollout = Rollout {
            summary,
            generation: None,
            generate_time,
            outcome: None,
            configure_time: Duration::ZERO,
            command: None,
            runs: Vec::new(),
            apply_time: Duration::ZERO,
        };
        if !rollout.published() {
            return Ok(rollout);
        }
        let version = rollout.summary["version_id"]
            .as_str()
            .ok_or_else(|| step_error("autoproxy-generate", "published without a version id"))?
            .to_owned();
        rollout.generation = Some(self.generation_of(&version).await?);
        let started = Instant::now();
        let outcome = self
            .invoke(
                "autoproxy-configure",
                &s3_put_event(BUCKET, CONFIG_KEY, &version),
                &[],
            )
            .await?;
        rollout.configure_time = started.elapsed();
        let command_id = outcome["dispatched"][0]["command_id"]
            .as_str()
            .ok_or_else(|| step_error("autoproxy-configure", format!("no command in {outcome}")))?
            .to_owned();
        rollout.outcome = Some(outcome);
        let command = self.sent_command(&command_id).await?;
        let started = Instant::now();
        rollout.runs = self.apply(&command)?;
        rollout.apply_time = started.elapsed();
        rollout.command = Some(command);
        Ok(rollout)
    }

    /// The configure function's fleet report (`{"fleet": true}`): which generation each
    /// instance's record says it runs against the latest config. Runs like every invocation
    /// (in process or through `cargo lambda`); the report is also left in the bucket.
    pub async fn fleet_report(&self) -> Result<Value, PipelineError> {
        self.invoke("autoproxy-configure", &json!({"fleet": true}), &[])
            .await
    }

    /// The command as moto recorded it (`ListCommands`).
    pub async fn sent_command(&self, command_id: &str) -> Result<SentCommand, PipelineError> {
        let listed = aws_sdk_ssm::Client::new(&self.sdk)
            .list_commands()
            .command_id(command_id)
            .send()
            .await
            .map_err(|e| step_error("ListCommands", aws_sdk_ssm::error::DisplayErrorContext(e)))?;
        let command = listed
            .commands()
            .first()
            .ok_or_else(|| step_error("ListCommands", format!("no command {command_id}")))?;
        let parameters = command
            .parameters()
            .map(|p| {
                p.iter()
                    .map(|(k, v)| (k.clone(), v.first().cloned().unwrap_or_default()))
                    .collect()
            })
            .unwrap_or_default();
        Ok(SentCommand {
            command_id: command_id.to_owned(),
            document: command.document_name().unwrap_or_default().to_owned(),
            parameters,
            targets: command
                .targets()
                .iter()
                .map(|t| format!("{}={}", t.key().unwrap_or_default(), t.values().join(",")))
                .collect(),
            instance_ids: command.instance_ids().to_vec(),
        })
    }

    /// The SSM agent's part: for each instance the command targets, one at a time, runs the
    /// apply document with the command's parameters (`ConfigPath` and `ReloadCommand` at
    /// their defaults, the values this stand-in stack was deployed with); stops at the first
    /// failure (`MaxErrors` 0).
    pub fn apply(&self, command: &SentCommand) -> Result<Vec<(String, Run)>, PipelineError> {
        if command.document != DOCUMENT {
            return Err(step_error(
                "apply",
                format!(
                    "expected document {DOCUMENT}, the command names {}",
                    command.document
                ),
            ));
        }
        let given: Vec<(&str, &str)> = command
            .parameters
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let mut runs = Vec::new();
        for instance in &command.instance_ids {
            // As the SSM agent does: the fleet record is named after it.
            let mut env = self.moto.env();
            env.push(("AWS_SSM_INSTANCE_ID".to_owned(), instance.clone()));
            let run = self.document.run(&given, &env, APPLY_TIMEOUT)?;
            let ok = run.success();
            runs.push((instance.clone(), run));
            if !ok {
                break;
            }
        }
        Ok(runs)
    }

    /// Re-reads Route53 into the resolver.
    pub async fn refresh_resolver(&mut self) -> Result<(), PipelineError> {
        let names = vpc_names(&[&self.own, &self.member]).await?;
        self.resolver.reload(&names)
    }

    /// Creates the cluster's zone and records; the CloudTrail event Route53 would emit for the
    /// records (`ChangeResourceRecordSets`).
    pub async fn add_cluster(&mut self, cluster: Cluster) -> Result<Value, PipelineError> {
        let seeded = self
            .account(cluster.account)
            .seed_zone(ZoneSpec::private(cluster.zone(), cluster.records()))
            .await?;
        let event = record_change_event(cluster.account, &seeded.id, &cluster.zone());
        self.zones.insert(cluster.name, seeded.id);
        self.refresh_resolver().await?;
        Ok(event)
    }

    /// Deletes the cluster's records and zone; the `DeleteHostedZone` CloudTrail event.
    pub async fn remove_cluster(&mut self, cluster: Cluster) -> Result<Value, PipelineError> {
        let id = self
            .zones
            .remove(cluster.name)
            .ok_or_else(|| step_error("remove cluster", format!("{} has no zone", cluster.name)))?;
        self.account(cluster.account).delete_zone(&id).await?;
        self.refresh_resolver().await?;
        Ok(zone_deleted_event(cluster.account, &id))
    }

    /// The generation of a version of the config, from its metadata.
    pub async fn generation_of(&self, version_id: &str) -> Result<u64, PipelineError> {
        let head = aws_sdk_s3::Client::new(&self.sdk)
            .head_object()
            .bucket(BUCKET)
            .key(CONFIG_KEY)
            .version_id(version_id)
            .send()
            .await
            .map_err(|e| {
                step_error(
                    format!("HeadObject {CONFIG_KEY} version {version_id}"),
                    aws_sdk_s3::error::DisplayErrorContext(e),
                )
            })?;
        let generation = head
            .metadata()
            .and_then(|m| m.get(autoproxy::artifact::META_GENERATION));
        generation.and_then(|g| g.parse().ok()).ok_or_else(|| {
            step_error(
                format!("HeadObject {CONFIG_KEY} version {version_id}"),
                format!("expected a numeric generation in the metadata, got {generation:?}"),
            )
        })
    }

    /// Stores an object in the config bucket (e.g. a custom template for `TEMPLATE_KEY`).
    pub async fn put_object(&self, key: &str, body: &str) -> Result<(), PipelineError> {
        aws_sdk_s3::Client::new(&self.sdk)
            .put_object()
            .bucket(BUCKET)
            .key(key)
            .body(body.as_bytes().to_vec().into())
            .send()
            .await
            .map_err(|e| {
                step_error(
                    format!("PutObject {key}"),
                    aws_sdk_s3::error::DisplayErrorContext(e),
                )
            })?;
        Ok(())
    }

    /// A client connecting as it would in the VPC: resolve the SNI name through the resolver,
    /// connect there on the proxy's TLS port with that SNI. A name that does not resolve (any
    /// more) is tried against the peering proxy anyway, as a client with a stale cache would.
    pub fn probe(&self, sni: &str) -> Probe {
        let resolved = self.resolver.lookup(sni);
        let ip = resolved
            .or_else(|| self.resolver.lookup(PROXY_HOSTNAME))
            .unwrap_or(PROXY_IP);
        let addr = SocketAddr::from((ip, self.haproxy.https.port()));
        Probe {
            sni: sni.to_owned(),
            resolved,
            backend: tls_peer(addr, sni),
        }
    }

    /// Probes until `sni` reaches `backend` (or, with `None`, until nothing answers); how
    /// long that took, or the last probe when `timeout` ran out. autoproxy-resolver sees a
    /// new config within a second and resolves its new names first.
    pub fn wait_for(
        &self,
        sni: &str,
        backend: Option<&str>,
        timeout: Duration,
    ) -> Result<Duration, Probe> {
        let started = Instant::now();
        loop {
            let probe = self.probe(sni);
            if probe.backend.as_deref() == backend {
                return Ok(started.elapsed());
            }
            if started.elapsed() >= timeout {
                return Err(probe);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The generation HAProxy runs.
    pub fn running_generation(&self) -> Option<u64> {
        self.haproxy.running_generation()
    }
}

fn names_in(account: &str, clusters: &[Cluster]) -> String {
    clusters
        .iter()
        .filter(|c| c.account == account)
        .map(Cluster::zone)
        .collect::<Vec<_>>()
        .join(" and ")
}

/// The apply document in moto's SSM, with the content CloudFormation would create from
/// template.yaml (its `!Ref`s resolved).
async fn create_document(sdk: &SdkConfig, document: &Document) -> Result<(), PipelineError> {
    let content =
        serde_yaml::to_string(&document.content).map_err(|e| step_error("document content", e))?;
    aws_sdk_ssm::Client::new(sdk)
        .create_document()
        .name(DOCUMENT)
        .document_type(aws_sdk_ssm::types::DocumentType::Command)
        .document_format(aws_sdk_ssm::types::DocumentFormat::Yaml)
        .content(content)
        .send()
        .await
        .map_err(|e| step_error("CreateDocument", aws_sdk_ssm::error::DisplayErrorContext(e)))?;
    Ok(())
}

/// The peering-proxy instances, created with the AWS CLI (no EC2 crate to compile).
fn run_instances(moto: &Moto) -> Result<Vec<String>, PipelineError> {
    let mut command = Command::new(crate::tool("aws"));
    command
        .args([
            "ec2",
            "run-instances",
            "--image-id",
            "ami-12c6146b",
            "--instance-type",
            "t3.micro",
        ])
        .args(["--count", &INSTANCES.to_string()])
        .args([
            "--tag-specifications",
            &format!("ResourceType=instance,Tags=[{{Key={TAG_KEY},Value={TAG_VALUE}}}]"),
        ])
        .args(["--query", "Instances[].InstanceId", "--output", "text"])
        .envs(moto.env());
    let out = run_bounded(command, "aws ec2 run-instances", Duration::from_secs(60))?;
    let ids: Vec<String> = out.split_whitespace().map(str::to_owned).collect();
    if ids.len() != INSTANCES {
        return Err(step_error(
            "aws ec2 run-instances",
            format!("expected {INSTANCES} ids, got {out:?}"),
        ));
    }
    Ok(ids)
}

fn event_file(name: &str) -> Value {
    let path = crate::root().join("events").join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn stamp(event: &mut Value, account: &str) {
    let now = autoproxy_generate::handler::now_rfc3339();
    event["account"] = json!(account);
    event["time"] = json!(now);
    event["detail"]["eventTime"] = json!(now);
    event["detail"]["recipientAccountId"] = json!(account);
    event["detail"]["userIdentity"]["accountId"] = json!(account);
    event["detail"]["userIdentity"]["arn"] = json!(format!(
        "arn:aws:sts::{account}:assumed-role/PlatformAdmin/platform-engineer"
    ));
}

/// `events/schedule.json`.
pub fn schedule_event() -> Value {
    event_file("schedule.json")
}

/// `events/change-resource-record-sets.json` for this zone of this account.
pub fn record_change_event(account: &str, zone_id: &str, zone: &str) -> Value {
    let text = event_file("change-resource-record-sets.json")
        .to_string()
        .replace("prod.example.internal", zone);
    let mut event: Value = serde_json::from_str(&text).unwrap_or_default();
    stamp(&mut event, account);
    event["detail"]["requestParameters"]["hostedZoneId"] = json!(zone_id);
    event
}

/// `events/delete-hosted-zone.json` for this zone of this account.
pub fn zone_deleted_event(account: &str, zone_id: &str) -> Value {
    let mut event = event_file("delete-hosted-zone.json");
    stamp(&mut event, account);
    event["detail"]["requestParameters"]["id"] = json!(zone_id);
    event
}

/// The S3 notification for one new version of the config.
pub fn s3_put_event(bucket: &str, key: &str, version_id: &str) -> Value {
    json!({"Records": [{
        "eventVersion": "2.1", "eventSource": "aws:s3", "awsRegion": crate::moto::REGION,
        "eventTime": autoproxy_generate::handler::now_rfc3339(), "eventName": "ObjectCreated:Put",
        "userIdentity": {"principalId": "AWS:AROAEXAMPLE:autoproxy-generate"},
        "requestParameters": {"sourceIPAddress": "127.0.0.1"},
        "responseElements": {},
        "s3": {"s3SchemaVersion": "1.0", "configurationId": "config-changed",
               "bucket": {"name": bucket, "arn": format!("arn:aws:s3:::{bucket}")},
               "object": {"key": key, "versionId": version_id, "sequencer": "0A"}}
    }]})
}

/// The names of the clusters HAProxy should route now.
pub fn routed(zones: &BTreeMap<&'static str, String>) -> BTreeSet<&'static str> {
    ALL.iter()
        .filter(|c| c.proxy == PROXY_HOSTNAME && zones.contains_key(c.name))
        .map(|c| c.name)
        .collect()
}
