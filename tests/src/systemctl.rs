//! A `systemctl` stand-in for hosts without systemd (tests run in containers): it drives the
//! test HAProxy's `reload.sh` as systemd drives the unit, and logs every call.

use std::os::unix::fs::PermissionsExt;

use crate::proxy::{Haproxy, HaproxyFiles};

/// A `systemctl` for unit `haproxy` only, first on PATH, behaving as systemd does for this
/// test HAProxy: `reload` of a stopped unit fails, `start` starts it (`reload.sh` starts an
/// HAProxy when no master runs), `restart`, `stop`, `is-active`, `enable`. Each call is logged.
#[derive(Debug)]
pub struct Systemctl {
    dir: tempfile::TempDir,
}

impl Systemctl {
    pub fn new(haproxy: &Haproxy) -> Systemctl {
        let dir = tempfile::Builder::new()
            .prefix("autoproxy-systemctl-")
            .tempdir()
            .expect("systemctl stand-in");
        let script = format!(
            r#"#!/bin/sh
# systemctl stand-in for haproxy.service.
dir='{haproxy}'
echo "$*" >>'{log}'
quiet=
verb=
unit=
for arg in "$@"; do
  case $arg in
    -q|--quiet) quiet=1 ;;
    -*) ;;
    *) if [ -z "$verb" ]; then verb=$arg; elif [ -z "$unit" ]; then unit=${{arg%.service}}; fi ;;
  esac
done
if [ "$unit" != haproxy ]; then
  echo "Unit $unit.service could not be found." >&2
  [ "$verb" = is-active ] && {{ [ -n "$quiet" ] || echo inactive; exit 4; }}
  exit 5
fi
# The master runs: its pid file names a live process (a zombie is not one; `kill -0` would
# say it is, and so would reload.sh: a stale pid file goes before a start) that reads this
# config (a reused pid names someone else's process), as systemd knows its unit's main pid.
running() {{
  pid=$(cat "$dir/haproxy.pid" 2>/dev/null) && [ -n "$pid" ] && [ -r "/proc/$pid/stat" ] || return 1
  state=$(sed 's/.*) //' "/proc/$pid/stat" | cut -c1)
  [ "$state" != Z ] && [ "$state" != X ] || return 1
  tr '\0' '\n' 2>/dev/null <"/proc/$pid/cmdline" | grep -qxF "$dir/haproxy.cfg"
}}
start() {{ rm -f "$dir/haproxy.pid"; exec "$dir/reload.sh"; }}
stop() {{
  running || return 0
  kill -TERM "$(cat "$dir/haproxy.pid")"
  n=0
  while running && [ $n -lt 100 ]; do sleep 0.05; n=$((n + 1)); done
}}
case $verb in
  is-active)
    if running; then [ -n "$quiet" ] || echo active; exit 0; fi
    [ -n "$quiet" ] || echo inactive; exit 3 ;;
  start) running && exit 0; start ;;
  reload)
    if ! running; then
      echo "Job for haproxy.service failed: haproxy.service is not active, cannot reload." >&2
      exit 1
    fi
    exec "$dir/reload.sh" ;;
  restart|reload-or-restart)
    [ "$verb" = reload-or-restart ] && running && exec "$dir/reload.sh"
    stop; start ;;
  stop) stop ;;
  # Enabling only matters at the next boot, which no test has.
  enable) ;;
  *) echo "Unknown command verb $verb." >&2; exit 1 ;;
esac
"#,
            haproxy = haproxy.dir().display(),
            log = dir.path().join("calls.log").display(),
        );
        let path = dir.path().join("systemctl");
        std::fs::write(&path, script).expect("systemctl stand-in");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
            .expect("systemctl stand-in");
        Systemctl { dir }
    }

    /// The environment that puts the stand-in first (then the pinned tools, as the agent
    /// stand-in does).
    pub fn env(&self) -> Vec<(String, String)> {
        let inherited = std::env::var("PATH").unwrap_or_default();
        let tools = crate::moto::tools_bin();
        vec![(
            "PATH".to_owned(),
            format!(
                "{}:{}:{inherited}",
                self.dir.path().display(),
                tools.display()
            ),
        )]
    }

    /// The calls so far, one line of arguments each.
    pub fn calls(&self) -> Vec<String> {
        std::fs::read_to_string(self.dir.path().join("calls.log"))
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::process::{Command, Stdio};

    use super::*;

    /// A pid file left behind names whatever process gets that pid next: neither the
    /// stand-in nor `reload.sh` may take it for the master, or signal it.
    #[test]
    fn a_pid_file_naming_another_process_is_not_the_master() {
        let haproxy = Haproxy::new();
        let systemctl = Systemctl::new(&haproxy);
        let mut other = Command::new("sleep").arg("30").spawn().expect("sleep");
        std::fs::write(haproxy.dir().join("haproxy.pid"), other.id().to_string())
            .expect("pid file");
        let run = |program: &Path, args: &[&str]| {
            Command::new(program)
                .args(args)
                .envs(systemctl.env())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .expect("run the stand-in")
        };
        let stand_in = systemctl.dir.path().join("systemctl");
        let active = run(&stand_in, &["is-active", "--quiet", "haproxy"]);
        run(&stand_in, &["stop", "haproxy"]);
        // No HAProxy config here: reload.sh's start fails, which is all it may do.
        run(&haproxy.dir().join("reload.sh"), &[]);
        let alive = other.try_wait().expect("wait").is_none();
        let _ = other.kill();
        let _ = other.wait();
        assert_eq!(active.code(), Some(3), "is-active took it for the master");
        assert!(alive, "the other process was signalled");
    }
}
