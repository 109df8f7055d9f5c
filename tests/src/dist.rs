//! `make dist`: the release bundle, `dist/autoproxy-<version>.tar.gz`, which deploys with the
//! SAM CLI or the AWS CLI alone (no Rust toolchain, no cargo-lambda, no Zig). It holds the
//! stack's template with every function and the agent layer pointing at prebuilt zips beside
//! it, those zips, the two templates member and forwarding accounts deploy, and a short README.
//!
//! The binaries come from `sam build` (the Makefile runs it exactly as
//! `.ci/check-templates.sh` does, so in `make test` cargo finds that build done); this module
//! zips them and rewrites a copy of `template.yaml`. The bundle is for one architecture, the
//! build machine's: its template defaults to it, for the functions and the proxies, and
//! refuses any other.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_yaml::{Mapping, Value};

/// Where `sam build` leaves one directory per built resource, named by its logical id.
pub const SAM_BUILD_DIR: &str = ".aws-sam/build";
/// The templates the bundle carries as they are (docs/DEPLOY.md, "Cross-account setup" and
/// "Any region").
pub const COMPANION_TEMPLATES: [&str; 2] =
    ["docs/member-account.yaml", "docs/central-forwarding.yaml"];

/// Why the bundle could not be made.
#[derive(Debug, thiserror::Error)]
pub enum DistError {
    #[error("template.yaml: {0}")]
    Template(String),
    #[error("{path}: {what}: {detail}")]
    File {
        path: PathBuf,
        what: &'static str,
        detail: String,
    },
    #[error("{command}: {detail}")]
    Command { command: String, detail: String },
}

fn template_error(detail: impl Into<String>) -> DistError {
    DistError::Template(detail.into())
}

/// A machine the bundle is built for: the Lambda functions' and the proxies' alike.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arch {
    X86_64,
    Arm64,
}

impl Arch {
    /// This machine's, when Lambda has it.
    pub fn host() -> Option<Arch> {
        match std::env::consts::ARCH {
            "x86_64" => Some(Arch::X86_64),
            "aarch64" => Some(Arch::Arm64),
            _ => None,
        }
    }

    /// As the template's `Architecture` and `ProxyArchitecture` parameters spell it.
    pub fn name(self) -> &'static str {
        match self {
            Arch::X86_64 => "x86_64",
            Arch::Arm64 => "arm64",
        }
    }

    /// `e_machine` of an ELF executable for it.
    pub fn elf_machine(self) -> u16 {
        match self {
            Arch::X86_64 => 0x3e,
            Arch::Arm64 => 0xb7,
        }
    }

    /// The architecture a template parameter (`Architecture`, `ProxyArchitecture`) names.
    pub fn parse(name: &str) -> Option<Arch> {
        [Arch::X86_64, Arch::Arm64]
            .into_iter()
            .find(|arch| arch.name() == name)
    }
}

/// `e_machine` of an ELF executable, or why `bytes` is not one.
pub fn elf_machine(bytes: &[u8]) -> Result<u16, String> {
    match bytes {
        [0x7f, b'E', b'L', b'F', header @ ..] if header.len() >= 16 => {
            // e_type at 16, e_machine at 18 (bytes 12 and 14 of what follows the magic),
            // little-endian (EI_DATA 1) on both architectures.
            if header[1] != 1 {
                return Err(format!("a big-endian ELF (EI_DATA {})", header[1]));
            }
            Ok(u16::from_le_bytes([header[14], header[15]]))
        }
        _ => Err(format!(
            "not an ELF executable (starts {:02x?})",
            &bytes[..bytes.len().min(4)]
        )),
    }
}

/// What the bundle ships prebuilt for one resource of the template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Artifact {
    /// The resource's logical id: also the directory `sam build` writes it to.
    pub logical_id: String,
    /// The zip's path inside the bundle, as the template names it.
    pub zip: String,
    /// The executable the zip must hold, and the architecture it must be built for.
    pub executable: String,
}

/// The bundle's template: a copy of `template` whose functions and layers that `sam build`
/// builds point at their zips (and lose their build metadata: nothing is built from the
/// bundle), whose `Globals` no longer make the bundle's directory every function's code, and
/// whose `Architecture` and `ProxyArchitecture` default to `arch` (a rule refusing any
/// other). With the zips it needs.
pub fn bundle_template(template: &Value, arch: Arch) -> Result<(Value, Vec<Artifact>), DistError> {
    let mut bundled = template.clone();
    if let Some(globals) = bundled
        .get_mut("Globals")
        .and_then(|g| g.get_mut("Function"))
        .and_then(Value::as_mapping_mut)
    {
        globals.remove("CodeUri");
    }
    let resources = bundled
        .get_mut("Resources")
        .and_then(Value::as_mapping_mut)
        .ok_or_else(|| template_error("no Resources mapping"))?;
    let mut artifacts = Vec::new();
    for (id, resource) in resources.iter_mut() {
        let id = id
            .as_str()
            .ok_or_else(|| template_error(format!("a resource id that is not a string: {id:?}")))?;
        if let Some(artifact) = prebuilt(id, resource)? {
            artifacts.push(artifact);
        }
    }
    for (name, what) in [
        ("Architecture", "the functions"),
        (
            "ProxyArchitecture",
            "the proxies' autoproxy-agent (AgentLayer)",
        ),
    ] {
        only_arch(&mut bundled, name, what, arch)?;
    }
    if !artifacts.iter().any(|a| a.zip.starts_with("layers/")) {
        return Err(template_error("no layer built by sam build (AgentLayer)"));
    }
    Ok((bundled, artifacts))
}

/// Points one resource at its zip when `sam build` builds it; what the bundle must ship for it.
fn prebuilt(id: &str, resource: &mut Value) -> Result<Option<Artifact>, DistError> {
    let kind = resource
        .get("Type")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let kind = kind.as_str();
    let Some(metadata) = resource.get_mut("Metadata").and_then(Value::as_mapping_mut) else {
        return ensure_code(id, kind, resource).map(|()| None);
    };
    let Some(method) = metadata.remove("BuildMethod") else {
        return ensure_code(id, kind, resource).map(|()| None);
    };
    let properties = metadata.remove("BuildProperties");
    metadata.remove("ContextPath");
    let empty = metadata.is_empty();
    let (uri_key, zip, executable) = match (kind, method.as_str()) {
        ("AWS::Serverless::Function", Some("rust-cargolambda")) => {
            let binary = properties
                .as_ref()
                .and_then(|p| p.get("Binary"))
                .and_then(Value::as_str);
            if binary.is_none() {
                return Err(template_error(format!(
                    "{id}: rust-cargolambda without BuildProperties.Binary"
                )));
            }
            ("CodeUri", format!("functions/{id}.zip"), "bootstrap")
        }
        ("AWS::Serverless::LayerVersion", Some("makefile")) => {
            ("ContentUri", format!("layers/{id}.zip"), "autoproxy-agent")
        }
        (kind, method) => {
            return Err(template_error(format!(
                "{id}: expected a rust-cargolambda function or a makefile layer, got {kind} built with {method:?}"
            )));
        }
    };
    let map = resource
        .as_mapping_mut()
        .ok_or_else(|| template_error(format!("{id}: not a mapping")))?;
    if empty {
        map.remove("Metadata");
    }
    let props = map
        .entry(Value::from("Properties"))
        .or_insert_with(|| Value::Mapping(Mapping::new()))
        .as_mapping_mut()
        .ok_or_else(|| template_error(format!("{id}: Properties is not a mapping")))?;
    props.insert(Value::from(uri_key), Value::from(zip.clone()));
    Ok(Some(Artifact {
        logical_id: id.to_owned(),
        zip,
        executable: executable.to_owned(),
    }))
}

/// A function the bundle does not build must carry its code itself (`Globals` no longer
/// give it the bundle's directory).
fn ensure_code(id: &str, kind: &str, resource: &Value) -> Result<(), DistError> {
    let has = |key: &str| {
        resource
            .get("Properties")
            .and_then(|p| p.get(key))
            .is_some()
    };
    if kind == "AWS::Serverless::Function" && !has("CodeUri") && !has("InlineCode") {
        return Err(template_error(format!(
            "{id}: a function with neither a build method nor CodeUri/InlineCode"
        )));
    }
    Ok(())
}

/// The rule that refuses, at deploy time, an architecture the bundle holds no binaries for.
pub const ARCH_RULE: &str = "ReleaseBundleArchitecture";

/// Makes `arch` the default of a parameter naming an architecture, and adds to [`ARCH_RULE`]
/// the assertion that refuses any other (narrowing `AllowedValues` instead would leave the
/// template's `!If`s on the other architecture unreachable, which cfn-lint warns of).
fn only_arch(template: &mut Value, name: &str, what: &str, arch: Arch) -> Result<(), DistError> {
    let parameter = template
        .get_mut("Parameters")
        .and_then(|p| p.get_mut(name))
        .and_then(Value::as_mapping_mut)
        .ok_or_else(|| template_error(format!("no parameter {name}")))?;
    let offered = parameter
        .get("AllowedValues")
        .and_then(Value::as_sequence)
        .is_some_and(|values| values.iter().any(|v| v.as_str() == Some(arch.name())));
    if !offered {
        return Err(template_error(format!(
            "parameter {name} does not offer {}",
            arch.name()
        )));
    }
    parameter.insert("Default".into(), arch.name().into());
    let tagged = |tag: &str, value: Value| {
        Value::Tagged(Box::new(serde_yaml::value::TaggedValue {
            tag: serde_yaml::value::Tag::new(tag),
            value,
        }))
    };
    let assertion = Value::Mapping(Mapping::from_iter([
        (
            "Assert".into(),
            tagged(
                "Equals",
                Value::Sequence(vec![tagged("Ref", name.into()), arch.name().into()]),
            ),
        ),
        (
            "AssertDescription".into(),
            format!(
                "This release bundle holds {what} built for {arch} only: {name}={arch}. Another \
                 architecture needs a build from source (docs/DEPLOY.md).",
                arch = arch.name()
            )
            .into(),
        ),
    ]));
    let rules = template
        .as_mapping_mut()
        .ok_or_else(|| template_error("not a mapping"))?
        .entry("Rules".into())
        .or_insert_with(|| Value::Mapping(Mapping::new()))
        .as_mapping_mut()
        .ok_or_else(|| template_error("Rules is not a mapping"))?;
    let rule = rules.entry(ARCH_RULE.into()).or_insert_with(|| {
        Value::Mapping(Mapping::from_iter([(
            "Assertions".into(),
            Value::Sequence(Vec::new()),
        )]))
    });
    if let Some(assertions) = rule.get_mut("Assertions").and_then(Value::as_sequence_mut) {
        assertions.push(assertion);
    }
    Ok(())
}

/// The template's text: YAML as serde_yaml writes it, with every date-like plain scalar
/// quoted. serde_yaml quotes by YAML 1.2, where `2012-10-17` is a string; PyYAML (the SAM CLI,
/// the AWS CLI, cfn-lint) reads YAML 1.1, where it is a date.
pub fn template_text(template: &Value) -> Result<String, DistError> {
    let text = serde_yaml::to_string(template).map_err(|e| template_error(e.to_string()))?;
    Ok(text.lines().map(quote_date).collect::<Vec<_>>().join("\n") + "\n")
}

/// One line with a plain date value (`Version: 2012-10-17`, `- 2012-10-17`) quoted.
fn quote_date(line: &str) -> String {
    let value_at = line.rfind(": ").map(|i| i + 2).or_else(|| {
        line.trim_start()
            .starts_with("- ")
            .then(|| line.len() - line.trim_start().len() + 2)
    });
    if let Some(at) = value_at {
        let value = &line[at..];
        let date = value.len() == 10
            && value.char_indices().all(|(i, c)| {
                if i == 4 || i == 7 {
                    c == '-'
                } else {
                    c.is_ascii_digit()
                }
            });
        if date {
            return format!("{}'{value}'", &line[..at]);
        }
    }
    line.to_owned()
}

/// The bundle's README, for `version` built for `arch`.
pub fn readme(version: &str, arch: Arch) -> String {
    include_str!("dist/README.md")
        .replace("{version}", version)
        .replace("{arch}", arch.name())
}

/// Makes `dist/autoproxy-<version>.tar.gz` under `root` from `template.yaml` and what
/// `sam build` left in `.aws-sam/build` (each binary checked to be an ELF for `arch` first: a
/// build left over for another architecture is refused). Returns the archive's path.
pub fn make_bundle(root: &Path, version: &str, arch: Arch) -> Result<PathBuf, DistError> {
    let source = root.join("template.yaml");
    let text = read(&source)?;
    let template: Value = serde_yaml::from_str(&text).map_err(|e| template_error(e.to_string()))?;
    let (bundled, artifacts) = bundle_template(&template, arch)?;
    let name = format!("autoproxy-{version}");
    let dist = root.join("dist");
    let stage = dist.join(&name);
    if stage.exists() {
        std::fs::remove_dir_all(&stage).map_err(|e| file_error(&stage, "remove", e))?;
    }
    for dir in ["functions", "layers"] {
        let path = stage.join(dir);
        std::fs::create_dir_all(&path).map_err(|e| file_error(&path, "create", e))?;
    }
    for artifact in &artifacts {
        let built = root.join(SAM_BUILD_DIR).join(&artifact.logical_id);
        let executable = built.join(&artifact.executable);
        let machine = elf_machine(&read_bytes(&executable)?).map_err(|detail| DistError::File {
            path: executable.clone(),
            what: "the built executable",
            detail,
        })?;
        if machine != arch.elf_machine() {
            return Err(DistError::File {
                path: executable,
                what: "the built executable",
                detail: format!(
                    "expected an ELF for {} (e_machine {:#x}), got e_machine {machine:#x}: run sam build for {} again",
                    arch.name(),
                    arch.elf_machine(),
                    arch.name()
                ),
            });
        }
        zip_dir(&built, &stage.join(&artifact.zip))?;
    }
    let header = format!(
        "# autoproxy {version}: the release bundle's template, written by `make dist` from the\n\
         # repository's template.yaml (whose comments explain every resource). The functions and\n\
         # AgentLayer are the zips beside it, built for {arch}: deploy it with the SAM CLI or the\n\
         # AWS CLI alone (README.md).\n",
        arch = arch.name()
    );
    let body = template_text(&bundled)?;
    write(&stage.join("template.yaml"), &format!("{header}{body}"))?;
    for companion in COMPANION_TEMPLATES {
        let from = root.join(companion);
        let file = from.file_name().unwrap_or_default();
        std::fs::copy(&from, stage.join(file)).map_err(|e| file_error(&from, "copy", e))?;
    }
    write(&stage.join("README.md"), &readme(version, arch))?;
    let archive = dist.join(format!("{name}.tar.gz"));
    let mut tar = Command::new("tar");
    tar.args(["-czf"])
        .arg(&archive)
        .args(["--owner=0", "--group=0", "--numeric-owner", "-C"])
        .arg(&dist)
        .arg(&name);
    run(tar, &format!("tar -czf {}", archive.display()))?;
    Ok(archive)
}

// By value: callers hand over the error they are done with.
#[allow(clippy::needless_pass_by_value)]
fn file_error(path: &Path, what: &'static str, err: std::io::Error) -> DistError {
    DistError::File {
        path: path.to_owned(),
        what,
        detail: err.to_string(),
    }
}

fn read(path: &Path) -> Result<String, DistError> {
    std::fs::read_to_string(path).map_err(|e| file_error(path, "read", e))
}

fn read_bytes(path: &Path) -> Result<Vec<u8>, DistError> {
    std::fs::read(path).map_err(|e| file_error(path, "read", e))
}

fn write(path: &Path, text: &str) -> Result<(), DistError> {
    std::fs::write(path, text).map_err(|e| file_error(path, "write", e))
}

/// Runs `command`; its stdout, or what it said when it failed.
fn run(mut command: Command, what: &str) -> Result<String, DistError> {
    let failed = |detail: String| DistError::Command {
        command: what.to_owned(),
        detail,
    };
    let out = command.output().map_err(|e| failed(e.to_string()))?;
    if !out.status.success() {
        return Err(failed(format!(
            "{}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Zips every file of `dir` (names relative to it, modes kept: Lambda runs `bootstrap` as
/// it finds it) into `zip`, with Python's zipfile (the tools already need Python; no zip crate
/// or `zip` program to add).
pub fn zip_dir(dir: &Path, zip: &Path) -> Result<(), DistError> {
    const SCRIPT: &str = "import os, sys, zipfile\n\
        src, out = sys.argv[1], sys.argv[2]\n\
        with zipfile.ZipFile(out, 'w', zipfile.ZIP_DEFLATED) as z:\n\
        \x20   for name in sorted(os.listdir(src)):\n\
        \x20       z.write(os.path.join(src, name), name)\n";
    let mut command = Command::new("python3");
    command.args(["-c", SCRIPT]).arg(dir).arg(zip);
    run(command, &format!("zip {}", dir.display())).map(|_| ())
}

/// The names in a zip and the bytes of one of them, with Python's zipfile.
pub fn zip_entry(zip: &Path, name: &str) -> Result<(Vec<String>, Vec<u8>), DistError> {
    const SCRIPT: &str = "import sys, zipfile\n\
        z = zipfile.ZipFile(sys.argv[1])\n\
        names = z.namelist()\n\
        sys.stdout.write('\\n'.join(names) + '\\n')\n\
        if sys.argv[2] in names:\n\
        \x20   open(sys.argv[3], 'wb').write(z.read(sys.argv[2]))\n";
    let out = tempfile::NamedTempFile::new().map_err(|e| DistError::File {
        path: zip.to_owned(),
        what: "a temporary file",
        detail: e.to_string(),
    })?;
    let mut command = Command::new("python3");
    command
        .args(["-c", SCRIPT])
        .arg(zip)
        .arg(name)
        .arg(out.path());
    let names = run(command, &format!("read {}", zip.display()))?;
    let bytes = std::fs::read(out.path()).unwrap_or_default();
    Ok((names.lines().map(str::to_owned).collect(), bytes))
}

#[cfg(test)]
mod tests;
