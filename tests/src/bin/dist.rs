//! `make dist`: writes `dist/autoproxy-<version>.tar.gz` (the workspace's version) from
//! template.yaml and the binaries `sam build` left in `.aws-sam/build`, for this machine's
//! architecture (`autoproxy_tests::dist` says what the bundle holds).
#![allow(clippy::print_stdout, clippy::print_stderr)]

use autoproxy_tests::dist::{self, Arch};

fn main() {
    let Some(arch) = Arch::host() else {
        eprintln!(
            "dist: expected an x86_64 or aarch64 machine (Lambda's architectures), got {}",
            std::env::consts::ARCH
        );
        std::process::exit(2);
    };
    match dist::make_bundle(&autoproxy_tests::root(), env!("CARGO_PKG_VERSION"), arch) {
        Ok(archive) => println!("dist: {} ({})", archive.display(), arch.name()),
        Err(err) => {
            eprintln!("dist: {err}");
            std::process::exit(1);
        }
    }
}
