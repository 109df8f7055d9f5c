//! Route53 cost: a full sweep and events at the fewest calls the pagination allows, paced per account.

use super::*;

#[tokio::test]
async fn full_run_and_event_costs() {
    let estate = Estate::start().await;
    // The own account: 103 small private zones (ListHostedZones pages at 100), the first five
    // with an API pair; one zone of 656 record sets whose rule records sort onto the third
    // page; one public zone whose rule records must not count.
    let mut specs: Vec<ZoneSpec> = (0..103)
        .map(|i| {
            let name = format!("z{i:03}.own.example.internal");
            let records = if i < 5 {
                api_pair(&name, PROXY)
            } else {
                vec![]
            };
            ZoneSpec::private(name, records)
        })
        .collect();
    let big = "big.own.example.internal";
    let mut big_records = filler(big, 650);
    big_records.extend(api_pair(big, PROXY));
    big_records.extend(ingress_pair(big, PROXY, Wildcard::Escaped));
    specs.push(ZoneSpec::private(big, big_records));
    let public = ZoneSpec::public(
        "public.own.example.com",
        api_pair("public.own.example.com", PROXY),
    );
    let own_private = estate.own.seed(specs, DEFAULT_PARALLELISM).await.unwrap();
    estate.own.seed_zone(public).await.unwrap();
    let big_zone = own_private.last().unwrap().clone();
    assert_eq!(big_zone.listed_records(), 656);

    // Two member accounts; the same private zone name in both.
    let shared = "shared.example.internal";
    let a_private = estate
        .a
        .seed(
            vec![
                ZoneSpec::private(shared, api_pair(shared, PROXY)),
                ZoneSpec::private(
                    "a.example.internal",
                    ingress_pair("a.example.internal", PROXY, Wildcard::Literal),
                ),
            ],
            DEFAULT_PARALLELISM,
        )
        .await
        .unwrap();
    let b_private = estate
        .b
        .seed(
            vec![
                ZoneSpec::private(shared, api_pair(shared, PROXY)),
                ZoneSpec::private(
                    "b.example.internal",
                    ingress_pair(
                        "b.example.internal",
                        "PEERING-PROXY.Tools.Example.COM.",
                        Wildcard::Escaped,
                    ),
                ),
            ],
            DEFAULT_PARALLELISM,
        )
        .await
        .unwrap();

    let deps = estate.deps(&[]).await;
    let started = Instant::now();
    let full = run(&deps, &json!({}), AT).await;
    let full_ms = started.elapsed().as_millis();
    let full_calls = calls(&deps);

    // Cost: exactly the pages, nothing more.
    let own_min = minimum_calls(own_private.len() + 1, &own_private);
    assert_eq!(own_min, 2 + 103 + 3);
    assert_eq!(calls_in(&deps, OWN_ACCOUNT), own_min);
    assert_eq!(calls_in(&deps, MEMBER_A), minimum_calls(2, &a_private));
    assert_eq!(calls_in(&deps, MEMBER_B), minimum_calls(2, &b_private));
    assert_eq!(full.zones_scanned, 104 + 2 + 2);

    // Routes: five small zones and the big one (both rules) in the own account, the shared
    // zone once (the lower account wins), and both ingress spellings.
    let artifact = estate.artifact().await;
    assert!(full.published && full.changed, "{full:#?}");
    assert_eq!(full.rules, 10);
    assert_eq!(full.sha256, artifact.header.sha256);
    assert_eq!(
        full.version_id.as_deref(),
        Some(artifact.version_id.as_str())
    );
    assert_eq!(artifact.header.generation, AT_SECS);
    assert_eq!(artifact.header.rules, 10);
    assert_eq!(artifact.header.trigger, "manual");
    let routes = snis(&artifact.text);
    for zone in (0..5).map(|i| format!("z{i:03}.own.example.internal")) {
        assert!(routes.contains(&api_sni(&zone)), "{routes:#?}");
    }
    for expected in [
        api_sni(big),
        ingress_sni(big),
        api_sni(shared),
        ingress_sni("a.example.internal"),
        ingress_sni("b.example.internal"),
    ] {
        assert!(
            routes.contains(&expected),
            "{expected} missing: {routes:#?}"
        );
    }
    assert!(!artifact.text.contains("public.own.example.com"));
    assert!(
        artifact
            .text
            .contains(&format!(" {MEMBER_A} {}\n", a_private[0].id))
    );
    // Both opted in on a first sweep: the lower account holds the name from now on, and
    // the other is told so, naming both.
    assert_warning(
        &full,
        &[
            "zone shared.example.internal",
            &format!("{} in account {MEMBER_B}", b_private[0].id),
            &format!("account {MEMBER_A} held the name first"),
            &a_private[0].id,
        ],
    );

    // An event for one small zone: only that zone is re-read, in one call.
    let z010 = &own_private[10];
    estate
        .own
        .upsert(
            &z010.id,
            &ingress_pair(&z010.name, PROXY, Wildcard::Literal),
        )
        .await
        .unwrap();
    let before = calls(&deps);
    let started = Instant::now();
    let one = run(
        &deps,
        &event("change-resource-record-sets.json", OWN_ACCOUNT, &z010.id),
        LATER,
    )
    .await;
    let event_ms = started.elapsed().as_millis();
    let event_calls = calls(&deps) - before;
    assert_eq!(event_calls, 1);
    assert!(event_calls <= 3);
    assert_eq!(one.zones_scanned, 1);
    assert_eq!(one.trigger, "route53:ChangeResourceRecordSets");
    assert!(one.published, "{one:#?}");
    let after_event = estate.artifact().await;
    assert_eq!(after_event.header.generation, LATER_SECS);
    assert_eq!(after_event.header.rules, 11);
    assert!(snis(&after_event.text).contains(&ingress_sni(&z010.name)));
    // The rest came from the manifest: the other accounts' routes are all still there.
    assert_eq!(
        snis(&after_event.text)
            .iter()
            .filter(|s| routes.contains(s))
            .count(),
        10
    );
    assert_eq!(estate.versions(KEY).await, 2);

    // An event for the big zone costs its three record pages.
    estate
        .own
        .delete_records(&big_zone.id, &api_pair(big, PROXY))
        .await
        .unwrap();
    let before = calls(&deps);
    let big_event = run(
        &deps,
        &event(
            "change-resource-record-sets.json",
            OWN_ACCOUNT,
            &big_zone.id,
        ),
        LATER,
    )
    .await;
    let big_event_calls = calls(&deps) - before;
    assert_eq!(big_event_calls, 3);
    assert_eq!(big_event.rules, 10);
    let after_big = estate.artifact().await;
    // Published in the same second as the last: one more.
    assert_eq!(after_big.header.generation, LATER_SECS + 1);
    assert!(!snis(&after_big.text).contains(&api_sni(big)));
    assert!(snis(&after_big.text).contains(&ingress_sni(big)));

    println!(
        "route53 calls: full run {full_calls} in {full_ms} ms, one event {event_calls} in \
         {event_ms} ms (estate: 3 accounts, {} private zones + 1 public, one zone of {} record \
         sets; an event on that zone: {big_event_calls} calls; rate limit raised to 1000/s)",
        own_private.len() + a_private.len() + b_private.len(),
        big_zone.listed_records(),
    );
}

#[tokio::test]
async fn zone_events_add_and_drop_routes() {
    let estate = Estate::start().await;
    let specs = (0..3)
        .map(|i| {
            let zone = format!("e{i}.example.internal");
            ZoneSpec::private(zone.clone(), api_pair(&zone, PROXY))
        })
        .collect();
    let zones = estate.own.seed(specs, DEFAULT_PARALLELISM).await.unwrap();
    let deps = estate.deps(&[]).await;
    assert_eq!(run(&deps, &json!({}), AT).await.rules, 3);

    // DeleteHostedZone: the zone's routes drop out, for one call (its listing answers
    // NoSuchHostedZone).
    estate.own.delete_zone(&zones[1].id).await.unwrap();
    let before = calls(&deps);
    let deleted = run(
        &deps,
        &event("delete-hosted-zone.json", OWN_ACCOUNT, &zones[1].id),
        LATER,
    )
    .await;
    assert_eq!(calls(&deps) - before, 1);
    assert!(deleted.published, "{deleted:#?}");
    assert_eq!(deleted.trigger, "route53:DeleteHostedZone");
    let artifact = estate.artifact().await;
    assert_eq!(
        snis(&artifact.text),
        [
            api_sni("e0.example.internal"),
            api_sni("e2.example.internal")
        ]
    );
    assert_eq!(artifact.header.generation, LATER_SECS);

    // CreateHostedZone in a member account: GetHostedZone, then its records.
    let new = "new.example.internal";
    let created = estate
        .b
        .seed_zone(ZoneSpec::private(new, api_pair(new, PROXY)))
        .await
        .unwrap();
    let before = calls(&deps);
    let added = run(
        &deps,
        &event("create-hosted-zone.json", MEMBER_B, &created.id),
        LATER,
    )
    .await;
    assert_eq!(calls(&deps) - before, 2);
    assert_eq!(calls_in(&deps, OWN_ACCOUNT), 1 + 3 + 1);
    assert!(added.published);
    let artifact = estate.artifact().await;
    // Published in the same second as the last: one more.
    assert_eq!(artifact.header.generation, LATER_SECS + 1);
    assert!(snis(&artifact.text).contains(&api_sni(new)));
    assert_eq!(artifact.header.trigger, "route53:CreateHostedZone");

    // An event for an account that is not configured changes nothing and says why.
    let stray = run(
        &deps,
        &event(
            "change-resource-record-sets.json",
            "999999999999",
            &created.id,
        ),
        LATER,
    )
    .await;
    assert!(!stray.changed);
    assert_warning(&stray, &["999999999999", "not configured"]);
}

#[tokio::test]
async fn route53_calls_are_paced() {
    let estate = Estate::start().await;
    let specs = (0..5)
        .map(|i| ZoneSpec::private(format!("p{i}.example.internal"), vec![]))
        .collect();
    estate.own.seed(specs, DEFAULT_PARALLELISM).await.unwrap();
    // Only the own account: the default 5 requests per second.
    let settings = GenerateSettings {
        account_roles: vec![],
        route53_requests_per_second: 5.0,
        ..settings(&[])
    };
    let deps = Deps::new(settings, &estate.sdk, OWN_ACCOUNT).await.unwrap();
    let started = Instant::now();
    run(&deps, &json!({}), AT).await;
    let elapsed = started.elapsed();
    // Six calls (one listing, five zones) spaced 200 ms apart: at least a second.
    assert_eq!(calls(&deps), 6);
    assert!(elapsed >= Duration::from_millis(1000), "{elapsed:?}");
    assert!(elapsed < Duration::from_secs(5), "{elapsed:?}");
}
