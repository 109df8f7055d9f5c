//! The document itself: its parameters, and what a deployer and a caller of SendCommand may choose.

use super::*;

#[test]
fn the_document_declares_strict_env_var_parameters() {
    let document = Document::from_workspace(&[]).unwrap();
    let names: Vec<&str> = document
        .parameters
        .iter()
        .map(|p| p.name.as_str())
        .collect();
    assert_eq!(
        names,
        [
            "ConfigBucket",
            "ConfigKey",
            "ConfigVersion",
            "ConfigPath",
            "ReloadCommand",
            "AgentSha256",
            "AgentArchitecture",
            "AgentDirectory",
            "InstanceArnPrefix"
        ]
    );
    let agent = autoproxy_tests::agent::Published::describe(autoproxy_tests::agent::BUCKET);
    let other_sha = "0".repeat(64);
    let cases: &[(&str, &str, bool)] = &[
        ("ConfigBucket", "autoproxy-config", true),
        ("ConfigBucket", "my.bucket-1", true),
        ("ConfigBucket", "Bad_Bucket", false),
        ("ConfigBucket", "a", false),
        ("ConfigBucket", "b;rm -rf /", false),
        ("ConfigKey", "haproxy/haproxy.cfg", true),
        ("ConfigKey", "a b", false),
        ("ConfigKey", "$(id)", false),
        ("ConfigKey", "/leading-slash", false),
        ("ConfigVersion", "", true),
        ("ConfigVersion", "3HL4kqtJlcpXroDTDmJ.rmSpXd3dIbrHY", true),
        (
            "ConfigVersion",
            "0b7f4c5e-1c2d-4f3a-9a8b-7c6d5e4f3a2b",
            true,
        ),
        ("ConfigVersion", "a;b", false),
        ("ConfigVersion", "a\nb", false),
        // Deployed with the defaults: only those.
        ("ConfigPath", "/etc/haproxy/haproxy.cfg", true),
        ("ConfigPath", "/etc/haproxy/other.cfg", false),
        ("ConfigPath", "/etc/cron.d/x", false),
        ("ReloadCommand", "systemctl reload haproxy", true),
        (
            "ReloadCommand",
            "systemctl reload-or-restart haproxy",
            false,
        ),
        ("ReloadCommand", "/bin/sh -c id", false),
        // Only the agent the stack published, only where the stack put it.
        ("AgentSha256", agent.sha256.as_str(), true),
        ("AgentSha256", other_sha.as_str(), false),
        ("AgentSha256", "", false),
        ("AgentArchitecture", agent.architecture.as_str(), true),
        ("AgentArchitecture", "riscv64", false),
        ("AgentDirectory", "/var/lib/autoproxy", true),
        ("AgentDirectory", "/tmp", false),
        // Only this stack's account and region: the one key its instances may write.
        (
            "InstanceArnPrefix",
            "arn:aws:ec2:us-east-1:999999999999:instance/",
            false,
        ),
    ];
    for (name, value, allowed) in cases {
        let result = document.resolve(&[("ConfigBucket", "bucket"), (name, value)]);
        assert_eq!(result.is_ok(), *allowed, "{name} = {value:?}: {result:?}");
        if !allowed {
            assert!(
                matches!(
                    result,
                    Err(AgentError::Rejected { .. } | AgentError::NotAllowed { .. })
                ),
                "{result:?}"
            );
        }
    }
    let defaults = document.resolve(&[("ConfigBucket", "bucket")]).unwrap();
    assert_eq!(defaults["ConfigKey"], "haproxy/haproxy.cfg");
    assert_eq!(defaults["ConfigVersion"], "");
    assert_eq!(defaults["ConfigPath"], "/etc/haproxy/haproxy.cfg");
    assert_eq!(defaults["ReloadCommand"], "systemctl reload haproxy");
    assert_eq!(defaults["AgentSha256"], agent.sha256);
    let prefix = &defaults["InstanceArnPrefix"];
    assert!(
        prefix.starts_with("arn:aws:ec2:") && prefix.ends_with(":instance/"),
        "{prefix}"
    );
    let own = document.resolve(&[("ConfigBucket", "bucket"), ("InstanceArnPrefix", prefix)]);
    assert!(own.is_ok(), "{own:?}");
    assert!(matches!(document.resolve(&[]), Err(AgentError::Missing(_))));
}

/// The config path and the reload command are the deployer's choice, checked as CloudFormation
/// checks a template parameter; the document then admits that one value and no other.
#[test]
fn the_config_path_and_reload_command_are_checked_when_the_stack_is_deployed() {
    let cases: &[(&str, &str, bool)] = &[
        ("ProxyConfigPath", "/etc/haproxy/haproxy.cfg", true),
        ("ProxyConfigPath", "/srv/haproxy-main/haproxy.cfg", true),
        ("ProxyConfigPath", "etc/haproxy.cfg", false),
        ("ProxyConfigPath", "/etc/../shadow", false),
        ("ProxyConfigPath", "/etc/haproxy/", false),
        ("ProxyConfigPath", "/etc/ha proxy.cfg", false),
        ("ProxyReloadCommand", "systemctl reload haproxy", true),
        (
            "ProxyReloadCommand",
            "/usr/local/bin/reload.sh --unit=haproxy@main",
            true,
        ),
        ("ProxyReloadCommand", "systemctl  reload haproxy", false),
        ("ProxyReloadCommand", " systemctl", false),
        ("ProxyReloadCommand", "systemctl reload haproxy; id", false),
        (
            "ProxyReloadCommand",
            "kill -USR2 $(cat /run/haproxy.pid)",
            false,
        ),
        ("ProxyReloadCommand", "reload *", false),
        ("ProxyReloadCommand", "reload\nid", false),
    ];
    for (name, value, allowed) in cases {
        let result = Document::from_workspace(&[(name, value)]);
        match (result, allowed) {
            (Ok(document), true) => {
                let parameter = if *name == "ProxyConfigPath" {
                    "ConfigPath"
                } else {
                    "ReloadCommand"
                };
                let values = document.resolve(&[("ConfigBucket", "bucket")]).unwrap();
                assert_eq!(
                    values[parameter], *value,
                    "the default is the deployed value"
                );
                assert_eq!(
                    document.parameter(parameter).unwrap().allowed_values,
                    Some(vec![(*value).to_owned()])
                );
            }
            (Err(AgentError::TemplateParameterRejected { name: n, .. }), false) => {
                assert_eq!(n, *name);
            }
            (result, _) => panic!("{name} = {value:?}: {result:?}"),
        }
    }
    assert!(matches!(
        Document::from_workspace(&[("ConfigPath", "/etc/haproxy/haproxy.cfg")]),
        Err(AgentError::UnknownTemplateParameter { .. })
    ));
}

/// Whoever may send the document can choose the config version, not what is written or run
/// as root: a path or command other than the deployed ones is refused before any instance
/// sees the command (each of these matched the document's former allowedPattern).
#[test]
fn a_config_path_or_reload_command_outside_the_deployed_set_is_refused() {
    let f = Fixture::new(&["a"]);
    let version = f.upload(&f.config(1, &[("g1.test", "a")]));
    let path = f.haproxy.config_path().display().to_string();
    let reload = f.haproxy.reload_command(&[]);
    let elsewhere = f.haproxy.dir().join("elsewhere.cfg");
    let marker = f.haproxy.dir().join("ran");
    let touch = format!("/usr/bin/touch {}", marker.display());
    let hostile: &[(&str, &str, &str)] = &[
        ("ReloadCommand", "/bin/sh -c id", &reload),
        ("ReloadCommand", &touch, &reload),
        ("ConfigPath", "/etc/cron.d/x", &path),
        ("ConfigPath", &elsewhere.display().to_string(), &path),
    ];
    for (name, value, deployed) in hostile {
        let err = f
            .try_run(
                &f.document,
                &[("ConfigVersion", &version), (name, value)],
                &[],
            )
            .expect_err("refused at SendCommand");
        let message = err.to_string();
        match err {
            AgentError::NotAllowed {
                name: n,
                value: v,
                allowed,
            } => {
                assert_eq!((n.as_str(), v.as_str()), (*name, *value));
                assert_eq!(allowed, [*deployed]);
            }
            other => panic!("{name} = {value:?}: {other:?}"),
        }
        for part in [name, value, deployed] {
            assert!(message.contains(part), "{message:?} names {part:?}");
        }
    }
    assert!(!marker.exists() && !elsewhere.exists(), "nothing ran");
    assert_eq!(f.haproxy.running_generation(), None);

    // The deployed values run, named or left to their defaults.
    let run = f.run(&[
        ("ConfigVersion", &version),
        ("ConfigPath", &path),
        ("ReloadCommand", &reload),
    ]);
    assert!(run.success(), "{run}{}", f.haproxy.log());
    assert_eq!(f.haproxy.running_generation(), Some(1));
    let run = f.run(&[("ConfigVersion", &version)]);
    assert!(run.success(), "{run}");
    assert_eq!(run.step("skip").len(), 1, "{run}");
}

#[test]
fn a_stats_socket_path_that_is_not_only_a_path_is_refused() {
    let f = Fixture::new(&["a", "b"]);
    let first = f.config(1, &[("g1.test", "a")]);
    f.install_first(&first);
    let before = snapshot(f.haproxy.dir());

    // A path socat would read as an address with options (and HAProxy accepts as a file name).
    let socket = f.haproxy.stats_socket().display().to_string();
    let hostile = format!("{socket},ignoreeof");
    let second = f.config(2, &[("g1.test", "a"), ("g2.test", "b")]);
    let body = artifact::body(&second).replace(&socket, &hostile);
    assert_ne!(body, artifact::body(&second));
    let run = f.apply(&f.upload(&restamp(&second, &body)));
    assert_eq!(run.status, Some(1), "{run}");
    let failure = run.failure().unwrap();
    assert!(
        failure.contains("declares stats socket") && failure.contains("ignoreeof"),
        "{run}"
    );
    assert!(
        run.step("check").is_empty(),
        "refused before haproxy -c:\n{run}"
    );
    assert_eq!(snapshot(f.haproxy.dir()), before, "nothing touched");
    assert_eq!(f.haproxy.running_generation(), Some(1));
}
