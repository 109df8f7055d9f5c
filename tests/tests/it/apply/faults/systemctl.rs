//! HAProxy stopped: the apply starts it rather than reloading a unit systemd knows is not
//! active.

use autoproxy_tests::systemctl::Systemctl;

use super::*;

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
        ["reload haproxy", "is-active haproxy", "start haproxy"],
        "started, not reloaded:\n{run}"
    );
    assert_eq!(f.haproxy.running_generation(), Some(3), "{run}");
    f.assert_routes("g1.test", "b");
    f.assert_routes("g3.test", "a");
    assert_eq!(f.installed(), third);
}
