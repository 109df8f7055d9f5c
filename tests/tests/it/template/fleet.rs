//! The proxy fleet (`ProxyFleet=create`) as the template declares it: the Rules that refuse a
//! fleet without its network, and the properties that make an instance take traffic only when
//! ready, drain on the way out, and boot only once there is something to apply.

use std::collections::BTreeMap;

use autoproxy::render::RenderOptions;
use serde_json::{Value as Json, json};
use serde_yaml::Value;

use super::template;

/// The template's Rules evaluated for these parameter values (the rest at their defaults), as
/// CloudFormation evaluates them before it creates anything: the descriptions of the
/// assertions that fail.
fn refused(overrides: &[(&str, Json)]) -> Vec<String> {
    let template = template();
    let mut values: BTreeMap<String, Json> = BTreeMap::new();
    for (name, spec) in template["Parameters"].as_mapping().unwrap() {
        let default = autoproxy_tests::cfn::scalar(&spec["Default"]).unwrap_or_default();
        let value = if spec["Type"].as_str() == Some("CommaDelimitedList") {
            // CloudFormation splits "" into one empty item.
            json!(default.split(',').collect::<Vec<_>>())
        } else {
            json!(default)
        };
        values.insert(name.as_str().unwrap().to_owned(), value);
    }
    for (name, value) in overrides {
        assert!(values.contains_key(*name), "no parameter {name}");
        values.insert((*name).to_owned(), value.clone());
    }
    let mut failed = Vec::new();
    for (_, rule) in template["Rules"].as_mapping().expect("a Rules section") {
        let applies = match rule.get("RuleCondition") {
            Some(condition) => truth(&eval(condition, &values)),
            None => true,
        };
        if !applies {
            continue;
        }
        for assertion in rule["Assertions"].as_sequence().unwrap() {
            if !truth(&eval(&assertion["Assert"], &values)) {
                failed.push(assertion["AssertDescription"].as_str().unwrap().to_owned());
            }
        }
    }
    failed
}

fn truth(value: &Json) -> bool {
    value
        .as_bool()
        .unwrap_or_else(|| panic!("not a boolean: {value}"))
}

/// The rule functions the template uses: `!Ref`, `!Equals`, `!Not`, `!And`, `!Or`, `!Contains`.
fn eval(value: &Value, values: &BTreeMap<String, Json>) -> Json {
    let Value::Tagged(tagged) = value else {
        return match value {
            Value::String(s) => json!(s),
            Value::Sequence(items) => Json::Array(items.iter().map(|i| eval(i, values)).collect()),
            other => panic!("a rule value this test does not read: {other:?}"),
        };
    };
    let args = || -> Vec<Json> {
        tagged
            .value
            .as_sequence()
            .unwrap()
            .iter()
            .map(|item| eval(item, values))
            .collect()
    };
    match tagged.tag.to_string().as_str() {
        "!Ref" => values[tagged.value.as_str().unwrap()].clone(),
        "!Equals" => {
            let args = args();
            json!(args[0] == args[1])
        }
        "!Not" => json!(!truth(&args()[0])),
        "!And" => json!(args().iter().all(truth)),
        "!Or" => json!(args().iter().any(truth)),
        "!Contains" => {
            let args = args();
            json!(args[0].as_array().unwrap().contains(&args[1]))
        }
        other => panic!("a rule function this test does not know: {other}"),
    }
}

/// Everything a fleet needs, given.
fn fleet() -> Vec<(&'static str, Json)> {
    vec![
        ("ProxyFleet", json!("create")),
        ("ProxyVpcId", json!("vpc-0123456789abcdef0")),
        (
            "ProxySubnets",
            json!(["subnet-0aaaaaaaaaaaaaaaa", "subnet-0bbbbbbbbbbbbbbbb"]),
        ),
        ("ProxyClientCidrs", json!("10.0.0.0/8")),
        ("ProxyStatsBind", json!(":8404")),
    ]
}

/// `fleet()` with `name` replaced.
fn fleet_with(name: &str, value: &Json) -> Vec<(&'static str, Json)> {
    fleet()
        .into_iter()
        .map(|(n, v)| {
            if n == name {
                (n, value.clone())
            } else {
                (n, v)
            }
        })
        .collect()
}

#[test]
fn the_rules_refuse_a_fleet_without_its_network_or_a_reachable_health_check() {
    assert_eq!(
        refused(&[]),
        Vec::<String>::new(),
        "ProxyFleet=none needs nothing"
    );
    assert_eq!(refused(&fleet()), Vec::<String>::new(), "a complete fleet");
    for (name, value, names) in [
        ("ProxySubnets", json!([""]), "ProxySubnets"),
        (
            "ProxySubnets",
            json!(["subnet-0aaaaaaaaaaaaaaaa", ""]),
            "ProxySubnets",
        ),
        ("ProxyVpcId", json!(""), "ProxyVpcId"),
        ("ProxyClientCidrs", json!(""), "ProxyClientCidrs"),
        ("ProxyStatsBind", json!("127.0.0.1:8404"), "ProxyStatsBind"),
    ] {
        let failed = refused(&fleet_with(name, &value));
        assert_eq!(failed.len(), 1, "{name}={value}: {failed:?}");
        assert!(failed[0].contains(names), "{name}={value}: {failed:?}");
    }
    // Neither subnets nor a VPC: both named.
    let failed = refused(&[
        ("ProxyFleet", json!("create")),
        ("ProxyStatsBind", json!(":8404")),
    ]);
    for name in ["ProxyVpcId", "ProxySubnets", "ProxyClientCidrs"] {
        assert!(
            failed.iter().any(|f| f.contains(name)),
            "{name}: {failed:?}"
        );
    }
}

fn resource<'a>(template: &'a Value, name: &str) -> &'a Value {
    let resource = &template["Resources"][name];
    assert!(!resource.is_null(), "no resource {name}");
    resource
}

/// `30m` → 1800.
fn seconds(duration: &str) -> u64 {
    let (number, unit) = duration.split_at(duration.len() - 1);
    let number: u64 = number.parse().unwrap();
    match unit {
        "s" => number,
        "m" => number * 60,
        "h" => number * 3600,
        other => panic!("a hard-stop-after unit this test does not read: {other}"),
    }
}

#[test]
fn every_fleet_resource_exists_only_with_create() {
    let template = template();
    for (name, body) in template["Resources"].as_mapping().unwrap() {
        let name = name.as_str().unwrap();
        if name.starts_with("Proxy") && name != "ProxyInstancePolicy" {
            let condition = body["Condition"].as_str().unwrap_or_default();
            assert!(
                condition.starts_with("CreatesFleet") || condition.starts_with("CreatesProxy"),
                "{name} is created without ProxyFleet=create (Condition {condition:?})"
            );
        }
    }
    for output in ["ProxyLoadBalancerDnsName", "ProxyAutoScalingGroupName"] {
        assert_eq!(
            template["Outputs"][output]["Condition"].as_str(),
            Some("CreatesFleet")
        );
    }
}

#[test]
fn an_instance_takes_traffic_only_when_ready_and_drains_for_the_chosen_delay() {
    let template = template();
    let group = &resource(&template, "ProxyTargetGroup")["Properties"];
    assert_eq!(group["HealthCheckProtocol"].as_str(), Some("HTTP"));
    assert_eq!(group["HealthCheckPath"].as_str(), Some("/ready"));
    assert_eq!(group["Matcher"]["HttpCode"].as_str(), Some("200"));
    // The health check's port is the stats listener's.
    let stats_port = serde_yaml::to_string(&group["HealthCheckPort"]).unwrap();
    assert!(stats_port.contains("ProxyStatsBind"), "{stats_port}");
    let attribute = |key: &str| {
        group["TargetGroupAttributes"]
            .as_sequence()
            .unwrap()
            .iter()
            .find(|a| a["Key"].as_str() == Some(key))
            .map(|a| a["Value"].clone())
            .unwrap_or_else(|| panic!("no target group attribute {key}"))
    };
    // An NLB holds a deregistering target for the whole delay: each refresh step and each
    // scale-in takes it, so it is the operator's (ProxyDrainSeconds), five minutes by default,
    // and never beyond what HAProxy keeps an old worker's connections for.
    let delay = serde_yaml::to_string(&attribute("deregistration_delay.timeout_seconds")).unwrap();
    assert_eq!(delay.trim(), "!Ref ProxyDrainSeconds");
    let drain = &template["Parameters"]["ProxyDrainSeconds"];
    assert_eq!(drain["Default"].as_u64(), Some(300));
    assert!(
        drain["MaxValue"].as_u64().unwrap() <= seconds(&RenderOptions::default().hard_stop_after),
        "a drain longer than hard-stop-after keeps nothing more open"
    );
    // An unhealthy target keeps its open connections (a slow reload must not cut watches).
    assert_eq!(
        attribute("target_health_state.unhealthy.connection_termination.enabled").as_str(),
        Some("false")
    );

    let asg = resource(&template, "ProxyAutoScalingGroup");
    assert_eq!(asg["Properties"]["HealthCheckType"].as_str(), Some("ELB"));
    let depends: Vec<&str> = asg["DependsOn"]
        .as_sequence()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    for first in [
        "ConfigBucket",
        "ApplyConfigDocument",
        "ApplyConfigAssociation",
        "AgentBinaryUpload",
    ] {
        assert!(
            depends.contains(&first),
            "instances before {first}: {depends:?}"
        );
    }
    let listener = &resource(&template, "ProxyListener")["Properties"];
    assert_eq!(listener["Protocol"].as_str(), Some("TCP"));
    assert_eq!(listener["Port"].as_u64(), Some(443));
    // The largest TCP idle timeout AWS allows (60 to 6,000 s; 350 s if unset), so an idle
    // session is ended by HAProxy's timeouts rather than by the NLB first.
    let idle_timeout = listener["ListenerAttributes"]
        .as_sequence()
        .into_iter()
        .flatten()
        .find(|attribute| attribute["Key"].as_str() == Some("tcp.idle_timeout.seconds"))
        .and_then(|attribute| attribute["Value"].as_str());
    assert_eq!(
        idle_timeout,
        Some("6000"),
        "the listener's TCP idle timeout"
    );
    let nlb = &resource(&template, "ProxyLoadBalancer")["Properties"];
    assert_eq!(nlb["Scheme"].as_str(), Some("internal"));
    assert_eq!(nlb["Type"].as_str(), Some("network"));
}

#[test]
fn the_launch_template_requires_imdsv2_encrypts_and_tags_without_a_public_address() {
    let template = template();
    let data = &resource(&template, "ProxyLaunchTemplate")["Properties"]["LaunchTemplateData"];
    assert_eq!(
        data["MetadataOptions"]["HttpTokens"].as_str(),
        Some("required")
    );
    for device in data["BlockDeviceMappings"].as_sequence().unwrap() {
        assert_eq!(device["Ebs"]["Encrypted"].as_bool(), Some(true));
    }
    for interface in data["NetworkInterfaces"].as_sequence().unwrap() {
        assert_eq!(interface["AssociatePublicIpAddress"].as_bool(), Some(false));
    }
    let instance_tags = data["TagSpecifications"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|spec| spec["ResourceType"].as_str() == Some("instance"))
        .map(|spec| serde_yaml::to_string(&spec["Tags"]).unwrap())
        .expect("instance tags");
    assert!(
        instance_tags.contains("TargetTagKey") && instance_tags.contains("TargetTagValue"),
        "the tag the association targets: {instance_tags}"
    );
    let role = serde_yaml::to_string(
        &resource(&template, "ProxyInstanceRole")["Properties"]["ManagedPolicyArns"],
    )
    .unwrap();
    assert!(
        role.contains("AmazonSSMManagedInstanceCore") && role.contains("ProxyInstancePolicy"),
        "{role}"
    );
}

/// `template.yaml` as a stack with `ProxyFleet=create` and these parameters deploys it.
fn fleet_stack(template: &Value, overrides: &[(&str, &str)]) -> autoproxy_tests::cfn::Stack {
    let mut stack = super::stack::stack(template);
    for (name, value) in fleet() {
        stack.refs.insert(name.into(), value);
    }
    for (name, value) in overrides {
        assert!(stack.refs.contains_key(*name), "no parameter {name}");
        stack.refs.insert((*name).into(), json!(value));
    }
    stack
        .decide_conditions(template)
        .expect("the conditions decide");
    stack
}

/// `name`'s `AllowedPattern`, compiled as CloudFormation reads it (the whole value).
fn allowed(template: &Value, name: &str) -> regex_automata::dfa::regex::Regex {
    let pattern = template["Parameters"][name]["AllowedPattern"]
        .as_str()
        .unwrap_or_else(|| panic!("{name} has no AllowedPattern"));
    regex_automata::dfa::regex::Regex::new(pattern).unwrap()
}

#[test]
fn a_stats_listener_on_loopback_is_refused_before_anything_is_created() {
    let template = template();
    let port = |stats: &str, fleet: &str| {
        let stack = fleet_stack(
            &template,
            &[("ProxyStatsBind", stats), ("ProxyFleet", fleet)],
        );
        let group = &resource(&template, "ProxyTargetGroup")["Properties"]["HealthCheckPort"];
        stack.resolve(group).map_err(|err| err.to_string())
    };
    for stats in ["127.0.0.1:8404", "127.0.0.1:9000", "127.1.2.3:8404"] {
        let refused = port(stats, "create").expect_err(stats);
        assert!(
            refused.contains("Unable to get mapping for Refused::ProxyStatsBind::ProxyFleet=create needs ProxyStatsBind off loopback"),
            "{stats}: {refused}"
        );
    }
    for (stats, expected) in [(":8404", "8404"), ("10.0.3.7:9000", "9000")] {
        assert_eq!(port(stats, "create"), Ok(json!(expected)), "{stats}");
    }
    // Without a fleet the listener may stay on loopback, on any port.
    assert!(
        !fleet_stack(
            &template,
            &[("ProxyStatsBind", "127.0.0.1:9000"), ("ProxyFleet", "none")]
        )
        .conditions["FleetStatsOnLoopback"]
    );
    // The names of loopback never reach that far: the parameter takes IPv4 addresses only.
    let pattern = allowed(&template, "ProxyStatsBind");
    for stats in [
        "localhost:8404",
        "[::1]:8404",
        "::1:8404",
        "ip6-localhost:8404",
    ] {
        assert!(
            !pattern.is_match(stats),
            "{stats} passes ProxyStatsBind's pattern"
        );
    }
    assert!(pattern.is_match("127.0.0.1:8404") && pattern.is_match(":8404"));
}

#[test]
fn client_ranges_beyond_what_the_template_handles_are_refused_not_ignored() {
    let template = template();
    let rules: Vec<&str> = template["Resources"]
        .as_mapping()
        .unwrap()
        .keys()
        .filter_map(Value::as_str)
        .filter(|name| name.starts_with("ProxyTlsFromClients"))
        .collect();
    let ranges = |count: usize| {
        (0..count)
            .map(|i| format!("10.{i}.0.0/16"))
            .collect::<Vec<_>>()
            .join(",")
    };
    let pattern = allowed(&template, "ProxyClientCidrs");
    for count in 0..=rules.len() {
        assert!(pattern.is_match(&ranges(count)), "{count} ranges refused");
        // Each range given has its rule, with its range.
        let stack = fleet_stack(&template, &[("ProxyClientCidrs", &ranges(count))]);
        for (i, rule) in rules.iter().enumerate() {
            let body = resource(&template, rule);
            let created = stack.conditions[body["Condition"].as_str().unwrap()];
            assert_eq!(created, i < count, "{rule} with {count} ranges");
            if created {
                let cidr = stack.resolve(&body["Properties"]["CidrIp"]).unwrap();
                assert_eq!(cidr, json!(format!("10.{i}.0.0/16")), "{rule}");
            }
        }
    }
    let one_too_many = ranges(rules.len() + 1);
    assert!(
        !pattern.is_match(&one_too_many),
        "{one_too_many} passes the pattern"
    );
    assert!(
        !pattern.is_match("10.0.0.0/8, 10.1.0.0/16"),
        "a space passes"
    );
}

#[test]
fn the_image_is_a_parameter_every_deploy_reads_again() {
    let template = template();
    let text = std::fs::read_to_string(autoproxy_tests::root().join("template.yaml")).unwrap();
    assert!(
        !text.contains("{{resolve:ssm"),
        "a dynamic reference is read again only when its resource changes"
    );
    let image = serde_yaml::to_string(
        &resource(&template, "ProxyLaunchTemplate")["Properties"]["LaunchTemplateData"]["ImageId"],
    )
    .unwrap();
    for (name, default) in [
        ("ProxyImage", "/aws/service/debian/release/12/latest/amd64"),
        (
            "ProxyImageArm64",
            "/aws/service/debian/release/12/latest/arm64",
        ),
    ] {
        assert!(image.contains(name), "ImageId does not use {name}: {image}");
        let spec = &template["Parameters"][name];
        assert_eq!(
            spec["Type"].as_str(),
            Some("AWS::SSM::Parameter::Value<AWS::EC2::Image::Id>"),
            "{name}"
        );
        assert_eq!(spec["Default"].as_str(), Some(default), "{name}");
    }
}

#[test]
fn the_way_out_without_nat_is_one_parameter_and_the_instances_wait_for_it() {
    let template = template();
    // Endpoints need the route tables for the S3 gateway.
    let mut endpoints = fleet();
    endpoints.push(("ProxyVpcEndpoints", json!("create")));
    let failed = refused(&endpoints);
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert!(failed[0].contains("ProxyRouteTableIds"), "{failed:?}");
    endpoints.push(("ProxyRouteTableIds", json!(["rtb-0123456789abcdef0"])));
    assert_eq!(refused(&endpoints), Vec::<String>::new());

    let mut services = Vec::new();
    for (name, body) in template["Resources"].as_mapping().unwrap() {
        if body["Type"].as_str() != Some("AWS::EC2::VPCEndpoint") {
            continue;
        }
        let name = name.as_str().unwrap();
        assert_eq!(
            body["Condition"].as_str(),
            Some("CreatesProxyEndpoints"),
            "{name}"
        );
        let service = serde_yaml::to_string(&body["Properties"]["ServiceName"]).unwrap();
        let service = service
            .trim()
            .rsplit('.')
            .next()
            .unwrap()
            .trim_matches('"')
            .to_owned();
        let kind = body["Properties"]["VpcEndpointType"].as_str().unwrap();
        if kind == "Interface" {
            assert_eq!(
                body["Properties"]["PrivateDnsEnabled"].as_bool(),
                Some(true),
                "{name}"
            );
        }
        services.push(format!("{service} {kind}"));
    }
    services.sort();
    assert_eq!(
        services,
        [
            "ec2messages Interface",
            "logs Interface",
            "monitoring Interface",
            "s3 Gateway",
            "ssm Interface",
            "ssmmessages Interface",
        ]
    );
    // The group waits for every endpoint: the user data checks its way out first.
    let asg = resource(&template, "ProxyAutoScalingGroup");
    assert!(
        asg["DependsOn"]
            .as_sequence()
            .unwrap()
            .iter()
            .any(|d| d.as_str() == Some("ProxyWayOut")),
        "the group does not wait for the way out"
    );
    let way_out = serde_yaml::to_string(&resource(&template, "ProxyWayOut")["Metadata"]).unwrap();
    for (name, body) in template["Resources"].as_mapping().unwrap() {
        if body["Type"].as_str() == Some("AWS::EC2::VPCEndpoint") {
            let name = name.as_str().unwrap();
            assert!(
                way_out.contains(&format!("!Ref {name}")),
                "ProxyWayOut does not wait for {name}"
            );
        }
    }
}
