//! End to end, as `make demo` runs it but without the narration: Route53 in moto (two
//! accounts) → autoproxy-generate → S3 → autoproxy-configure → SendCommand → the apply
//! document from template.yaml → a real HAProxy → TLS backends, names resolved through
//! dnsmasq. The functions' handlers are called in-process (the demo goes through
//! `cargo lambda`; the test needs nothing but cargo and the tools from `.ci/tools.sh`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use autoproxy_tests::pipeline::{
    ALL, ANALYTICS, LEGACY, PROXY_HOSTNAME, Pipeline, Rollout, Runner, STAGING, routed,
    schedule_event,
};
use autoproxy_tests::proxy::HaproxyFiles;
use serde_json::json;

mod eks;

/// HAProxy resolves a new worker's server names through the resolver about a second after
/// a reload; generous for a loaded CI machine.
const ROUTE_TIMEOUT: Duration = Duration::from_secs(15);

/// Checks the rollout reached both instances, and returns the generation published, which
/// HAProxy now runs.
#[track_caller]
fn assert_applied(rollout: &Rollout, pipeline: &Pipeline) -> u64 {
    assert!(
        rollout.published(),
        "nothing published: {}",
        rollout.summary
    );
    let command = rollout.command.as_ref().expect("a command was sent");
    assert_eq!(command.instance_ids.len(), 2, "{command:?}");
    assert_eq!(command.targets, ["tag:Role=peering-proxy"], "{command:?}");
    assert_eq!(
        command.parameters.get("ConfigVersion"),
        rollout.summary["version_id"]
            .as_str()
            .map(str::to_owned)
            .as_ref(),
        "the command names the version just published"
    );
    for (instance, run) in &rollout.runs {
        assert!(run.success(), "apply on {instance} failed:\n{run}");
    }
    assert_eq!(rollout.runs.len(), 2);
    let generation = rollout
        .generation
        .expect("a published config has a generation");
    assert_eq!(pipeline.running_generation(), Some(generation));
    generation
}

fn unix_seconds() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// Every cluster's two routes reach their own backends exactly when the cluster is routed.
#[track_caller]
fn assert_traffic(pipeline: &Pipeline) {
    let routed = routed(&pipeline.zones);
    for cluster in ALL {
        let on = routed.contains(cluster.name);
        for (sni, backend) in [
            (cluster.api_sni(), cluster.api_backend()),
            (cluster.ingress_sni(), cluster.ingress_backend()),
        ] {
            let want = on.then_some(backend.as_str());
            if let Err(probe) = pipeline.wait_for(&sni, want, ROUTE_TIMEOUT) {
                panic!(
                    "SNI {sni}: expected {}, got: {probe}\nHAProxy log:\n{}",
                    want.unwrap_or("no route"),
                    pipeline.haproxy.log()
                );
            }
        }
        if on {
            // The client found the proxy by name, the way it does in the VPC.
            let probe = pipeline.probe(&cluster.api_sni());
            assert_eq!(
                probe.resolved,
                pipeline.resolver.lookup(PROXY_HOSTNAME),
                "{probe}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn route53_changes_reach_haproxy_and_a_broken_config_never_does() {
    let started = Instant::now();
    let mut pipeline = Pipeline::start(Runner::InProcess, None, &|_| {})
        .await
        .unwrap();

    // First publication: full reconciliation from the schedule, numbered by the clock.
    let before = unix_seconds();
    let rollout = pipeline.roll_out(&schedule_event(), &[]).await.unwrap();
    assert_eq!(
        rollout.rules(),
        6,
        "three clusters × two rules: {}",
        rollout.summary
    );
    let first = assert_applied(&rollout, &pipeline);
    assert!(
        (before..=unix_seconds()).contains(&first),
        "the first generation {first} is not the publish time in Unix seconds"
    );
    assert!(!routed(&pipeline.zones).contains(LEGACY.name));
    assert_traffic(&pipeline);

    // A cluster appears in the member account: its CloudTrail event adds its routes.
    let event = pipeline.add_cluster(ANALYTICS).await.unwrap();
    let rollout = pipeline.roll_out(&event, &[]).await.unwrap();
    assert_eq!(
        rollout.summary["trigger"],
        json!("route53:ChangeResourceRecordSets")
    );
    assert_eq!(rollout.rules(), 8, "{}", rollout.summary);
    let second = assert_applied(&rollout, &pipeline);
    assert!(second > first, "generation {second} after {first}");
    assert_traffic(&pipeline);

    // A zone is deleted: its routes go, the others stay.
    let event = pipeline.remove_cluster(STAGING).await.unwrap();
    let rollout = pipeline.roll_out(&event, &[]).await.unwrap();
    assert_eq!(
        rollout.summary["trigger"],
        json!("route53:DeleteHostedZone")
    );
    assert_eq!(rollout.rules(), 6, "{}", rollout.summary);
    let third = assert_applied(&rollout, &pipeline);
    assert!(third > second, "generation {third} after {second}");
    assert_traffic(&pipeline);
    let good = std::fs::read_to_string(pipeline.haproxy.config_path()).unwrap();

    // A config HAProxy rejects is published (a custom template with a bad directive): the
    // apply refuses it on the first instance, the rollout stops there, and HAProxy keeps
    // serving the third generation from the same file.
    let broken = autoproxy::render::DEFAULT_TEMPLATE.replacen(
        "    maxconn {{ options.maxconn }}\n",
        "    maxconn {{ options.maxconn }}\n    autoproxy-e2e-not-a-directive on\n",
        1,
    );
    assert_ne!(broken, autoproxy::render::DEFAULT_TEMPLATE);
    pipeline
        .put_object("templates/broken.cfg.j2", &broken)
        .await
        .unwrap();
    let rollout = pipeline
        .roll_out(
            &json!({"force": false}),
            &[("TEMPLATE_KEY", "templates/broken.cfg.j2")],
        )
        .await
        .unwrap();
    assert!(rollout.published(), "{}", rollout.summary);
    let rejected = rollout.generation.unwrap();
    assert!(rejected > third, "generation {rejected} after {third}");
    assert_eq!(rollout.runs.len(), 1, "the first failure stops the rollout");
    let (_, run) = &rollout.runs[0];
    assert!(
        !run.success(),
        "a config haproxy -c rejects was applied:\n{run}"
    );
    let failure = run.failure().unwrap_or_default().to_owned();
    assert!(failure.contains("nothing changed"), "{run}");
    assert_eq!(pipeline.running_generation(), Some(third), "{run}");
    assert_eq!(
        std::fs::read_to_string(pipeline.haproxy.config_path()).unwrap(),
        good,
        "the installed file is still generation {third}"
    );
    assert_traffic(&pipeline);

    // The next good config (default template again) goes live over the rejected one: it is
    // numbered above it.
    let rollout = pipeline.roll_out(&schedule_event(), &[]).await.unwrap();
    let fixed = assert_applied(&rollout, &pipeline);
    assert!(fixed > rejected, "generation {fixed} after {rejected}");
    assert_traffic(&pipeline);

    assert!(
        started.elapsed() < Duration::from_secs(150),
        "the end-to-end run took {:?}",
        started.elapsed()
    );
}
