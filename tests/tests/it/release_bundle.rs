//! The release bundle (`make dist`) deploys without a Rust toolchain. Unpacked elsewhere, with
//! cargo, rustc, cargo-lambda and zig off PATH (and no cargo variable in the environment),
//! `sam package` and `aws cloudformation package` upload every function's zip and the agent
//! layer's to (moto's) S3; each uploaded zip holds a binary for the bundled template's
//! architecture, which names neither the workspace nor cargo's home; the AWS CLI block of the
//! bundle's README runs as written as far as moto allows (the template uploaded, a change set
//! asked for); the bundle carries what the docs name at the paths they name it by, its
//! LICENSE, notices covering every crate the binaries link, and its checksum; the template
//! reports the release; cfn-lint passes on the bundled templates.
//!
//! The bundle is built once for the group. `make test-dist` runs the group, last in `make test`:
//! its `make dist` then finds the template checks' `sam build` done.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use autoproxy_tests::dist::{
    Arch, CARRIED, CHECKSUMS, NOTICES, RELEASE_OUTPUTS, Release, bundle_deploy_doc, elf_machine,
    zip_entry,
};
use autoproxy_tests::moto::Moto;
use autoproxy_tests::{root, tool};
use serde_yaml::Value;

/// What building from source needs and deploying the bundle must not.
const TOOLCHAIN: [&str; 4] = ["cargo", "rustc", "cargo-lambda", "zig"];
/// What deploying the bundle needs.
const DEPLOY_TOOLS: [&str; 3] = ["sam", "aws", "cfn-lint"];
const ARTIFACT_BUCKET: &str = "autoproxy-release-artifacts";
/// The runbook of day 2 (upgrade, roll back, the alarms, removal), at its path in the bundle.
const RUNBOOK: &str = "docs/RUNBOOK.md";

/// `make dist`, once: the archive it wrote.
fn archive() -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| {
        let out = Command::new("make")
            .args(["--no-print-directory", "dist"])
            .current_dir(root())
            .output()
            .expect("run make dist");
        assert!(
            out.status.success(),
            "make dist: {}\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let archive = root()
            .join("dist")
            .join(format!("autoproxy-{}.tar.gz", env!("CARGO_PKG_VERSION")));
        assert!(
            archive.is_file(),
            "make dist wrote no {}",
            archive.display()
        );
        archive
    })
}

/// The bundle unpacked in a directory of its own, and a PATH with the deploy tools and
/// without the toolchain.
struct Unpacked {
    dir: PathBuf,
    path: OsString,
    _temp: tempfile::TempDir,
}

impl Unpacked {
    fn new() -> Unpacked {
        let temp = tempfile::tempdir().unwrap();
        let status = Command::new("tar")
            .arg("-xzf")
            .arg(archive())
            .arg("-C")
            .arg(temp.path())
            .status()
            .unwrap();
        assert!(status.success(), "tar -xzf {}", archive().display());
        let dir = temp
            .path()
            .join(format!("autoproxy-{}", env!("CARGO_PKG_VERSION")));
        // The deploy tools by their own names; every other PATH entry only when it holds none
        // of the toolchain (the tools' bin directory holds cargo-lambda: it goes).
        let bin = temp.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        for name in DEPLOY_TOOLS {
            let installed = tool(name);
            assert!(
                installed.is_absolute(),
                "{name} is not installed (.ci/tools.sh all)"
            );
            std::os::unix::fs::symlink(&installed, bin.join(name)).unwrap();
        }
        let current = std::env::var_os("PATH").unwrap_or_default();
        let kept = std::env::split_paths(&current)
            .filter(|dir| TOOLCHAIN.iter().all(|name| !dir.join(name).exists()));
        let path = std::env::join_paths(std::iter::once(bin).chain(kept)).unwrap();
        Unpacked {
            dir,
            path,
            _temp: temp,
        }
    }

    /// `program args…` in the bundle's directory, with a clean environment: this PATH,
    /// HOME, and `env`.
    fn run(&self, program: &str, args: &[&str], env: &[(String, String)]) -> Output {
        Command::new(program)
            .args(args)
            .current_dir(&self.dir)
            .env_clear()
            .env("PATH", &self.path)
            .env("HOME", std::env::var_os("HOME").unwrap_or_default())
            .env("LANG", "C.UTF-8")
            .env("SAM_CLI_TELEMETRY", "0")
            .envs(env.iter().map(|(k, v)| (k, v)))
            .output()
            .unwrap_or_else(|e| panic!("run {program}: {e}"))
    }

    fn yaml(&self, file: &str) -> Value {
        let text = std::fs::read_to_string(self.dir.join(file)).unwrap();
        serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("{file}: {e}"))
    }
}

#[track_caller]
fn succeeded(what: &str, out: &Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{what}: {}\n{stdout}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[test]
fn the_toolchain_is_off_the_path_the_bundle_deploys_with() {
    let unpacked = Unpacked::new();
    for name in TOOLCHAIN {
        let found = unpacked.run("sh", &["-c", &format!("command -v {name}")], &[]);
        assert!(
            !found.status.success(),
            "{name} is on the PATH: {}",
            String::from_utf8_lossy(&found.stdout)
        );
    }
    for name in DEPLOY_TOOLS {
        let found = unpacked.run("sh", &["-c", &format!("command -v {name}")], &[]);
        succeeded(name, &found);
    }
}

#[test]
fn the_bundle_holds_the_templates_and_a_readme_and_cfn_lint_passes() {
    let unpacked = Unpacked::new();
    let readme = std::fs::read_to_string(unpacked.dir.join("README.md")).unwrap();
    assert!(
        readme.starts_with(&format!("# autoproxy {}\n", env!("CARGO_PKG_VERSION"))),
        "{readme}"
    );
    // What the repository's files are, at the same paths: the docs name them by these;
    // DEPLOY as `bundle_deploy_doc` writes the bundle's copy of it.
    let release = Release {
        version: env!("CARGO_PKG_VERSION"),
        commit: "",
    };
    let arch = Arch::host().expect("a Lambda architecture");
    for carried in CARRIED {
        let shipped = std::fs::read(unpacked.dir.join(carried))
            .unwrap_or_else(|e| panic!("the bundle has no {carried}: {e}"));
        let mut source = std::fs::read(root().join(carried)).unwrap();
        if carried == "docs/DEPLOY.md" {
            let text = String::from_utf8(source).unwrap();
            source = bundle_deploy_doc(&text, &release, arch)
                .unwrap()
                .into_bytes();
        }
        assert!(shipped == source, "{carried} differs from the repository's");
    }
    // Every docs/… file a text of the bundle names is in it.
    for text in [
        "README.md",
        "template.yaml",
        "docs/DEPLOY.md",
        "docs/ARCHITECTURE.md",
    ] {
        let body = std::fs::read_to_string(unpacked.dir.join(text)).unwrap();
        for named in body.split(|c: char| !(c.is_ascii_alphanumeric() || "/._-".contains(c))) {
            let named = named.trim_end_matches('.');
            if named.starts_with("docs/") && named.contains('.') {
                assert!(
                    unpacked.dir.join(named).is_file(),
                    "{text} names {named}, which the bundle lacks"
                );
            }
        }
    }
    let templates = [
        "template.yaml",
        "docs/member-account.yaml",
        "docs/central-forwarding.yaml",
    ];
    // Warnings count as failures, as in .ci/check-templates.sh.
    let out = unpacked.run("cfn-lint", &templates, &[]);
    let report = succeeded("cfn-lint", &out);
    assert_eq!(report.trim(), "", "cfn-lint reported findings");
}

/// The runbook a bundle's user follows on day 2 is in the bundle, as the repository has it,
/// and both the bundle's README and its copy of DEPLOY send the reader to it.
#[test]
fn the_bundle_carries_the_runbook_its_readme_and_deploy_name() {
    let unpacked = Unpacked::new();
    let runbook = std::fs::read_to_string(unpacked.dir.join(RUNBOOK))
        .unwrap_or_else(|e| panic!("the bundle has no {RUNBOOK}: {e}"));
    assert_eq!(
        runbook,
        std::fs::read_to_string(root().join(RUNBOOK)).unwrap(),
        "{RUNBOOK} differs from the repository's"
    );
    for part in [
        "## Upgrade",
        "## Roll back",
        "## When an alarm fires",
        "## Remove",
    ] {
        assert!(
            runbook.contains(&format!("\n{part}\n")),
            "{RUNBOOK} has no {part}"
        );
    }
    for doc in ["README.md", "docs/DEPLOY.md"] {
        let text = std::fs::read_to_string(unpacked.dir.join(doc)).unwrap();
        assert!(
            text.contains("RUNBOOK.md"),
            "the bundle's {doc} does not name its runbook"
        );
    }
}

#[test]
fn the_checksum_the_licence_and_the_release_the_stack_reports() {
    let dist = archive().parent().unwrap();
    let check = Command::new("sha256sum")
        .args(["-c", CHECKSUMS])
        .current_dir(dist)
        .output()
        .unwrap();
    let name = archive()
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    assert_eq!(
        succeeded("sha256sum -c SHA256SUMS", &check),
        format!("{name}: OK\n")
    );
    let unpacked = Unpacked::new();
    let licence = std::fs::read_to_string(unpacked.dir.join("LICENSE")).unwrap();
    assert!(
        licence.contains("Apache License\n                           Version 2.0"),
        "{licence:.200}"
    );
    let head = Command::new("git")
        .args(["rev-parse", "HEAD"])
        .current_dir(root())
        .output()
        .unwrap();
    let head = succeeded("git rev-parse HEAD", &head).trim().to_owned();
    let template = unpacked.yaml("template.yaml");
    let version = env!("CARGO_PKG_VERSION");
    let outputs = &template["Outputs"];
    assert_eq!(outputs[RELEASE_OUTPUTS[0]]["Value"], version);
    let commit = outputs[RELEASE_OUTPUTS[1]]["Value"].as_str().unwrap();
    assert!(
        commit == head || commit == format!("{head}-dirty"),
        "ReleaseCommit {commit}, HEAD {head}"
    );
    let description = template["Description"].as_str().unwrap();
    assert!(
        description.contains(&format!("Release {version} (commit {commit})")),
        "{description}"
    );
    assert_eq!(
        template["Resources"]["GenerateOnDeploy"]["Properties"]["Release"],
        format!("{version} (commit {commit})").as_str(),
        "a new release must change GenerateOnDeploy, or an upgrade of code alone runs no generator"
    );
    for (id, resource) in template["Resources"].as_mapping().unwrap() {
        let kind = resource["Type"].as_str().unwrap_or_default();
        if kind.ends_with("::Function") || kind.ends_with("::LayerVersion") {
            let described = resource["Properties"]["Description"]
                .as_str()
                .unwrap_or_default();
            let short = commit.get(..12).unwrap_or(commit);
            assert!(
                described.contains(&format!("autoproxy {version} ({short}")),
                "{id:?}: {described}"
            );
        }
    }
}

/// The notices name every crate the shipped binaries link, at its locked version: what
/// `cargo tree` resolves for them (normal dependencies, the build machine's target), the
/// workspace's own crates aside.
#[test]
fn the_notices_cover_every_crate_the_binaries_link() {
    let unpacked = Unpacked::new();
    let notices = std::fs::read_to_string(unpacked.dir.join(NOTICES.1)).unwrap();
    let tree = Command::new("cargo")
        .args([
            "tree",
            "--locked",
            "--offline",
            "-e",
            "normal",
            "--prefix",
            "none",
            "--format",
            "{p}",
        ])
        .args(["-p", "autoproxy-generate", "-p", "autoproxy-configure"])
        .args(["-p", "autoproxy-agent", "-p", "autoproxy-agent-publisher"])
        .current_dir(root())
        .output()
        .unwrap();
    let tree = succeeded("cargo tree", &tree);
    let mut linked = std::collections::BTreeSet::new();
    for line in tree.lines() {
        let mut words = line.split_whitespace();
        let (Some(name), Some(version)) = (words.next(), words.next()) else {
            continue;
        };
        if !name.starts_with("autoproxy") {
            linked.insert(format!("{name} {}", version.trim_start_matches('v')));
        }
    }
    let missing: Vec<&String> = linked.iter().filter(|c| !notices.contains(*c)).collect();
    let linked = linked.len();
    assert!(
        linked > 50,
        "cargo tree listed only {linked} crates:\n{tree}"
    );
    assert!(
        missing.is_empty(),
        "{NOTICES:?} lacks {} of the {linked} linked crates: {missing:?} (make dist again; \
         cargo-about reads Cargo.lock)",
        missing.len()
    );
}

/// The one architecture a parameter allows, its default.
fn only_value(template: &Value, parameter: &str) -> Arch {
    let default = template["Parameters"][parameter]["Default"]
        .as_str()
        .unwrap();
    assert_eq!(
        template["Parameters"][parameter]["AllowedValues"],
        Value::Sequence(vec![default.into()]),
        "{parameter} offers another architecture than its default"
    );
    Arch::parse(default).unwrap_or_else(|| panic!("{parameter}: {default}"))
}

/// Every function's `CodeUri` and every layer's `ContentUri` in a packaged template, with what
/// the zip must hold and for which architecture.
fn uploads(packaged: &Value, bundled: &Value) -> Vec<(String, String, &'static str, Arch)> {
    let functions = only_value(bundled, "Architecture");
    let proxies = only_value(bundled, "ProxyArchitecture");
    let resources = packaged["Resources"].as_mapping().unwrap();
    let mut found = Vec::new();
    for (id, resource) in resources {
        let id = id.as_str().unwrap().to_owned();
        let (key, executable, arch) = match resource["Type"].as_str() {
            Some("AWS::Serverless::Function") => ("CodeUri", "bootstrap", functions),
            Some("AWS::Serverless::LayerVersion") => ("ContentUri", "autoproxy-agent", proxies),
            _ => continue,
        };
        let uri = resource["Properties"][key]
            .as_str()
            .unwrap_or_else(|| panic!("{id}: no {key} in the packaged template"))
            .to_owned();
        found.push((id, uri, executable, arch));
    }
    found
}

/// Packages the unpacked bundle with `program command…` (template.yaml into packaged.yaml, the
/// artifacts bucket named) against a fresh moto, then checks every upload: an S3 URI in the
/// artifacts bucket, a zip holding the executable for its architecture.
async fn packaged_uploads_hold_the_binaries(program: &str, command: &[&str]) {
    let unpacked = Unpacked::new();
    let moto = Moto::start();
    let sdk = moto.sdk_config().await;
    let s3 = aws_sdk_s3::Client::new(&sdk);
    s3.create_bucket()
        .bucket(ARTIFACT_BUCKET)
        .send()
        .await
        .unwrap();
    let files = [
        "--template-file",
        "template.yaml",
        "--s3-bucket",
        ARTIFACT_BUCKET,
        "--output-template-file",
        "packaged.yaml",
    ];
    let out = unpacked.run(program, &[command, &files].concat(), &moto.env());
    succeeded(program, &out);
    let uploads = uploads(
        &unpacked.yaml("packaged.yaml"),
        &unpacked.yaml("template.yaml"),
    );
    let built = built_in_repository();
    assert_eq!(
        uploads.iter().map(|u| u.0.clone()).collect::<Vec<_>>(),
        built,
        "the packaged template's functions and layers are those sam build builds"
    );
    let prefix = format!("s3://{ARTIFACT_BUCKET}/");
    for (id, uri, executable, arch) in uploads {
        let key = uri
            .strip_prefix(&prefix)
            .unwrap_or_else(|| panic!("{id}: expected an S3 URI in {ARTIFACT_BUCKET}, got {uri}"));
        let object = s3
            .get_object()
            .bucket(ARTIFACT_BUCKET)
            .key(key)
            .send()
            .await
            .unwrap_or_else(|e| panic!("{id}: {uri} was not uploaded: {e}"));
        let bytes = object.body.collect().await.unwrap().into_bytes();
        let zip = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(zip.path(), &bytes).unwrap();
        let (names, binary) = zip_entry(zip.path(), executable).unwrap();
        assert!(
            names.iter().any(|n| n == executable),
            "{id}: {uri} holds {names:?}, no {executable}"
        );
        assert_eq!(
            elf_machine(&binary),
            Ok(arch.elf_machine()),
            "{id}: {executable} in {uri} is not an ELF for {}",
            arch.name()
        );
        // Build paths are remapped (the Makefile's REMAP_PATHS for Rust, REMAP_CFLAGS for the
        // C that aws-lc-sys compiles): neither the workspace it was built in nor cargo's home
        // (the crates' sources) is named anywhere in it.
        for (what, dir) in [("workspace", root()), ("cargo home", cargo_home())] {
            let dir = dir.to_string_lossy().into_owned();
            let named = binary
                .windows(dir.len())
                .filter(|window| *window == dir.as_bytes())
                .count();
            assert_eq!(
                named, 0,
                "{id}: {executable} in {uri} names the build machine's {what} {dir} {named} times"
            );
        }
    }
}

/// Cargo's home on the build machine, as the Makefile's REMAP_PATHS takes it: `CARGO_HOME`, or
/// `~/.cargo`.
fn cargo_home() -> PathBuf {
    match std::env::var_os("CARGO_HOME") {
        Some(home) if !home.is_empty() => PathBuf::from(home),
        _ => PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cargo"),
    }
}

/// The functions and layers of the repository's template.yaml that `sam build` builds.
fn built_in_repository() -> Vec<String> {
    let text = std::fs::read_to_string(root().join("template.yaml")).unwrap();
    let template: Value = serde_yaml::from_str(&text).unwrap();
    let resources = template["Resources"].as_mapping().unwrap();
    resources
        .iter()
        .filter(|(_, r)| r["Metadata"].get("BuildMethod").is_some())
        .map(|(id, _)| id.as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn sam_package_uploads_every_zip_each_a_binary_for_the_templates_architecture() {
    packaged_uploads_hold_the_binaries("sam", &["package", "--region", "us-east-1"]).await;
}

#[tokio::test]
async fn aws_cloudformation_package_uploads_them_as_well() {
    packaged_uploads_hold_the_binaries("aws", &["cloudformation", "package"]).await;
}

/// The bucket the docs' AWS CLI commands name for the artifacts.
const DOCUMENTED_BUCKET: &str = "my-artifacts-us-east-1";

/// The README's `## Deploy with the AWS CLI` block, as a script.
fn aws_cli_block(readme: &str) -> String {
    let from = readme
        .find("## Deploy with the AWS CLI")
        .expect("the README has a section `## Deploy with the AWS CLI`");
    let rest = &readme[from..];
    let start = rest.find("```sh\n").expect("a sh block in it") + "```sh\n".len();
    let end = rest[start..].find("```").expect("the block ends") + start;
    rest[start..end].to_owned()
}

/// The bundle's README's AWS CLI block, run as written (in the directory holding the archive)
/// against moto, from an account with no bucket: it makes the bucket it names, `package` uploads the zips, then `deploy` takes the
/// 121 KB template (over the CLI's inline limit of 51,200 bytes), uploads it to the bucket and
/// asks CloudFormation for a change set from its URL. moto answers that request with an error
/// for a URL of its own S3; getting that far is what shows the CLI accepts the command.
#[tokio::test]
async fn the_readmes_aws_cli_deploy_runs_as_written() {
    let unpacked = Unpacked::new();
    let parent = unpacked.dir.parent().unwrap().to_owned();
    std::fs::copy(archive(), parent.join(archive().file_name().unwrap())).unwrap();
    let moto = Moto::start();
    // No bucket beforehand: the block makes the one it names.
    let s3 = aws_sdk_s3::Client::new(&moto.sdk_config().await);
    let readme = std::fs::read_to_string(unpacked.dir.join("README.md")).unwrap();
    let script = aws_cli_block(&readme);
    assert!(script.contains("aws cloudformation deploy"), "{script}");
    // In the shell where the README's first block set the stack's region.
    let script = format!("region=us-east-1\n{script}");
    let out = Command::new("bash")
        .args(["-c", &script])
        .current_dir(&parent)
        .env_clear()
        .env("PATH", &unpacked.path)
        .env("HOME", std::env::var_os("HOME").unwrap_or_default())
        .envs(moto.env())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.contains("51,200"),
        "the AWS CLI refused the template before any call:\n{stderr}"
    );
    assert!(
        stderr.contains("CreateChangeSet"),
        "expected the CLI to reach CreateChangeSet (which moto answers with an error), got {}:\n{}{stderr}",
        out.status,
        String::from_utf8_lossy(&out.stdout)
    );
    let packaged = std::fs::read(unpacked.dir.join("packaged.yaml")).unwrap();
    assert!(
        packaged.len() > 51_200,
        "packaged.yaml: {} bytes",
        packaged.len()
    );
    let listed = s3
        .list_objects_v2()
        .bucket(DOCUMENTED_BUCKET)
        .send()
        .await
        .unwrap();
    let templates: Vec<String> = listed
        .contents()
        .iter()
        .filter_map(|o| o.key())
        .filter(|k| k.ends_with(".template"))
        .map(str::to_owned)
        .collect();
    assert_eq!(templates.len(), 1, "the template uploaded once: {listed:?}");
    let object = s3
        .get_object()
        .bucket(DOCUMENTED_BUCKET)
        .key(&templates[0])
        .send()
        .await
        .unwrap();
    let uploaded = object.body.collect().await.unwrap().into_bytes();
    assert!(
        uploaded == packaged,
        "the uploaded template is not packaged.yaml"
    );
}
