//! `haproxy -c` as it runs inside the VPC.
//!
//! HAProxy resolves server names with libc while checking; the names in our configs only
//! resolve inside the member VPCs, so here every one would be a "could not resolve" warning.
//! The check therefore runs in a private mount namespace whose /etc/hosts maps every server
//! name to loopback: what remains are the config's own warnings, and `-dW` makes each of them
//! fatal. (The default template names no server: its routes live in map files, written
//! beside the config as the apply document does.)

use std::collections::BTreeSet;
use std::process::Command;

/// What `haproxy -c` said.
#[derive(Debug)]
pub struct Checked {
    pub success: bool,
    pub output: String,
}

/// The host names of every `server` line (a socket path, `unix@…`, names no host).
pub fn server_names(config: &str) -> BTreeSet<String> {
    config
        .lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            (words.next() == Some("server")).then_some(())?;
            let address = words
                .nth(1)
                .filter(|a| !a.contains('@') && !a.starts_with('/'))?;
            let host = address.rsplit_once(':').map_or(address, |(host, _)| host);
            Some(host.to_owned())
        })
        .filter(|host| host.parse::<std::net::IpAddr>().is_err())
        .collect()
}

/// Runs `haproxy -c -dW` on the config (panics if HAProxy is not installed: a missing
/// checker must fail the test, not skip it).
pub fn haproxy_check(config: &str) -> Checked {
    let dir = tempfile::tempdir().expect("temp dir");
    let cfg = dir.path().join("haproxy.cfg");
    let hosts = dir.path().join("hosts");
    crate::proxy::install_config(dir.path(), config);
    let mut lines = String::from("127.0.0.1 localhost\n");
    for name in server_names(config) {
        lines.push_str(&format!("127.0.0.1 {name}\n"));
    }
    std::fs::write(&hosts, lines).expect("write hosts");
    let output = Command::new("unshare")
        .args([
            "-rm",
            "sh",
            "-c",
            "mount --bind \"$1\" /etc/hosts && exec haproxy -c -dW -f \"$2\"",
            "sh",
        ])
        .arg(&hosts)
        .arg(&cfg)
        .output()
        .expect("run unshare + haproxy (install util-linux and haproxy: .ci/tools.sh)");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        !text.contains("haproxy: not found") && !text.contains("No such file"),
        "haproxy is not installed: {text}"
    );
    let clean = !text.contains("[WARNING]") && !text.contains("[ALERT]");
    Checked {
        success: output.status.success() && clean,
        output: text,
    }
}

/// Asserts the config passes `haproxy -c` with no warnings.
pub fn assert_valid(config: &str) {
    let checked = haproxy_check(config);
    assert!(
        checked.success,
        "haproxy -c rejected the config:\n{}",
        checked.output
    );
}
