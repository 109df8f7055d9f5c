//! The apply document from template.yaml, run by the SSM agent stand-in against moto (S3) and a
//! real HAProxy in master-worker mode on loopback.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::collections::BTreeMap;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use autoproxy::artifact::{self, MapFiles};
use autoproxy::model::SniMatch;
use autoproxy_tests::config_bucket::InstanceBucket;
use autoproxy_tests::dns::DnsServer;
use autoproxy_tests::estate;
use autoproxy_tests::moto::Moto;
use autoproxy_tests::proxy::HaproxyFiles;
use autoproxy_tests::proxy::{self, Backends, Haproxy, ProbeError};
use autoproxy_tests::ssm_agent::{AgentError, Background, Document, Run};

mod borders;
mod concurrency;
mod document;
mod durability;
mod faults;
mod held;
mod held_in_time;
mod install;
mod launcher;
mod long_sessions;
mod loops;
mod repair;
mod running;
mod runtime;
mod truth;

const BUCKET: &str = "autoproxy-config";
const KEY: &str = "haproxy/haproxy.cfg";
const RUN_TIMEOUT: Duration = Duration::from_secs(90);
/// The instance the SSM agent stand-in says it runs on.
const INSTANCE: &str = "i-0a1b2c3d4e5f60718";
/// Where that instance's fleet record goes: its ARN, the one key its role may write.
const RECORD: &str =
    "haproxy/haproxy.fleet/arn:aws:ec2:us-east-1:123456789012:instance/i-0a1b2c3d4e5f60718.json";

/// moto with a versioned bucket, an HAProxy that is not started yet, and backends.
struct Fixture {
    haproxy: Haproxy,
    backends: Backends,
    /// The apply document as deployed for this HAProxy (its config path and reload command).
    document: Document,
    sdk: aws_config::SdkConfig,
    rt: tokio::runtime::Runtime,
    moto: Moto,
}

impl Fixture {
    fn new(backends: &[&str]) -> Fixture {
        let InstanceBucket { sdk, rt, moto } = InstanceBucket::start(BUCKET);
        let haproxy = Haproxy::new();
        Fixture {
            document: haproxy.apply_document().unwrap(),
            haproxy,
            backends: Backends::start(backends),
            sdk,
            rt,
            moto,
        }
    }

    /// A rendered config routing `proxy.api.<zone>` to the named backend, per pair.
    fn config(&self, generation: u64, routes: &[(&str, &str)]) -> String {
        self.config_with(
            generation,
            routes,
            &self.haproxy.options(self.backends.port),
        )
    }

    /// `config`, with a setting that differs in every generation: HAProxy must reload to
    /// take it (a change of routes alone would not reload).
    fn reloading_config(&self, generation: u64, routes: &[(&str, &str)]) -> String {
        let mut options = self.haproxy.options(self.backends.port);
        options.maxconn -= u32::try_from(generation).unwrap();
        self.config_with(generation, routes, &options)
    }

    fn config_with(
        &self,
        generation: u64,
        routes: &[(&str, &str)],
        options: &autoproxy::render::RenderOptions,
    ) -> String {
        proxy::render(generation, &self.api_routes(routes), options)
    }

    /// An API route `proxy.api.<zone>` to the named backend, per pair.
    fn api_routes(&self, routes: &[(&str, &str)]) -> Vec<autoproxy::model::Route> {
        routes
            .iter()
            .map(|(zone, backend)| proxy::api_route(zone, self.backends.get(backend)))
            .collect()
    }

    /// Uploads a config as the generator does; its version id.
    fn upload(&self, text: &str) -> String {
        self.rt
            .block_on(estate::upload_config(&self.sdk, BUCKET, KEY, text))
            .unwrap()
    }

    /// The parameters the configure function would pass (`ConfigPath` and `ReloadCommand`
    /// left at their deployed defaults), then `overrides`.
    fn run(&self, overrides: &[(&str, &str)]) -> Run {
        self.run_deployed(&self.document, overrides)
    }

    /// `run` with another deployment of the document (another reload command).
    fn run_deployed(&self, document: &Document, overrides: &[(&str, &str)]) -> Run {
        self.try_run(document, overrides, &[]).unwrap()
    }

    /// `run`, as SSM would refuse it or as the agent ran it, with `env` added.
    fn try_run(
        &self,
        document: &Document,
        overrides: &[(&str, &str)],
        env: &[(String, String)],
    ) -> Result<Run, AgentError> {
        Ok(self.spawn(document, overrides, env, &[])?.wait(RUN_TIMEOUT))
    }

    /// `try_run` started in the background, its `sh` started by `wrapper` (none: as the SSM
    /// agent starts it); wait for it with `RUN_TIMEOUT`.
    fn spawn(
        &self,
        document: &Document,
        overrides: &[(&str, &str)],
        env: &[(String, String)],
        wrapper: &[String],
    ) -> Result<Background, AgentError> {
        let mut parameters = vec![("ConfigBucket", BUCKET), ("ConfigKey", KEY)];
        parameters.extend_from_slice(overrides);
        let mut all = self.moto.env();
        all.push(("AWS_SSM_INSTANCE_ID".to_owned(), INSTANCE.to_owned()));
        all.extend_from_slice(env);
        document.spawn_wrapped(&parameters, &all, wrapper)
    }

    fn apply(&self, version: &str) -> Run {
        self.run(&[("ConfigVersion", version)])
    }

    /// First install through the document: no config yet and no HAProxy running.
    fn install_first(&self, text: &str) {
        let version = self.upload(text);
        let run = self.apply(&version);
        assert!(run.success(), "first install failed:\n{run}");
        let generation = artifact::parse_header(text).unwrap().generation;
        assert_eq!(self.haproxy.running_generation(), Some(generation), "{run}");
    }

    /// Generation 1 installed (`g1.test` to `a`), generation 2 uploaded with a setting that
    /// reloads (and `g2.test` to `b`), and the document deployed with a reload command that
    /// fails once (a rollback's own reload works): generation 1's config, 2's version, that
    /// document.
    fn before_a_failing_reload(&self) -> (String, String, Document) {
        let first = self.config(1, &[("g1.test", "a")]);
        self.install_first(&first);
        let second = self.reloading_config(2, &[("g1.test", "a"), ("g2.test", "b")]);
        let version = self.upload(&second);
        let flaky = self
            .haproxy
            .apply_document_reloading_with(&self.haproxy.reload_command(&["fail-once"]))
            .unwrap();
        (first, version, flaky)
    }

    /// Runs `apply` and returns the fleet record it leaves (sent in the background: waited for).
    fn apply_and_record(&self, version: &str) -> (Run, serde_json::Value) {
        let s3 = aws_sdk_s3::Client::new(&self.sdk);
        self.rt
            .block_on(s3.delete_object().bucket(BUCKET).key(RECORD).send())
            .unwrap();
        let run = self.apply(version);
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            let got = self
                .rt
                .block_on(s3.get_object().bucket(BUCKET).key(RECORD).send());
            if let Ok(object) = got {
                let bytes = self.rt.block_on(object.body.collect()).unwrap().to_vec();
                let record = serde_json::from_slice(&bytes)
                    .unwrap_or_else(|err| panic!("{err}: {}", String::from_utf8_lossy(&bytes)));
                return (run, record);
            }
            assert!(
                std::time::Instant::now() < deadline,
                "no fleet record at {RECORD} within 20 s:\n{run}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn installed(&self) -> String {
        std::fs::read_to_string(self.haproxy.config_path()).unwrap()
    }

    fn last_good(&self) -> Option<String> {
        let path = format!("{}.last-good", self.haproxy.config_path().display());
        std::fs::read_to_string(path).ok()
    }

    #[track_caller]
    fn assert_routes(&self, zone: &str, backend: &str) {
        let sni = format!("proxy.api.{zone}");
        match self.haproxy.probe(&sni) {
            Ok(banner) => assert_eq!(banner, self.backends.get(backend).banner(), "SNI {sni}"),
            Err(err) => panic!(
                "SNI {sni} should reach backend {backend}: {err}\n{}",
                self.haproxy.log()
            ),
        }
    }

    #[track_caller]
    fn assert_no_route(&self, zone: &str) {
        let sni = format!("proxy.api.{zone}");
        let answer = self.haproxy.probe(&sni);
        assert!(
            matches!(answer, Err(ProbeError::Closed)),
            "SNI {sni}: {answer:?}"
        );
    }
}

/// The same header over a new body, with the body's sha256: a config whose checksum is
/// right but whose content is whatever the test needs.
fn restamp(text: &str, body: &str) -> String {
    let header: String = text[..artifact::body_offset(text)]
        .lines()
        .map(|line| {
            if line.starts_with("# sha256: ") {
                format!("# sha256: {}\n", artifact::sha256_hex(body.as_bytes()))
            } else {
                format!("{line}\n")
            }
        })
        .collect();
    let restamped = header + body;
    artifact::parse_header(&restamped).expect("restamped header verifies");
    restamped
}

/// The lock wait an apply logged (`lock: acquired … after N ms`).
fn lock_wait(run: &Run) -> Duration {
    let line = run.step("lock").into_iter().next().expect("a lock line");
    let ms = line
        .rsplit_once(" after ")
        .and_then(|(_, rest)| rest.strip_suffix(" ms"))
        .and_then(|ms| ms.parse().ok())
        .unwrap_or_else(|| panic!("lock line without a wait: {line}"));
    Duration::from_millis(ms)
}

/// The names and contents of every file in a directory (sockets and pid files aside).
fn snapshot(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap())
        .filter(|entry| entry.file_type().unwrap().is_file())
        .map(|entry| {
            let name = entry.file_name().to_string_lossy().into_owned();
            let content = if name == "haproxy.log" {
                Vec::new()
            } else {
                std::fs::read(entry.path()).unwrap()
            };
            (name, content)
        })
        .collect()
}

fn temp_files(dir: &Path) -> Vec<String> {
    snapshot(dir)
        .into_keys()
        .filter(|name| name.starts_with(".autoproxy-"))
        .collect()
}
