//! The release bundle (`make dist`) deploys without a Rust toolchain. Unpacked elsewhere, with
//! cargo, rustc, cargo-lambda and zig off PATH (and no cargo variable in the environment),
//! `sam package` and `aws cloudformation package` upload every function's zip and the agent
//! layer's to (moto's) S3; each uploaded zip holds a binary for the bundled template's
//! architecture; cfn-lint passes on the bundled templates.
//!
//! The bundle is built once for the group. `make test-dist` runs the group, last in `make test`:
//! its `make dist` then finds the template checks' `sam build` done.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use autoproxy_tests::dist::{ARCH_RULE, Arch, elf_machine, zip_entry};
use autoproxy_tests::moto::Moto;
use autoproxy_tests::{root, tool};
use serde_yaml::Value;

/// What building from source needs and deploying the bundle must not.
const TOOLCHAIN: [&str; 4] = ["cargo", "rustc", "cargo-lambda", "zig"];
/// What deploying the bundle needs.
const DEPLOY_TOOLS: [&str; 3] = ["sam", "aws", "cfn-lint"];
const ARTIFACT_BUCKET: &str = "autoproxy-release-artifacts";

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
    let templates = [
        "template.yaml",
        "member-account.yaml",
        "central-forwarding.yaml",
    ];
    for companion in &templates[1..] {
        let shipped = std::fs::read(unpacked.dir.join(companion)).unwrap();
        let source = std::fs::read(root().join("docs").join(companion)).unwrap();
        assert!(
            shipped == source,
            "{companion} differs from docs/{companion}"
        );
    }
    // Warnings count as failures, as in .ci/check-templates.sh.
    let out = unpacked.run("cfn-lint", &templates, &[]);
    let report = succeeded("cfn-lint", &out);
    assert_eq!(report.trim(), "", "cfn-lint reported findings");
}

/// The architecture a parameter defaults to, which the bundle's rule must hold it to.
fn only_value(template: &Value, parameter: &str) -> Arch {
    let default = template["Parameters"][parameter]["Default"]
        .as_str()
        .unwrap();
    let rule = serde_yaml::to_string(&template["Rules"][ARCH_RULE]).unwrap();
    // As words: how deep serde_yaml indents the assertion's list is no part of it.
    let words = rule.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        words.contains(&format!("!Equals - !Ref {parameter} - {default} ")),
        "{ARCH_RULE} does not hold {parameter} to {default}:\n{rule}"
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
