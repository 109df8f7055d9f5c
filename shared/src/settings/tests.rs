use super::*;
use std::collections::HashMap;

fn generate(vars: &[(&str, &str)]) -> Result<GenerateSettings, SettingsError> {
    let map: HashMap<String, String> = vars
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    GenerateSettings::from_lookup(|name| map.get(name).cloned())
}

const MINIMAL: &[(&str, &str)] = &[
    ("CONFIG_BUCKET", "bucket"),
    ("PEERING_PROXY_HOSTNAME", "Proxy.Tools.Example.com."),
];

#[test]
fn defaults_follow_the_design() {
    let s = generate(MINIMAL).unwrap();
    assert_eq!(s.config_key, "haproxy/haproxy.cfg");
    assert_eq!(s.manifest_key(), "haproxy/haproxy.manifest.json");
    assert_eq!(s.proxy_hostnames[0].as_str(), "proxy.tools.example.com");
    assert!(s.account_roles.is_empty());
    assert_eq!(s.dns_resolvers, ["169.254.169.253:53".parse().unwrap()]);
    assert_eq!(s.max_rule_drop_percent, 50);
    assert_eq!(s.render_options, RenderOptions::default());
    assert!((s.route53_requests_per_second - 5.0).abs() < f64::EPSILON);
    assert!(s.scan_own_account);
    assert!(s.proxy_vpcs.is_empty());
    assert_eq!(s.event_queue_url, None);
    let url = "https://sqs.us-east-1.amazonaws.com/123456789012/autoproxy-Route53EventsQueue-X";
    let mut vars = MINIMAL.to_vec();
    vars.push(("EVENT_QUEUE_URL", url));
    assert_eq!(
        generate(&vars).unwrap().event_queue_url.as_deref(),
        Some(url)
    );
    let mut vars = MINIMAL.to_vec();
    vars.push(("ACCOUNT_ROLE_ARNS", "arn:aws:iam::222222222222:role/r"));
    vars.push(("SCAN_OWN_ACCOUNT", "false"));
    let s = generate(&vars).unwrap();
    assert!(!s.scan_own_account);
    assert!(!s.scans_own_account("111111111111"));
    // Members listed from Organizations are accounts to scan too.
    let mut members = MINIMAL.to_vec();
    members.push(("SCAN_OWN_ACCOUNT", "false"));
    members.push(("MEMBER_ACCOUNTS", "ou-ab12-cdef5678"));
    members.push(("MEMBER_ROLE_NAME", "autoproxy-route53-read"));
    let listed = generate(&members).unwrap();
    assert!(!listed.scan_own_account && listed.account_roles.is_empty());
    assert_eq!(
        listed.member_accounts.map(|m| m.role_name),
        Some("autoproxy-route53-read".to_owned())
    );
    assert!(
        s.scans_own_account("222222222222"),
        "a role in the own account names it"
    );
}

#[test]
fn lists_are_parsed_and_normalised() {
    let mut vars = MINIMAL.to_vec();
    vars.push(("PEERING_PROXY_HOSTNAME", "a.example.com, b.example.com"));
    vars.push((
        "ACCOUNT_ROLE_ARNS",
        "arn:aws:iam::222222222222:role/r, arn:aws:iam::111111111111:role/r",
    ));
    vars.push((
        "IGNORE_ZONES",
        "Legacy.Internal., other.internal, 222222222222:Shared.Internal",
    ));
    vars.push((
        "PROXY_VPCS",
        "eu-west-1:vpc-0123456789abcdef0, us-east-1:vpc-01234567",
    ));
    vars.push(("DNS_RESOLVERS", "10.0.0.2, 127.0.0.1:5353"));
    let s = generate(&vars).unwrap();
    assert_eq!(s.proxy_hostnames.len(), 2);
    assert_eq!(s.account_roles[0].account, "111111111111");
    let ignores = |account, zone| s.ignore_zones.ignores(account, zone);
    assert!(ignores("111111111111", "legacy.internal"));
    assert!(ignores("222222222222", "LEGACY.internal."));
    assert!(!ignores("111111111111", "x.internal"));
    // The account form drops one of two same-named zones, not both.
    assert!(ignores("222222222222", "shared.internal."));
    assert!(!ignores("111111111111", "shared.internal."));
    assert_eq!(s.proxy_vpcs.len(), 2);
    assert_eq!(
        (
            s.proxy_vpcs[0].region.as_str(),
            s.proxy_vpcs[0].vpc_id.as_str()
        ),
        ("eu-west-1", "vpc-0123456789abcdef0")
    );
    assert!(s.scan_own_account);
    assert_eq!(s.dns_resolvers[0], "10.0.0.2:53".parse().unwrap());
    assert_eq!(s.dns_resolvers[1], "127.0.0.1:5353".parse().unwrap());
}

#[test]
fn bad_values_name_the_variable_expectation_and_value() {
    let cases: &[(&str, &str, &str)] = &[
        ("PEERING_PROXY_HOSTNAME", "bad host", "host names"),
        ("ACCOUNT_ROLE_ARNS", "arn:aws:iam::12:role/x", "role ARNs"),
        ("DNS_RESOLVERS", "resolver.local", "ip[:port]"),
        ("MAX_RULE_DROP_PERCENT", "101", "0 to 100"),
        ("MAX_RULE_DROP_PERCENT", "ten", "0 to 100"),
        ("CONFIG_KEY", "/abs/key", "S3 key"),
        ("RENDER_OPTIONS", "{\"https_port\": 1}", "JSON object"),
        (
            "RENDER_OPTIONS",
            "{\"route_maxconn\": 0}",
            "route_maxconn of at least 1",
        ),
        ("ROUTE53_REQUESTS_PER_SECOND", "0", "above 0"),
        ("IGNORE_ZONES", "12345:a.internal", "111111111111:zone.name"),
        ("IGNORE_ZONES", "111111111111:bad zone", "one account"),
        ("SCAN_OWN_ACCOUNT", "no", "true or false"),
        ("SCAN_OWN_ACCOUNT", "false", "nothing to scan"),
        ("PROXY_VPCS", "vpc-0123456789abcdef0", "region:vpc-id"),
        ("PROXY_VPCS", "eu-west-1:vpc-XYZ", "region:vpc-id"),
        ("OWNERSHIP_GRACE_HOURS", "8761", "0 to 8760"),
        ("OWNERSHIP_GRACE_HOURS", "a day", "0 to 8760"),
        ("EVENT_QUEUE_URL", "route53-events", "SQS queue URL"),
        ("EVENT_QUEUE_URL", "https://sqs.x/1/a b", "SQS queue URL"),
    ];
    for (variable, value, expected) in cases {
        let mut vars = MINIMAL.to_vec();
        vars.push((variable, value));
        let err = generate(&vars).unwrap_err();
        assert_eq!(err.variable, *variable);
        let text = err.to_string();
        assert!(text.contains(expected), "{text}");
        assert!(text.contains(&format!("{value:?}")), "{text}");
    }
    let err = generate(&[("CONFIG_BUCKET", "b")]).unwrap_err();
    assert_eq!(err.variable, "PEERING_PROXY_HOSTNAME");
    let err = generate(&[]).unwrap_err();
    assert_eq!(err.variable, "CONFIG_BUCKET");
}

#[test]
fn a_rule_s_port_is_the_port_and_the_grace_defaults_to_a_day() {
    let s = generate(MINIMAL).unwrap();
    assert_eq!(s.ownership_grace_hours, DEFAULT_GRACE_HOURS);
    assert_eq!(DEFAULT_GRACE_HOURS, 24);
    let port = ("RENDER_OPTIONS", "{\"backend_port\": 8443}");
    // Beside the built-in rules it points them at one backend port (tests, the demo) ...
    let mut vars = MINIMAL.to_vec();
    vars.push(port);
    assert_eq!(
        generate(&vars).unwrap().render_options.backend_port,
        Some(8443)
    );
    // ... beside ROUTING_RULES, whose rules set their own ports, it is refused.
    let rules = r#"[{"id": "k", "front": "p.k", "back": "k", "back_types": ["A"], "sni": "back"}]"#;
    vars.push(("ROUTING_RULES", rules));
    let err = generate(&vars).unwrap_err();
    assert_eq!(err.variable, "RENDER_OPTIONS");
    let text = err.to_string();
    assert!(
        text.contains("no backend_port beside ROUTING_RULES"),
        "{text}"
    );
    assert!(text.contains("backend_port 8443"), "{text}");
}

#[test]
fn manifest_key_never_shares_the_config_prefix() {
    for (config, manifest) in [
        ("haproxy/haproxy.cfg", "haproxy/haproxy.manifest.json"),
        ("haproxy.cfg", "haproxy.manifest.json"),
        ("a/b/proxy", "a/b/proxy.manifest.json"),
    ] {
        assert_eq!(manifest_key(config), manifest);
    }
}

#[test]
fn configure_defaults_and_errors() {
    let map: HashMap<&str, &str> = [("APPLY_DOCUMENT", "doc")].into();
    let s = ConfigureSettings::from_lookup(|n| map.get(n).map(|v| (*v).to_owned())).unwrap();
    assert_eq!(s.config_key, "haproxy/haproxy.cfg");
    assert_eq!(
        (s.target_tag_key.as_str(), s.target_tag_value.as_str()),
        ("Role", "peering-proxy")
    );
    assert_eq!(
        (s.max_concurrency.as_str(), s.max_errors.as_str()),
        ("1", "0")
    );
    assert_eq!(s.config_bucket, None);
    let map: HashMap<&str, &str> = [
        ("APPLY_DOCUMENT", "doc"),
        ("CONFIG_BUCKET", " autoproxy-config "),
    ]
    .into();
    let s = ConfigureSettings::from_lookup(|n| map.get(n).map(|v| (*v).to_owned())).unwrap();
    assert_eq!(s.config_bucket.as_deref(), Some("autoproxy-config"));
    assert_eq!(s.fleet_silent_after_seconds, 90 * 60);
    assert_eq!(s.delivery_timeout_seconds, 120);
    for (variable, bad) in [
        ("MAX_ERRORS", "x"),
        ("DELIVERY_TIMEOUT_SECONDS", "29"),
        ("DELIVERY_TIMEOUT_SECONDS", "2592001"),
        ("DELIVERY_TIMEOUT_SECONDS", "2m"),
        ("FLEET_SILENT_AFTER_MINUTES", "0"),
        ("FLEET_SILENT_AFTER_MINUTES", "90m"),
        ("FLEET_SILENT_AFTER_MINUTES", "525601"),
    ] {
        let map: HashMap<&str, &str> = [("APPLY_DOCUMENT", "doc"), (variable, bad)].into();
        let err =
            ConfigureSettings::from_lookup(|n| map.get(n).map(|v| (*v).to_owned())).unwrap_err();
        assert_eq!(err.variable, variable, "{bad}");
    }
    let map: HashMap<&str, &str> = [
        ("APPLY_DOCUMENT", "doc"),
        ("FLEET_SILENT_AFTER_MINUTES", "150"),
        ("DELIVERY_TIMEOUT_SECONDS", "30"),
    ]
    .into();
    let s = ConfigureSettings::from_lookup(|n| map.get(n).map(|v| (*v).to_owned())).unwrap();
    assert_eq!(s.fleet_silent_after_seconds, 150 * 60);
    assert_eq!(s.delivery_timeout_seconds, 30);
    let err = ConfigureSettings::from_lookup(|_| None).unwrap_err();
    assert_eq!(err.variable, "APPLY_DOCUMENT");
}

#[test]
fn routing_rules_replace_the_built_in_ones_or_stop_the_start() {
    assert_eq!(generate(MINIMAL).unwrap().routing_rules, *DEFAULT_RULES);
    let mut vars = MINIMAL.to_vec();
    vars.push(("ROUTING_RULES", "  "));
    assert_eq!(generate(&vars).unwrap().routing_rules, *DEFAULT_RULES);
    let eks = r#"[{"id": "eks", "front": "proxy.eks", "back": "eks", "back_types": ["CNAME"], "sni": "back-target"}]"#;
    let mut vars = MINIMAL.to_vec();
    vars.push(("ROUTING_RULES", eks));
    let rules = generate(&vars).unwrap().routing_rules;
    assert_eq!(rules.len(), 1);
    assert_eq!(rules[0].id, "eks");
    for (value, expected) in [
        (
            eks.replace("back-target", "sideways"),
            r#"ROUTING_RULES: rule "eks" (index 0), field "sni": expected one of front, front-suffix, back, back-target, got "sideways""#,
        ),
        (
            eks.replace(r#""id": "eks", "#, ""),
            r#"ROUTING_RULES: rule at index 0 (no valid id), field "id": expected a string: 1 to 32 characters of a-z, 0-9 and '-', got nothing"#,
        ),
        (
            "[".to_owned(),
            "ROUTING_RULES: expected a JSON list of rules, got [",
        ),
    ] {
        let mut vars = MINIMAL.to_vec();
        vars.push(("ROUTING_RULES", &value));
        let err = generate(&vars).unwrap_err();
        assert_eq!(err.variable, "ROUTING_RULES");
        assert!(err.to_string().starts_with(expected), "{err}");
    }
}

#[test]
fn member_networks_and_public_backs_are_read_and_refused_when_malformed() {
    use crate::networks::PublicBacks;
    let s = generate(MINIMAL).unwrap();
    assert!(s.borders.networks.is_empty());
    assert_eq!(s.borders.public, PublicBacks::Refused);
    let mut vars = MINIMAL.to_vec();
    vars.push((
        "MEMBER_NETWORKS",
        " 111111111111:10.1.0.0/16, 111111111111:2600:1f18::/56,222222222222:192.168.7.9/24 ",
    ));
    vars.push(("ALLOW_PUBLIC_BACKS", "true"));
    let s = generate(&vars).unwrap();
    assert_eq!(s.borders.public, PublicBacks::Allowed);
    let ranges: Vec<String> = s
        .borders
        .networks
        .ranges()
        .iter()
        .flat_map(|(account, nets)| nets.iter().map(move |net| format!("{account}:{net}")))
        .collect();
    assert_eq!(
        ranges,
        [
            "111111111111:10.1.0.0/16",
            "111111111111:2600:1f18::/56",
            "222222222222:192.168.7.0/24"
        ]
    );
    for (variable, value) in [
        ("MEMBER_NETWORKS", "10.1.0.0/16"),
        ("MEMBER_NETWORKS", "1111:10.1.0.0/16"),
        ("MEMBER_NETWORKS", "111111111111:10.1.0.0"),
        ("MEMBER_NETWORKS", "111111111111:10.1.0.0/33"),
        ("ALLOW_PUBLIC_BACKS", "yes"),
    ] {
        let mut vars = MINIMAL.to_vec();
        vars.push((variable, value));
        let err = generate(&vars).unwrap_err();
        assert_eq!(err.variable, variable, "{value}: {err}");
        assert!(err.got.contains(value), "{err}");
    }
}

#[test]
fn member_regions_are_every_enabled_one_by_default_or_the_ones_listed() {
    use super::MemberRegions;
    assert_eq!(
        generate(MINIMAL).unwrap().member_regions,
        MemberRegions::Enabled
    );
    for (raw, expected) in [
        ("enabled", MemberRegions::Enabled),
        (
            " eu-west-1, us-east-1,eu-west-1 ",
            MemberRegions::Listed(vec!["eu-west-1".to_owned(), "us-east-1".to_owned()]),
        ),
    ] {
        let mut vars = MINIMAL.to_vec();
        vars.push(("MEMBER_REGIONS", raw));
        assert_eq!(generate(&vars).unwrap().member_regions, expected, "{raw}");
    }
    for bad in ["all", "eu-west-1,Europe", "us-east-1:vpc-1"] {
        let mut vars = MINIMAL.to_vec();
        vars.push(("MEMBER_REGIONS", bad));
        let err = generate(&vars).unwrap_err();
        assert_eq!(err.variable, "MEMBER_REGIONS", "{bad}: {err}");
        assert!(
            err.to_string().contains("enabled, or region names"),
            "{err}"
        );
    }
}
