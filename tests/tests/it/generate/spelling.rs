//! Names as Route53 and its callers spell them, and hostile ones that must never reach the config.

use super::*;

#[tokio::test]
async fn names_and_targets_as_route53_spells_them() {
    let estate = Estate::start().await;
    let zones = vec![
        ZoneSpec::private(
            "esc.example.internal",
            ingress_pair("esc.example.internal", PROXY, Wildcard::Escaped),
        ),
        ZoneSpec::private(
            "lit.example.internal",
            ingress_pair("lit.example.internal", PROXY, Wildcard::Literal),
        ),
        // Upper case everywhere, trailing dots on names and on the target.
        ZoneSpec::private(
            "Case.Example.Internal.",
            vec![
                Record::a("API.Case.Example.Internal.", "10.0.0.1"),
                Record::cname(
                    "Proxy.API.Case.Example.Internal",
                    "PEERING-PROXY.TOOLS.EXAMPLE.COM.",
                ),
            ],
        ),
        ZoneSpec::private(
            "alias.example.internal",
            vec![
                Record::alias("api.alias.example.internal", "nlb-0123.elb.amazonaws.com."),
                Record::cname("proxy.api.alias.example.internal.", PROXY),
            ],
        ),
        ZoneSpec::private(
            "variant.example.internal",
            vec![
                Record::a("api.k8s.variant.example.internal", "10.0.0.2"),
                Record::cname("proxy.api.k8s.variant.example.internal", PROXY),
            ],
        ),
        // CNAMEs to something that is not the proxy (one a suffix of its name).
        ZoneSpec::private(
            "wrong.example.internal",
            vec![
                Record::a("api.wrong.example.internal", "10.0.0.3"),
                Record::cname("proxy.api.wrong.example.internal", "other.example.com"),
                Record::cname("*.int.wrong.example.internal", "tools.example.com"),
                Record::cname("ingress-int.wrong.example.internal", "elb.example.com"),
            ],
        ),
        // Points at the proxy but the backend record is missing.
        ZoneSpec::private(
            "missing.example.internal",
            vec![Record::cname("proxy.api.missing.example.internal", PROXY)],
        ),
        ZoneSpec::private(
            "ignored.example.internal",
            api_pair("ignored.example.internal", PROXY),
        ),
        ZoneSpec::public("public.example.com", api_pair("public.example.com", PROXY)),
    ];
    let own = estate.own.seed(zones, DEFAULT_PARALLELISM).await.unwrap();
    let shared = "shared.example.internal";
    // B first, so B's zone is the older one: the winner must not depend on creation order.
    let in_b = estate
        .b
        .seed_zone(ZoneSpec::private(shared, api_pair(shared, PROXY)))
        .await
        .unwrap();
    let in_a = estate
        .a
        .seed_zone(ZoneSpec::private(shared, api_pair(shared, PROXY)))
        .await
        .unwrap();

    let deps = estate
        .deps(&[("IGNORE_ZONES", "Ignored.Example.Internal.")])
        .await;
    let summary = run(&deps, &json!({}), AT).await;
    let artifact = estate.artifact().await;
    assert_eq!(
        snis(&artifact.text),
        [
            api_sni("alias.example.internal"),
            api_sni("case.example.internal"),
            "proxy.api.k8s.variant.example.internal".to_owned(),
            api_sni(shared),
            ingress_sni("esc.example.internal"),
            ingress_sni("lit.example.internal"),
        ]
    );
    assert_eq!(summary.rules, 6);
    // Public and ignored zones are never read: in the own account one listing and seven
    // zones (eight private, one of them ignored); one listing and one zone in each member.
    assert_eq!(calls_in(&deps, OWN_ACCOUNT), 1 + 7);
    assert_eq!(calls_in(&deps, MEMBER_A), 2);
    assert_eq!(calls_in(&deps, MEMBER_B), 2);
    assert!(!artifact.text.contains("wrong.example.internal"));
    assert!(!artifact.text.contains("ignored.example.internal"));
    assert!(!artifact.text.contains("public.example.com"));
    // The shared name routes to member A's zone, whatever the order of creation, and says so.
    assert!(
        artifact
            .text
            .contains(&format!(" {MEMBER_A} {}\n", in_a.id)),
    );
    assert!(!artifact.text.contains(&in_b.id));
    assert_warning(
        &summary,
        &[
            "zone shared.example.internal",
            &format!("{} in account {MEMBER_A}", in_a.id),
            &format!("{} in account {MEMBER_B}", in_b.id),
            "held the name first",
        ],
    );
    let missing = &own[6];
    assert_warning(
        &summary,
        &[
            &missing.id,
            "proxy.api.missing.example.internal points at the peering proxy",
        ],
    );
    assert_eq!(summary.warnings.len(), 2, "{:#?}", summary.warnings);

    // The same state read again decides the same way.
    let again = run(&deps, &json!({"dry_run": true}), LATER).await;
    assert!(!again.changed);
    assert_eq!(again.warnings, summary.warnings);
}

#[tokio::test]
async fn hostile_names_never_reach_the_config() {
    let estate = Estate::start().await;
    // moto takes any zone name, but record names must end with the zone's name as spelt and
    // may not hold a raw space or control character: those zones stay empty (the zone's
    // name alone must keep it out).
    let hostile_zones = [
        "evil\\040zone.example.internal",
        "evil zone.example.internal",
        "evil#zone.example.internal",
        "evil\\043hash.example.internal",
        "evil\\012global.example.internal",
        "nl\nglobal.example.internal",
        "evil\\056dot.example.internal",
        "caf\\303\\251.example.internal",
        "${HOME}.example.internal",
        "quote\".example.internal",
    ];
    let mut specs: Vec<ZoneSpec> = hostile_zones
        .iter()
        .map(|zone| {
            let records = if zone.contains([' ', '\n']) {
                vec![]
            } else {
                api_pair(zone, PROXY)
            };
            ZoneSpec::private(*zone, records)
        })
        .collect();
    let ok = "ok.example.internal";
    let mut ok_records = api_pair(ok, PROXY);
    ok_records.extend([
        Record::cname("x\"y.ok.example.internal", PROXY),
        Record::a("\\044{HOME}.ok.example.internal", "10.0.0.1"),
        Record::cname("semi;colon\\040space.ok.example.internal", PROXY),
        // A hostile name in a rule position: `*.int` with a backend whose name is hostile.
        Record::cname("proxy.api.x\\043y.ok.example.internal", PROXY),
        Record::a("api.x\\043y.ok.example.internal", "10.0.0.2"),
    ]);
    specs.push(ZoneSpec::private(ok, ok_records));
    let seeded = estate.own.seed(specs, DEFAULT_PARALLELISM).await.unwrap();

    let deps = estate.deps(&[]).await;
    let summary = run(&deps, &json!({}), AT).await;
    let artifact = estate.artifact().await;
    assert_eq!(snis(&artifact.text), [api_sni(ok)]);
    assert_eq!(summary.rules, 1);
    for zone in &seeded[..hostile_zones.len()] {
        assert_warning(&summary, &[&zone.id, "skipped: expected a host name"]);
    }
    // The zone's five refused names are one warning: their count and the first three.
    let refused: Vec<&String> = summary
        .warnings
        .iter()
        .filter(|w| w.contains("records in zone ok.example.internal"))
        .collect();
    assert_eq!(refused.len(), 1, "{:#?}", summary.warnings);
    assert!(
        refused[0].starts_with("5 records in zone ok.example.internal"),
        "{}",
        refused[0]
    );
    for fragment in [
        "evil",
        "HOME",
        "caf",
        "global.example",
        "semi",
        "x\"y",
        "\\0",
    ] {
        let body = artifact::body(&artifact.text);
        assert!(!body.contains(fragment), "{fragment:?} reached the config");
    }
}
