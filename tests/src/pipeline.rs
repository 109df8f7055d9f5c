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
use std::net::{Ipv4Addr, SocketAddr, TcpListener, UdpSocket};
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
use crate::proxy::HaproxyFiles;
use crate::resolver::{Knobs, Resolver as AddressAgent};
use crate::ssm_agent::{AgentError, Document, Run};

mod backends;
mod clusters;
mod events;
mod lambda;
mod process;
mod ssm;
mod vpc_dns;

pub use backends::*;
pub use clusters::*;
pub use events::*;
pub use lambda::*;
pub use process::*;
pub use ssm::*;
pub use vpc_dns::*;

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
/// The Route53 event queue, as the stack's `Route53EventsQueue`.
pub const EVENT_QUEUE: &str = "autoproxy-route53-events";
pub const TAG_KEY: &str = "Role";
pub const TAG_VALUE: &str = "peering-proxy";
/// Peering-proxy instances created in moto's EC2.
pub const INSTANCES: usize = 2;
/// The address the peering proxy's name resolves to.
pub const PROXY_IP: Ipv4Addr = Ipv4Addr::LOCALHOST;
/// How long an apply may run.
const APPLY_TIMEOUT: Duration = Duration::from_secs(120);

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
        let (dir, temp) = work_dir(dir)?;
        let moto = Moto::start();
        register(Started::Pid(moto.pid()));
        say(&format!(
            "moto (S3, Route53, STS, SSM, EC2) on {}",
            moto.endpoint()
        ));
        let sdk = moto.sdk_config().await;

        estate::versioned_bucket(&sdk, BUCKET).await?;
        let queue_url = event_queue(&sdk).await?;
        let own = Account::own(&sdk);
        let member = Account::assume(&sdk, MEMBER_ACCOUNT).await?;
        let zones = seed_clusters(&own, &member, &INITIAL).await?;
        say(&format!(
            "estate: {} in account {OWN_ACCOUNT}, {} in account {MEMBER_ACCOUNT} (assumed role), \
             {} pointing at {OTHER_PROXY} (must not match); bucket s3://{BUCKET} (versioned)",
            names_in(OWN_ACCOUNT, &[PROD, STAGING]),
            names_in(MEMBER_ACCOUNT, &[PAYMENTS]),
            LEGACY.zone(),
        ));

        let (haproxy, document, instance_ids) = deploy_fleet(&moto, &sdk, say).await?;

        let resolver = Resolver::start(&dir, &vpc_names(&[&own, &member]).await?)?;
        say(&format!(
            "VPC resolver: dnsmasq on {} serving {}",
            resolver.addr,
            resolver.hosts_path().display()
        ));

        let backends = start_backends(&dir, say)?;

        say(&format!(
            "peering proxy: HAProxy (master-worker) prepared in {}; TLS on {}; not running \
             until the first config arrives",
            haproxy.dir().display(),
            haproxy.https
        ));

        let addresses = start_address_agent(&haproxy, &resolver, say);

        let options = haproxy.options(backends.port);
        let env = function_env(&moto, &resolver, &options, &queue_url)?;
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
                // As the Lambda entry point runs it (a queued batch included), without a budget.
                let invocation =
                    handler::Invocation::parse(payload).map_err(|e| step_error(function, e))?;
                let reply = handler::handle(&deps, invocation, None)
                    .await
                    .map_err(|e| step_error(function, e))?;
                serde_json::to_value(reply).map_err(|e| step_error(function, e))
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
        let summary = self
            .invoke("autoproxy-generate", &delivered(event), extra_env)
            .await?;
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
                    autoproxy::aws_error::reason(&e),
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
        estate::put_object(&self.sdk, BUCKET, key, body)
            .await
            .map_err(|e| step_error(format!("PutObject {key}"), e))
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

/// The pipeline's work directory: `dir`, emptied, or a new temporary one (kept alive by the
/// handle returned with it).
fn work_dir(dir: Option<PathBuf>) -> Result<(PathBuf, Option<tempfile::TempDir>), PipelineError> {
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
    Ok((dir, temp))
}

/// The Route53 event queue the generator drains, as the stack's `Route53EventsQueue`: its URL.
async fn event_queue(sdk: &SdkConfig) -> Result<String, PipelineError> {
    let created = aws_sdk_sqs::Client::new(sdk)
        .create_queue()
        .queue_name(EVENT_QUEUE)
        .send()
        .await
        .map_err(|e| step_error("CreateQueue", autoproxy::aws_error::reason(&e)))?;
    Ok(created.queue_url.unwrap_or_default())
}

/// The functions' environment, as the stack would set it for this machine's estate.
fn function_env(
    moto: &Moto,
    resolver: &Resolver,
    options: &autoproxy::render::RenderOptions,
    queue_url: &str,
) -> Result<Vec<(String, String)>, PipelineError> {
    let mut env = moto.env();
    env.extend(
        [
            // The SDK's retries off, as in the harness's own clients (`Moto::sdk_config`): the
            // calls moto does not implement (ListCommandInvocations) answer 500, and three
            // attempts with backoff added up to 3 s, at random, to every rollout.
            ("AWS_MAX_ATTEMPTS", "1".to_owned()),
            ("CONFIG_BUCKET", BUCKET.to_owned()),
            ("CONFIG_KEY", CONFIG_KEY.to_owned()),
            ("PEERING_PROXY_HOSTNAME", PROXY_HOSTNAME.to_owned()),
            ("ACCOUNT_ROLE_ARNS", estate::role_arn(MEMBER_ACCOUNT)),
            // Moto's one region, not the 38 it lists as the member's enabled ones.
            ("MEMBER_REGIONS", crate::moto::REGION.to_owned()),
            ("DNS_RESOLVERS", resolver.addr.to_string()),
            (
                "RENDER_OPTIONS",
                serde_json::to_string(&options).map_err(|e| step_error("RENDER_OPTIONS", e))?,
            ),
            ("ROUTE53_REQUESTS_PER_SECOND", "50".to_owned()),
            ("EVENT_QUEUE_URL", queue_url.to_owned()),
            ("APPLY_DOCUMENT", DOCUMENT.to_owned()),
            ("TARGET_TAG_KEY", TAG_KEY.to_owned()),
            ("TARGET_TAG_VALUE", TAG_VALUE.to_owned()),
            ("MAX_CONCURRENCY", "1".to_owned()),
            ("MAX_ERRORS", "0".to_owned()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v)),
    );
    Ok(env)
}

/// The clusters' TLS backends on loopback, one per backend name.
fn start_backends(dir: &Path, say: &dyn Fn(&str)) -> Result<TlsBackends, PipelineError> {
    let mut list = Vec::new();
    for cluster in ALL {
        list.push((cluster.api_backend(), cluster.api_ip()));
        list.push((cluster.ingress_backend(), cluster.ingress_ip()));
    }
    let backends = TlsBackends::start(dir, &list)?;
    say(&format!(
        "backends: {} openssl s_server on 127.0.0.10-{}:{} (certificate CN = backend name)",
        list.len(),
        list.last().map_or(0, |(_, ip)| ip.octets()[3]),
        backends.port
    ));
    Ok(backends)
}

/// The address service as the apply document installs it on an instance.
fn start_address_agent(haproxy: &Haproxy, resolver: &Resolver, say: &dyn Fn(&str)) -> AddressAgent {
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
        "address agent: autoproxy-agent resolve (the autoproxy-resolver service) on {}, every name \
         resolved through {} every 5 s",
        haproxy.config_path().display(),
        resolver.addr
    ));
    addresses
}

/// The stack's fleet side for the HAProxy on this machine: the apply document and the tagged
/// instances that run it.
async fn deploy_fleet(
    moto: &Moto,
    sdk: &SdkConfig,
    say: &dyn Fn(&str),
) -> Result<(Haproxy, Document, Vec<String>), PipelineError> {
    // The stack deployed for the HAProxy on this machine: its ConfigPath and ReloadCommand
    // are the only ones the document accepts.
    let haproxy = Haproxy::new();
    register(Started::Haproxy(haproxy.dir().to_owned()));
    let document = haproxy.apply_document_in(BUCKET)?;
    crate::agent::Published::publish(sdk, BUCKET).await;
    create_document(sdk, &document).await?;
    let instance_ids = run_instances(moto)?;
    say(&format!(
        "fleet: SSM document {DOCUMENT} (ApplyConfigDocument from template.yaml); EC2 \
         instances {} tagged {TAG_KEY}={TAG_VALUE}",
        instance_ids.join(", ")
    ));
    Ok((haproxy, document, instance_ids))
}
