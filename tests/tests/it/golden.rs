//! Every golden config: rendered from its input, compared byte for byte, and checked by the
//! real `haproxy -c` with warnings fatal.

use autoproxy::model::{RecordSet, Zone, ZoneRecords};
use autoproxy::names::HostName;
use autoproxy_tests::check::assert_valid;
use autoproxy_tests::golden::{Input, compare, dir, render_case};

fn golden(case: &str) -> (String, Vec<String>) {
    let path = dir(case).join("input.json");
    let text = std::fs::read_to_string(&path).unwrap();
    let input: Input = serde_json::from_str(&text).unwrap();
    let (rendered, warnings) = render_case(&input);
    compare(&dir(case).join("haproxy.cfg"), &rendered.text);
    let mut listed = warnings.join("\n");
    listed.push('\n');
    compare(&dir(case).join("warnings.txt"), &listed);
    assert_valid(&rendered.text);
    (rendered.text, warnings)
}

/// The route-table lines: `#@route <sni> <host>:<port>` and `#@suffix <suffix> <host>:<port>`.
fn route_lines(config: &str) -> Vec<&str> {
    config
        .lines()
        .filter(|l| l.starts_with("#@route ") || l.starts_with("#@suffix "))
        .collect()
}

#[test]
fn both_rules() {
    let (config, warnings) = golden("both_rules");
    assert_eq!(
        route_lines(&config),
        [
            "#@route proxy.api.prod.example.internal api.prod.example.internal:443 api 111111111111 Z0AAA",
            "#@suffix int.prod.example.internal ingress-int.prod.example.internal:443 ingress-int 111111111111 Z0AAA",
        ]
    );
    assert!(config.contains("\n#@nameserver 169.254.169.253:53\n"));
    assert!(warnings.is_empty(), "{warnings:?}");
}

#[test]
fn api_only() {
    let (config, _) = golden("api_only");
    // Alias A and the k8s variant both count.
    assert_eq!(
        route_lines(&config),
        [
            "#@route proxy.api.k8s.staging.example.internal api.k8s.staging.example.internal:443 api-k8s 111111111111 Z0AAA",
            "#@route proxy.api.staging.example.internal api.staging.example.internal:443 api 111111111111 Z0AAA",
        ]
    );
}

#[test]
fn ingress_only() {
    let (config, _) = golden("ingress_only");
    assert_eq!(
        route_lines(&config),
        [
            "#@suffix int.dev.example.internal ingress-int.dev.example.internal:443 ingress-int 111111111111 Z0AAA"
        ]
    );
}

#[test]
fn wrong_target() {
    let (config, warnings) = golden("wrong_target");
    assert!(
        route_lines(&config).is_empty(),
        "a CNAME to anything but the proxy must not route"
    );
    // A name one edit from the proxy's, or beside it in its zone, is a mistake worth a
    // warning; someone else's name (even one that starts with the proxy's) is not.
    assert_eq!(
        warnings,
        [
            "zone Z0AAA in account 111111111111: proxy.api.k8s.qa.example.internal is a CNAME \
             to peering-prxoy.tools.example.com, one edit away from the peering proxy's name \
             peering-proxy.tools.example.com (a typo?): no route until it points at \
             peering-proxy.tools.example.com",
            "zone Z0BBB in account 111111111111: proxy.api.uat.example.internal is a CNAME to \
             old-proxy.tools.example.com, another name under the proxy's zone \
             tools.example.com, not the peering proxy peering-proxy.tools.example.com: no \
             route until it points at peering-proxy.tools.example.com",
            "zone Z0BBB in account 111111111111: *.int.uat.example.internal is a CNAME to \
             peering-proxy.tools.example.co, one edit away from the peering proxy's name \
             peering-proxy.tools.example.com (a typo?): no route until it points at \
             peering-proxy.tools.example.com",
        ]
    );
}

#[test]
fn public_zone() {
    let (config, _) = golden("public_zone");
    assert!(route_lines(&config).is_empty());
}

#[test]
fn escaped_wildcard() {
    let (config, _) = golden("escaped_wildcard");
    assert!(config.contains("\n#@suffix int.escaped.example.internal "));
}

#[test]
fn case_and_dots() {
    let (config, _) = golden("case_and_dots");
    assert!(config.contains("\n#@route proxy.api.mixed.example.internal "));
    assert!(config.contains("\n#@suffix int.mixed.example.internal "));
    assert!(!config.to_lowercase().contains("mixed.example.internal.:"));
}

#[test]
fn same_zone_two_accounts() {
    let (config, warnings) = golden("same_zone_two_accounts");
    // The API name is claimed twice: account 111… wins; the ingress suffix only once.
    assert!(config.contains(
        "\n#@route proxy.api.shared.example.internal api.shared.example.internal:443 api 111111111111 Z0AAA\n"
    ));
    assert_eq!(route_lines(&config).len(), 2);
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(warnings[0].contains("Z0AAA in account 111111111111"));
    assert!(warnings[0].contains("Z0BBB in account 222222222222"));
}

#[test]
fn hostile_names() {
    let (config, warnings) = golden("hostile_names");
    assert_eq!(route_lines(&config).len(), 1, "only the plain zone routes");
    assert!(config.contains("proxy.api.ok.example.internal"));
    for bad in ["evil", "caf", "HOME", "x\"y"] {
        assert!(!config.contains(bad), "{bad} reached the config");
    }
    // Five hostile zones, each named in a warning, and the plain zone's two hostile record
    // names in one (a zone's warnings of one kind are one entry).
    assert_eq!(warnings.len(), 6, "{warnings:#?}");
    assert!(
        warnings[5].starts_with("2 records in zone ok.example.internal"),
        "{warnings:#?}"
    );
}

#[test]
fn zero_rules() {
    let (config, _) = golden("zero_rules");
    assert!(route_lines(&config).is_empty());
    assert!(config.contains("# rules: 0\n"));
}

/// 2,000 rules: 1,000 zones with both pairs (generated, not stored as input).
#[test]
fn two_thousand_rules() {
    let proxy = "peering-proxy.tools.example.com";
    let zones = (0..1000)
        .map(|i| {
            let name = format!("c{i:04}.example.internal.");
            ZoneRecords {
                unnamed_left: 0,
                zone: Zone {
                    account: format!("{:012}", 100_000_000_000u64 + (i % 10)),
                    id: format!("Z{i:05}"),
                    name: name.clone(),
                    private: true,
                },
                records: vec![
                    RecordSet::new(&format!("api.{name}"), "A", &["10.0.0.1"]),
                    RecordSet::new(&format!("proxy.api.{name}"), "CNAME", &[proxy]),
                    RecordSet::new(&format!("\\052.int.{name}"), "CNAME", &[proxy]),
                    RecordSet::new(
                        &format!("ingress-int.{name}"),
                        "CNAME",
                        &["elb.example.com"],
                    ),
                ],
            }
        })
        .collect();
    let input = Input {
        rules: None,
        proxies: vec![HostName::parse(proxy).unwrap()],
        zones,
    };
    let (rendered, warnings) = render_case(&input);
    assert!(warnings.is_empty());
    assert_eq!(rendered.header.rules, 2000);
    compare(
        &dir("two_thousand_rules").join("haproxy.cfg"),
        &rendered.text,
    );
    assert_valid(&rendered.text);
}

// One golden per SNI mode, each with the operator's own rule table (ROUTING_RULES).

#[test]
fn sni_front_routes_the_front_name_on_the_rules_port() {
    let (config, warnings) = golden("sni_front");
    assert_eq!(
        route_lines(&config),
        [
            "#@route proxy.grpc.prod.example.internal grpc.prod.example.internal:8443 grpc 111111111111 Z0AAA"
        ]
    );
    assert!(warnings.is_empty(), "{warnings:?}");
}

#[test]
fn sni_front_suffix_routes_under_the_wildcard_to_an_alias_or_a_cname() {
    let (config, warnings) = golden("sni_front_suffix");
    assert_eq!(
        route_lines(&config),
        [
            "#@suffix apps.prod.example.internal router.prod.example.internal:443 apps 111111111111 Z0AAA",
            "#@suffix apps.dev.example.internal router.dev.example.internal:443 apps 222222222222 Z0BBB",
        ]
    );
    assert!(warnings.is_empty(), "{warnings:?}");
}

#[test]
fn sni_back_routes_the_back_name_on_6443() {
    let (config, warnings) = golden("sni_back");
    assert_eq!(
        route_lines(&config),
        [
            "#@route k8s.lab.example.internal k8s.lab.example.internal:6443 kubeadm 111111111111 Z0AAA"
        ]
    );
    assert!(warnings.is_empty(), "{warnings:?}");
}

#[test]
fn sni_back_target_routes_the_endpoint_name_to_the_back_record() {
    let (config, warnings) = golden("sni_back_target");
    assert_eq!(
        route_lines(&config),
        [
            "#@route abc123def.gr7.us-east-1.eks.amazonaws.com eks.prod.example.internal:443 eks 111111111111 Z0AAA"
        ]
    );
    // A target that is not a plain host name never reaches the config.
    assert!(!config.contains("evil"), "{config}");
    let [warning] = &warnings[..] else {
        panic!("{warnings:?}")
    };
    assert!(
        warning.contains("eks.bad.example.internal's CNAME"),
        "{warning}"
    );
}
