//! The proxies the stack creates (`ProxyFleet=create`): their user data run for real on the
//! proxy-host harness (a private mount namespace, the `systemctl` stand-in, a real HAProxy,
//! moto), the association's first apply after it, the load balancer's health check (`/ready`)
//! as it sees a new instance, and the drain of a leaving one.

use std::net::{Ipv4Addr, SocketAddr};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use autoproxy::model::{Route, SniMatch};
use autoproxy::names::HostName;
use autoproxy_agent::resolve::observe::ready::WARM_UP;
use autoproxy_tests::agent::BUCKET;
use autoproxy_tests::config_bucket::InstanceBucket;
use autoproxy_tests::dns::DnsServer;
use autoproxy_tests::estate;
use autoproxy_tests::moto::Moto;
use autoproxy_tests::prometheus;
use autoproxy_tests::proxy::{self, Backends, Haproxy, HaproxyFiles, ProbeError};
use autoproxy_tests::ssm_agent::Run;
use autoproxy_tests::user_data::{self, Boot, Host};

mod cloudformation;
mod drain;
mod refresh;

const KEY: &str = "haproxy/haproxy.cfg";
const INSTANCE: &str = "i-0f1ee7b007a1e5c0d";

/// A new instance: moto with the config bucket and the published agent, an HAProxy installed
/// but not started, its host (the namespace and stand-ins), backends and the VPC's resolver.
struct Instance {
    host: Host,
    haproxy: Haproxy,
    backends: Backends,
    dns: DnsServer,
    sdk: aws_config::SdkConfig,
    rt: tokio::runtime::Runtime,
    moto: Moto,
}

/// The backend host of backend `name`.
fn host_of(name: &str) -> String {
    format!("svc-{name}.test.internal")
}

/// The SNI that routes to backend `name`.
fn sni_of(name: &str) -> String {
    format!("proxy.api.{name}.test.internal")
}

impl Instance {
    fn new(backends: &[&str]) -> Option<Instance> {
        if !user_data::run_dir_exists() {
            eprintln!("skipped: no /run/haproxy to bind over (install haproxy: .ci/tools.sh)");
            return None;
        }
        let InstanceBucket { sdk, rt, moto } = InstanceBucket::start(BUCKET);
        let haproxy = Haproxy::new();
        Some(Instance {
            host: Host::new(&haproxy),
            haproxy,
            backends: Backends::start(backends),
            dns: DnsServer::start(SocketAddr::from((Ipv4Addr::LOCALHOST, 0))).unwrap(),
            sdk,
            rt,
            moto,
        })
    }

    /// The stats listener on loopback (the bootstrap binds every address).
    fn stats(&self) -> SocketAddr {
        SocketAddr::from((Ipv4Addr::LOCALHOST, self.haproxy.stats.port()))
    }

    /// `GET path` on the stats listener, as the load balancer's health check sends it.
    fn get(&self, path: &str) -> (u16, String) {
        match prometheus::get(self.stats(), path) {
            Ok(answer) => (answer.status, answer.body),
            Err(err) => (0, err.to_string()),
        }
    }

    /// A config the generator would publish for these backends, by host name: the production
    /// stats socket and agent socket (in `/run/haproxy`), the stats listener on every address.
    fn generated(&self, generation: u64, backends: &[&str]) -> String {
        let mut options = self.haproxy.options(self.backends.port);
        options.stats_socket = format!("{}/admin.sock", user_data::RUN_DIR);
        options.agent_socket = format!("{}/autoproxy-agent.sock", user_data::RUN_DIR);
        options.stats_bind = format!(":{}", self.haproxy.stats.port());
        let routes: Vec<Route> = backends.iter().map(|name| self.route(name)).collect();
        proxy::render_with(generation, &routes, &options, &[self.dns.addr()])
    }

    fn route(&self, name: &str) -> Route {
        let zone = format!("{name}.test.internal");
        let zone_name = HostName::parse(&zone).unwrap();
        Route {
            rule: "api".to_owned(),
            account: autoproxy_tests::moto::OWN_ACCOUNT.to_owned(),
            zone_id: format!("Z{}", name.to_uppercase()),
            sni: sni_of(name),
            sni_match: SniMatch::Exact,
            back: HostName::parse(&host_of(name)).unwrap(),
            port: 443,
            records: vec![zone_name.with_prefix("api")],
            zone_name,
        }
    }

    /// `name` resolves to its backend's address.
    fn resolvable(&self, name: &str) {
        let ip = match self.backends.get(name).addr.ip() {
            std::net::IpAddr::V4(ip) => ip,
            std::net::IpAddr::V6(_) => unreachable!("backends listen on IPv4 loopback"),
        };
        self.dns.set(&host_of(name), &[ip]);
    }

    fn publish(&self, config: &str) {
        self.rt
            .block_on(estate::upload_config(&self.sdk, BUCKET, KEY, config))
            .unwrap();
    }

    /// The association's run on this instance: the apply document from template.yaml as SSM
    /// runs it (no version: the latest), in the instance's namespace.
    fn associate(&self) -> Run {
        let document = self.haproxy.apply_document().unwrap();
        let mut env = self.moto.env();
        env.push(("AWS_SSM_INSTANCE_ID".to_owned(), INSTANCE.to_owned()));
        env.extend(self.host.env());
        document
            .spawn_wrapped(
                &[("ConfigBucket", BUCKET), ("ConfigKey", KEY)],
                &env,
                &self.host.wrapper(),
            )
            .unwrap()
            .wait(Duration::from_secs(90))
    }

    /// The address service, started as the unit the apply installs starts it (systemd does
    /// not run here), in the instance's namespace.
    fn resolver(&self) -> Service {
        let agent = autoproxy_tests::agent_binary().display().to_string();
        let config = self.haproxy.config_path().display().to_string();
        let path = self.haproxy.dir().join("resolver.log");
        let log = std::fs::File::create(&path).unwrap();
        let child = self
            .host
            .in_namespace(&[&agent, "resolve", &config])
            .env("AUTOPROXY_REFRESH_SECONDS", "1")
            .env("AUTOPROXY_QUERY_TIMEOUT", "0.3")
            .env("AUTOPROXY_METRICS_SECONDS", "0")
            .stdout(Stdio::from(log.try_clone().unwrap()))
            .stderr(Stdio::from(log))
            .spawn()
            .expect("start autoproxy-agent resolve");
        Service(child, path)
    }

    /// Waits (`timeout` at most) until `/ready` answers `status` with a body that has `text`;
    /// the last answer.
    fn wait_ready(&self, status: u16, text: &str, timeout: Duration) -> (u16, String) {
        let deadline = Instant::now() + timeout;
        loop {
            let answer = self.get("/ready");
            if (answer.0 == status && answer.1.contains(text)) || Instant::now() >= deadline {
                return answer;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    #[track_caller]
    fn assert_routes(&self, name: &str) {
        match self.haproxy.probe(&sni_of(name)) {
            Ok(banner) => assert_eq!(banner, self.backends.get(name).banner()),
            Err(err) => panic!(
                "{} should serve: {err}\n{}",
                sni_of(name),
                self.haproxy.log()
            ),
        }
    }

    fn installed(&self) -> String {
        std::fs::read_to_string(self.haproxy.config_path()).unwrap()
    }
}

/// A process killed when dropped, and where its output goes.
struct Service(Child, std::path::PathBuf);

impl Service {
    fn output(&self) -> String {
        std::fs::read_to_string(&self.1).unwrap_or_default()
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[track_caller]
fn assert_booted(boot: &Boot, haproxy: &Haproxy) {
    assert!(
        boot.success(),
        "the user data failed:\n{}\n{}",
        boot.output,
        haproxy.log()
    );
}

/// From a host with HAProxy installed but not started: the user data leaves HAProxy running the
/// bootstrap config with its stats socket, `/ready` answering 503 (and nothing but `/ready` and
/// `/metrics` on the stats listener); the association's first apply makes `/ready` 200 and
/// every route serve; the user data run again changes nothing.
#[test]
fn the_user_data_bootstraps_and_the_first_apply_makes_the_instance_ready() {
    let Some(i) = Instance::new(&["a", "b"]) else {
        return;
    };
    assert!(i.haproxy.processes().is_empty(), "HAProxy is not started");

    let boot = i.host.boot();
    assert_booted(&boot, &i.haproxy);
    assert!(
        boot.output.contains("wrote the bootstrap config"),
        "{}",
        boot.output
    );
    let bootstrap = i.installed();
    assert!(bootstrap.starts_with("# autoproxy: bootstrap haproxy.cfg"));
    let info = i
        .haproxy
        .stats_command("show info")
        .expect("the stats socket answers");
    assert!(
        info.contains("description: autoproxy bootstrap"),
        "the bootstrap config runs: {info}"
    );
    let (status, body) = i.get("/ready");
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("no generation installed yet"), "{body}");
    assert_eq!(i.get("/metrics").0, 200, "HAProxy's exporter");
    assert_eq!(
        i.get("/stats").0,
        404,
        "never the stats page, on any address"
    );
    assert_eq!(
        i.haproxy.running_generation(),
        None,
        "no generation of ours runs"
    );
    let calls = i.host.systemctl_calls();
    assert_eq!(calls, ["enable haproxy", "restart haproxy"], "{calls:?}");

    // The generator publishes; the association's first run on the new instance applies it.
    i.resolvable("a");
    i.resolvable("b");
    let config = i.generated(1, &["a", "b"]);
    i.publish(&config);
    let run = i.associate();
    assert!(run.success(), "{run}{}", i.haproxy.log());
    assert_eq!(i.haproxy.running_generation(), Some(1), "{run}");
    assert_eq!(i.installed(), config);
    let resolver = i.resolver();
    let ready = i.wait_ready(200, "ready", Duration::from_secs(20));
    assert_eq!(ready, (200, "ready\n".to_owned()), "{}", resolver.output());
    i.assert_routes("a");
    i.assert_routes("b");

    // Run again (a re-run of cloud-init's user data): nothing changes.
    let worker = i.haproxy.worker_pid();
    let processes = i.haproxy.processes();
    let boot = i.host.boot();
    assert_booted(&boot, &i.haproxy);
    assert!(boot.output.contains("left as it is"), "{}", boot.output);
    assert_eq!(i.installed(), config, "the installed generation stays");
    assert_eq!(i.haproxy.worker_pid(), worker, "the same worker serves");
    assert_eq!(
        i.haproxy.processes(),
        processes,
        "no process started or stopped"
    );
    assert_eq!(
        i.host.systemctl_calls()[2..],
        ["enable haproxy", "start haproxy"],
        "a start of a running unit is no change"
    );
    assert_eq!(i.wait_ready(200, "ready", Duration::from_secs(5)).0, 200);
    i.assert_routes("a");

    // And on the bootstrap config itself: a second run before any apply changes nothing either.
    let fresh = Instance::new(&["a"]).unwrap();
    assert_booted(&fresh.host.boot(), &fresh.haproxy);
    let worker = fresh.haproxy.worker_pid();
    let boot = fresh.host.boot();
    assert_booted(&boot, &fresh.haproxy);
    assert!(
        boot.output.contains("is the bootstrap config already"),
        "{}",
        boot.output
    );
    assert_eq!(fresh.haproxy.worker_pid(), worker);
    assert_eq!(
        fresh.installed(),
        bootstrap.replace(
            &i.haproxy.stats.port().to_string(),
            &fresh.haproxy.stats.port().to_string()
        )
    );
}

/// What the load balancer's health check means: the proxy's own health, never a member's. A new
/// instance one of whose routes' hosts is never answered is ready within the warm-up after its
/// first apply, serving every other route and holding that one (no route without an address);
/// once the host resolves, its route serves too, without another apply.
#[test]
fn a_new_instance_is_ready_within_the_warm_up_whatever_a_members_host_does() {
    let Some(i) = Instance::new(&["a", "b"]) else {
        return;
    };
    assert_booted(&i.host.boot(), &i.haproxy);
    i.resolvable("a");
    i.dns.drop_queries(&host_of("b"), true);
    i.publish(&i.generated(1, &["a", "b"]));
    let run = i.associate();
    assert!(run.success(), "{run}{}", i.haproxy.log());
    assert_eq!(i.haproxy.running_generation(), Some(1), "{run}");
    let resolver = i.resolver();

    // Loaded CI machines get slack beyond the warm-up; a 503 for b's sake never ends.
    let (status, body) = i.wait_ready(200, "ready", WARM_UP + Duration::from_secs(10));
    assert_eq!(status, 200, "{body}\n{}", resolver.output());
    i.assert_routes("a");
    assert!(
        matches!(i.haproxy.probe(&sni_of("b")), Err(ProbeError::Closed)),
        "no route without an address"
    );

    i.dns.drop_queries(&host_of("b"), false);
    i.resolvable("b");
    let deadline = Instant::now() + Duration::from_secs(30);
    while i.haproxy.probe(&sni_of("b")).is_err() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
    }
    i.assert_routes("b");
    i.assert_routes("a");
    assert_eq!(i.get("/ready").0, 200, "{}", resolver.output());
}

/// The user data is the launch template's, resolved as a deploy resolves it: the config path and
/// the stats port are the stack's.
#[test]
fn the_user_data_names_the_stack_s_config_path_and_stats_port() {
    let haproxy = Haproxy::new();
    let script = user_data::script_for(&haproxy);
    assert!(script.starts_with("#!/bin/bash\n"));
    assert!(script.contains(&format!("config='{}'", haproxy.config_path().display())));
    assert!(script.contains(&format!("stats_port='{}'", haproxy.stats.port())));
    assert!(
        !script.contains("${"),
        "every !Sub variable resolved:\n{script}"
    );
    let checked = std::process::Command::new("bash")
        .args(["-n", "-c", &script])
        .output()
        .unwrap();
    assert!(
        checked.status.success(),
        "{}",
        String::from_utf8_lossy(&checked.stderr)
    );
}

/// A proxy subnet without a way out (no NAT, no endpoints): the user data checks first, writes
/// one line naming what it cannot reach to the console (what `aws ec2 get-console-output`
/// shows), and stops before it touches HAProxy. With every host reachable it checks the same
/// hosts and boots.
#[test]
fn a_proxy_without_a_way_out_says_on_the_console_what_it_cannot_reach() {
    if !user_data::run_dir_exists() {
        eprintln!("skipped: no /run/haproxy to bind over (install haproxy: .ci/tools.sh)");
        return;
    }
    // No moto, no backends: the boot reaches neither before its check.
    let haproxy = Haproxy::new();
    let i = Bare {
        host: Host::new(&haproxy),
        haproxy,
    };
    i.host
        .cut_off(&["ssm.us-east-1.amazonaws.com", "s3.us-east-1.amazonaws.com"]);
    let boot = i.host.boot();
    assert_eq!(boot.status, Some(1), "{}", boot.output);
    let console = i.host.console();
    let lines: Vec<&str> = console.lines().collect();
    assert_eq!(lines.len(), 1, "one line on the console: {console:?}");
    for needed in ["NO WAY OUT", "NAT gateway", "ProxyVpcEndpoints=create"] {
        assert!(
            lines[0].contains(needed),
            "{needed:?} not in {:?}",
            lines[0]
        );
    }
    let named = lines[0]
        .split_once("cannot reach ")
        .and_then(|(_, rest)| rest.split_once(". "))
        .map(|(named, _)| named);
    assert_eq!(
        named,
        Some("ssm.us-east-1.amazonaws.com:443, s3.us-east-1.amazonaws.com:443"),
        "exactly what it could not reach: {:?}",
        lines[0]
    );
    assert!(boot.output.contains(lines[0]), "the log has it too");
    assert!(
        i.host.systemctl_calls().is_empty(),
        "HAProxy untouched: {:?}",
        i.host.systemctl_calls()
    );
    assert!(i.haproxy.processes().is_empty(), "HAProxy not started");

    i.host.cut_off(&[]);
    assert_booted(&i.host.boot(), &i.haproxy);
    assert_eq!(
        i.host.probed()[4..],
        [
            "ssm.us-east-1.amazonaws.com",
            "ssmmessages.us-east-1.amazonaws.com",
            "ec2messages.us-east-1.amazonaws.com",
            "s3.us-east-1.amazonaws.com",
        ]
    );
    assert_eq!(i.host.console(), console, "nothing more on the console");
}

/// A host and its HAProxy, nothing else.
struct Bare {
    host: Host,
    haproxy: Haproxy,
}

/// At first boot Debian's own apt jobs may hold the dpkg lock: every package install waits for
/// it rather than fail the boot.
#[test]
fn every_package_install_waits_for_the_dpkg_lock() {
    let script = user_data::script_for(&Haproxy::new());
    let apt_calls: Vec<&str> = script
        .lines()
        .map(str::trim)
        .filter(|line| line.contains("apt-get") && !line.starts_with('#'))
        // A message naming it.
        .filter(|line| !line.starts_with("die "))
        .filter(|line| !line.contains("command -v apt-get"))
        .collect();
    assert_eq!(
        apt_calls,
        ["apt_get() { apt-get -q -o DPkg::Lock::Timeout=600 \"$@\"; }"],
        "apt-get is called through the one wrapper that waits for the lock"
    );
    assert!(
        !script.contains("dpkg -i"),
        "dpkg itself does not wait for its lock: install a .deb with apt-get"
    );
}
