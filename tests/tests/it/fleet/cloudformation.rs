//! The fleet's resources deployed by moto's CloudFormation, from `template.yaml` with the SAM
//! parts and the rest of the stack stripped, and their properties read back from moto's EC2,
//! Auto Scaling, ELBv2, IAM and Route53.
//!
//! What moto cannot take, and so is left out or not read here: the load balancer's `Type`
//! (moto's CloudFormation makes every `AWS::ElasticLoadBalancingV2::LoadBalancer` an
//! application load balancer, which then refuses the TCP listener: "Listener protocol 'TCP'
//! must be one of 'HTTP, HTTPS'"), so `ProxyListener` is left out; the instance-refresh custom
//! resource, its inline Python function and that function's log group (moto runs Lambda code
//! only in Docker; `fleet::refresh` runs it against a stand-in); the target group's attributes
//! (moto keeps its own defaults: a deregistration delay of 300 s); the role's
//! `ManagedPolicyArns` (moto attaches none); the instances' metadata options (moto does not
//! carry a launch template's over). The static tests (`template::fleet`) hold those properties.

use std::process::Command;

use autoproxy_tests::moto::Moto;
use serde_json::Value as Json;
use serde_yaml::{Mapping, Value};

/// Resources of the fleet moto cannot create (see the module's doc).
const LEFT_OUT: [&str; 5] = [
    "ProxyListener",
    "ProxyInstanceRefresh",
    "ProxyInstanceRefreshFunction",
    "ProxyInstanceRefreshLogGroup",
    "ProxyInstanceRefreshRole",
];

/// The SSM parameter naming the test's image (put in moto before the stack is created).
const IMAGE_PARAMETER: &str = "/test/debian/12/amd64";

/// `aws <args>` against moto; its JSON answer.
fn aws(moto: &Moto, args: &[&str]) -> Json {
    let out = Command::new(autoproxy_tests::tool("aws"))
        .args(args)
        .args(["--output", "json"])
        .envs(moto.env())
        .env("AWS_DEFAULT_REGION", autoproxy_tests::moto::REGION)
        .output()
        .expect("run the AWS CLI");
    assert!(
        out.status.success(),
        "aws {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    if out.stdout.iter().all(u8::is_ascii_whitespace) {
        return Json::Null;
    }
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The fleet's part of `template.yaml` as a plain CloudFormation template: its parameters, its
/// per-CIDR conditions (without `CreatesFleet`, which holds here), its resources without their
/// `CreatesFleet` condition and their `DependsOn` on the rest of the stack, and a stand-in for
/// the stack's `ProxyInstancePolicy`.
fn fleet_template() -> String {
    let template = super::user_data::template();
    let mut parameters = Mapping::new();
    for (name, spec) in template["Parameters"].as_mapping().unwrap() {
        let name = name.as_str().unwrap();
        if name.starts_with("Proxy")
            || name.starts_with("TargetTag")
            || name == "PeeringProxyHostname"
        {
            let mut spec = spec.clone();
            // Every image parameter is read at every deploy, its default too: moto's SSM has
            // none of Debian's names (and refuses to create names under /aws).
            if spec["Type"]
                .as_str()
                .is_some_and(|t| t.starts_with("AWS::SSM::Parameter::"))
            {
                spec["Default"] = IMAGE_PARAMETER.into();
            }
            parameters.insert(name.into(), spec);
        }
    }
    let mut conditions = Mapping::new();
    for (name, condition) in template["Conditions"].as_mapping().unwrap() {
        let name = name.as_str().unwrap();
        if name.starts_with("CreatesProxyClientCidr")
            || ["FleetStatsOnLoopback", "CreatesProxyEndpoints"].contains(&name)
        {
            // !And [!Condition CreatesFleet, <the CIDR test>]
            let Value::Tagged(and) = condition else {
                panic!("{name}: {condition:?}")
            };
            conditions.insert(name.into(), and.value[1].clone());
        } else if ["FleetIsX86", "HasProxyInstanceType"].contains(&name) {
            conditions.insert(name.into(), condition.clone());
        }
    }
    conditions.insert(
        "CreatesFleetRecord".into(),
        serde_yaml::from_str("!Not [!Equals [!Ref ProxyHostnameZoneId, \"\"]]").unwrap(),
    );
    let mut resources = Mapping::new();
    for (name, resource) in template["Resources"].as_mapping().unwrap() {
        let name = name.as_str().unwrap();
        if !name.starts_with("Proxy") || name == "ProxyInstancePolicy" || LEFT_OUT.contains(&name) {
            continue;
        }
        let mut resource = resource.as_mapping().unwrap().clone();
        resource.remove("DependsOn");
        resource.remove("Metadata");
        if resource.get("Condition").and_then(Value::as_str) == Some("CreatesFleet") {
            resource.remove("Condition");
        }
        resources.insert(name.into(), Value::Mapping(resource));
    }
    resources.insert(
        "ProxyInstancePolicy".into(),
        serde_yaml::from_str(
            "Type: AWS::IAM::ManagedPolicy\nProperties:\n  PolicyDocument:\n    Version: '2012-10-17'\n    Statement:\n      - {Effect: Allow, Action: 's3:GetObject', Resource: 'arn:aws:s3:::autoproxy-config/haproxy/haproxy.cfg'}\n",
        )
        .unwrap(),
    );
    let mut out = Mapping::new();
    out.insert("AWSTemplateFormatVersion".into(), "2010-09-09".into());
    out.insert("Parameters".into(), Value::Mapping(parameters));
    out.insert("Mappings".into(), template["Mappings"].clone());
    out.insert("Conditions".into(), Value::Mapping(conditions));
    out.insert("Resources".into(), Value::Mapping(resources));
    // serde_yaml writes the string 2012-10-17 unquoted, which a YAML 1.1 reader (moto's)
    // takes for a date.
    serde_yaml::to_string(&Value::Mapping(out))
        .unwrap()
        .replace("Version: 2012-10-17", "Version: '2012-10-17'")
}

fn text<'a>(value: &'a Json, path: &[&str]) -> &'a str {
    let mut node = value;
    for key in path {
        node = &node[*key];
    }
    node.as_str()
        .unwrap_or_else(|| panic!("{}: {value}", path.join(".")))
}

#[test]
fn moto_s_cloudformation_creates_the_fleet_as_the_template_says() {
    let moto = Moto::start();
    let vpc = aws(
        &moto,
        &["ec2", "create-vpc", "--cidr-block", "10.50.0.0/16"],
    );
    let vpc = text(&vpc, &["Vpc", "VpcId"]).to_owned();
    let subnets: Vec<String> = [
        ("10.50.1.0/24", "us-east-1a"),
        ("10.50.2.0/24", "us-east-1b"),
    ]
    .iter()
    .map(|(cidr, zone)| {
        let subnet = aws(
            &moto,
            &[
                "ec2",
                "create-subnet",
                "--vpc-id",
                &vpc,
                "--cidr-block",
                cidr,
                "--availability-zone",
                zone,
            ],
        );
        text(&subnet, &["Subnet", "SubnetId"]).to_owned()
    })
    .collect();
    let zone = aws(
        &moto,
        &[
            "route53",
            "create-hosted-zone",
            "--name",
            "tools.example.internal",
            "--caller-reference",
            "fleet",
            "--vpc",
            &format!("VPCRegion=us-east-1,VPCId={vpc}"),
        ],
    );
    let zone_id = text(&zone, &["HostedZone", "Id"])
        .trim_start_matches("/hostedzone/")
        .to_owned();
    // The image parameter is read from SSM at deploy time (moto refuses names under /aws).
    let images = aws(
        &moto,
        &[
            "ec2",
            "describe-images",
            "--filters",
            "Name=name,Values=amzn-ami-hvm-2017.09.1.20171103-x86_64-gp2",
        ],
    );
    let image = images["Images"][0]["ImageId"]
        .as_str()
        .unwrap_or_else(|| panic!("one of moto's images: {images}"))
        .to_owned();
    aws(
        &moto,
        &[
            "ssm",
            "put-parameter",
            "--name",
            IMAGE_PARAMETER,
            "--type",
            "String",
            "--value",
            &image,
        ],
    );
    let dir = tempfile::tempdir().unwrap();
    let template = dir.path().join("fleet.yaml");
    std::fs::write(&template, fleet_template()).unwrap();
    let parameter = |key: &str, value: &str| format!("ParameterKey={key},ParameterValue={value}");
    let subnet_list = format!("\"{}\"", subnets.join(","));
    aws(
        &moto,
        &[
            "cloudformation",
            "create-stack",
            "--stack-name",
            "fleet",
            "--capabilities",
            "CAPABILITY_IAM",
            "--template-body",
            &format!("file://{}", template.display()),
            "--parameters",
            &parameter("PeeringProxyHostname", "proxy.tools.example.internal"),
            &parameter("ProxyVpcId", &vpc),
            &parameter("ProxySubnets", &subnet_list),
            &parameter("ProxyClientCidrs", "\"10.0.0.0/8,192.168.0.0/16\""),
            &parameter("ProxyStatsBind", ":8404"),
            &parameter("ProxyHostnameZoneId", &zone_id),
            &parameter("ProxyImage", IMAGE_PARAMETER),
        ],
    );
    let stack = aws(
        &moto,
        &["cloudformation", "describe-stacks", "--stack-name", "fleet"],
    );
    assert_eq!(
        stack["Stacks"][0]["StackStatus"], "CREATE_COMPLETE",
        "{stack}"
    );
    let resources = aws(
        &moto,
        &[
            "cloudformation",
            "list-stack-resources",
            "--stack-name",
            "fleet",
        ],
    );
    let physical = |logical: &str| -> String {
        resources["StackResourceSummaries"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["LogicalResourceId"] == logical)
            .and_then(|r| r["PhysicalResourceId"].as_str())
            .unwrap_or_else(|| panic!("no {logical}: {resources}"))
            .to_owned()
    };

    // The group: sized, health from the load balancer, in the target group, instances tagged.
    let groups = aws(&moto, &["autoscaling", "describe-auto-scaling-groups"]);
    let group = &groups["AutoScalingGroups"][0];
    assert_eq!(group["HealthCheckType"], "ELB");
    assert_eq!(group["HealthCheckGracePeriod"], 900);
    assert_eq!(
        (
            group["MinSize"].as_u64(),
            group["MaxSize"].as_u64(),
            group["DesiredCapacity"].as_u64()
        ),
        (Some(2), Some(4), Some(2))
    );
    let target_group_arn = physical("ProxyTargetGroup");
    assert_eq!(
        group["TargetGroupARNs"],
        serde_json::json!([target_group_arn])
    );
    let instances = aws(&moto, &["ec2", "describe-instances"]);
    let instances: Vec<&Json> = instances["Reservations"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|r| r["Instances"].as_array().unwrap())
        .collect();
    assert_eq!(instances.len(), 2);
    for instance in &instances {
        let tags = instance["Tags"].as_array().unwrap();
        assert!(
            tags.iter()
                .any(|t| t["Key"] == "Role" && t["Value"] == "peering-proxy"),
            "the association's tag: {tags:?}"
        );
        assert!(
            subnets.iter().any(|s| instance["SubnetId"] == s.as_str()),
            "{instance}"
        );
        assert_eq!(instance["InstanceType"], "t3.small");
    }

    // The target group: TCP 443, health check HTTP /ready on the stats port, the drain.
    let target_groups = aws(
        &moto,
        &[
            "elbv2",
            "describe-target-groups",
            "--target-group-arns",
            &target_group_arn,
        ],
    );
    let target_group = &target_groups["TargetGroups"][0];
    for (key, want) in [
        ("Protocol", "TCP"),
        ("HealthCheckProtocol", "HTTP"),
        ("HealthCheckPath", "/ready"),
        ("HealthCheckPort", "8404"),
        ("TargetType", "instance"),
    ] {
        assert_eq!(target_group[key], want, "{key}: {target_group}");
    }
    assert_eq!(target_group["Port"], 443);

    // The load balancer: internal, in the subnets, behind its own security group.
    let balancers = aws(&moto, &["elbv2", "describe-load-balancers"]);
    let balancer = &balancers["LoadBalancers"][0];
    assert_eq!(balancer["Scheme"], "internal");
    let nlb_group = physical("ProxyLoadBalancerSecurityGroup");
    let instance_group = physical("ProxyInstanceSecurityGroup");
    assert_eq!(balancer["SecurityGroups"], serde_json::json!([nlb_group]));

    // The security groups: clients reach only the NLB, the NLB only the proxies.
    let groups = aws(
        &moto,
        &[
            "ec2",
            "describe-security-groups",
            "--group-ids",
            &nlb_group,
            &instance_group,
        ],
    );
    let find = |id: &str| {
        groups["SecurityGroups"]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["GroupId"] == id)
            .unwrap()
            .clone()
    };
    let nlb = find(&nlb_group);
    let mut client_ranges: Vec<&str> = nlb["IpPermissions"]
        .as_array()
        .unwrap()
        .iter()
        .inspect(|p| {
            assert_eq!(
                (p["FromPort"].as_u64(), p["ToPort"].as_u64()),
                (Some(443), Some(443)),
                "{p}"
            )
        })
        .flat_map(|p| {
            p["IpRanges"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| r["CidrIp"].as_str().unwrap())
        })
        .collect();
    client_ranges.sort_unstable();
    assert_eq!(client_ranges, ["10.0.0.0/8", "192.168.0.0/16"]);
    let proxies = find(&instance_group);
    let mut ports: Vec<u64> = Vec::new();
    for permission in proxies["IpPermissions"].as_array().unwrap() {
        assert!(
            permission["IpRanges"].as_array().is_none_or(Vec::is_empty),
            "no CIDR reaches the proxies: {permission}"
        );
        let sources: Vec<&str> = permission["UserIdGroupPairs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["GroupId"].as_str().unwrap())
            .collect();
        assert_eq!(sources, [nlb_group.as_str()], "{permission}");
        ports.push(permission["FromPort"].as_u64().unwrap());
    }
    ports.sort_unstable();
    assert_eq!(ports, [443, 8404]);

    // The launch template: IMDSv2, encrypted root, no public address, the user data.
    let versions = aws(
        &moto,
        &[
            "ec2",
            "describe-launch-template-versions",
            "--launch-template-id",
            &physical("ProxyLaunchTemplate"),
        ],
    );
    let data = &versions["LaunchTemplateVersions"][0]["LaunchTemplateData"];
    assert_eq!(
        data["ImageId"],
        image.as_str(),
        "the image the parameter names: {data}"
    );
    assert_eq!(data["MetadataOptions"]["HttpTokens"], "required", "{data}");
    assert_eq!(
        data["BlockDeviceMappings"][0]["Ebs"]["Encrypted"], true,
        "{data}"
    );
    assert_eq!(
        data["NetworkInterfaces"][0]["AssociatePublicIpAddress"], false,
        "{data}"
    );
    let user_data = base64_decode(text(data, &["UserData"]));
    assert!(user_data.starts_with("#!/bin/bash\n"), "{user_data}");
    assert!(
        user_data.contains("config='/etc/haproxy/haproxy.cfg'")
            && user_data.contains("stats_port='8404'"),
        "{user_data}"
    );

    // The alias record to the NLB.
    let records = aws(
        &moto,
        &[
            "route53",
            "list-resource-record-sets",
            "--hosted-zone-id",
            &zone_id,
        ],
    );
    let alias = records["ResourceRecordSets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["Type"] == "A")
        .unwrap_or_else(|| panic!("no alias record: {records}"));
    assert!(
        alias["Name"]
            .as_str()
            .unwrap()
            .starts_with("proxy.tools.example.internal"),
        "{alias}"
    );
    assert_eq!(
        alias["AliasTarget"]["DNSName"]
            .as_str()
            .map(|n| n.trim_end_matches('.')),
        balancer["DNSName"].as_str(),
        "{alias}"
    );
}

/// Standard base64 (the user data as EC2 holds it).
fn base64_decode(text: &str) -> String {
    let alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut bits = 0u32;
    let mut count = 0;
    let mut out = Vec::new();
    for byte in text
        .bytes()
        .filter(|b| *b != b'=' && !b.is_ascii_whitespace())
    {
        let value = alphabet.iter().position(|a| *a == byte).expect("base64") as u32;
        bits = (bits << 6) | value;
        count += 6;
        if count >= 8 {
            count -= 8;
            out.push((bits >> count) as u8);
            bits &= (1 << count) - 1;
        }
    }
    String::from_utf8(out).unwrap()
}
