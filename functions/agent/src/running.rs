//! What runs on this instance, asked two ways: the service (is an HAProxy running at all?) and
//! the runtime API of the installed config (which generation, which worker?).
//!
//! The two answer different questions, and neither stands in for the other. A hand-written
//! config often declares no stats socket, so its HAProxy runs although nothing answers there:
//! it must be reloaded, never "started" (a start of an active unit does nothing). And a busy or
//! frozen worker leaves the socket silent: its generation is unknown, which is never 0.

use std::path::{Path, PathBuf};
use std::time::Duration;

use autoproxy::artifact::{self, MapFiles};

use crate::haproxy::{Info, RuntimeApi, RuntimeError, Session};

/// How long one question on the stats socket may take.
pub const QUESTION_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a silent socket is asked again before its generation counts as unknown.
pub const SILENT_BUDGET: Duration = Duration::from_secs(6);
/// How long `systemctl is-active` may take.
pub const SERVICE_TIMEOUT: Duration = Duration::from_secs(5);

/// What one HAProxy worker runs, asked on one connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Running {
    /// The generation of its generation map; without one, of its `description` (0 when that
    /// is not an autoproxy generation).
    pub generation: u64,
    pub pid: u32,
    /// The generation came from the generation map.
    pub by_map: bool,
}

/// What the installed config's stats socket said.
#[derive(Debug)]
pub enum Answer {
    Runs(Running),
    /// No config installed, or it declares no usable stats socket.
    NoSocket,
    /// Nothing listens on the socket: no HAProxy runs this config's socket.
    NothingListens,
    /// Something listens but did not answer as it should within the budget: a busy worker.
    Silent(String),
}

impl Running {
    /// Asks the worker on `api` once: connect, `show info`, the generation map, within one
    /// [`QUESTION_TIMEOUT`] for the whole question, however slowly each part answers.
    pub async fn read(api: &RuntimeApi) -> Result<Running, RuntimeError> {
        let question = async {
            let mut session = api.session().await?;
            let info = session.info().await?;
            Running::read_on(&mut session, &info).await
        };
        tokio::time::timeout(QUESTION_TIMEOUT, question)
            .await
            .unwrap_or_else(|_| Err(api.timed_out("show info; show map", QUESTION_TIMEOUT)))
    }

    /// What the worker that answered `info` on `session` runs.
    pub async fn read_on(session: &mut Session, info: &Info) -> Result<Running, RuntimeError> {
        let map = MapFiles::stable().generation.unwrap_or_default();
        // Only a worker without the map (a config without one) falls back to `description`:
        // any other error is an error, not an older generation.
        let from_map = match session.show_map(&map).await {
            Ok(entries) => entries
                .iter()
                .find(|(key, _)| key == artifact::GENERATION_KEY)
                .and_then(|(_, value)| artifact::parse_generation(value)),
            Err(RuntimeError::Unexpected { answer, .. })
                if answer.starts_with("Unknown map identifier") =>
            {
                None
            }
            Err(err) => return Err(err),
        };
        Ok(Running {
            generation: from_map.or_else(|| info.generation()).unwrap_or(0),
            pid: info.pid,
            by_map: from_map.is_some(),
        })
    }

    /// Asks the worker on the stats socket of the config at `config`, again while it is
    /// silent, for at most `budget`.
    pub async fn ask(config: &Path, budget: Duration) -> Answer {
        let Some(socket) = crate::haproxy::socket_of(config) else {
            return Answer::NoSocket;
        };
        Running::ask_socket(&socket, budget).await
    }

    /// The same, on `socket`: ends within `budget` (one question more than fits is cut
    /// short, never waited out).
    pub async fn ask_socket(socket: &Path, budget: Duration) -> Answer {
        let api = RuntimeApi::new(socket, QUESTION_TIMEOUT);
        let mut last = None;
        let asking = async {
            loop {
                match Running::read(&api).await {
                    Ok(running) => return Answer::Runs(running),
                    Err(err) if err.nothing_listens() => return Answer::NothingListens,
                    Err(err) => last = Some(err.to_string()),
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        };
        match tokio::time::timeout(budget, asking).await {
            Ok(answer) => answer,
            Err(_) => Answer::Silent(
                last.unwrap_or_else(|| api.timed_out("show info", budget).to_string()),
            ),
        }
    }
}

/// What ran when an apply took the lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Before {
    /// No HAProxy runs: the apply starts it.
    Stopped,
    /// HAProxy runs (the service says so, or its socket answered); what its worker answered on
    /// the installed config's stats socket, `None` when that config declares none or nothing
    /// listens there (a hand-written config): it runs no generation of ours.
    Runs(Option<Running>),
}

impl Before {
    pub fn running(self) -> Option<Running> {
        match self {
            Before::Runs(running) => running,
            Before::Stopped => None,
        }
    }
}

/// How this instance says whether HAProxy runs: the service manager when the reload command
/// is `systemctl reload <unit>`, else the processes that read the config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Service {
    Systemd { systemctl: String, unit: String },
    Processes { config: PathBuf },
}

impl Service {
    pub fn of(reload: &[String], config: &Path) -> Service {
        match reload {
            [systemctl, verb, unit]
                if (systemctl == "systemctl" || systemctl.ends_with("/systemctl"))
                    && verb.starts_with("reload") =>
            {
                Service::Systemd {
                    systemctl: systemctl.clone(),
                    unit: unit.clone(),
                }
            }
            _ => Service::Processes {
                config: config.to_path_buf(),
            },
        }
    }

    /// Whether HAProxy runs; `Err` when the service manager could not be asked.
    pub async fn runs(&self) -> Result<bool, String> {
        match self {
            Service::Systemd { systemctl, unit } => {
                let args = vec!["is-active".to_owned(), unit.clone()];
                // Not `/`: a caller that is not root may write in the temp directory only.
                let scratch = std::env::temp_dir();
                let finished =
                    crate::child::run(Path::new(systemctl), &args, &scratch, SERVICE_TIMEOUT)
                        .await
                        .map_err(|err| format!("cannot run {systemctl} is-active {unit}: {err}"))?;
                if finished.timed_out {
                    return Err(format!(
                        "{systemctl} is-active {unit}: {}",
                        finished.status()
                    ));
                }
                Ok(unit_runs(&finished.output))
            }
            Service::Processes { config } => Ok(!processes_reading(config).is_empty()),
        }
    }
}

/// Whether `systemctl is-active`'s answer is a unit with a running main process.
fn unit_runs(answer: &str) -> bool {
    matches!(
        answer.lines().next().map(str::trim),
        Some("active" | "reloading" | "activating" | "deactivating")
    )
}

/// The live processes (not zombies) whose command line reads `config` with `-f`.
pub fn processes_reading(config: &Path) -> Vec<u32> {
    let wanted = config.as_os_str().as_encoded_bytes();
    crate::proc::pids()
        .into_iter()
        .filter(|pid| {
            let reads = crate::proc::command_line(*pid).is_some_and(|args| {
                args.windows(2)
                    .any(|pair| pair[0] == b"-f" && pair[1] == wanted)
            });
            reads && crate::proc::stat(*pid).is_some_and(|stat| stat.live())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(text: &str) -> Vec<String> {
        text.split(' ').map(str::to_owned).collect()
    }

    #[test]
    fn the_service_is_asked_where_the_reload_command_says() {
        let config = Path::new("/etc/haproxy/haproxy.cfg");
        let systemd = |systemctl: &str, unit: &str| Service::Systemd {
            systemctl: systemctl.to_owned(),
            unit: unit.to_owned(),
        };
        let processes = Service::Processes {
            config: config.to_path_buf(),
        };
        for (reload, want) in [
            ("systemctl reload haproxy", systemd("systemctl", "haproxy")),
            (
                "/usr/bin/systemctl reload haproxy@edge",
                systemd("/usr/bin/systemctl", "haproxy@edge"),
            ),
            (
                "systemctl reload-or-restart haproxy",
                systemd("systemctl", "haproxy"),
            ),
            ("/usr/local/bin/reload-haproxy", processes.clone()),
            ("mysystemctl reload haproxy", processes.clone()),
        ] {
            assert_eq!(Service::of(&words(reload), config), want, "{reload}");
        }
    }

    #[test]
    fn is_active_answers_are_read_as_systemd_means_them() {
        for (answer, runs) in [
            ("active\n", true),
            ("reloading\n", true),
            ("activating\n", true),
            ("inactive\n", false),
            ("failed\n", false),
            ("unknown\n", false),
            ("", false),
        ] {
            assert_eq!(unit_runs(answer), runs, "{answer:?}");
        }
    }

    #[test]
    fn processes_are_found_by_the_config_they_read() {
        let me = std::process::id();
        assert!(!processes_reading(Path::new("/no/such/haproxy.cfg")).contains(&me));
        // A process whose command line reads a config with `-f` is found by that config
        // alone; once it ended (a zombie, then reaped) it is not.
        let config = format!("/nonexistent/autoproxy-{me}/haproxy.cfg");
        // Not `-c "sleep 30"`: dash execs a lone last command, and the command line it had
        // (with `-f`) would be gone by the time the test looks, at random.
        let mut child = std::process::Command::new("sh")
            .args(["-c", "sleep 30; exit 0", "-f", &config])
            .spawn()
            .expect("start sh");
        // Its fork for `sleep` has the same command line until it execs: wait that out.
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        let mut found = processes_reading(Path::new(&config));
        while found != [child.id()] && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
            found = processes_reading(Path::new(&config));
        }
        assert_eq!(found, [child.id()]);
        assert!(processes_reading(Path::new("/nonexistent/other.cfg")).is_empty());
        child.kill().expect("kill sh");
        let _ = child.wait();
        assert!(processes_reading(Path::new(&config)).is_empty());
    }
}
