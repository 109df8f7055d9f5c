//! `make dist`: writes `dist/autoproxy-<version>.tar.gz` (the workspace's version, stamped with
//! the commit checked out) and `dist/SHA256SUMS` from template.yaml and the binaries `sam
//! build` left in `.aws-sam/build`, for this machine's architecture (`autoproxy_tests::dist`
//! says what the bundle holds).
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::path::Path;
use std::process::Command;

use autoproxy_tests::dist::{self, Arch, Release};

fn main() {
    let Some(arch) = Arch::host() else {
        eprintln!(
            "dist: expected an x86_64 or aarch64 machine (Lambda's architectures), got {}",
            std::env::consts::ARCH
        );
        std::process::exit(2);
    };
    let root = autoproxy_tests::root();
    let commit = match commit(&root) {
        Ok(commit) => commit,
        Err(err) => {
            eprintln!("dist: the commit to stamp: {err}");
            std::process::exit(2);
        }
    };
    let release = Release {
        version: env!("CARGO_PKG_VERSION"),
        commit: &commit,
    };
    match dist::make_bundle(&root, &release, arch) {
        Ok(archive) => println!("dist: {} ({}, {commit})", archive.display(), arch.name()),
        Err(err) => {
            eprintln!("dist: {err}");
            std::process::exit(1);
        }
    }
}

/// The commit checked out in `root`, with `-dirty` when tracked files differ from it.
fn commit(root: &Path) -> Result<String, String> {
    let git = |args: &[&str]| -> Result<String, String> {
        let out = Command::new("git")
            .arg("-C")
            .arg(root)
            .args(args)
            .output()
            .map_err(|e| format!("run git: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "expected a git checkout: git {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    };
    let head = git(&["rev-parse", "HEAD"])?;
    let changed = git(&["status", "--porcelain", "--untracked-files=no"])?;
    Ok(if changed.is_empty() {
        head
    } else {
        format!("{head}-dirty")
    })
}
