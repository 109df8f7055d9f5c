//! The address service as a systemd unit (the ground floor: the apply installs it, the service
//! runs under it): its text, and keeping it installed and running.
//!
//! The apply calls [`ensure`] after every successful apply or skip. The unit names the agent
//! by its path, and the launcher caches each agent build under its own sha256: an upgrade is
//! a new path, so a new unit text, so a restart onto the new binary. Nothing happens where
//! the agent is not root or systemd does not run (the result says which).
//!
//! The unit is hardened: a read-only system but for the maps directory (the map file, its
//! lock and the control socket) and the directory of the HTTP socket HAProxy forwards
//! `/ready` to (when the config names one), which [`ensure`] creates before the unit starts,
//! and which `ReadWritePaths=-…` tolerates missing (without the `-`, a missing directory
//! fails the start with 226/NAMESPACE). A config that moves that socket changes the unit's
//! text, so the apply restarts the service with the new directory writable. The unit sets no
//! `AUTOPROXY_*` variable: the service's defaults are the production values (CloudWatch
//! metrics every 60 s, with the instance profile's credentials and the region from IMDS).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The unit's name.
pub const UNIT: &str = "autoproxy-resolver.service";

/// Where the unit goes and how systemd is reached: [`Host::system`] on an instance; tests
/// point them elsewhere.
#[derive(Debug, Clone)]
pub struct Host {
    /// The unit file.
    pub unit_path: PathBuf,
    /// Exists when systemd runs (`/run/systemd/system`).
    pub systemd_marker: PathBuf,
    /// The `systemctl` to run (looked up on PATH when it has no `/`).
    pub systemctl: PathBuf,
    /// Whether only root may install (false in tests, which may run as anyone).
    pub require_root: bool,
}

impl Host {
    pub fn system() -> Host {
        Host {
            unit_path: PathBuf::from("/etc/systemd/system").join(UNIT),
            systemd_marker: PathBuf::from("/run/systemd/system"),
            systemctl: PathBuf::from("systemctl"),
            require_root: true,
        }
    }
}

/// What [`ensure`] found and did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServiceState {
    /// Not root: nothing done.
    NotRoot,
    /// systemd does not run here: nothing done.
    NoSystemd,
    /// The unit was as it should be and the service active: nothing done.
    Running,
    /// The unit was as it should be, the service inactive: started.
    Started,
    /// The unit was written (new, or its text changed: a new agent or config path):
    /// daemon-reload, enable, restart.
    Installed,
}

/// Why [`ensure`] could not finish.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    #[error(
        "refusing to write {what} {path:?} into a unit file: expected an absolute path of \
         letters, digits and / . _ + -"
    )]
    UnsafePath { what: &'static str, path: PathBuf },
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot create the maps directory {path}: {source}")]
    MapsDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot create the agent socket's directory {path}: {source}")]
    SocketDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("systemctl {args}: {why}")]
    Systemctl { args: String, why: String },
    #[error(
        "{unit} runs the address service for {serving}, which still exists: refusing to switch \
         it to {config} (one address service per host, so one ConfigPath per host; remove \
         {serving} or the unit to move it)"
    )]
    OtherConfig {
        unit: PathBuf,
        serving: PathBuf,
        config: PathBuf,
    },
}

/// The unit text for `agent` resolving for the config at `config` (read for the directory of
/// its agent socket).
pub fn unit(agent: &Path, config: &Path) -> Result<String, ServiceError> {
    unit_with(agent, config, socket_dir(config).as_deref())
}

/// The directory of the HTTP socket the config at `config` names, if it names one.
pub fn socket_dir(config: &Path) -> Option<PathBuf> {
    let text = std::fs::read_to_string(config).ok()?;
    let path = crate::haproxy::agent_bind_path(&text).ok()??;
    path.parent().map(Path::to_path_buf)
}

/// The unit text, the agent socket's directory given.
pub fn unit_with(
    agent: &Path,
    config: &Path,
    socket_dir: Option<&Path>,
) -> Result<String, ServiceError> {
    let agent_text = safe(agent, "the agent path")?;
    let config_text = safe(config, "the config path")?;
    let maps = crate::address_map::maps_dir(config);
    let mut writable = format!("ReadWritePaths=-{}", safe(&maps, "the maps directory")?);
    if let Some(dir) = socket_dir {
        writable.push_str(&format!(
            "\nReadWritePaths=-{}",
            safe(dir, "the agent socket's directory")?
        ));
    }
    Ok(format!(
        "\
# Written by autoproxy-agent apply; rewritten whenever its text changes.
[Unit]
Description=autoproxy-resolver: keeps HAProxy's backend addresses current at a bounded DNS rate
After=network-online.target haproxy.service
Wants=network-online.target

[Service]
Type=notify
NotifyAccess=main
WatchdogSec=30
ExecStart={agent_text} resolve {config_text}
Restart=always
RestartSec=5
TimeoutStopSec=20
NoNewPrivileges=yes
ProtectSystem=strict
{writable}
ProtectHome=yes
PrivateTmp=yes
PrivateDevices=yes
ProtectKernelTunables=yes
ProtectKernelModules=yes
ProtectKernelLogs=yes
ProtectControlGroups=yes
ProtectClock=yes
ProtectHostname=yes
RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6
RestrictNamespaces=yes
RestrictRealtime=yes
RestrictSUIDSGID=yes
LockPersonality=yes
MemoryDenyWriteExecute=yes
SystemCallArchitectures=native
MemoryMax=256M
TasksMax=64

[Install]
WantedBy=multi-user.target
"
    ))
}

/// A path goes into the unit as it is: absolute, no whitespace (systemd splits on it), no
/// `%` (a specifier), no quotes or backslashes.
fn safe<'a>(path: &'a Path, what: &'static str) -> Result<&'a str, ServiceError> {
    let text = path.to_str().filter(|t| {
        t.starts_with('/')
            && t.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"/._+-".contains(&b))
    });
    text.ok_or_else(|| ServiceError::UnsafePath {
        what,
        path: path.to_path_buf(),
    })
}

/// Keeps the resolver's unit installed and the service running, for `config`, run from
/// `agent` (see the module doc).
pub fn ensure(
    agent: &Path,
    config: &Path,
    host: &Host,
    deadline: Instant,
) -> Result<ServiceState, ServiceError> {
    if host.require_root && !rustix::process::geteuid().is_root() {
        return Ok(ServiceState::NotRoot);
    }
    if !host.systemd_marker.is_dir() {
        return Ok(ServiceState::NoSystemd);
    }
    let socket_dir = socket_dir(config);
    let text = unit_with(agent, config, socket_dir.as_deref())?;
    let maps = crate::address_map::maps_dir(config);
    std::fs::create_dir_all(&maps).map_err(|source| ServiceError::MapsDir {
        path: maps.clone(),
        source,
    })?;
    if let Some(dir) = socket_dir {
        std::fs::create_dir_all(&dir)
            .map_err(|source| ServiceError::SocketDir { path: dir, source })?;
    }
    let current = std::fs::read_to_string(&host.unit_path).ok();
    if let Some(serving) = current.as_deref().and_then(served_config)
        && serving != config
        && serving.exists()
    {
        return Err(ServiceError::OtherConfig {
            unit: host.unit_path.clone(),
            serving,
            config: config.to_path_buf(),
        });
    }
    if current.as_deref() != Some(text.as_str()) {
        write_unit(&host.unit_path, &text)?;
        systemctl(host, &["daemon-reload"], deadline)?;
        systemctl(host, &["enable", "--quiet", UNIT], deadline)?;
        systemctl(host, &["restart", UNIT], deadline)?;
        return Ok(ServiceState::Installed);
    }
    if systemctl(host, &["is-active", "--quiet", UNIT], deadline).is_ok() {
        return Ok(ServiceState::Running);
    }
    systemctl(host, &["enable", "--quiet", UNIT], deadline)?;
    systemctl(host, &["start", UNIT], deadline)?;
    Ok(ServiceState::Started)
}

/// The config an installed unit's service resolves for (its `ExecStart=… resolve <config>`).
fn served_config(unit: &str) -> Option<PathBuf> {
    unit.lines()
        .find_map(|line| line.strip_prefix("ExecStart="))
        .and_then(|exec| exec.split_once(" resolve "))
        .map(|(_, config)| PathBuf::from(config.trim()))
}

fn write_unit(path: &Path, text: &str) -> Result<(), ServiceError> {
    let failed = |source| ServiceError::Write {
        path: path.to_path_buf(),
        source,
    };
    crate::files::replace(path, text.as_bytes(), 0o644).map_err(failed)
}

/// The longest any systemctl call may take (a restart waits for the old process to stop).
const SYSTEMCTL_TIMEOUT: Duration = Duration::from_secs(60);

fn systemctl(host: &Host, args: &[&str], deadline: Instant) -> Result<(), ServiceError> {
    let failed = |why: String| ServiceError::Systemctl {
        args: args.join(" "),
        why,
    };
    // Its words go to a file without a name, not a pipe: a pipe read only after the exit
    // would stop a child that says more than the pipe holds, until the deadline.
    let mut said = crate::child::output_file(&std::env::temp_dir())
        .map_err(|err| failed(format!("no file for its output: {err}")))?;
    let stderr = said
        .try_clone()
        .map_err(|err| failed(format!("no file for its output: {err}")))?;
    let mut child = Command::new(&host.systemctl)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .map_err(|err| failed(format!("cannot run {}: {err}", host.systemctl.display())))?;
    let waited = Instant::now();
    let deadline = deadline.min(waited + SYSTEMCTL_TIMEOUT);
    loop {
        match child.try_wait() {
            Ok(Some(status)) if status.success() => return Ok(()),
            Ok(Some(status)) => {
                let stderr = crate::child::kept_output(&mut said).unwrap_or_default();
                return Err(failed(format!(
                    "{status}: {}",
                    autoproxy::excerpt(stderr.trim(), 300)
                )));
            }
            Ok(None) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(failed(format!(
                    "no exit within {} ms (its bound, or what was left of the apply's)",
                    waited.elapsed().as_millis()
                )));
            }
            Err(err) => return Err(failed(err.to_string())),
        }
    }
}

/// Keeps the address service installed and running for `config`, run from `agent`; one log
/// line per thing it did or could not do. The apply calls this after every successful apply
/// or skip; [`ensure`] is the typed form.
pub fn ensure_lines(agent: &Path, config: &Path, deadline: Instant) -> Vec<String> {
    let line = match ensure(agent, config, &Host::system(), deadline) {
        Ok(ServiceState::NotRoot) => format!(
            "not root: the address service for {} is not installed (root installs it as {})",
            config.display(),
            UNIT
        ),
        Ok(ServiceState::NoSystemd) => format!(
            "no systemd here: the address service for {} is not installed ({} needs systemd)",
            config.display(),
            UNIT
        ),
        Ok(ServiceState::Running) => return Vec::new(),
        Ok(ServiceState::Started) => "started autoproxy-resolver".to_owned(),
        Ok(ServiceState::Installed) => "installed and (re)started autoproxy-resolver".to_owned(),
        Err(err) => format!("WARNING: {err}"),
    };
    vec![line]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A host under `dir` whose `systemctl` is a shell script running `body`.
    fn stand_in_host(dir: &Path, body: &str) -> Host {
        use std::os::unix::fs::PermissionsExt;
        let systemctl = dir.join("systemctl");
        std::fs::write(&systemctl, format!("#!/bin/sh\n{body}\n")).expect("stand-in");
        std::fs::set_permissions(&systemctl, std::fs::Permissions::from_mode(0o755)).expect("mode");
        Host {
            unit_path: dir.join("autoproxy-resolver.service"),
            systemd_marker: dir.to_path_buf(),
            systemctl,
            require_root: false,
        }
    }

    /// A `systemctl` that never answers: every call is killed at the deadline the apply
    /// gives, not at each call's own 60 s, and the install says which call it was.
    #[test]
    fn every_systemctl_call_ends_by_the_deadline() {
        let dir = tempfile::tempdir().expect("temp dir");
        let host = stand_in_host(dir.path(), "exec sleep 30");
        let config = dir.path().join("haproxy.cfg");
        let agent = dir.path().join("autoproxy-agent");
        let started = Instant::now();
        let ended = ensure(&agent, &config, &host, started + Duration::from_secs(1));
        let took = started.elapsed();
        assert!(
            matches!(&ended, Err(ServiceError::Systemctl { args, .. }) if args == "daemon-reload"),
            "{ended:?}"
        );
        assert!(took < Duration::from_secs(10), "{took:?}");
    }

    /// A `systemctl` that fails with more on stderr than a pipe holds: its words are read
    /// while it runs, so it ends, and the error says how it ended rather than waiting out
    /// the deadline on a full pipe.
    #[test]
    fn a_systemctl_that_says_much_and_fails_ends_with_its_status() {
        let dir = tempfile::tempdir().expect("temp dir");
        let host = stand_in_host(
            dir.path(),
            "echo first words >&2; head -c 1000000 /dev/zero | tr '\\0' x >&2; exit 3",
        );
        let started = Instant::now();
        let ended = systemctl(&host, &["daemon-reload"], started + Duration::from_secs(5));
        let why = match ended {
            Err(ServiceError::Systemctl { why, .. }) => why,
            other => panic!("expected a failed systemctl, got {other:?}"),
        };
        assert!(why.contains("exit status: 3"), "{why}");
        assert!(why.contains("first words"), "{why}");
        assert!(why.len() < 1000, "{} bytes", why.len());
    }

    /// One unit per host: a second config that still exists is refused, clearly, rather
    /// than flip the service between the two at every apply; a config that is gone moves it.
    #[test]
    fn a_second_config_on_a_host_is_refused_and_a_moved_one_followed() {
        let dir = tempfile::tempdir().expect("temp dir");
        let host = stand_in_host(dir.path(), "exit 0");
        let agent = dir.path().join("autoproxy-agent");
        let (first, second) = (
            dir.path().join("a/haproxy.cfg"),
            dir.path().join("b/haproxy.cfg"),
        );
        for config in [&first, &second] {
            std::fs::create_dir_all(config.parent().expect("a directory")).expect("dir");
            std::fs::write(config, "global\n").expect("config");
        }
        let deadline = || Instant::now() + Duration::from_secs(30);
        let installed = ensure(&agent, &first, &host, deadline());
        assert!(
            matches!(installed, Ok(ServiceState::Installed)),
            "{installed:?}"
        );
        let refused = ensure(&agent, &second, &host, deadline());
        let Err(err @ ServiceError::OtherConfig { .. }) = refused else {
            panic!("{refused:?}")
        };
        assert!(
            err.to_string().contains(&first.display().to_string()),
            "{err}"
        );
        let unit_text = std::fs::read_to_string(&host.unit_path).expect("the unit");
        assert_eq!(served_config(&unit_text), Some(first.clone()));
        std::fs::remove_file(&first).expect("removed");
        let moved = ensure(&agent, &second, &host, deadline());
        assert!(matches!(moved, Ok(ServiceState::Installed)), "{moved:?}");
    }

    #[test]
    fn the_unit_names_the_agent_the_config_and_the_maps_directory() {
        let text = unit(
            Path::new("/var/lib/autoproxy/agent/ab12/autoproxy-agent"),
            Path::new("/etc/haproxy/haproxy.cfg"),
        )
        .expect("a unit");
        assert!(text.contains(
            "\nExecStart=/var/lib/autoproxy/agent/ab12/autoproxy-agent resolve /etc/haproxy/haproxy.cfg\n"
        ));
        assert!(text.contains("\nReadWritePaths=-/etc/haproxy/autoproxy\n"));
        // systemd restarts a wedged loop, not only an exited process.
        assert!(text.contains("\nType=notify\nNotifyAccess=main\nWatchdogSec=30\n"));
        let with_socket = unit_with(
            Path::new("/var/lib/autoproxy/agent/ab12/autoproxy-agent"),
            Path::new("/etc/haproxy/haproxy.cfg"),
            Some(Path::new("/run/haproxy")),
        )
        .expect("a unit");
        assert!(
            with_socket.contains(
                "\nReadWritePaths=-/etc/haproxy/autoproxy\nReadWritePaths=-/run/haproxy\n"
            )
        );
        for unsafe_path in ["relative/agent", "/a b/agent", "/a%n/agent", "/a\"/agent"] {
            assert!(
                matches!(
                    unit(
                        Path::new(unsafe_path),
                        Path::new("/etc/haproxy/haproxy.cfg")
                    ),
                    Err(ServiceError::UnsafePath { .. })
                ),
                "{unsafe_path}"
            );
        }
    }
}
