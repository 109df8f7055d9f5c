//! The apply document from template.yaml, run by the SSM agent stand-in against moto (S3) and a
//! real HAProxy in master-worker mode on loopback.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::collections::BTreeMap;
use std::net::{SocketAddr, TcpListener};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use autoproxy::artifact;
use autoproxy::model::SniMatch;
use autoproxy_tests::dns::DnsServer;
use autoproxy_tests::estate;
use autoproxy_tests::moto::Moto;
use autoproxy_tests::proxy::{self, Backends, Haproxy, ProbeError};
use autoproxy_tests::ssm_agent::{AgentError, Document, Run};

const BUCKET: &str = "autoproxy-config";
const KEY: &str = "haproxy/haproxy.cfg";
const RUN_TIMEOUT: Duration = Duration::from_secs(90);
/// The instance the SSM agent stand-in says it runs on.
const INSTANCE: &str = "i-0a1b2c3d4e5f60718";
/// Where that instance's fleet record goes.
const RECORD: &str = "haproxy/haproxy.fleet/i-0a1b2c3d4e5f60718.json";

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
        let moto = Moto::start();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let sdk = rt.block_on(async {
            let sdk = moto.sdk_config().await;
            estate::versioned_bucket(&sdk, BUCKET).await.unwrap();
            sdk
        });
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

    fn config_with(
        &self,
        generation: u64,
        routes: &[(&str, &str)],
        options: &autoproxy::render::RenderOptions,
    ) -> String {
        let routes: Vec<_> = routes
            .iter()
            .map(|(zone, backend)| proxy::api_route(zone, self.backends.get(backend)))
            .collect();
        proxy::render(generation, &routes, options)
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
        let mut parameters = vec![("ConfigBucket", BUCKET), ("ConfigKey", KEY)];
        parameters.extend_from_slice(overrides);
        let mut all = self.moto.env();
        all.push(("AWS_SSM_INSTANCE_ID".to_owned(), INSTANCE.to_owned()));
        all.extend_from_slice(env);
        document.run(&parameters, &all, RUN_TIMEOUT)
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

#[test]
fn the_document_declares_strict_env_var_parameters() {
    let document = Document::from_workspace(&[]).unwrap();
    let names: Vec<&str> = document
        .parameters
        .iter()
        .map(|p| p.name.as_str())
        .collect();
    assert_eq!(
        names,
        [
            "ConfigBucket",
            "ConfigKey",
            "ConfigVersion",
            "ConfigPath",
            "ReloadCommand"
        ]
    );
    let cases: &[(&str, &str, bool)] = &[
        ("ConfigBucket", "autoproxy-config", true),
        ("ConfigBucket", "my.bucket-1", true),
        ("ConfigBucket", "Bad_Bucket", false),
        ("ConfigBucket", "a", false),
        ("ConfigBucket", "b;rm -rf /", false),
        ("ConfigKey", "haproxy/haproxy.cfg", true),
        ("ConfigKey", "a b", false),
        ("ConfigKey", "$(id)", false),
        ("ConfigKey", "/leading-slash", false),
        ("ConfigVersion", "", true),
        ("ConfigVersion", "3HL4kqtJlcpXroDTDmJ.rmSpXd3dIbrHY", true),
        (
            "ConfigVersion",
            "0b7f4c5e-1c2d-4f3a-9a8b-7c6d5e4f3a2b",
            true,
        ),
        ("ConfigVersion", "a;b", false),
        ("ConfigVersion", "a\nb", false),
        // Deployed with the defaults: only those.
        ("ConfigPath", "/etc/haproxy/haproxy.cfg", true),
        ("ConfigPath", "/etc/haproxy/other.cfg", false),
        ("ConfigPath", "/etc/cron.d/x", false),
        ("ReloadCommand", "systemctl reload haproxy", true),
        (
            "ReloadCommand",
            "systemctl reload-or-restart haproxy",
            false,
        ),
        ("ReloadCommand", "/bin/sh -c id", false),
    ];
    for (name, value, allowed) in cases {
        let result = document.resolve(&[("ConfigBucket", "bucket"), (name, value)]);
        assert_eq!(result.is_ok(), *allowed, "{name} = {value:?}: {result:?}");
        if !allowed {
            assert!(
                matches!(
                    result,
                    Err(AgentError::Rejected { .. } | AgentError::NotAllowed { .. })
                ),
                "{result:?}"
            );
        }
    }
    let defaults = document.resolve(&[("ConfigBucket", "bucket")]).unwrap();
    assert_eq!(defaults["ConfigKey"], "haproxy/haproxy.cfg");
    assert_eq!(defaults["ConfigVersion"], "");
    assert_eq!(defaults["ConfigPath"], "/etc/haproxy/haproxy.cfg");
    assert_eq!(defaults["ReloadCommand"], "systemctl reload haproxy");
    assert!(matches!(document.resolve(&[]), Err(AgentError::Missing(_))));
}

/// The config path and the reload command are the deployer's choice, checked as CloudFormation
/// checks a template parameter; the document then admits that one value and no other.
#[test]
fn the_config_path_and_reload_command_are_checked_when_the_stack_is_deployed() {
    let cases: &[(&str, &str, bool)] = &[
        ("ProxyConfigPath", "/etc/haproxy/haproxy.cfg", true),
        ("ProxyConfigPath", "/srv/haproxy-main/haproxy.cfg", true),
        ("ProxyConfigPath", "etc/haproxy.cfg", false),
        ("ProxyConfigPath", "/etc/../shadow", false),
        ("ProxyConfigPath", "/etc/haproxy/", false),
        ("ProxyConfigPath", "/etc/ha proxy.cfg", false),
        ("ProxyReloadCommand", "systemctl reload haproxy", true),
        (
            "ProxyReloadCommand",
            "/usr/local/bin/reload.sh --unit=haproxy@main",
            true,
        ),
        ("ProxyReloadCommand", "systemctl  reload haproxy", false),
        ("ProxyReloadCommand", " systemctl", false),
        ("ProxyReloadCommand", "systemctl reload haproxy; id", false),
        (
            "ProxyReloadCommand",
            "kill -USR2 $(cat /run/haproxy.pid)",
            false,
        ),
        ("ProxyReloadCommand", "reload *", false),
        ("ProxyReloadCommand", "reload\nid", false),
    ];
    for (name, value, allowed) in cases {
        let result = Document::from_workspace(&[(name, value)]);
        match (result, allowed) {
            (Ok(document), true) => {
                let parameter = if *name == "ProxyConfigPath" {
                    "ConfigPath"
                } else {
                    "ReloadCommand"
                };
                let values = document.resolve(&[("ConfigBucket", "bucket")]).unwrap();
                assert_eq!(
                    values[parameter], *value,
                    "the default is the deployed value"
                );
                assert_eq!(
                    document.parameter(parameter).unwrap().allowed_values,
                    Some(vec![(*value).to_owned()])
                );
            }
            (Err(AgentError::TemplateParameterRejected { name: n, .. }), false) => {
                assert_eq!(n, *name);
            }
            (result, _) => panic!("{name} = {value:?}: {result:?}"),
        }
    }
    assert!(matches!(
        Document::from_workspace(&[("ConfigPath", "/etc/haproxy/haproxy.cfg")]),
        Err(AgentError::UnknownTemplateParameter { .. })
    ));
}

/// Whoever may send the document can choose the config version, not what is written or run
/// as root: a path or command other than the deployed ones is refused before any instance
/// sees the command (each of these matched the document's former allowedPattern).
#[test]
fn a_config_path_or_reload_command_outside_the_deployed_set_is_refused() {
    let f = Fixture::new(&["a"]);
    let version = f.upload(&f.config(1, &[("g1.test", "a")]));
    let path = f.haproxy.config_path().display().to_string();
    let reload = f.haproxy.reload_command(&[]);
    let elsewhere = f.haproxy.dir().join("elsewhere.cfg");
    let marker = f.haproxy.dir().join("ran");
    let touch = format!("/usr/bin/touch {}", marker.display());
    let hostile: &[(&str, &str, &str)] = &[
        ("ReloadCommand", "/bin/sh -c id", &reload),
        ("ReloadCommand", &touch, &reload),
        ("ConfigPath", "/etc/cron.d/x", &path),
        ("ConfigPath", &elsewhere.display().to_string(), &path),
    ];
    for (name, value, deployed) in hostile {
        let err = f
            .try_run(
                &f.document,
                &[("ConfigVersion", &version), (name, value)],
                &[],
            )
            .expect_err("refused at SendCommand");
        let message = err.to_string();
        match err {
            AgentError::NotAllowed {
                name: n,
                value: v,
                allowed,
            } => {
                assert_eq!((n.as_str(), v.as_str()), (*name, *value));
                assert_eq!(allowed, [*deployed]);
            }
            other => panic!("{name} = {value:?}: {other:?}"),
        }
        for part in [name, value, deployed] {
            assert!(message.contains(part), "{message:?} names {part:?}");
        }
    }
    assert!(!marker.exists() && !elsewhere.exists(), "nothing ran");
    assert_eq!(f.haproxy.running_generation(), None);

    // The deployed values run, named or left to their defaults.
    let run = f.run(&[
        ("ConfigVersion", &version),
        ("ConfigPath", &path),
        ("ReloadCommand", &reload),
    ]);
    assert!(run.success(), "{run}{}", f.haproxy.log());
    assert_eq!(f.haproxy.running_generation(), Some(1));
    let run = f.run(&[("ConfigVersion", &version)]);
    assert!(run.success(), "{run}");
    assert_eq!(run.step("skip").len(), 1, "{run}");
}

#[test]
fn a_first_install_then_a_new_config_goes_live() {
    let f = Fixture::new(&["a", "b"]);
    let first = f.config(1, &[("g1.test", "a")]);
    let version = f.upload(&first);
    let run = f.apply(&version);
    assert!(run.success(), "{run}{}", f.haproxy.log());
    assert!(run.step("keep")[0].contains("nothing to keep"), "{run}");
    assert_eq!(f.haproxy.running_generation(), Some(1));
    f.assert_routes("g1.test", "a");
    f.assert_no_route("g2.test");

    let second = f.config(2, &[("g1.test", "a"), ("g2.test", "b")]);
    let version = f.upload(&second);
    let run = f.apply(&version);
    assert!(run.success(), "{run}{}", f.haproxy.log());
    for step in [
        "lock", "download", "verify", "keep", "swap", "reload", "done",
    ] {
        assert_eq!(run.step(step).len(), 1, "one {step} line:\n{run}");
    }
    assert!(
        run.step("done")[0].starts_with("generation 2 is running"),
        "{run}"
    );
    assert_eq!(f.haproxy.running_generation(), Some(2));
    f.assert_routes("g2.test", "b");
    f.assert_routes("g1.test", "a");
    assert_eq!(f.installed(), second);
    assert_eq!(f.last_good().as_deref(), Some(first.as_str()));
    assert_eq!(temp_files(f.haproxy.dir()), Vec::<String>::new());
}

#[test]
fn a_config_haproxy_rejects_is_not_installed_and_the_old_one_keeps_serving() {
    let f = Fixture::new(&["a", "b"]);
    let first = f.config(1, &[("g1.test", "a")]);
    f.install_first(&first);

    let second = f.config(2, &[("g1.test", "a"), ("g2.test", "b")]);
    let body = artifact::body(&second).replace("defaults\n", "defaults\n    no-such-keyword on\n");
    let broken = restamp(&second, &body);
    let run = f.apply(&f.upload(&broken));
    assert_eq!(run.status, Some(1), "{run}");
    let failure = run.failure().expect("a FAILED line");
    assert!(
        failure.contains("haproxy -c rejected generation 2"),
        "{run}"
    );
    assert!(
        failure.contains("no-such-keyword"),
        "the reason names the problem:\n{run}"
    );
    assert!(
        failure.ends_with("nothing changed (running generation 1)"),
        "{run}"
    );
    assert_eq!(f.installed(), first);
    assert_eq!(f.last_good(), None, "step 5 never ran");
    assert_eq!(f.haproxy.running_generation(), Some(1));
    f.assert_routes("g1.test", "a");
    f.assert_no_route("g2.test");
    assert_eq!(temp_files(f.haproxy.dir()), Vec::<String>::new());
}

#[test]
fn a_body_that_does_not_match_its_sha256_is_rejected_before_anything_is_touched() {
    let f = Fixture::new(&["a", "b"]);
    let first = f.config(1, &[("g1.test", "a")]);
    f.install_first(&first);
    let before = snapshot(f.haproxy.dir());

    let second = f.config(2, &[("g1.test", "a"), ("g2.test", "b")]);
    let tampered = second.replace("proxy.api.g2.test", "proxy.api.evil.test");
    assert_ne!(tampered, second);
    let run = f.apply(&f.upload(&tampered));
    assert_eq!(run.status, Some(1), "{run}");
    assert!(run.failure().unwrap().contains("sha256 mismatch"), "{run}");
    assert!(run.step("check").is_empty(), "haproxy -c never ran:\n{run}");
    // Same files, same bytes (the lock file exists since the first install).
    assert_eq!(snapshot(f.haproxy.dir()), before, "nothing touched");
    assert_eq!(f.haproxy.running_generation(), Some(1));
    f.assert_no_route("evil.test");
}

#[test]
fn an_older_or_equal_generation_is_skipped() {
    let f = Fixture::new(&["a", "b"]);
    let third = f.config(3, &[("g3.test", "a")]);
    f.install_first(&third);

    let same = f.config(3, &[("g3.test", "a"), ("other.test", "b")]);
    let older = f.config(2, &[("g2.test", "b")]);
    for text in [same, older] {
        let run = f.apply(&f.upload(&text));
        assert!(run.success(), "{run}{}", f.haproxy.log());
        let skip = run.step("skip");
        assert_eq!(skip.len(), 1, "{run}");
        assert!(
            skip[0].contains("not newer than the running generation 3"),
            "{run}"
        );
        assert!(
            run.step("check").is_empty() && run.step("reload").is_empty(),
            "{run}"
        );
    }
    assert_eq!(f.installed(), third);
    assert_eq!(f.last_good(), None);
    assert_eq!(f.haproxy.running_generation(), Some(3));
    f.assert_routes("g3.test", "a");
}

/// The state an apply leaves when it dies after its swap (SSM's timeout, an agent restart, a
/// reboot): `config` in the file with its maps, last-known-good kept, HAProxy never reloaded.
fn died_after_swap(f: &Fixture, kept: &str, config: &str) {
    std::fs::write(
        f.haproxy.config_path().with_extension("cfg.last-good"),
        kept,
    )
    .unwrap();
    proxy::install_config(f.haproxy.dir(), config);
}

#[test]
fn a_file_haproxy_does_not_run_is_installed_again_not_skipped() {
    let f = Fixture::new(&["a", "b"]);
    let first = f.config(1, &[("g1.test", "a")]);
    f.install_first(&first);
    let second = f.config(2, &[("g1.test", "a"), ("g2.test", "b")]);
    let version = f.upload(&second);
    died_after_swap(&f, &first, &second);
    assert_eq!(f.haproxy.running_generation(), Some(1));

    // The retry (or the association's next run) of the same version.
    let run = f.apply(&version);
    assert!(run.success(), "{run}{}", f.haproxy.log());
    assert!(run.step("skip").is_empty(), "not skipped:\n{run}");
    assert!(
        run.step("state")[0].contains("holds generation 2 but HAProxy runs generation 1"),
        "{run}"
    );
    assert_eq!(f.haproxy.running_generation(), Some(2), "{run}");
    f.assert_routes("g2.test", "b");
    assert_eq!(
        f.last_good().as_deref(),
        Some(first.as_str()),
        "last-known-good is what ran, not the file that never did:\n{run}"
    );

    // Now the file is what runs: the same version again is skipped.
    let run = f.apply(&version);
    assert!(run.success(), "{run}");
    assert!(
        run.step("skip")[0].contains("not newer than the running generation 2"),
        "{run}"
    );
}

#[test]
fn a_file_that_never_ran_is_not_kept_as_last_known_good() {
    let f = Fixture::new(&["a", "b"]);
    let first = f.config(1, &[("g1.test", "a")]);
    f.install_first(&first);
    let second = f.config(2, &[("g1.test", "a"), ("g2.test", "b")]);
    died_after_swap(&f, &first, &second);

    // The next generation cannot start (its HTTP port is taken): the rollback must bring
    // back what ran, generation 1, not the unverified generation 2 from the file.
    let squatter = TcpListener::bind("127.0.0.1:0").unwrap();
    let mut options = f.haproxy.options(f.backends.port);
    options.http_bind = squatter.local_addr().unwrap().to_string();
    let third = f.config_with(3, &[("g3.test", "a")], &options);
    let run = f.apply(&f.upload(&third));
    assert_eq!(run.status, Some(2), "{run}");
    assert!(
        run.step("keep")[0].contains("generation 2 in")
            && run.step("keep")[0].contains("never ran here"),
        "{run}"
    );
    assert!(
        run.failure()
            .unwrap()
            .ends_with("; restored last-known-good generation 1"),
        "{run}"
    );
    assert_eq!(f.installed(), first);
    assert_eq!(f.last_good().as_deref(), Some(first.as_str()));
    assert_eq!(f.haproxy.running_generation(), Some(1));
    f.assert_routes("g1.test", "a");
    drop(squatter);
}

#[test]
fn a_config_that_cannot_start_is_rolled_back_to_the_last_known_good() {
    let f = Fixture::new(&["a", "b"]);
    let first = f.config(1, &[("g1.test", "a")]);
    f.install_first(&first);

    // Valid for `haproxy -c` (which binds nothing), but its HTTP port is taken: the new
    // worker cannot start, and the old one keeps serving.
    let squatter = TcpListener::bind("127.0.0.1:0").unwrap();
    let mut options = f.haproxy.options(f.backends.port);
    options.http_bind = squatter.local_addr().unwrap().to_string();
    let second = f.config_with(2, &[("g1.test", "a"), ("g2.test", "b")], &options);
    let run = f.apply(&f.upload(&second));
    assert_eq!(run.status, Some(2), "{run}");
    let failure = run.failure().unwrap();
    assert!(
        failure.contains("HAProxy did not report generation 2"),
        "{run}"
    );
    assert!(
        failure.ends_with("; restored last-known-good generation 1"),
        "{run}"
    );
    assert_eq!(
        run.stderr.lines().filter(|l| l.contains("FAILED")).count(),
        1,
        "{run}"
    );
    assert_eq!(f.installed(), first);
    assert_eq!(f.last_good().as_deref(), Some(first.as_str()));
    assert_eq!(f.haproxy.running_generation(), Some(1));
    f.assert_routes("g1.test", "a");
    f.assert_no_route("g2.test");
    drop(squatter);
}

/// The generations whose route maps are on disk, and any staging left behind.
fn map_dirs(f: &Fixture) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(f.haproxy.dir().join("autoproxy"))
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name != "addresses.map")
        .collect();
    names.sort();
    names
}

#[test]
fn route_maps_are_installed_and_rolled_back_with_their_generation() {
    let f = Fixture::new(&["a", "b"]);
    let first = f.config(1, &[("g1.test", "a")]);
    f.install_first(&first);
    let maps = f.haproxy.dir().join("autoproxy");
    let routes = std::fs::read_to_string(maps.join("gen-1/routes.map")).unwrap();
    let a = f.backends.get("a").addr;
    assert_eq!(
        routes,
        format!("proxy.api.g1.test {}:{}\n", a.ip(), a.port())
    );
    assert_eq!(
        std::fs::read_to_string(maps.join("gen-1/suffixes.map")).unwrap(),
        ""
    );
    assert!(maps.join("addresses.map").is_file());

    let second = f.config(2, &[("g1.test", "a"), ("g2.test", "b")]);
    let run = f.apply(&f.upload(&second));
    assert!(run.success(), "{run}");
    assert!(
        run.step("maps")
            .iter()
            .any(|l| l.contains("2 exact, 0 suffix routes")),
        "{run}"
    );
    assert_eq!(map_dirs(&f), ["gen-1", "gen-2"]);

    // Only the running generation's maps and last-known-good's stay.
    let third = f.config(3, &[("g3.test", "a")]);
    assert!(f.apply(&f.upload(&third)).success());
    assert_eq!(map_dirs(&f), ["gen-2", "gen-3"]);
    f.assert_routes("g3.test", "a");
    f.assert_no_route("g2.test");

    // A generation that cannot start rolls back to a config whose maps are still there.
    let squatter = TcpListener::bind("127.0.0.1:0").unwrap();
    let mut options = f.haproxy.options(f.backends.port);
    options.http_bind = squatter.local_addr().unwrap().to_string();
    let fourth = f.config_with(4, &[("g4.test", "b")], &options);
    let run = f.apply(&f.upload(&fourth));
    assert_eq!(run.status, Some(2), "{run}");
    assert_eq!(f.haproxy.running_generation(), Some(3));
    f.assert_routes("g3.test", "a");
    f.assert_no_route("g4.test");
    assert!(
        map_dirs(&f).contains(&"gen-3".to_owned()),
        "{:?}",
        map_dirs(&f)
    );
    drop(squatter);

    // The next good generation tidies what the failed one left.
    let fifth = f.config(5, &[("g5.test", "b")]);
    assert!(f.apply(&f.upload(&fifth)).success());
    assert_eq!(map_dirs(&f), ["gen-3", "gen-5"]);
    f.assert_routes("g5.test", "b");
}

/// A config of the per-route layout: one backend whose server `host` HAProxy resolves
/// through `dns`, for the SNI `proxy.api.<zone>`.
fn per_route_config(
    f: &Fixture,
    generation: u64,
    zone: &str,
    host: &str,
    dns: SocketAddr,
) -> String {
    let port = f.backends.port;
    let socket = f.haproxy.stats_socket();
    let body = format!(
        "global\n    master-worker\n    description autoproxy generation {generation}\n    \
         stats socket {} mode 660 level admin expose-fd listeners\n\
         resolvers vpc\n    nameserver ns1 {dns}\n    timeout resolve 1s\n\
         defaults\n    mode tcp\n    timeout connect 2s\n    timeout client 5s\n    timeout server 5s\n\
         frontend tls\n    bind {}\n    tcp-request inspect-delay 5s\n    \
         tcp-request content accept if {{ req.ssl_hello_type 1 }}\n    \
         use_backend be_one if {{ req.ssl_sni -i proxy.api.{zone} }}\n\
         backend be_one\n    server {host} {host}:{port} resolvers vpc init-addr none resolve-prefer ipv4\n",
        socket.display(),
        f.haproxy.https,
    );
    format!(
        "# autoproxy: generated\n# generation: {generation}\n# sha256: {}\n\
         # generated-at: 2026-01-01T00:00:00Z\n# trigger: test\n# rules: 1\n{body}",
        artifact::sha256_hex(body.as_bytes())
    )
}

#[test]
fn the_first_config_with_an_address_map_starts_from_what_haproxy_had_resolved() {
    let f = Fixture::new(&["a"]);
    let dns = DnsServer::start("127.0.0.1:0".parse().unwrap()).unwrap();
    let a = f.backends.get("a").addr;
    let std::net::IpAddr::V4(ip) = a.ip() else {
        panic!("backends listen on IPv4 loopback")
    };
    dns.set("api.up.test", &[ip]);
    f.install_first(&per_route_config(
        &f,
        1,
        "up.test",
        "api.up.test",
        dns.addr(),
    ));
    // HAProxy resolves the server's name at run time; wait until it routes.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while f.haproxy.probe("proxy.api.up.test").ok().as_deref() != Some("backend a") {
        assert!(std::time::Instant::now() < deadline, "{}", f.haproxy.log());
        std::thread::sleep(Duration::from_millis(100));
    }

    // The new layout names the same host; no autoproxy-resolver runs here, so only the
    // seeded address can route it.
    let mut route = proxy::api_route("up.test", f.backends.get("a"));
    route.backend = autoproxy::names::HostName::parse("api.up.test").unwrap();
    let text = proxy::render(2, &[route], &f.haproxy.options(f.backends.port));
    let run = f.apply(&f.upload(&text));
    assert!(run.success(), "{run}");
    assert!(
        run.step("maps").iter().any(|l| l.contains("started")
            && l.contains("with 1 addresses the running HAProxy had resolved")),
        "{run}"
    );
    let map = std::fs::read_to_string(f.haproxy.dir().join("autoproxy/addresses.map")).unwrap();
    assert_eq!(map, format!("api.up.test {ip}\n"));
    f.assert_routes("up.test", "a");
}

#[test]
fn a_failing_reload_command_is_rolled_back() {
    let f = Fixture::new(&["a", "b"]);
    let first = f.config(1, &[("g1.test", "a")]);
    f.install_first(&first);
    let second = f.config(2, &[("g1.test", "a"), ("g2.test", "b")]);
    let version = f.upload(&second);

    // Fails once: the rollback's own reload works.
    let flaky = f
        .haproxy
        .apply_document_reloading_with(&f.haproxy.reload_command(&["fail-once"]))
        .unwrap();
    let run = f.run_deployed(&flaky, &[("ConfigVersion", &version)]);
    assert_eq!(run.status, Some(2), "{run}");
    let failure = run.failure().unwrap();
    assert!(failure.contains("exited with 1"), "{run}");
    assert!(
        failure.ends_with("; restored last-known-good generation 1"),
        "{run}"
    );
    assert_eq!(f.installed(), first);
    assert_eq!(f.haproxy.running_generation(), Some(1));
    f.assert_routes("g1.test", "a");

    // Always fails: the file is restored, and the run says the rollback is incomplete.
    let failing = f.haproxy.apply_document_reloading_with("false").unwrap();
    let run = f.run_deployed(&failing, &[("ConfigVersion", &version)]);
    assert_eq!(run.status, Some(3), "{run}");
    assert!(
        run.failure().unwrap().contains("its reload failed too"),
        "{run}"
    );
    assert_eq!(f.installed(), first);
    assert_eq!(f.haproxy.running_generation(), Some(1));
    f.assert_routes("g1.test", "a");
}

#[test]
fn two_runs_at_once_are_serialised() {
    let f = Fixture::new(&["a", "b"]);
    f.install_first(&f.config(1, &[("g1.test", "a")]));
    let second = f.upload(&f.config(2, &[("g1.test", "a"), ("g2.test", "b")]));
    let third_text = f.config(3, &[("g1.test", "a"), ("g2.test", "b"), ("g3.test", "a")]);
    let third = f.upload(&third_text);

    // The first run holds the lock for at least the 2 s its reload sleeps.
    let slow = f
        .haproxy
        .apply_document_reloading_with(&f.haproxy.reload_command(&["2"]))
        .unwrap();
    let (first_run, second_run) = std::thread::scope(|scope| {
        let a = scope.spawn(|| f.run_deployed(&slow, &[("ConfigVersion", &second)]));
        std::thread::sleep(Duration::from_millis(300));
        let b = scope.spawn(|| f.apply(&third));
        (a.join().unwrap(), b.join().unwrap())
    });
    assert!(first_run.success(), "{first_run}");
    assert!(second_run.success(), "{second_run}");
    assert!(first_run.started < second_run.started);
    assert!(
        lock_wait(&first_run) < Duration::from_millis(500),
        "{first_run}"
    );
    let acquired = second_run.started + lock_wait(&second_run);
    assert!(
        acquired >= first_run.started + Duration::from_secs(2),
        "the second run got the lock while the first was still reloading:\n{first_run}{second_run}"
    );
    assert!(second_run.finished > first_run.finished);
    assert_eq!(f.installed(), third_text);
    assert_eq!(f.haproxy.running_generation(), Some(3));
    f.assert_routes("g3.test", "a");
}

#[test]
fn an_empty_config_version_installs_the_latest() {
    let f = Fixture::new(&["a", "b"]);
    f.upload(&f.config(1, &[("g1.test", "a")]));
    let latest = f.upload(&f.config(2, &[("g2.test", "b")]));
    // The association passes no version: the default is empty.
    let run = f.run(&[]);
    assert!(run.success(), "{run}{}", f.haproxy.log());
    assert!(
        run.step("download")[0].contains(&format!("version {latest}")),
        "{run}"
    );
    assert_eq!(f.haproxy.running_generation(), Some(2));
    f.assert_routes("g2.test", "b");

    let newest = f.upload(&f.config(3, &[("g3.test", "a")]));
    let run = f.apply("");
    assert!(run.success(), "{run}{}", f.haproxy.log());
    assert!(
        run.step("download")[0].contains(&format!("version {newest}")),
        "{run}"
    );
    assert_eq!(f.haproxy.running_generation(), Some(3));
    f.assert_routes("g3.test", "a");
}

#[test]
fn reload_under_load() {
    const RELOADS: u64 = 20;
    const MAX_CONNECTIONS: usize = 12_000;
    let f = Fixture::new(&["a", "b"]);
    f.install_first(&f.config(1, &[("steady.test", "a")]));

    let stop = AtomicBool::new(false);
    let total = AtomicUsize::new(0);
    let failures = Mutex::new(Vec::new());
    let mut durations = Vec::new();
    std::thread::scope(|scope| {
        for _ in 0..2 {
            scope.spawn(|| {
                while !stop.load(Ordering::SeqCst)
                    && total.fetch_add(1, Ordering::SeqCst) < MAX_CONNECTIONS
                {
                    match f.haproxy.probe("proxy.api.steady.test") {
                        Ok(banner) if banner == "backend a" => {}
                        other => failures.lock().unwrap().push(format!("{other:?}")),
                    }
                    std::thread::sleep(Duration::from_millis(2));
                }
            });
        }
        for generation in 2..=RELOADS + 1 {
            let zone = format!("g{generation}.test");
            let text = f.config(generation, &[("steady.test", "a"), (&zone, "b")]);
            let run = f.apply(&f.upload(&text));
            assert!(run.success(), "generation {generation}:\n{run}");
            durations.push(run.elapsed());
        }
        stop.store(true, Ordering::SeqCst);
    });
    let total = total.load(Ordering::SeqCst).min(MAX_CONNECTIONS);
    let failures = failures.into_inner().unwrap();
    durations.sort();
    let median = durations[durations.len() / 2];
    println!(
        "reload under load: {} failed / {total} connections, {RELOADS} reloads, one apply takes {} ms (median)",
        failures.len(),
        median.as_millis()
    );
    assert_eq!(f.haproxy.running_generation(), Some(RELOADS + 1));
    f.assert_routes(&format!("g{}.test", RELOADS + 1), "b");
    assert!(
        total > 100,
        "the load was too light to mean anything: {total}"
    );
    assert!(
        failures.is_empty(),
        "failed connections: {:?}",
        &failures[..failures.len().min(10)]
    );
}

#[test]
fn every_apply_leaves_a_fleet_record_of_what_runs() {
    let f = Fixture::new(&["a", "b"]);
    let first = f.config(1, &[("g1.test", "a")]);
    let version = f.upload(&first);
    let (run, record) = f.apply_and_record(&version);
    assert!(run.success(), "{run}");
    let header = artifact::parse_header(&first).unwrap();
    assert_eq!(record["instance_id"], INSTANCE);
    assert_eq!(record["generation"], 1);
    assert_eq!(record["sha256"], header.sha256.as_str());
    assert_eq!(record["result"], "applied");
    assert_eq!(record["reason"], "");
    assert_eq!(record["version_id"], version.as_str());
    assert!(
        record["at"].as_str().is_some_and(|at| at.ends_with('Z')),
        "{record}"
    );

    let (run, record) = f.apply_and_record(&version);
    assert!(run.success(), "{run}");
    assert_eq!(record["result"], "skipped");
    assert_eq!(record["generation"], 1);

    // Rejected by `haproxy -c`: the record says so, and that generation 1 still runs.
    let second = f.config(2, &[("g2.test", "b")]);
    let body = artifact::body(&second).replace("defaults\n", "defaults\n    no-such-keyword on\n");
    let broken = restamp(&second, &body);
    let (run, record) = f.apply_and_record(&f.upload(&broken));
    assert_eq!(run.status, Some(1), "{run}");
    assert_eq!(record["result"], "rejected");
    assert_eq!(record["generation"], 1);
    assert!(
        record["reason"]
            .as_str()
            .is_some_and(|r| r.contains("haproxy -c rejected generation 2")),
        "{record}"
    );

    // A config that cannot start: rolled back, generation 1 runs again.
    let squatter = TcpListener::bind("127.0.0.1:0").unwrap();
    let mut options = f.haproxy.options(f.backends.port);
    options.http_bind = squatter.local_addr().unwrap().to_string();
    let third = f.config_with(3, &[("g3.test", "a")], &options);
    let (run, record) = f.apply_and_record(&f.upload(&third));
    assert_eq!(run.status, Some(2), "{run}");
    assert_eq!(record["result"], "rolled_back");
    assert_eq!(record["generation"], 1);
    drop(squatter);
}

/// A push that meets another apply's lock (an association run) waits longer than that apply
/// can hold it, and the wait plus a whole apply still fits the document's timeout.
#[test]
fn a_lock_wait_outlasts_any_apply_that_holds_the_lock() {
    let text = std::fs::read_to_string(autoproxy_tests::root().join("template.yaml")).unwrap();
    let document = Document::from_workspace(&[]).unwrap();
    let constant = |name: &str| -> u64 {
        document
            .script
            .lines()
            .find_map(|line| line.trim().strip_prefix(&format!("{name}=")))
            .and_then(|value| value.split_whitespace().next()?.parse().ok())
            .unwrap_or_else(|| panic!("the apply script sets no {name}=<seconds>"))
    };
    // Each bounded step runs under `timeout -k 5`.
    let kill = 5;
    let hold = constant("DOWNLOAD_TIMEOUT_SECONDS")
        + kill
        + constant("HAPROXY_CHECK_TIMEOUT_SECONDS")
        + kill
        + 2 * (constant("RELOAD_TIMEOUT_SECONDS") + kill + constant("CHECK_SECONDS"));
    let wait = constant("LOCK_WAIT_SECONDS");
    assert!(wait > hold, "lock wait {wait} s, longest hold {hold} s");
    let timeout: u64 = text
        .lines()
        .find_map(|line| line.trim().strip_prefix("timeoutSeconds: "))
        .and_then(|value| value.trim_matches('"').parse().ok())
        .expect("the document's timeoutSeconds");
    assert!(
        wait + hold < timeout,
        "a wait ({wait} s) and a whole apply ({hold} s) exceed timeoutSeconds {timeout}"
    );
}

#[test]
fn a_stats_socket_path_that_is_not_only_a_path_is_refused() {
    let f = Fixture::new(&["a", "b"]);
    let first = f.config(1, &[("g1.test", "a")]);
    f.install_first(&first);
    let before = snapshot(f.haproxy.dir());

    // A path socat would read as an address with options (and HAProxy accepts as a file name).
    let socket = f.haproxy.stats_socket().display().to_string();
    let hostile = format!("{socket},ignoreeof");
    let second = f.config(2, &[("g1.test", "a"), ("g2.test", "b")]);
    let body = artifact::body(&second).replace(&socket, &hostile);
    assert_ne!(body, artifact::body(&second));
    let run = f.apply(&f.upload(&restamp(&second, &body)));
    assert_eq!(run.status, Some(1), "{run}");
    let failure = run.failure().unwrap();
    assert!(
        failure.contains("declares stats socket") && failure.contains("ignoreeof"),
        "{run}"
    );
    assert!(
        run.step("check").is_empty(),
        "refused before haproxy -c:\n{run}"
    );
    assert_eq!(snapshot(f.haproxy.dir()), before, "nothing touched");
    assert_eq!(f.haproxy.running_generation(), Some(1));
}

/// What one argument of a `sync` call was at the moment of the call.
#[derive(Debug, Clone, PartialEq)]
enum Synced {
    Dir(PathBuf),
    /// A file and its size.
    File(PathBuf, u64),
    Missing(PathBuf),
}

impl Synced {
    fn path(&self) -> &Path {
        match self {
            Synced::Dir(path) | Synced::File(path, _) | Synced::Missing(path) => path,
        }
    }
}

/// A `sync` placed first in PATH (the script only appends the system directories): it logs
/// each call, one line per path argument as it is at that moment, then runs the real `sync`.
struct SyncShim {
    dir: tempfile::TempDir,
}

impl SyncShim {
    fn new() -> SyncShim {
        let real = ["/usr/bin/sync", "/bin/sync"]
            .into_iter()
            .map(Path::new)
            .find(|path| path.is_file())
            .expect("coreutils sync");
        let dir = tempfile::Builder::new()
            .prefix("autoproxy-sync-shim-")
            .tempdir()
            .unwrap();
        let log = dir.path().join("sync.log");
        let script = format!(
            r#"#!/bin/sh
for arg in "$@"; do
  case $arg in -*) continue ;; esac
  if [ -d "$arg" ]; then echo "dir $arg"
  elif [ -f "$arg" ]; then echo "file $(wc -c <"$arg") $arg"
  else echo "missing $arg"; fi
done >>'{log}'
echo end >>'{log}'
exec '{real}' "$@"
"#,
            log = log.display(),
            real = real.display()
        );
        let shim = dir.path().join("sync");
        std::fs::write(&shim, script).unwrap();
        std::fs::set_permissions(&shim, std::fs::Permissions::from_mode(0o755)).unwrap();
        SyncShim { dir }
    }

    /// The environment that puts the shim first (then the pinned tools, as the agent
    /// stand-in does).
    fn env(&self) -> Vec<(String, String)> {
        let inherited = std::env::var("PATH").unwrap_or_default();
        let tools = autoproxy_tests::moto::tools_bin();
        vec![(
            "PATH".to_owned(),
            format!(
                "{}:{}:{inherited}",
                self.dir.path().display(),
                tools.display()
            ),
        )]
    }

    /// The calls logged since the last `take`, in order, each its arguments.
    fn take(&self) -> Vec<Vec<Synced>> {
        let log = self.dir.path().join("sync.log");
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let _ = std::fs::remove_file(&log);
        let mut calls = vec![Vec::new()];
        for line in text.lines() {
            let (kind, rest) = line.split_once(' ').unwrap_or((line, ""));
            let current = calls.last_mut().unwrap();
            match kind {
                "end" => calls.push(Vec::new()),
                "dir" => current.push(Synced::Dir(rest.into())),
                "missing" => current.push(Synced::Missing(rest.into())),
                "file" => {
                    let (size, path) = rest.trim_start().split_once(' ').unwrap();
                    current.push(Synced::File(path.into(), size.parse().unwrap()));
                }
                other => panic!("sync log line {other:?}"),
            }
        }
        calls.pop();
        calls
    }
}

/// The calls, by index, that named a path in `dir` whose name starts with `prefix`.
fn synced_in<'a>(calls: &'a [Vec<Synced>], dir: &Path, prefix: &str) -> Vec<(usize, &'a Synced)> {
    calls
        .iter()
        .enumerate()
        .flat_map(|(index, call)| call.iter().map(move |arg| (index, arg)))
        .filter(|(_, arg)| {
            arg.path().parent() == Some(dir)
                && arg
                    .path()
                    .file_name()
                    .is_some_and(|name| name.to_string_lossy().starts_with(prefix))
        })
        .collect()
}

/// The one staging file in `dir` named `<prefix>…` that was synced, complete (`size` bytes),
/// and is gone now (renamed into place); the index of its call.
#[track_caller]
fn staged_file(calls: &[Vec<Synced>], dir: &Path, prefix: &str, size: u64) -> usize {
    let found = synced_in(calls, dir, prefix);
    let [(index, Synced::File(path, synced))] = found.as_slice() else {
        panic!("expected one file {prefix}… in {dir:?} synced: {found:?}\nall calls: {calls:#?}")
    };
    assert_eq!(*synced, size, "{path:?} was synced before it was complete");
    assert!(!path.exists(), "{path:?} was renamed into place after");
    *index
}

/// The calls, by index, that synced directory `dir`.
fn synced_dir(calls: &[Vec<Synced>], dir: &Path) -> Vec<usize> {
    calls
        .iter()
        .enumerate()
        .filter(|(_, call)| call.contains(&Synced::Dir(dir.to_owned())))
        .map(|(index, _)| index)
        .collect()
}

/// A config with an exact and a suffix route to `backend`, so both route maps have content.
fn config_with_both_maps(f: &Fixture, generation: u64, zone: &str, backend: &str) -> String {
    let exact = proxy::api_route(zone, f.backends.get(backend));
    let mut suffix = exact.clone();
    suffix.rule = "ingress-int".to_owned();
    suffix.sni = format!(".int.{zone}");
    suffix.sni_match = SniMatch::Suffix;
    proxy::render(
        generation,
        &[exact, suffix],
        &f.haproxy.options(f.backends.port),
    )
}

/// Checks the maps of `generation` were synced complete in their staging directory, before
/// the config's own sync at call `new`; the maps directory (holding their rename) by then.
#[track_caller]
fn assert_maps_synced(f: &Fixture, calls: &[Vec<Synced>], generation: u64, new: usize) {
    let maps = f.haproxy.dir().join("autoproxy");
    let stage = synced_in(calls, &maps, &format!(".gen-{generation}."));
    let [(at, Synced::Dir(stage))] = stage.as_slice() else {
        panic!("expected the staging directory of generation {generation} synced: {calls:#?}")
    };
    assert!(!stage.exists(), "{stage:?} was renamed into place after");
    let installed = maps.join(format!("gen-{generation}"));
    for name in ["routes.map", "suffixes.map"] {
        let size = std::fs::metadata(installed.join(name)).unwrap().len();
        assert!(size > 0, "{name} has routes");
        assert_eq!(
            staged_file(calls, stage, name, size),
            *at,
            "{name} synced with its directory"
        );
    }
    assert!(*at < new, "the maps before the config: {calls:#?}");
    assert!(
        synced_dir(calls, &maps)
            .iter()
            .any(|&index| *at < index && index <= new),
        "{maps:?} (the maps' rename) synced before the config's rename: {calls:#?}"
    );
}

/// A crash on XFS after a rename can leave a zero-length file in place unless its data was
/// flushed first: every file the apply renames into place (the config, its maps, the seeded
/// address map, last-known-good, a rollback's restore) is synced at its staging path, complete,
/// before its rename, and the directory after.
#[test]
fn every_file_is_on_disk_before_the_rename_that_installs_it() {
    let f = Fixture::new(&["a", "b"]);
    let shim = SyncShim::new();
    let dir = f.haproxy.dir().to_owned();
    let maps = dir.join("autoproxy");
    let apply = |text: &str| {
        let version = f.upload(text);
        let run = f
            .try_run(&f.document, &[("ConfigVersion", &version)], &shim.env())
            .unwrap();
        let calls = shim.take();
        let missing: Vec<&Synced> = calls
            .iter()
            .flatten()
            .filter(|arg| matches!(arg, Synced::Missing(_)))
            .collect();
        assert!(missing.is_empty(), "synced what did not exist: {missing:?}");
        (run, calls)
    };
    let len = |text: &str| u64::try_from(text.len()).unwrap();

    // The first install: the seeded address map, generation 1's maps, the config.
    let first = config_with_both_maps(&f, 1, "g1.test", "a");
    let (run, calls) = apply(&first);
    assert!(run.success(), "{run}{}", f.haproxy.log());
    let new = staged_file(&calls, &dir, ".autoproxy-new.", len(&first));
    assert_maps_synced(&f, &calls, 1, new);
    let seeded = std::fs::metadata(maps.join("addresses.map")).unwrap().len();
    assert!(staged_file(&calls, &maps, ".autoproxy-addresses.", seeded) < new);
    assert!(
        synced_dir(&calls, &dir).iter().any(|&index| index > new),
        "{dir:?} synced after the config's rename: {calls:#?}"
    );

    // The next generation: last-known-good too.
    let second = config_with_both_maps(&f, 2, "g2.test", "b");
    let (run, calls) = apply(&second);
    assert!(run.success(), "{run}{}", f.haproxy.log());
    assert_eq!(f.installed(), second);
    let new = staged_file(&calls, &dir, ".autoproxy-new.", len(&second));
    assert_maps_synced(&f, &calls, 2, new);
    assert!(staged_file(&calls, &dir, ".autoproxy-last-good.", len(&first)) < new);
    assert_eq!(f.last_good().as_deref(), Some(first.as_str()));
    assert!(
        synced_dir(&calls, &dir).iter().any(|&index| index > new),
        "{dir:?} synced after the config's rename: {calls:#?}"
    );

    // A generation that cannot start: the rollback's restore of generation 2.
    let squatter = TcpListener::bind("127.0.0.1:0").unwrap();
    let mut options = f.haproxy.options(f.backends.port);
    options.http_bind = squatter.local_addr().unwrap().to_string();
    let third = f.config_with(3, &[("g3.test", "a")], &options);
    let (run, calls) = apply(&third);
    assert_eq!(run.status, Some(2), "{run}");
    assert_eq!(f.installed(), second);
    let restore = staged_file(&calls, &dir, ".autoproxy-restore.", len(&second));
    assert!(
        synced_dir(&calls, &dir)
            .iter()
            .any(|&index| index > restore),
        "{dir:?} synced after the restore's rename: {calls:#?}"
    );
    drop(squatter);
}
