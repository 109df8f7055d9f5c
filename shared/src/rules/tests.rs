use super::*;
use crate::model::{RecordSet, Zone};

const PROXY: &str = "peering-proxy.tools.example.com";

fn zone(account: &str, id: &str, name: &str, records: Vec<RecordSet>) -> ZoneRecords {
    ZoneRecords {
        unnamed_left: 0,
        zone: Zone {
            account: account.to_owned(),
            id: id.to_owned(),
            name: name.to_owned(),
            private: true,
        },
        records,
    }
}

fn api_pair(zone: &str) -> Vec<RecordSet> {
    vec![
        RecordSet::new(&format!("api.{zone}"), "A", &["10.0.0.1"]),
        RecordSet::new(&format!("proxy.api.{zone}"), "CNAME", &[PROXY]),
    ]
}

/// `api.example.internal` (A) and its front `proxy.api.example.internal`: a record of
/// `rtype` pointing at `target`.
fn api_front(rtype: &str, target: &str) -> Vec<RecordSet> {
    vec![
        RecordSet::new("api.example.internal.", "A", &["10.0.0.1"]),
        RecordSet::new("proxy.api.example.internal.", rtype, &[target]),
    ]
}

fn ingress_pair(zone: &str) -> Vec<RecordSet> {
    vec![
        RecordSet::new(&format!("\\052.int.{zone}"), "CNAME", &[PROXY]),
        RecordSet::new(
            &format!("ingress-int.{zone}"),
            "CNAME",
            &["internal-a.elb.amazonaws.com"],
        ),
    ]
}

/// Matches one zone and returns `rule sni -> backend` lines, plus warnings as text.
fn matched(zone: &ZoneRecords) -> (Vec<String>, Vec<String>) {
    matched_with(&DEFAULT_RULES, zone)
}

fn matched_with(rules: &[Rule], zone: &ZoneRecords) -> (Vec<String>, Vec<String>) {
    let proxies = [HostName::parse(PROXY).unwrap()];
    let outcome = zone_routes(rules, zone, &proxies);
    let routes = outcome
        .routes
        .iter()
        .map(|r| format!("{} {} -> {}:{}", r.rule, r.sni, r.back, r.port))
        .collect();
    let warnings = outcome.warnings.iter().map(ToString::to_string).collect();
    (routes, warnings)
}

fn check(records: Vec<RecordSet>, expected: &[&str]) {
    let (routes, _) = matched(&zone("111111111111", "Z1", "example.internal.", records));
    assert_eq!(routes, expected);
}

#[test]
fn both_rules_in_one_zone() {
    let mut records = api_pair("example.internal.");
    records.extend(ingress_pair("example.internal."));
    check(
        records,
        &[
            "api proxy.api.example.internal -> api.example.internal:443",
            "ingress-int .int.example.internal -> ingress-int.example.internal:443",
        ],
    );
}

#[test]
fn api_via_alias_record() {
    check(
        vec![
            RecordSet::alias("api.example.internal.", "A", "nlb.elb.amazonaws.com."),
            RecordSet::new("proxy.api.example.internal.", "CNAME", &[PROXY]),
        ],
        &["api proxy.api.example.internal -> api.example.internal:443"],
    );
}

#[test]
fn k8s_variant_of_the_api_pair() {
    check(
        vec![
            RecordSet::new("api.k8s.example.internal.", "A", &["10.0.0.1"]),
            RecordSet::new("proxy.api.k8s.example.internal.", "CNAME", &[PROXY]),
        ],
        &["api-k8s proxy.api.k8s.example.internal -> api.k8s.example.internal:443"],
    );
}

#[test]
fn literal_and_escaped_wildcards_both_match() {
    check(
        vec![
            RecordSet::new("*.int.example.internal", "CNAME", &[PROXY]),
            RecordSet::new("ingress-int.example.internal", "CNAME", &["elb"]),
        ],
        &["ingress-int .int.example.internal -> ingress-int.example.internal:443"],
    );
    check(
        ingress_pair("example.internal."),
        &["ingress-int .int.example.internal -> ingress-int.example.internal:443"],
    );
}

#[test]
fn case_and_trailing_dots_are_ignored_in_names_and_targets() {
    check(
        vec![
            RecordSet::new("API.Example.Internal.", "A", &["10.0.0.1"]),
            RecordSet::new(
                "Proxy.API.example.internal",
                "CNAME",
                &["PEERING-PROXY.tools.example.com."],
            ),
        ],
        &["api proxy.api.example.internal -> api.example.internal:443"],
    );
}

#[test]
fn the_cname_target_must_be_the_proxy() {
    check(api_front("CNAME", "other.example.com"), &[]);
    // A suffix of the proxy's name is not the proxy.
    check(api_front("CNAME", "tools.example.com"), &[]);
}

#[test]
fn record_types_are_checked() {
    // The front must be a CNAME, not an A record with the proxy's address.
    check(api_front("A", PROXY), &[]);
    // The API back must be an A record; a CNAME or AAAA is not the rule.
    check(
        vec![
            RecordSet::new("api.example.internal.", "CNAME", &["x.example.com"]),
            RecordSet::new("proxy.api.example.internal.", "CNAME", &[PROXY]),
        ],
        &[],
    );
    // The ingress back may be a CNAME or an A record (external-dns writes an alias A), not
    // an AAAA.
    check(
        vec![
            RecordSet::new("*.int.example.internal", "CNAME", &[PROXY]),
            RecordSet::new("ingress-int.example.internal", "AAAA", &["::1"]),
        ],
        &[],
    );
}

#[test]
fn half_pairs_warn() {
    let (routes, warnings) = matched(&zone(
        "111111111111",
        "Z1",
        "example.internal",
        vec![RecordSet::new(
            "proxy.api.example.internal.",
            "CNAME",
            &[PROXY],
        )],
    ));
    assert!(routes.is_empty());
    assert_eq!(warnings.len(), 1);
    assert!(warnings[0].contains("api.example.internal is not a A record"));
}

#[test]
fn any_configured_proxy_name_counts() {
    let z = zone(
        "1",
        "Z1",
        "z",
        vec![
            RecordSet::new("api.z", "A", &["10.0.0.1"]),
            RecordSet::new("proxy.api.z", "CNAME", &["proxy-b.example.com"]),
        ],
    );
    let proxies = [
        HostName::parse("proxy-a.example.com").unwrap(),
        HostName::parse("Proxy-B.example.com.").unwrap(),
    ];
    assert_eq!(zone_routes(&DEFAULT_RULES, &z, &proxies).routes.len(), 1);
}

#[test]
fn public_zones_are_skipped() {
    let mut z = zone("1", "Z1", "example.com", api_pair("example.com"));
    z.zone.private = false;
    assert_eq!(matched(&z), (vec![], vec![]));
}

#[test]
fn hostile_zone_names_never_route() {
    for name in [
        "ex\\040ample.internal",
        "ex\\043x.internal",
        "a\\056b.internal",
    ] {
        let z = zone("1", "Z1", name, api_pair(name));
        let (routes, warnings) = matched(&z);
        assert!(routes.is_empty(), "{name}");
        assert_eq!(warnings.len(), 1, "{name}: {warnings:?}");
        assert!(
            warnings[0].starts_with("zone Z1 in account 1 skipped"),
            "{warnings:?}"
        );
    }
}

#[test]
fn hostile_record_names_are_skipped_with_a_warning() {
    let mut records = api_pair("z");
    records.push(RecordSet::new("evil\\012name.z", "CNAME", &[PROXY]));
    let (routes, warnings) = matched(&zone("1", "Z1", "z", records));
    assert_eq!(routes.len(), 1);
    assert_eq!(warnings.len(), 1);
    assert!(warnings[0].contains("U+000A"), "{warnings:?}");
}

#[test]
fn same_zone_name_in_two_accounts_resolves_deterministically() {
    let proxies = [HostName::parse(PROXY).unwrap()];
    let a = zone(
        "222222222222",
        "ZB",
        "shared.internal",
        api_pair("shared.internal"),
    );
    let b = zone(
        "111111111111",
        "ZA",
        "shared.internal",
        api_pair("shared.internal"),
    );
    for order in [[&a, &b], [&b, &a]] {
        let candidates = order
            .iter()
            .flat_map(|z| zone_routes(&DEFAULT_RULES, z, &proxies).routes)
            .collect();
        let (routes, warnings) = merge_claims(candidates);
        assert_eq!(routes.len(), 1);
        assert_eq!(routes[0].account, "111111111111");
        assert_eq!(warnings.len(), 1);
        let text = warnings[0].to_string();
        assert!(text.contains("ZA in account 111111111111"), "{text}");
        assert!(text.contains("ZB in account 222222222222"), "{text}");
    }
}

#[test]
fn resolved_order_is_exact_first_then_longest_suffix() {
    let proxies = [HostName::parse(PROXY).unwrap()];
    let mut candidates = Vec::new();
    for (id, name) in [
        ("Z1", "b.internal"),
        ("Z2", "a.b.internal"),
        ("Z3", "c.internal"),
    ] {
        let mut records = ingress_pair(name);
        records.extend(api_pair(name));
        candidates
            .extend(zone_routes(&DEFAULT_RULES, &zone("1", id, name, records), &proxies).routes);
    }
    let (routes, _) = merge_claims(candidates);
    let order: Vec<&str> = routes.iter().map(|r| r.sni.as_str()).collect();
    assert_eq!(
        order,
        [
            "proxy.api.a.b.internal",
            "proxy.api.b.internal",
            "proxy.api.c.internal",
            ".int.a.b.internal",
            ".int.b.internal",
            ".int.c.internal",
        ]
    );
}

#[test]
fn ingress_via_alias_a_record_as_external_dns_writes_it() {
    check(
        vec![
            RecordSet::new("*.int.example.internal", "CNAME", &[PROXY]),
            RecordSet::alias(
                "ingress-int.example.internal.",
                "A",
                "internal-k8s-ingress.elb.amazonaws.com.",
            ),
        ],
        &["ingress-int .int.example.internal -> ingress-int.example.internal:443"],
    );
}

/// One operator rule of each SNI mode, as `ROUTING_RULES` would give them.
fn mode_rules() -> Vec<Rule> {
    parse_rules(
        r#"[
        {"id": "eks", "front": "proxy.eks", "back": "eks", "back_types": ["CNAME"], "sni": "back-target"},
        {"id": "kubeadm", "front": "proxy.k8s", "back": "k8s", "back_types": ["A"], "sni": "back", "port": 6443},
        {"id": "web", "front": "*.apps", "back": "router", "back_types": ["A", "CNAME"], "sni": "front-suffix", "port": 8443},
        {"id": "api", "front": "proxy.api", "back": "api", "back_types": ["A"], "sni": "front"}
    ]"#,
    )
    .unwrap()
}

/// Matches `records` in zone `z` with [`mode_rules`]: the routes as `rule sni -> backend`
/// lines, and the warnings, each containing its `warns` fragment.
fn check_modes(records: Vec<RecordSet>, expected: &[&str], warns: &[&str]) {
    let (routes, warnings) = matched_with(&mode_rules(), &zone("1", "Z1", "z.", records));
    assert_eq!(routes, expected);
    assert_eq!(warnings.len(), warns.len(), "{warnings:?}");
    for (warning, fragment) in warnings.iter().zip(warns) {
        assert!(warning.contains(fragment), "{warning} lacks {fragment}");
    }
}

const EKS_ENDPOINT: &str = "ABC123.gr7.us-east-1.eks.amazonaws.com.";

#[test]
fn sni_back_target_routes_the_back_cname_target() {
    // The endpoint's name, lower-cased, is the SNI; the back record is the server.
    check_modes(
        vec![
            RecordSet::new("eks.z.", "CNAME", &[EKS_ENDPOINT]),
            RecordSet::new("proxy.eks.z.", "CNAME", &[PROXY]),
        ],
        &["eks abc123.gr7.us-east-1.eks.amazonaws.com -> eks.z:443"],
        &[],
    );
    // An A back record has no target: not this rule's.
    check_modes(
        vec![
            RecordSet::new("eks.z.", "A", &["10.0.0.1"]),
            RecordSet::new("proxy.eks.z.", "CNAME", &[PROXY]),
        ],
        &[],
        &["eks.z is not a CNAME record"],
    );
    // A target that is not a plain host name never becomes an SNI.
    check_modes(
        vec![
            RecordSet::new("eks.z.", "CNAME", &["evil\\040name.example.com"]),
            RecordSet::new("proxy.eks.z.", "CNAME", &[PROXY]),
        ],
        &[],
        &["the target of eks.z's CNAME"],
    );
    check_modes(
        vec![
            RecordSet::new("eks.z.", "CNAME", &["*.example.com"]),
            RecordSet::new("proxy.eks.z.", "CNAME", &[PROXY]),
        ],
        &[],
        &["not a plain host name"],
    );
}

#[test]
fn sni_back_routes_the_back_name_on_its_port() {
    check_modes(
        vec![
            RecordSet::alias("k8s.z.", "A", "nlb.elb.amazonaws.com."),
            RecordSet::new("proxy.k8s.z.", "CNAME", &[PROXY]),
        ],
        &["kubeadm k8s.z -> k8s.z:6443"],
        &[],
    );
}

#[test]
fn sni_front_suffix_routes_under_the_wildcard() {
    check_modes(
        vec![
            RecordSet::new("\\052.apps.z.", "CNAME", &[PROXY]),
            RecordSet::new("router.z.", "CNAME", &["elb.example.com"]),
        ],
        &["web .apps.z -> router.z:8443"],
        &[],
    );
}

#[test]
fn sni_front_routes_the_front_name() {
    check_modes(
        vec![
            RecordSet::new("api.z.", "A", &["10.0.0.1"]),
            RecordSet::new("proxy.api.z.", "CNAME", &[PROXY]),
        ],
        &["api proxy.api.z -> api.z:443"],
        &[],
    );
    // Custom rules replace the built-in ones: the built-in ingress pair routes nothing here.
    check_modes(ingress_pair("z."), &[], &[]);
}

#[test]
fn every_mode_makes_the_route_its_name_says() {
    let zone = ZoneKey {
        account: "1".into(),
        id: "Z1".into(),
    };
    let name = HostName::parse("z").unwrap();
    let target = HostName::parse("abc.eks.amazonaws.com").unwrap();
    for rule in mode_rules() {
        let with_target = rule.route(&zone, &name, Some(&target)).unwrap();
        let without = rule.route(&zone, &name, None);
        let (sni, sni_match) = match rule.sni_mode {
            SniMode::Front => ("proxy.api.z", SniMatch::Exact),
            SniMode::FrontSuffix => (".apps.z", SniMatch::Suffix),
            SniMode::Back => ("k8s.z", SniMatch::Exact),
            SniMode::BackTarget => ("abc.eks.amazonaws.com", SniMatch::Exact),
        };
        assert_eq!(
            (with_target.sni.as_str(), with_target.sni_match),
            (sni, sni_match)
        );
        assert_eq!(with_target.port, rule.port);
        // Only back-target needs the target.
        assert_eq!(
            without.is_none(),
            rule.sni_mode == SniMode::BackTarget,
            "{}",
            rule.id
        );
    }
}

#[test]
fn a_back_that_is_or_points_at_the_proxy_is_refused_in_every_mode() {
    // The proxy's name as Route53 may spell it: any case, a trailing dot, escapes.
    for spelling in [
        PROXY,
        "Peering-Proxy.Tools.Example.COM.",
        "peering\\055proxy.tools.example.com.",
    ] {
        let loops = |records: Vec<RecordSet>, back: &str| {
            let mut records = records;
            records.extend([
                RecordSet::new("api.z.", "A", &["10.0.0.1"]),
                RecordSet::new("proxy.api.z.", "CNAME", &[PROXY]),
            ]);
            check_modes(
                records,
                &["api proxy.api.z -> api.z:443"],
                &[&format!(
                    "back record {back} is or points at the peering proxy"
                )],
            );
        };
        loops(
            vec![
                RecordSet::new("eks.z.", "CNAME", &[spelling]),
                RecordSet::new("proxy.eks.z.", "CNAME", &[PROXY]),
            ],
            "eks.z",
        );
        loops(
            vec![
                RecordSet::alias("k8s.z.", "A", spelling),
                RecordSet::new("proxy.k8s.z.", "CNAME", &[PROXY]),
            ],
            "k8s.z",
        );
        loops(
            vec![
                RecordSet::new("*.apps.z.", "CNAME", &[PROXY]),
                RecordSet::new("router.z.", "CNAME", &[spelling]),
            ],
            "router.z",
        );
    }
    // The built-in ingress rule, whose back takes CNAMEs.
    let mut records = ingress_pair("example.internal.");
    records[1] = RecordSet::new("ingress-int.example.internal.", "CNAME", &[PROXY]);
    let (routes, warnings) = matched(&zone("1", "Z1", "example.internal.", records));
    assert!(routes.is_empty(), "{routes:?}");
    assert!(
        warnings[0].contains("ingress-int.example.internal"),
        "{warnings:?}"
    );
    assert!(warnings[0].contains("Z1 in account 1"), "{warnings:?}");
}

#[test]
fn two_rules_yielding_one_sni_route_neither_naming_both() {
    let rules = parse_rules(
        r#"[
        {"id": "svc-a", "front": "p1", "back": "svc", "back_types": ["A"], "sni": "back", "port": 8443},
        {"id": "svc-b", "front": "p2", "back": "svc", "back_types": ["A"], "sni": "back"},
        {"id": "api", "front": "proxy.api", "back": "api", "back_types": ["A"], "sni": "front"}
    ]"#,
    )
    .unwrap();
    let mut records = api_pair("z.");
    records.extend([
        RecordSet::new("svc.z.", "A", &["10.0.0.7"]),
        RecordSet::new("p1.z.", "CNAME", &[PROXY]),
        RecordSet::new("p2.z.", "CNAME", &[PROXY]),
    ]);
    let (routes, warnings) = matched_with(&rules, &zone("1", "Z1", "z.", records));
    assert_eq!(routes, ["api proxy.api.z -> api.z:443"]);
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].contains("rules svc-a and svc-b all yield SNI svc.z"),
        "{warnings:?}"
    );
}

#[test]
fn a_routing_policy_set_at_a_back_name_is_warned_about_naming_its_sets() {
    let weighted = |target: &str, id: &str| RecordSet {
        set_identifier: Some(id.to_owned()),
        ..RecordSet::new("router.z.", "CNAME", &[target])
    };
    let front = RecordSet::new("*.apps.z.", "CNAME", &[PROXY]);
    // Routed by name: the proxy forwards to whichever set Route53 answers.
    check_modes(
        vec![
            front.clone(),
            weighted("blue.example.com", "blue"),
            weighted("green.example.com", "green"),
        ],
        &["web .apps.z -> router.z:8443"],
        &["routing-policy set (set identifiers blue, green)"],
    );
    // back-target: sets that point to different names give no single SNI.
    let eks = |target: &str, id: &str| RecordSet {
        set_identifier: Some(id.to_owned()),
        ..RecordSet::new("eks.z.", "CNAME", &[target])
    };
    let eks_front = RecordSet::new("proxy.eks.z.", "CNAME", &[PROXY]);
    check_modes(
        vec![
            eks_front.clone(),
            eks("a.example.com", "primary"),
            eks("b.example.com", "secondary"),
        ],
        &[],
        &["(set identifiers primary, secondary) whose CNAMEs do not all point to one name"],
    );
    check_modes(
        vec![
            eks_front,
            eks("a.example.com", "primary"),
            eks("A.example.com.", "secondary"),
        ],
        &["eks a.example.com -> eks.z:443"],
        &["set identifiers primary, secondary"],
    );
}

mod backs;
