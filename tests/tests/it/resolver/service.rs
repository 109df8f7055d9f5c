//! The resolver's systemd unit: verified offline, and installed through `systemctl`.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use autoproxy_agent::unit::{self as service, Host, ServiceState};

/// `systemd-analyze verify` passes `unit` (written under `dir`) and says nothing about it.
/// A deadline the systemctl stand-in never comes near.
fn later() -> std::time::Instant {
    std::time::Instant::now() + std::time::Duration::from_secs(60)
}

fn assert_verifies(unit: &str, dir: &Path) {
    let unit_dir = dir.join("units");
    std::fs::create_dir_all(&unit_dir).unwrap();
    std::fs::write(unit_dir.join(service::UNIT), unit).unwrap();
    let verify = Command::new("systemd-analyze")
        .arg("verify")
        .arg(unit_dir.join(service::UNIT))
        .output()
        .expect("run systemd-analyze");
    let complaints = String::from_utf8_lossy(&verify.stderr).into_owned();
    println!("systemd-analyze verify:\n{complaints}");
    assert!(verify.status.success(), "{complaints}");
    let ours: Vec<&str> = complaints
        .lines()
        .filter(|l| l.contains(service::UNIT))
        .collect();
    assert!(ours.is_empty(), "complaints about the unit: {ours:?}");
}

/// A `systemctl` stand-in in `dir` that records its calls and says the unit is inactive
/// while the file `inactive` exists.
struct Systemctl {
    path: PathBuf,
    calls: PathBuf,
    inactive: PathBuf,
}

impl Systemctl {
    fn new(dir: &Path) -> Systemctl {
        let systemctl = Systemctl {
            path: dir.join("systemctl"),
            calls: dir.join("calls"),
            inactive: dir.join("inactive"),
        };
        std::fs::write(
            &systemctl.path,
            format!(
                "#!/bin/sh\necho \"$*\" >>'{}'\nif [ \"$1\" = is-active ] && [ -e '{}' ]; then exit 3; fi\nexit 0\n",
                systemctl.calls.display(),
                systemctl.inactive.display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&systemctl.path, std::fs::Permissions::from_mode(0o755)).unwrap();
        systemctl
    }

    /// The calls since the last time, one line of arguments each.
    fn take_calls(&self) -> Vec<String> {
        let text = std::fs::read_to_string(&self.calls).unwrap_or_default();
        let _ = std::fs::remove_file(&self.calls);
        text.lines().map(str::to_owned).collect()
    }
}

/// The unit passes `systemd-analyze verify`, and is installed through `systemctl` (a
/// stand-in that records its calls): written and restarted when its text changes (a new
/// agent path is an upgrade), started when inactive, left alone when running.
#[test]
fn the_service_unit_verifies_and_installs_through_systemctl() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("etc/haproxy.cfg");
    std::fs::create_dir_all(config.parent().unwrap()).unwrap();
    std::fs::write(&config, "global\n").unwrap();
    let agent = autoproxy_tests::agent_binary();
    let unit = service::unit(&agent, &config).expect("a unit");
    assert_verifies(&unit, dir.path());

    let systemctl = Systemctl::new(dir.path());
    let marker = dir.path().join("run-systemd-system");
    let host = Host {
        unit_path: dir.path().join(service::UNIT),
        systemd_marker: marker.clone(),
        systemctl: systemctl.path.clone(),
        require_root: false,
    };
    let take_calls = || systemctl.take_calls();
    let name = service::UNIT;

    assert_eq!(
        service::ensure(&agent, &config, &host, later()).unwrap(),
        ServiceState::NoSystemd
    );
    assert!(take_calls().is_empty());
    std::fs::create_dir_all(&marker).unwrap();

    assert_eq!(
        service::ensure(&agent, &config, &host, later()).unwrap(),
        ServiceState::Installed
    );
    assert_eq!(
        take_calls(),
        [
            "daemon-reload".to_owned(),
            format!("enable --quiet {name}"),
            format!("restart {name}")
        ]
    );
    assert_eq!(std::fs::read_to_string(&host.unit_path).unwrap(), unit);
    assert!(
        config.parent().unwrap().join("autoproxy").is_dir(),
        "the maps directory exists before the unit starts"
    );

    assert_eq!(
        service::ensure(&agent, &config, &host, later()).unwrap(),
        ServiceState::Running
    );
    assert_eq!(take_calls(), [format!("is-active --quiet {name}")]);

    std::fs::write(&systemctl.inactive, "").unwrap();
    assert_eq!(
        service::ensure(&agent, &config, &host, later()).unwrap(),
        ServiceState::Started
    );
    assert_eq!(
        take_calls(),
        [
            format!("is-active --quiet {name}"),
            format!("enable --quiet {name}"),
            format!("start {name}")
        ]
    );

    // An upgrade: the launcher caches each build under its own path.
    let upgraded = dir.path().join("agent/0123abcd/autoproxy-agent");
    assert_eq!(
        service::ensure(&upgraded, &config, &host, later()).unwrap(),
        ServiceState::Installed
    );
    assert_eq!(take_calls().last().unwrap(), &format!("restart {name}"));
    assert!(
        std::fs::read_to_string(&host.unit_path)
            .unwrap()
            .contains(&format!("ExecStart={} resolve ", upgraded.display()))
    );
}

/// One address service per config: a second one on the same config exits 1 within a second,
/// naming the pid of the first, and never resolves beside it; the first goes on.
#[test]
fn a_second_service_on_one_config_exits_naming_the_first() {
    use std::time::Duration;

    use super::fixture::{Fixture, QUICK, host};

    let f = Fixture::start(1, &["b"]);
    f.dns.set(&host(0), &[f.backend_ip("b")]);
    let mut first = f.resolver(QUICK);
    assert!(
        f.wait_until(Duration::from_secs(10), |f| f.running_map().len() == 1),
        "{}",
        first.output()
    );
    let mut second = f.resolver(QUICK);
    let status = second.exited_within(Duration::from_secs(1));
    assert_eq!(
        status.and_then(|s| s.code()),
        Some(1),
        "the second service still runs or ended otherwise:\n{}",
        second.output()
    );
    let said = second.output();
    assert!(
        said.contains(&format!("pid {}", first.pid())),
        "the holder's pid is not named:\n{said}"
    );
    assert!(!said.contains("yourself"), "{said}");
    assert!(first.is_running(), "{}", first.output());
    // Once the first is gone, a service may run again.
    assert!(first.terminate().is_some());
    let mut third = f.resolver(QUICK);
    assert!(
        third.exited_within(Duration::from_secs(2)).is_none(),
        "{}",
        third.output()
    );
}
