//! HAProxy stopped: the apply starts it rather than reloading a unit systemd knows is not
//! active.

use std::os::unix::fs::PermissionsExt;

use super::*;

/// A `systemctl` for unit `haproxy` only, first on PATH, behaving as systemd does for this
/// test HAProxy: `reload` of a stopped unit fails, `start` starts it (`reload.sh` starts an
/// HAProxy when no master runs), `restart`, `stop`, `is-active`. Each call is logged.
struct Systemctl {
    dir: tempfile::TempDir,
}

impl Systemctl {
    fn new(haproxy: &Haproxy) -> Systemctl {
        let dir = tempfile::Builder::new()
            .prefix("autoproxy-systemctl-")
            .tempdir()
            .unwrap();
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
# say it is, and so would reload.sh: a stale pid file goes before a start).
running() {{
  pid=$(cat "$dir/haproxy.pid" 2>/dev/null) && [ -n "$pid" ] && [ -r "/proc/$pid/stat" ] || return 1
  state=$(sed 's/.*) //' "/proc/$pid/stat" | cut -c1)
  [ "$state" != Z ] && [ "$state" != X ]
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
  *) echo "Unknown command verb $verb." >&2; exit 1 ;;
esac
"#,
            haproxy = haproxy.dir().display(),
            log = dir.path().join("calls.log").display(),
        );
        let path = dir.path().join("systemctl");
        std::fs::write(&path, script).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        Systemctl { dir }
    }

    /// The environment that puts the stand-in first (then the pinned tools, as the agent
    /// stand-in does).
    fn env(&self) -> Vec<(String, String)> {
        let inherited = std::env::var("PATH").unwrap_or_default();
        let tools = autoproxy_tests::moto::tools_bin();
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
    fn calls(&self) -> Vec<String> {
        std::fs::read_to_string(self.dir.path().join("calls.log"))
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }
}

/// HAProxy stopped (a crash, an operator's `systemctl stop`, a reboot with the unit disabled):
/// the apply starts it, with `systemctl start haproxy` where the reload command is
/// `systemctl reload haproxy` (systemd refuses to reload a unit that is not active).
///
/// The old document ran the reload command whatever the state: `systemctl reload haproxy`
/// failed ("not active"), it restored last-known-good and ran the same reload again, which
/// failed too, so it exited 3 ("the rollback did not complete either") and the instance stayed
/// down until a person came.
#[test]
fn a_stopped_haproxy_is_started_not_reloaded() {
    let f = Fixture::new(&["a", "b"]);
    f.install_first(&f.config(1, &[("g1.test", "a")]));
    let systemctl = Systemctl::new(&f.haproxy);
    let document = f
        .haproxy
        .apply_document_reloading_with("systemctl reload haproxy")
        .unwrap();

    // Running: reloaded through systemctl.
    let version = f.upload(&f.reloading_config(2, &[("g1.test", "a"), ("g2.test", "b")]));
    let run = f
        .try_run(&document, &[("ConfigVersion", &version)], &systemctl.env())
        .unwrap();
    assert!(run.success(), "{run}{}", f.haproxy.log());
    assert_eq!(f.haproxy.running_generation(), Some(2), "{run}");
    assert_eq!(systemctl.calls(), ["reload haproxy"], "{run}");
    assert!(
        f.haproxy.wait_for_generation(2, Duration::from_secs(10)),
        "{run}"
    );

    f.haproxy.stop();
    assert_eq!(f.haproxy.running_generation(), None);
    let third = f.config(3, &[("g1.test", "b"), ("g3.test", "a")]);
    let version = f.upload(&third);
    let run = f
        .try_run(&document, &[("ConfigVersion", &version)], &systemctl.env())
        .unwrap();
    assert_eq!(run.status, Some(0), "{run}{}", f.haproxy.log());
    assert_eq!(
        systemctl.calls(),
        ["reload haproxy", "start haproxy"],
        "started, not reloaded:\n{run}"
    );
    assert_eq!(f.haproxy.running_generation(), Some(3), "{run}");
    f.assert_routes("g1.test", "b");
    f.assert_routes("g3.test", "a");
    assert_eq!(f.installed(), third);
}
