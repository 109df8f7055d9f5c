//! `make dist`: the release bundle, `dist/autoproxy-<version>.tar.gz`, which deploys with the
//! SAM CLI or the AWS CLI alone (no Rust toolchain, no cargo-lambda, no Zig). It holds the
//! stack's template with every function and the agent layer pointing at prebuilt zips beside
//! it, those zips, the two templates member and forwarding accounts deploy, the deploy docs and
//! the runbook of day 2 (at the paths the docs name them by), the licence, the third-party notices, the release
//! notes and a README for a first deploy; `dist/SHA256SUMS` lists the archive's digest.
//!
//! The binaries come from `sam build` (the Makefile runs it exactly as
//! `.ci/check-templates.sh` does, so in `make test` cargo finds that build done); this module
//! zips them and rewrites a copy of `template.yaml`. The bundle is for one architecture, the
//! build machine's: its template offers that one alone, for the functions and the proxies, and
//! reports the release (version and commit) in its description, its outputs and each
//! function's description.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_yaml::Value;

mod deploy_doc;
mod template;
pub use deploy_doc::bundle_deploy_doc;
pub use template::{ARCH_PARAMETERS, RELEASE_OUTPUTS, bundle_template, template_text};

/// Where `sam build` leaves one directory per built resource, named by its logical id.
pub const SAM_BUILD_DIR: &str = ".aws-sam/build";
/// What the bundle carries from the repository, at the same relative path (the docs name the
/// templates by these paths): the templates member and forwarding accounts deploy
/// (docs/DEPLOY.md, "Cross-account setup" and "Any region"), the docs a deployer reads (the
/// runbook of day 2 among them), the licence and the release notes. All as they are but
/// docs/DEPLOY.md: [`bundle_deploy_doc`].
pub const CARRIED: [&str; 8] = [
    "docs/member-account.yaml",
    "docs/central-forwarding.yaml",
    "docs/RUNBOOK.md",
    "docs/DEPLOY.md",
    "docs/ARCHITECTURE.md",
    "docs/BENCHMARKS.md",
    "LICENSE",
    "CHANGELOG.md",
];
/// The third-party notices `make dist` generates (cargo-about, from Cargo.lock) before it
/// makes the bundle: where it writes them under the workspace, and the name in the bundle.
pub const NOTICES: (&str, &str) = ("dist/THIRD-PARTY-NOTICES.md", "THIRD-PARTY-NOTICES.md");
/// The checksum file `make dist` writes beside the archives, as `sha256sum` writes it.
pub const CHECKSUMS: &str = "SHA256SUMS";

/// The release a bundle is: the workspace's version and the commit it was built from (with
/// `-dirty` when the work tree had changes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Release<'a> {
    pub version: &'a str,
    pub commit: &'a str,
}

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

/// The bundle's README, for `release` built for `arch`.
pub fn readme(release: &Release, arch: Arch) -> String {
    include_str!("dist/README.md")
        .replace("{version}", release.version)
        .replace("{commit}", release.commit)
        .replace("{arch}", arch.name())
}

/// Makes `dist/autoproxy-<version>.tar.gz` under `root` from `template.yaml`, what `sam
/// build` left in `.aws-sam/build` (each binary checked to be an ELF for `arch` first: a
/// build left over for another architecture is refused), the files [`CARRIED`] and the
/// notices [`NOTICES`]; then `dist/SHA256SUMS` for it. Returns the archive's path.
pub fn make_bundle(root: &Path, release: &Release, arch: Arch) -> Result<PathBuf, DistError> {
    let source = root.join("template.yaml");
    let text = read(&source)?;
    let template: Value = serde_yaml::from_str(&text).map_err(|e| template_error(e.to_string()))?;
    let (bundled, artifacts) = bundle_template(&template, arch, release)?;
    let name = format!("autoproxy-{}", release.version);
    let dist = root.join("dist");
    let stage = dist.join(&name);
    if stage.exists() {
        std::fs::remove_dir_all(&stage).map_err(|e| file_error(&stage, "remove", e))?;
    }
    for dir in ["functions", "layers", "docs"] {
        let path = stage.join(dir);
        std::fs::create_dir_all(&path).map_err(|e| file_error(&path, "create", e))?;
    }
    for artifact in &artifacts {
        zip_artifact(root, &stage, artifact, arch)?;
    }
    let header = format!(
        "# autoproxy {version} (commit {commit}): the release bundle's template, written by\n\
         # `make dist` from the repository's template.yaml (whose comments explain every\n\
         # resource). The functions and AgentLayer are the zips beside it, built for {arch}:\n\
         # deploy it with the SAM CLI or the AWS CLI alone (README.md).\n",
        version = release.version,
        commit = release.commit,
        arch = arch.name()
    );
    let body = template_text(&bundled)?;
    write(&stage.join("template.yaml"), &format!("{header}{body}"))?;
    for carried in CARRIED.iter().copied().chain([NOTICES.0]) {
        let from = root.join(carried);
        let to = stage.join(if carried == NOTICES.0 {
            NOTICES.1
        } else {
            carried
        });
        if carried == "docs/DEPLOY.md" {
            write(&to, &bundle_deploy_doc(&read(&from)?, release, arch)?)?;
        } else {
            std::fs::copy(&from, &to).map_err(|e| file_error(&from, "copy", e))?;
        }
    }
    write(&stage.join("README.md"), &readme(release, arch))?;
    let archive = dist.join(format!("{name}.tar.gz"));
    let mut tar = Command::new("tar");
    tar.args(["-czf"])
        .arg(&archive)
        .args([
            "--sort=name",
            "--owner=0",
            "--group=0",
            "--numeric-owner",
            "-C",
        ])
        .arg(&dist)
        .arg(&name);
    run(tar, &format!("tar -czf {}", archive.display()))?;
    let mut sums = Command::new("sha256sum");
    sums.arg(format!("{name}.tar.gz")).current_dir(&dist);
    let listed = run(sums, &format!("sha256sum {}", archive.display()))?;
    write(&dist.join(CHECKSUMS), &listed)?;
    Ok(archive)
}

/// Zips what `sam build` left for one artifact into the stage, its executable checked first.
fn zip_artifact(
    root: &Path,
    stage: &Path,
    artifact: &Artifact,
    arch: Arch,
) -> Result<(), DistError> {
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
    zip_dir(&built, &stage.join(&artifact.zip))
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
