//! A local stand-in for the SSM agent running the apply document.
//!
//! moto records `SendCommand` but runs nothing, so the tests (and the demo) run the document
//! themselves, the way the stack and the agent do: take it from `template.yaml` as a deploy
//! creates it (every `!Ref` of a template parameter replaced by the value the deployer chose,
//! or the parameter's `Default`, each checked against its `AllowedPattern`/`AllowedValues` as
//! CloudFormation checks them), fill in parameter defaults, refuse a value outside a
//! parameter's `allowedValues` or `allowedPattern` as SSM does at `SendCommand`, carry out the
//! `aws:downloadContent` steps (the published agent, from moto's S3, to the step's
//! `destinationPath` under the key's last part), and run the `aws:runShellScript` text with
//! `sh` in a fresh directory, each parameter passed only as the environment variable
//! `SSM_<Name>` (`interpolationType: ENV_VAR`). What is run is exactly the text in
//! `template.yaml`: there is no second copy of the script.

use std::collections::BTreeMap;
use std::fmt;
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use regex_automata::dfa::regex::Regex;
use regex_automata::util::syntax;
use serde_yaml::Value;

use crate::cfn::scalar;

mod deploy;

use deploy::*;

/// The logical id of the document in `template.yaml`.
pub const RESOURCE: &str = "ApplyConfigDocument";

/// The template parameter that fixes the document's `ConfigPath` at deploy time.
pub const CONFIG_PATH_PARAMETER: &str = "ProxyConfigPath";

/// The template parameter that fixes where the document caches the agent.
pub const AGENT_DIRECTORY_PARAMETER: &str = "ProxyAgentDirectory";

/// The template parameter that fixes the document's `ReloadCommand` at deploy time.
pub const RELOAD_COMMAND_PARAMETER: &str = "ProxyReloadCommand";

/// Why the document could not be read or run.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("template.yaml is not YAML: {0}")]
    Yaml(#[from] serde_yaml::Error),
    #[error("expected {expected} in the document, found {found}")]
    Shape { expected: String, found: String },
    #[error("parameter {name}: allowedPattern {pattern:?} does not compile: {source}")]
    Pattern {
        name: String,
        pattern: String,
        #[source]
        source: Box<regex_automata::dfa::dense::BuildError>,
    },
    #[error("expected one of the document's parameters ({known}), got {name}")]
    Unknown { name: String, known: String },
    #[error("parameter {0} is required: it has no default and no value was given")]
    Missing(String),
    #[error("parameter {name}: {value:?} does not match allowedPattern {pattern}")]
    Rejected {
        name: String,
        value: String,
        pattern: String,
    },
    #[error("parameter {name}: {value:?} is not one of its allowedValues {allowed:?}")]
    NotAllowed {
        name: String,
        value: String,
        allowed: Vec<String>,
    },
    #[error("deploy: {name} is not a parameter of the template (CloudFormation refuses the stack)")]
    UnknownTemplateParameter { name: String },
    #[error("deploy: template parameter {0} has no Default and no value was given")]
    TemplateParameterMissing(String),
    #[error("deploy: template parameter {name}: {value:?} breaks its {constraint}")]
    TemplateParameterRejected {
        name: String,
        value: String,
        constraint: String,
    },
    #[error(
        "deploy: {found} in the document: the stand-in resolves only !Ref of a template parameter"
    )]
    Unresolved { found: String },
    #[error("cannot run the script: {0}")]
    Spawn(#[source] std::io::Error),
}

/// One document parameter as SSM enforces it (after the deploy resolved its `!Ref`s).
#[derive(Debug, Clone)]
pub struct Parameter {
    pub name: String,
    pub default: Option<String>,
    /// As the document spells it, if it has one.
    pub allowed_pattern: Option<String>,
    /// Compiled with ASCII classes, as Java (SSM) reads them; searched, not anchored: the
    /// document's patterns carry their own `^...$`.
    matcher: Option<Regex>,
    /// The only values SSM accepts, if the document lists them.
    pub allowed_values: Option<Vec<String>>,
}

/// The apply document as a deploy created it: its parameters and the script of its single
/// step.
#[derive(Debug, Clone)]
pub struct Document {
    pub parameters: Vec<Parameter>,
    /// The `aws:downloadContent` steps before the script, in order.
    pub downloads: Vec<Download>,
    pub script: String,
    /// The document's `Content` with every `!Ref` resolved: what `CreateDocument` receives.
    pub content: Value,
}

/// One `aws:downloadContent` step from S3: the object's URL and the directory it goes to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Download {
    pub name: String,
    /// `https://<bucket>.s3.<region>.amazonaws.com/<key>`, as the SSM agent takes it.
    pub url: String,
    pub destination: PathBuf,
}

impl Download {
    fn from_step(step: &Value) -> Result<Download, AgentError> {
        expect_str(get(step, &["action"])?, "aws:downloadContent", "action")?;
        expect_str(get(step, &["inputs", "sourceType"])?, "S3", "sourceType")?;
        let info = get(step, &["inputs", "sourceInfo"])?
            .as_str()
            .ok_or_else(|| shape("sourceInfo as a JSON string", "something else"))?;
        let info: serde_json::Value = serde_json::from_str(info)
            .map_err(|err| shape("sourceInfo as JSON", &err.to_string()))?;
        let url = info
            .get("path")
            .and_then(serde_json::Value::as_str)
            .ok_or_else(|| shape("sourceInfo {\"path\": URL}", &info.to_string()))?;
        let destination = get(step, &["inputs", "destinationPath"])?
            .as_str()
            .ok_or_else(|| shape("destinationPath as a string", "something else"))?;
        Ok(Download {
            name: get(step, &["name"])?
                .as_str()
                .unwrap_or("download")
                .to_owned(),
            url: url.to_owned(),
            destination: PathBuf::from(destination),
        })
    }

    /// (bucket, key) of a virtual-hosted S3 URL.
    pub fn object(&self) -> Option<(&str, &str)> {
        let rest = self.url.strip_prefix("https://")?;
        let (host, key) = rest.split_once('/')?;
        let (bucket, _) = host.split_once(".s3.")?;
        Some((bucket, key))
    }

    /// Fetches the object into the destination directory under its key's last part, as the
    /// SSM agent does, from the S3 endpoint of `env` (moto). A failure is the step's output.
    fn run(&self, env: &[(String, String)]) -> Result<String, String> {
        let (bucket, key) = self
            .object()
            .ok_or_else(|| format!("{}: not an S3 object URL", self.url))?;
        let endpoint = env
            .iter()
            .rev()
            .find(|(k, _)| k == "AWS_ENDPOINT_URL_S3" || k == "AWS_ENDPOINT_URL")
            .map(|(_, v)| v.trim_end_matches('/').to_owned())
            .ok_or("no AWS_ENDPOINT_URL to download from")?;
        let var = |name: &str| {
            env.iter()
                .rev()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
                .unwrap_or_default()
        };
        let (access, secret, region) = (
            var("AWS_ACCESS_KEY_ID"),
            var("AWS_SECRET_ACCESS_KEY"),
            var("AWS_REGION"),
        );
        // As the SSM agent saves one object: into `destinationPath` under the key's last part
        // when that path is a directory or ends with '/', else as that path itself.
        let destination = self.destination.to_string_lossy();
        let (dir, name) = if destination.ends_with('/') || self.destination.is_dir() {
            (
                self.destination.clone(),
                key.rsplit('/').next().unwrap_or(key).to_owned(),
            )
        } else {
            (
                self.destination
                    .parent()
                    .map_or_else(|| PathBuf::from("/"), Path::to_path_buf),
                self.destination
                    .file_name()
                    .map_or_else(String::new, |n| n.to_string_lossy().into_owned()),
            )
        };
        std::fs::create_dir_all(&dir).map_err(|err| err.to_string())?;
        let target = dir.join(name);
        let (bucket, key) = (bucket.to_owned(), key.to_owned());
        let fetch_target = target.clone();
        // Its own thread and runtime: the caller may be inside one.
        let fetched = std::thread::spawn(move || -> Result<(), String> {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|err| err.to_string())?;
            rt.block_on(async {
                let config = aws_sdk_s3::Config::builder()
                    .behavior_version(aws_config::BehaviorVersion::latest())
                    .endpoint_url(endpoint)
                    .region(aws_sdk_s3::config::Region::new(region))
                    .credentials_provider(aws_sdk_s3::config::Credentials::new(
                        access,
                        secret,
                        None,
                        None,
                        "ssm-agent-stand-in",
                    ))
                    .force_path_style(true)
                    .build();
                let object = aws_sdk_s3::Client::from_conf(config)
                    .get_object()
                    .bucket(&bucket)
                    .key(&key)
                    .send()
                    .await
                    .map_err(|err| aws_sdk_s3::error::DisplayErrorContext(err).to_string())?;
                let bytes = object
                    .body
                    .collect()
                    .await
                    .map_err(|err| err.to_string())?
                    .into_bytes();
                std::fs::write(&fetch_target, &bytes).map_err(|err| err.to_string())
            })
        })
        .join()
        .map_err(|_| "the download thread panicked".to_owned())?;
        let (bucket, key) = self.object().unwrap_or_default();
        match fetched {
            Ok(()) => Ok(format!(
                "downloaded s3://{bucket}/{key} to {}",
                target.display()
            )),
            Err(err) => Err(format!("s3://{bucket}/{key}: {err}")),
        }
    }
}

/// What one run of the script did.
#[derive(Debug, Clone)]
pub struct Run {
    /// Exit status; `None` when killed (see `timed_out`).
    pub status: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    pub started: Instant,
    pub finished: Instant,
    pub timed_out: bool,
}

impl Document {
    /// The document in the workspace's `template.yaml`, or in the template file named by
    /// `AUTOPROXY_TEMPLATE` (to run the tests against a deliberately broken copy of the
    /// script and see them fail), deployed with the template parameters `deploy` (name,
    /// value); the others keep their `Default`.
    pub fn from_workspace(deploy: &[(&str, &str)]) -> Result<Document, AgentError> {
        Document::from_workspace_with(
            deploy,
            &crate::agent::Published::describe(crate::agent::BUCKET).attributes(),
        )
    }

    /// The same, with the attributes the stack's other resources returned (`!GetAtt`): the
    /// published agent's.
    pub fn from_workspace_with(
        deploy: &[(&str, &str)],
        attributes: &[(String, String)],
    ) -> Result<Document, AgentError> {
        let path = std::env::var_os("AUTOPROXY_TEMPLATE")
            .map_or_else(|| crate::root().join("template.yaml"), PathBuf::from);
        let text = std::fs::read_to_string(&path).map_err(|source| AgentError::Read {
            path: path.clone(),
            source,
        })?;
        Document::from_template_text_with(&text, deploy, attributes)
    }

    /// The document in a SAM/CloudFormation template file, deployed with `deploy`.
    pub fn from_template(path: &Path, deploy: &[(&str, &str)]) -> Result<Document, AgentError> {
        let text = std::fs::read_to_string(path).map_err(|source| AgentError::Read {
            path: path.to_owned(),
            source,
        })?;
        Document::from_template_text(&text, deploy)
    }

    /// A template's text, deployed with `deploy`, the agent described for the default bucket.
    pub fn from_template_text(text: &str, deploy: &[(&str, &str)]) -> Result<Document, AgentError> {
        Document::from_template_text_with(
            text,
            deploy,
            &crate::agent::Published::describe(crate::agent::BUCKET).attributes(),
        )
    }

    /// The document in a template's text, deployed with the template parameters `deploy`
    /// (name, value; unnamed ones take their `Default`) and the other resources' `attributes`
    /// (`AgentBinary.Sha256`, …, for `!GetAtt`). Refuses, as CloudFormation would, a name the
    /// template does not declare and a value outside its parameter's `AllowedPattern` or
    /// `AllowedValues`. Refuses a document that breaks the contract the script relies on:
    /// schema 2.2, `aws:downloadContent` steps from S3 followed by one `aws:runShellScript`
    /// step, every parameter a `String` passed as `ENV_VAR` with an `allowedPattern` or
    /// `allowedValues` its default satisfies, no intrinsic but `!Ref` of template parameters,
    /// `!GetAtt` and `!Sub` over both, and no `{{ }}` in the script.
    pub fn from_template_text_with(
        text: &str,
        deploy: &[(&str, &str)],
        attributes: &[(String, String)],
    ) -> Result<Document, AgentError> {
        let template: Value = serde_yaml::from_str(text)?;
        let deploy = Deploy::new(&template, deploy, attributes)?;
        let properties = get(&template, &["Resources", RESOURCE, "Properties"])?;
        expect_str(
            get(properties, &["DocumentType"])?,
            "Command",
            "DocumentType",
        )?;
        let content = deploy.resolve(get(properties, &["Content"])?)?;
        expect_str(get(&content, &["schemaVersion"])?, "2.2", "schemaVersion")?;

        let mut parameters = Vec::new();
        let declared = get(&content, &["parameters"])?
            .as_mapping()
            .ok_or_else(|| shape("a mapping of parameters", "something else"))?;
        for (name, spec) in declared {
            let name = name
                .as_str()
                .ok_or_else(|| shape("parameter names as strings", &format!("{name:?}")))?
                .to_owned();
            let field = |key: &str| spec.get(key).and_then(Value::as_str);
            if field("type") != Some("String") {
                return Err(shape(
                    &format!("{name}: type String"),
                    &format!("{:?}", field("type")),
                ));
            }
            if field("interpolationType") != Some("ENV_VAR") {
                return Err(shape(
                    &format!("{name}: interpolationType ENV_VAR"),
                    &format!("{:?}", field("interpolationType")),
                ));
            }
            let allowed_values = match spec.get("allowedValues") {
                None => None,
                Some(list) => Some(
                    list.as_sequence()
                        .filter(|list| !list.is_empty())
                        .and_then(|list| {
                            list.iter()
                                .map(|v| v.as_str().map(str::to_owned))
                                .collect::<Option<Vec<_>>>()
                        })
                        .ok_or_else(|| {
                            shape(
                                &format!("{name}: allowedValues as a list of strings"),
                                &format!("{list:?}"),
                            )
                        })?,
                ),
            };
            let pattern = field("allowedPattern");
            if pattern.is_none() && allowed_values.is_none() {
                return Err(shape(
                    &format!("{name}: an allowedPattern or allowedValues"),
                    "neither",
                ));
            }
            let matcher = pattern.map(|pattern| compile(&name, pattern)).transpose()?;
            let parameter = Parameter {
                default: field("default").map(str::to_owned),
                name,
                allowed_pattern: pattern.map(str::to_owned),
                matcher,
                allowed_values,
            };
            if let Some(default) = &parameter.default {
                parameter.check(default)?;
            }
            parameters.push(parameter);
        }

        let steps = get(&content, &["mainSteps"])?
            .as_sequence()
            .ok_or_else(|| shape("mainSteps as a list", "something else"))?;
        let Some((step, downloads)) = steps.split_last() else {
            return Err(shape("at least one step", "none"));
        };
        let downloads = downloads
            .iter()
            .map(Download::from_step)
            .collect::<Result<Vec<_>, _>>()?;
        expect_str(
            get(step, &["action"])?,
            "aws:runShellScript",
            "the last step's action",
        )?;
        let lines = get(step, &["inputs", "runCommand"])?
            .as_sequence()
            .ok_or_else(|| shape("runCommand as a list of lines", "something else"))?;
        let lines = lines
            .iter()
            .map(|line| {
                line.as_str()
                    .ok_or_else(|| shape("runCommand lines as strings", "other"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        // The agent joins the lines with newlines into one script file.
        let script = lines.join("\n");
        if script.contains("{{") {
            return Err(shape(
                "no {{ }} interpolation in the script (parameters arrive as SSM_ variables)",
                "{{",
            ));
        }
        Ok(Document {
            parameters,
            downloads,
            script,
            content,
        })
    }

    /// The autoproxy-resolver program the script installs: the text of its quoted heredoc.
    pub fn resolver_script(&self) -> Result<&str, AgentError> {
        const START: &str = "<<'AUTOPROXY_RESOLVER'\n";
        const END: &str = "\nAUTOPROXY_RESOLVER\n";
        let start = self
            .script
            .find(START)
            .ok_or_else(|| shape("a heredoc <<'AUTOPROXY_RESOLVER' in the script", "none"))?
            + START.len();
        let len = self.script[start..]
            .find(END)
            .ok_or_else(|| shape("the line AUTOPROXY_RESOLVER ending the heredoc", "none"))?;
        Ok(&self.script[start..=start + len])
    }

    pub fn parameter(&self, name: &str) -> Option<&Parameter> {
        self.parameters.iter().find(|p| p.name == name)
    }

    /// Fills in defaults and checks every value against its `allowedValues` and
    /// `allowedPattern`, as the SSM service does before a command reaches any instance.
    pub fn resolve(&self, given: &[(&str, &str)]) -> Result<BTreeMap<String, String>, AgentError> {
        for (name, _) in given {
            if self.parameter(name).is_none() {
                let known: Vec<&str> = self.parameters.iter().map(|p| p.name.as_str()).collect();
                return Err(AgentError::Unknown {
                    name: (*name).to_owned(),
                    known: known.join(", "),
                });
            }
        }
        let mut values = BTreeMap::new();
        for parameter in &self.parameters {
            let value = given
                .iter()
                .rev()
                .find(|(name, _)| *name == parameter.name)
                .map(|(_, value)| (*value).to_owned())
                .or_else(|| parameter.default.clone())
                .ok_or_else(|| AgentError::Missing(parameter.name.clone()))?;
            parameter.check(&value)?;
            values.insert(parameter.name.clone(), value);
        }
        Ok(values)
    }

    /// Runs the script as the agent does: written to `_script.sh` in a fresh directory and
    /// started with `sh -c`, parameters as `SSM_<Name>`, plus `env` (e.g. the moto server's
    /// endpoint and credentials for the AWS CLI). The environment is otherwise clean: only
    /// `PATH` (with the pinned tools first), `HOME` and `TMPDIR` pass through. The whole
    /// process group is killed after `timeout`.
    pub fn run(
        &self,
        given: &[(&str, &str)],
        env: &[(String, String)],
        timeout: Duration,
    ) -> Result<Run, AgentError> {
        Ok(self.spawn(given, env)?.wait(timeout))
    }

    /// `run`, started in the background: the caller watches its output, signals it as SSM
    /// would (a cancel, a timeout) and waits for it.
    pub fn spawn(
        &self,
        given: &[(&str, &str)],
        env: &[(String, String)],
    ) -> Result<Background, AgentError> {
        self.spawn_wrapped(given, env, &[])
    }

    /// `spawn` with the script's `sh` started by `wrapper` (a program and its arguments, e.g.
    /// `strace … --`), which execs it in the end: the wrapper leads the process group.
    pub fn spawn_wrapped(
        &self,
        given: &[(&str, &str)],
        env: &[(String, String)],
        wrapper: &[String],
    ) -> Result<Background, AgentError> {
        let values = self.resolve(given)?;
        let mut downloaded = String::new();
        for download in &self.downloads {
            match download.run(env) {
                Ok(line) => downloaded.push_str(&format!("{}: {line}\n", download.name)),
                Err(line) => downloaded.push_str(&format!("{}: FAILED: {line}\n", download.name)),
            }
        }
        let workdir = tempfile::Builder::new()
            .prefix("autoproxy-ssm-")
            .tempdir()
            .map_err(AgentError::Spawn)?;
        let script = workdir.path().join("_script.sh");
        std::fs::write(&script, &self.script).map_err(AgentError::Spawn)?;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o700))
            .map_err(AgentError::Spawn)?;

        let mut command = match wrapper.split_first() {
            Some((program, args)) => {
                let mut command = Command::new(program);
                command.args(args).arg("sh");
                command
            }
            None => Command::new("sh"),
        };
        command
            .arg("-c")
            .arg(&script)
            .current_dir(workdir.path())
            .env_clear()
            .env("PATH", search_path())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        for key in ["HOME", "TMPDIR"] {
            if let Some(value) = std::env::var_os(key) {
                command.env(key, value);
            }
        }
        command.envs(env.iter().map(|(k, v)| (k, v)));
        command.envs(
            values
                .iter()
                .map(|(name, value)| (format!("SSM_{name}"), value)),
        );

        let started = Instant::now();
        let mut child = command.spawn().map_err(AgentError::Spawn)?;
        let stdout = Pipe::drain(child.stdout.take());
        let stderr = Pipe::drain(child.stderr.take());
        Ok(Background {
            child,
            stdout,
            stderr,
            downloaded,
            started,
            _workdir: workdir,
        })
    }
}

/// A run of the document in the background ([`Document::spawn`]): its script leads its own
/// process group, as under the SSM agent.
#[derive(Debug)]
pub struct Background {
    child: std::process::Child,
    stdout: Pipe,
    stderr: Pipe,
    downloaded: String,
    started: Instant,
    /// Holds `_script.sh` until the run ends.
    _workdir: tempfile::TempDir,
}

impl Background {
    /// The PID of the script's process (with the launcher's `exec`, the agent's), which is
    /// also its process group's id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends `signal` (a name `kill` knows: `TERM`, `KILL`, …) to the script's whole process
    /// group, as SSM's cancel and timeout do.
    pub fn signal_group(&self, signal: &str) {
        let _ = Command::new("kill")
            .args([&format!("-{signal}"), "--", &format!("-{}", self.pid())])
            .stderr(Stdio::null())
            .status();
    }

    /// Sends `signal` to one process (one of [`Background::processes`]).
    pub fn signal_process(&self, pid: u32, signal: &str) {
        let _ = Command::new("kill")
            .args([&format!("-{signal}"), "--", &pid.to_string()])
            .stderr(Stdio::null())
            .status();
    }

    /// The live processes of the script's process group (zombies aside), each with its
    /// arguments: the script's `sh`, the agent it runs, their children.
    pub fn processes(&self) -> Vec<(u32, Vec<String>)> {
        let group = self.pid().to_string();
        let Ok(entries) = std::fs::read_dir("/proc") else {
            return Vec::new();
        };
        entries
            .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
            .filter_map(|pid| {
                let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
                // After the command in parentheses: state, ppid, pgrp.
                let fields: Vec<&str> = stat.rsplit_once(") ")?.1.split(' ').collect();
                if fields.first().is_some_and(|s| *s == "Z" || *s == "X")
                    || fields.get(2) != Some(&group.as_str())
                {
                    return None;
                }
                let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
                let argv = cmdline
                    .split(|b| *b == 0)
                    .filter(|arg| !arg.is_empty())
                    .map(|arg| String::from_utf8_lossy(arg).into_owned())
                    .collect();
                Some((pid, argv))
            })
            .collect()
    }

    /// What the script wrote on stdout so far.
    pub fn stdout_so_far(&self) -> String {
        self.stdout.so_far()
    }

    /// Waits until a line of stdout equals `line`; false when the run ended or `timeout` passed
    /// first.
    pub fn wait_for_line(&mut self, line: &str, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            if self.stdout.so_far().lines().any(|l| l == line) {
                return true;
            }
            if Instant::now() >= deadline || !matches!(self.child.try_wait(), Ok(None)) {
                return self.stdout.so_far().lines().any(|l| l == line);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Waits for the script to end; kills its whole process group after `timeout` (counted
    /// from its start).
    pub fn wait(mut self, timeout: Duration) -> Run {
        let deadline = self.started + timeout;
        let (status, timed_out) = loop {
            match self.child.try_wait() {
                Ok(Some(status)) => break (status.code(), false),
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(10));
                }
                _ => {
                    // The script leads its own process group: take all of it down.
                    self.signal_group("KILL");
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    break (None, true);
                }
            }
        };
        let finished = Instant::now();
        Run {
            status,
            stdout: std::mem::take(&mut self.downloaded) + &self.stdout.collect(),
            stderr: self.stderr.collect(),
            started: self.started,
            finished,
            timed_out,
        }
    }
}

impl Parameter {
    /// Refuses a value outside `allowedValues` or not matching `allowedPattern`.
    pub fn check(&self, value: &str) -> Result<(), AgentError> {
        if let Some(allowed) = &self.allowed_values
            && !allowed.iter().any(|a| a == value)
        {
            return Err(AgentError::NotAllowed {
                name: self.name.clone(),
                value: value.to_owned(),
                allowed: allowed.clone(),
            });
        }
        if let (Some(pattern), Some(matcher)) = (&self.allowed_pattern, &self.matcher)
            && !matcher.is_match(value.as_bytes())
        {
            return Err(AgentError::Rejected {
                name: self.name.clone(),
                value: value.to_owned(),
                pattern: pattern.clone(),
            });
        }
        Ok(())
    }
}

/// Parameter `name`'s pattern compiled with ASCII classes, as Java (SSM, CloudFormation)
/// reads it.
fn compile(name: &str, pattern: &str) -> Result<Regex, AgentError> {
    Regex::builder()
        .syntax(syntax::Config::new().unicode(false))
        .build(pattern)
        .map_err(|source| AgentError::Pattern {
            name: name.to_owned(),
            pattern: pattern.to_owned(),
            source: Box::new(source),
        })
}

impl Run {
    pub fn success(&self) -> bool {
        self.status == Some(0)
    }

    pub fn elapsed(&self) -> Duration {
        self.finished - self.started
    }

    /// The details of the log lines of one step (`autoproxy-apply: <step>: <detail>`).
    pub fn step(&self, step: &str) -> Vec<&str> {
        let prefix = format!("autoproxy-apply: {step}: ");
        self.stdout
            .lines()
            .chain(self.stderr.lines())
            .filter_map(|line| line.strip_prefix(prefix.as_str()))
            .collect()
    }

    /// The detail of the one `FAILED` line, if the run failed.
    pub fn failure(&self) -> Option<&str> {
        self.step("FAILED").into_iter().next()
    }
}

/// The whole transcript, for assertion messages.
impl fmt::Display for Run {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let status = match (self.status, self.timed_out) {
            (_, true) => "killed after the timeout".to_owned(),
            (Some(code), false) => format!("exit {code}"),
            (None, false) => "killed by a signal".to_owned(),
        };
        writeln!(f, "--- apply document: {status} after {:?}", self.elapsed())?;
        writeln!(
            f,
            "--- stdout\n{}--- stderr\n{}---",
            self.stdout, self.stderr
        )
    }
}

fn get<'a>(value: &'a Value, path: &[&str]) -> Result<&'a Value, AgentError> {
    let mut here = value;
    for (depth, key) in path.iter().enumerate() {
        here = here
            .get(key)
            .ok_or_else(|| shape(&path[..=depth].join("."), "nothing"))?;
    }
    Ok(here)
}

fn expect_str(value: &Value, expected: &str, what: &str) -> Result<(), AgentError> {
    match value.as_str() {
        Some(found) if found == expected => Ok(()),
        found => Err(shape(&format!("{what} {expected}"), &format!("{found:?}"))),
    }
}

fn shape(expected: &str, found: &str) -> AgentError {
    AgentError::Shape {
        expected: expected.to_owned(),
        found: found.to_owned(),
    }
}

/// PATH with the pinned tools (the AWS CLI) first, like an instance's `aws` on PATH.
fn search_path() -> String {
    let inherited = std::env::var("PATH").unwrap_or_else(|_| "/usr/bin:/bin".to_owned());
    format!("{}:{inherited}", crate::moto::tools_bin().display())
}

/// A pipe read to its end on a thread, its bytes visible as they come.
#[derive(Debug)]
struct Pipe {
    bytes: std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
    closed: mpsc::Receiver<()>,
}

impl Pipe {
    fn drain<R: Read + Send + 'static>(pipe: Option<R>) -> Pipe {
        let bytes = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let (tx, closed) = mpsc::channel();
        if let Some(mut pipe) = pipe {
            let bytes = std::sync::Arc::clone(&bytes);
            std::thread::spawn(move || {
                let mut buffer = [0u8; 8192];
                while let Ok(n) = pipe.read(&mut buffer) {
                    if n == 0 {
                        break;
                    }
                    bytes
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .extend_from_slice(&buffer[..n]);
                }
                let _ = tx.send(());
            });
        } else {
            let _ = tx.send(());
        }
        Pipe { bytes, closed }
    }

    fn so_far(&self) -> String {
        let bytes = self
            .bytes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        String::from_utf8_lossy(&bytes).into_owned()
    }

    /// What the pipe carried; bounded, in case a daemon the script started still holds it.
    fn collect(&self) -> String {
        match self.closed.recv_timeout(Duration::from_secs(5)) {
            Ok(()) => self.so_far(),
            Err(_) => format!(
                "{}(output not closed within 5 s after the script ended)",
                self.so_far()
            ),
        }
    }
}
