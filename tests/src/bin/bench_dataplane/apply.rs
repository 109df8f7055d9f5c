//! The apply document's whole run on one config: the first install, route-only generations
//! applied while connections are held through the proxy, and one generation that changes a
//! setting; what the agent and the document cost.

use std::fmt::Write as _;
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use autoproxy::model::Route;
use autoproxy::render::RenderOptions;
use autoproxy_tests::agent::Published;
use autoproxy_tests::dataplane::{self, Design};
use autoproxy_tests::estate;
use autoproxy_tests::moto::Moto;
use autoproxy_tests::proxy::{Haproxy, HaproxyFiles};
use autoproxy_tests::ssm_agent::{Document, Run};
use autoproxy_tests::stream::{Held, KubectlWatch, WatchEnd, streamer};

use super::env::Env;

/// Route changes published one after another.
const CHANGES: usize = 20;
/// Connections held open through the proxy while they are applied.
const HELD: usize = 10;
/// Where the held connections' backend listens (the backends' port).
const STREAMER: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 60);
/// Where the Kubernetes API stand-in that kubectl watches listens (the backends' port).
const APISERVER: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 61);

/// The apply document's whole run on one config, as the first install, then [`CHANGES`]
/// route-only generations and one that changes a setting, with connections held through
/// the proxy; what the agent and the document cost.
pub(super) struct ApplyTimes {
    routes: usize,
    bytes: usize,
    first: Duration,
    /// Each route-only generation's whole run.
    changes: Vec<Duration>,
    /// From each route-only generation's return to its new route serving (`None`: not
    /// within 5 s).
    serving: Vec<Option<Duration>>,
    /// Reloads the route-only generations caused (reload lines in their logs, and worker
    /// PIDs that changed).
    reloads: usize,
    worker_changes: usize,
    /// HAProxy workers (old ones included) after the route-only generations.
    workers: usize,
    /// Held connections still flowing after them.
    held_alive: usize,
    /// How the kubectl watch through the proxy fared, as a phrase.
    kubectl: String,
    /// The generation that changes a setting: its whole run (a reload).
    structural: Duration,
    /// The agent's peak resident memory during the last route-only apply, as it logged it.
    peak_memory: String,
    agent_bytes: u64,
    document_bytes: usize,
}

fn median(times: &[Duration]) -> Duration {
    let mut sorted = times.to_vec();
    sorted.sort();
    sorted.get(sorted.len() / 2).copied().unwrap_or_default()
}

fn ms(time: Duration) -> String {
    format!("{:.0} ms", time.as_secs_f64() * 1000.0)
}

impl ApplyTimes {
    pub(super) fn line(&self) -> String {
        let served: Vec<Duration> = self.serving.iter().flatten().copied().collect();
        let serving = if served.len() == self.serving.len() {
            format!(
                "median {}, at most {}",
                ms(median(&served)),
                ms(served.iter().max().copied().unwrap_or_default())
            )
        } else {
            format!("{} of {} within 5 s", served.len(), self.serving.len())
        };
        format!(
            "**Apply** ({} routes, a {:.1} MB config): the apply document's whole run took \
             {:.2} s as the first install. Then {} route-only generations, one after another \
             (each adds a route whose host the apply resolves): whole run median {:.2} s, at \
             most {:.2} s; the new route served {serving} after the apply returned; reloads \
             {} (worker PIDs changed {} times); HAProxy workers afterwards {}; {} of {} \
             connections held through the proxy still flowing; {}. A generation that changes \
             a setting reloads: {:.2} s. autoproxy-agent: {:.1} MB binary, peak memory {} \
             during the apply; the document's Content is {} bytes as JSON.",
            self.routes,
            self.bytes as f64 / 1e6,
            self.first.as_secs_f64(),
            self.changes.len(),
            median(&self.changes).as_secs_f64(),
            self.changes
                .iter()
                .max()
                .copied()
                .unwrap_or_default()
                .as_secs_f64(),
            self.reloads,
            self.worker_changes,
            self.workers,
            self.held_alive,
            HELD,
            self.kubectl,
            self.structural.as_secs_f64(),
            self.agent_bytes as f64 / 1e6,
            self.peak_memory,
            self.document_bytes,
        )
    }
}

/// One apply of a config through the document as the SSM agent runs it.
pub(super) struct Applier {
    rt: tokio::runtime::Runtime,
    moto: Moto,
    sdk: aws_config::SdkConfig,
    document: Document,
}

impl Applier {
    const BUCKET: &'static str = "autoproxy-config";
    const KEY: &'static str = "haproxy/haproxy.cfg";

    /// moto as S3 with the config bucket and the published agent, and the apply document as
    /// deployed for `haproxy`.
    pub(super) fn start(haproxy: &Haproxy) -> (Applier, Published) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a tokio runtime");
        let moto = Moto::start();
        let sdk = rt.block_on(moto.sdk_config());
        rt.block_on(estate::versioned_bucket(&sdk, Applier::BUCKET))
            .expect("the config bucket");
        let agent = rt.block_on(Published::publish(&sdk, Applier::BUCKET));
        let applier = Applier {
            document: haproxy.apply_document().expect("the apply document"),
            rt,
            moto,
            sdk,
        };
        (applier, agent)
    }

    pub(super) fn run(&self, config: &str) -> Run {
        let version = self
            .rt
            .block_on(estate::upload_config(
                &self.sdk,
                Self::BUCKET,
                Self::KEY,
                config,
            ))
            .expect("upload the config");
        let run = self
            .document
            .run(
                &[
                    ("ConfigBucket", Self::BUCKET),
                    ("ConfigKey", Self::KEY),
                    ("ConfigVersion", version.as_str()),
                ],
                &self.moto.env(),
                Duration::from_secs(120),
            )
            .expect("run the apply document");
        assert!(run.success(), "the apply failed:\n{run}");
        run
    }
}

/// The configs of the run: the routes installed, plus a route to the streaming backend and
/// one to the Kubernetes API stand-in, both by address.
struct Configs<'a> {
    hold: Route,
    kube: Route,
    env: &'a Env,
}

impl Configs<'_> {
    fn render(&self, installed: &[Route], generation: u64, options: &RenderOptions) -> String {
        let mut all = vec![self.hold.clone(), self.kube.clone()];
        all.extend_from_slice(installed);
        dataplane::render(
            Design::Maps,
            &all,
            &[self.env.agent_dns.addr()],
            options,
            generation,
        )
    }
}

/// What the route-only generations did.
#[derive(Default)]
struct Changes {
    /// The largest config applied.
    bytes: usize,
    changes: Vec<Duration>,
    serving: Vec<Option<Duration>>,
    reloads: usize,
    worker_changes: usize,
    peak_memory: String,
}

/// Runs the apply document against moto as S3 and a real HAProxy on loopback: the first
/// install of all routes but [`CHANGES`] (their addresses known, as the resolver would have
/// them) plus a route to a streaming backend, [`HELD`] connections opened through it, then
/// one generation per withheld route, then one with another `maxconn`.
pub(super) fn apply_times(env: &Env, routes: &[Route]) -> ApplyTimes {
    let haproxy = Haproxy::new();
    let (applier, agent) = Applier::start(&haproxy);
    let mut options = haproxy.options(env.backends.port);
    let _streamer = streamer(STREAMER, env.backends.port).expect("the streaming backend");
    let literal_route = |sni: &str, ip: Ipv4Addr| {
        let mut route = routes[0].clone();
        route.sni = sni.to_owned();
        route.back = autoproxy::names::HostName::parse(&ip.to_string()).expect("an IP");
        route
    };
    let configs = Configs {
        hold: literal_route("proxy.api.hold.bench", STREAMER),
        kube: literal_route("proxy.api.kube.bench", APISERVER),
        env,
    };
    let withheld = CHANGES.min(routes.len() - 1);
    write_known_addresses(&haproxy, env, routes, withheld);

    let config = configs.render(&routes[withheld..], 1, &options);
    let first = applier.run(&config).elapsed();
    let mut held: Vec<Held> = (0..HELD)
        .map(|_| Held::open(haproxy.https, &configs.hold.sni).expect("a held connection"))
        .collect();
    // kubectl and openssl are not the project's tools: without them, the rest is measured.
    let watch = KubectlWatch::start(
        APISERVER,
        env.backends.port,
        haproxy.https,
        &configs.kube.sni,
    );
    let mut changes = route_only_changes(&applier, &haproxy, &configs, routes, withheld, &options);
    changes.bytes = changes.bytes.max(config.len());
    std::thread::sleep(Duration::from_millis(500));
    let workers = haproxy.processes().len().saturating_sub(1);
    let held_alive = held
        .iter_mut()
        .map(|h| h.alive().is_ok())
        .filter(|ok| *ok)
        .count();
    let kubectl = watch.map_or_else(
        |why| format!("no kubectl watch measured ({why})"),
        |watch| kubectl_phrase(&watch.end()),
    );
    println!("kubectl watch: {kubectl}");

    options.maxconn -= 1;
    let structural_config = configs.render(routes, 2 + withheld as u64, &options);
    let run = applier.run(&structural_config);
    assert_eq!(run.step("reload").len(), 1, "a setting reloads:\n{run}");
    ApplyTimes {
        routes: routes.len(),
        bytes: changes.bytes,
        first,
        changes: changes.changes,
        serving: changes.serving,
        reloads: changes.reloads,
        worker_changes: changes.worker_changes,
        workers,
        held_alive,
        kubectl,
        structural: run.elapsed(),
        peak_memory: changes.peak_memory,
        agent_bytes: std::fs::metadata(&agent.binary).map_or(0, |m| m.len()),
        document_bytes: serde_json::to_string(&applier.document.content).map_or(0, |s| s.len()),
    }
}

/// The address map as the resolver would have it for the routes of the first install (all
/// but the first `withheld`).
fn write_known_addresses(haproxy: &Haproxy, env: &Env, routes: &[Route], withheld: usize) {
    let mut known = String::new();
    for (i, route) in routes.iter().enumerate().skip(withheld) {
        let backend = &env.backends.list[i % env.backends.list.len()];
        writeln!(known, "{} {}", route.back.as_str(), backend.addr.ip()).unwrap();
    }
    let maps = haproxy.dir().join("autoproxy");
    std::fs::create_dir_all(&maps).expect("the maps directory");
    std::fs::write(maps.join("addresses.map"), known).expect("write addresses.map");
}

/// One generation per withheld route, each adding it back: how long each run took, when
/// its route served, and what reloaded.
fn route_only_changes(
    applier: &Applier,
    haproxy: &Haproxy,
    configs: &Configs<'_>,
    routes: &[Route],
    withheld: usize,
    options: &RenderOptions,
) -> Changes {
    let mut changes = Changes::default();
    let mut worker = haproxy.worker_pid();
    for (index, added) in routes[..withheld].iter().rev().enumerate() {
        let generation = 2 + index as u64;
        let config = configs.render(&routes[withheld - 1 - index..], generation, options);
        changes.bytes = changes.bytes.max(config.len());
        let run = applier.run(&config);
        let returned = Instant::now();
        changes.serving.push(served_within(
            haproxy,
            &added.sni,
            returned,
            Duration::from_secs(5),
        ));
        changes.changes.push(run.elapsed());
        changes.reloads += run.step("reload").len();
        let now = haproxy.worker_pid();
        changes.worker_changes += usize::from(now != worker);
        worker = now;
        changes.peak_memory = run
            .step("done")
            .first()
            .and_then(|done| done.split("peak memory ").nth(1))
            .map(|m| m.trim_end_matches(')').to_owned())
            .unwrap_or_default();
        println!("generation {generation}: {:?}", run.step("done"));
    }
    changes
}

/// How the kubectl watch fared, as the report says it.
fn kubectl_phrase(end: &WatchEnd) -> String {
    if end.survived && end.status == Some(0) {
        format!(
            "kubectl watching through the proxy (`kubectl get --raw …?watch=true`, one event \
             every 100 ms) still connected, then read {} events over {:.1} s and exited 0",
            end.events,
            end.watched.as_secs_f64()
        )
    } else {
        format!(
            "kubectl watching through the proxy was cut (still running: {}, exit {:?}, {} \
             events over {:.1} s)",
            end.survived,
            end.status,
            end.events,
            end.watched.as_secs_f64()
        )
    }
}

/// How long after `returned` a ClientHello for `sni` first got a backend's answer, probed
/// every 5 ms; `None` if not within `limit`.
fn served_within(
    haproxy: &Haproxy,
    sni: &str,
    returned: Instant,
    limit: Duration,
) -> Option<Duration> {
    while returned.elapsed() < limit {
        if haproxy.probe(sni).is_ok() {
            return Some(returned.elapsed());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    None
}
