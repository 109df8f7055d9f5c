//! What a run refuses to write: nothing unchanged, a failing account's routes kept, the
//! mass-deletion guard (per account, and estate-wide without a manifest), dry runs, bad
//! payloads and templates.

use autoproxy_generate::handler::{InvocationError, function_handler};
use lambda_runtime::{Context, LambdaEvent};

use super::*;

#[tokio::test]
async fn an_unchanged_estate_writes_nothing() {
    let zone = "quiet.example.internal";
    let (estate, _) = Estate::with_api_zone(zone).await;
    let deps = estate.deps(&[]).await;
    let first = run(&deps, &json!({}), AT).await;
    assert!(first.published);
    let published = estate.artifact().await;

    // Another trigger, another time: the body is the same, so nothing is written.
    let schedule: Value = serde_json::from_str(
        &std::fs::read_to_string(root().join("events/schedule.json")).unwrap(),
    )
    .unwrap();
    let second = run(&deps, &schedule, LATER).await;
    assert_eq!(second.trigger, "schedule");
    assert!(!second.changed && !second.published, "{second:#?}");
    assert_eq!(second.sha256, first.sha256);
    assert_eq!(second.version_id, first.version_id);
    assert!(second.diff.is_empty(), "{}", second.diff);
    assert_eq!(estate.versions(KEY).await, 1);
    assert_eq!(estate.versions(MANIFEST_KEY).await, 1);
    let still = estate.artifact().await;
    assert_eq!(still.version_id, published.version_id);
    assert_eq!(still.header, published.header);
}

#[tokio::test]
async fn a_failing_account_keeps_its_routes() {
    let estate = Estate::start().await;
    let own = "own.example.internal";
    let in_a = "a.example.internal";
    let in_b = "b.example.internal";
    estate
        .own
        .seed_zone(ZoneSpec::private(own, api_pair(own, PROXY)))
        .await
        .unwrap();
    let a_zone = estate
        .a
        .seed_zone(ZoneSpec::private(in_a, api_pair(in_a, PROXY)))
        .await
        .unwrap();
    estate
        .b
        .seed_zone(ZoneSpec::private(
            in_b,
            ingress_pair(in_b, PROXY, Wildcard::Escaped),
        ))
        .await
        .unwrap();

    // With no manifest yet, a failed account fails the run and nothing is written: a config
    // without that account's routes would go live.
    let broken = estate.deps_with_failing_account(&[], MEMBER_B).await;
    let err = run_at(&broken, &json!({}), AT, None).await.unwrap_err();
    assert!(matches!(err, GenerateError::Sweep(_)), "{err}");
    let message = err.to_string();
    assert!(
        message.contains(&format!("account {MEMBER_B}")),
        "{message}"
    );
    assert!(message.contains("nothing is published"), "{message}");
    assert!(estate.keys().await.is_empty());

    let deps = estate.deps(&[]).await;
    let first = run(&deps, &json!({}), AT).await;
    assert_eq!(first.rules, 3);
    assert!(first.published);

    // Now B fails while A changes: A's change goes out, B keeps its route, and a warning
    // names B.
    estate
        .a
        .upsert(&a_zone.id, &ingress_pair(in_a, PROXY, Wildcard::Literal))
        .await
        .unwrap();
    let second = run(&broken, &json!({}), LATER).await;
    assert!(second.published, "{second:#?}");
    assert_eq!(second.rules, 4);
    assert_warning(
        &second,
        &[
            &format!("account {MEMBER_B}: ListHostedZones failed"),
            "keeping its 1 zone(s) from the last manifest",
        ],
    );
    let artifact = estate.artifact().await;
    assert_eq!(artifact.header.generation, LATER_SECS);
    assert_eq!(
        snis(&artifact.text),
        [
            api_sni(in_a),
            api_sni(own),
            ingress_sni(in_a),
            ingress_sni(in_b)
        ]
    );
    // The manifest still holds B's zone, so the next failure keeps it again.
    let third = run(&broken, &json!({}), LATER).await;
    assert!(!third.changed && !third.published, "{third:#?}");
    assert_eq!(third.rules, 4);
}

#[tokio::test]
async fn mass_deletion_is_refused_unless_forced() {
    let estate = Estate::start().await;
    let specs = (0..4)
        .map(|i| {
            let zone = format!("m{i}.example.internal");
            ZoneSpec::private(zone.clone(), api_pair(&zone, PROXY))
        })
        .collect();
    let zones = estate.own.seed(specs, DEFAULT_PARALLELISM).await.unwrap();
    let deps = estate.deps(&[]).await;
    let first = run(&deps, &json!({}), AT).await;
    assert_eq!(first.rules, 4);
    let published = estate.artifact().await;

    for zone in &zones[1..] {
        estate.own.delete_zone(&zone.id).await.unwrap();
    }
    // The manifest knows the account's routes: that account is held, its routes stay, and
    // the hold is recorded.
    let held = run(&deps, &json!({}), LATER).await;
    assert!(!held.changed && !held.published, "{held:#?}");
    assert_eq!((held.rules, held.accounts.held), (4, 1));
    assert_warning(
        &held,
        &[
            &format!("holding account {OWN_ACCOUNT}"),
            "from 4 to 1 (75%)",
            "MAX_RULE_DROP_PERCENT=50%",
            &format!("{{\"force\": \"{OWN_ACCOUNT}\"}}"),
        ],
    );
    assert_eq!(
        held.version_id.as_deref(),
        Some(published.version_id.as_str())
    );
    assert_eq!(estate.versions(KEY).await, 1);
    assert_eq!(estate.versions(MANIFEST_KEY).await, 2);
    assert_eq!(estate.artifact().await.header, published.header);

    // Without a manifest to compare accounts with, the config's rule count guards the estate.
    estate.delete_every_version(MANIFEST_KEY).await;
    let blocked = run(&deps, &json!({}), LATER).await;
    assert!(blocked.changed && !blocked.published, "{blocked:#?}");
    assert_eq!(blocked.rules, 1);
    assert_warning(
        &blocked,
        &[
            "refusing to publish",
            "from 4 to 1 (75%)",
            "MAX_RULE_DROP_PERCENT=50%",
            "\"force\": true",
        ],
    );
    assert_eq!(estate.versions(KEY).await, 1);
    assert_eq!(estate.artifact().await.header, published.header);

    let forced = run(&deps, &json!({"force": true}), LATER).await;
    assert!(forced.published, "{forced:#?}");
    let artifact = estate.artifact().await;
    assert_eq!(artifact.header.generation, LATER_SECS);
    assert_eq!(artifact.header.rules, 1);
    assert_eq!(snis(&artifact.text), [api_sni("m0.example.internal")]);
    assert_eq!(estate.versions(KEY).await, 2);
}

#[tokio::test]
async fn a_dry_run_writes_nothing() {
    let zone = "dry.example.internal";
    let (estate, seeded) = Estate::with_api_zone(zone).await;
    let deps = estate.deps(&[]).await;

    let before_any = run(&deps, &json!({"dry_run": true}), AT).await;
    assert_eq!(before_any.trigger, "manual-dry-run");
    assert!(before_any.changed && !before_any.published);
    assert!(
        before_any.diff.starts_with("--- /dev/null"),
        "{}",
        before_any.diff
    );
    assert!(
        before_any
            .config
            .as_deref()
            .unwrap()
            .contains(&api_sni(zone))
    );
    assert!(estate.keys().await.is_empty());

    run(&deps, &json!({}), AT).await;
    let published = estate.artifact().await;
    estate
        .own
        .upsert(&seeded.id, &ingress_pair(zone, PROXY, Wildcard::Escaped))
        .await
        .unwrap();
    let dry = run(&deps, &json!({"dry_run": true}), LATER).await;
    assert!(dry.changed && !dry.published, "{dry:#?}");
    let config = dry.config.as_deref().unwrap();
    assert!(snis(config).contains(&ingress_sni(zone)));
    assert!(
        dry.diff.contains(&format!("--- s3://{BUCKET}/{KEY}")),
        "{}",
        dry.diff
    );
    assert!(
        dry.diff
            .lines()
            .any(|l| l.starts_with(&format!("+#@suffix int.{zone} "))),
        "{}",
        dry.diff
    );
    assert_eq!(
        artifact::parse_header(config).unwrap().generation,
        LATER_SECS
    );
    assert_eq!(estate.versions(KEY).await, 1);
    assert_eq!(estate.versions(MANIFEST_KEY).await, 1);
    assert_eq!(estate.artifact().await.header, published.header);
}

#[tokio::test]
async fn an_invalid_payload_fails_and_writes_nothing() {
    let estate = Estate::start().await;
    let deps = estate.deps(&[]).await;
    let s3_event = json!({"Records": [{
        "eventSource": "aws:s3",
        "eventName": "ObjectCreated:Put",
        "s3": {"bucket": {"name": BUCKET}, "object": {"key": KEY}}
    }]});
    for payload in [s3_event, json!({"dry_run": "yes"}), json!("schedule")] {
        let event = LambdaEvent::new(payload, Context::default());
        let err = function_handler(&deps, event).await.unwrap_err();
        assert!(
            matches!(err, GenerateError::Invalid(InvocationError::Trigger(_))),
            "{err}"
        );
        let message = err.to_string();
        assert!(message.contains("Scheduled Event"), "{message}");
        assert!(message.contains("\"dry_run\""), "{message}");
    }
    assert_eq!(calls(&deps), 0);
    assert!(estate.keys().await.is_empty());
}

#[tokio::test]
async fn a_custom_template_is_used_and_a_broken_one_publishes_nothing() {
    let zone = "tpl.example.internal";
    let (estate, seeded) = Estate::with_api_zone(zone).await;
    let template_key = "templates/haproxy.cfg.j2";
    let custom = autoproxy::render::DEFAULT_TEMPLATE.replacen(
        "defaults\n",
        "defaults\n    # from the operator's template (TEMPLATE_KEY)\n    option log-health-checks\n",
        1,
    );
    assert_ne!(custom, autoproxy::render::DEFAULT_TEMPLATE);
    estate.put_object(template_key, &custom).await;
    let deps = estate.deps(&[("TEMPLATE_KEY", template_key)]).await;
    let first = run(&deps, &json!({}), AT).await;
    assert!(first.published);
    let published = estate.artifact().await;
    assert!(published.text.contains("# from the operator's template"));
    assert_eq!(snis(&published.text), [api_sni(zone)]);

    // A change is pending, but the template does not compile, then does not render: the run
    // fails and the config stays as it was.
    estate
        .own
        .upsert(&seeded.id, &ingress_pair(zone, PROXY, Wildcard::Literal))
        .await
        .unwrap();
    for broken in [
        "{% for route in routes %}\nno endfor\n",
        "# generation: {{ header.generation }}\n{{ no_such_variable }}\n",
    ] {
        estate.put_object(template_key, broken).await;
        let err = run_at(&deps, &json!({}), LATER, None).await.unwrap_err();
        assert!(matches!(err, GenerateError::Render(_)), "{err}");
        assert!(err.to_string().contains("nothing published"), "{err}");
        assert_eq!(estate.versions(KEY).await, 1);
        assert_eq!(estate.artifact().await.header, published.header);
    }
    // The same, from the default template, goes out.
    let deps = estate.deps(&[]).await;
    let fixed = run(&deps, &json!({}), LATER).await;
    assert!(fixed.published);
    let artifact = estate.artifact().await;
    assert!(!artifact.text.contains("operator's template"));
    assert_eq!(artifact.header.generation, LATER_SECS);
}
