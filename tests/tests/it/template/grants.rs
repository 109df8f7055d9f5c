//! What the IAM-enforcing test (least_privilege) cannot check, checked on the template as a
//! stack deploys it: the Route53 grants, the SSM resources and the tag condition, the bucket
//! listings, the role assumptions, the member account's read role and the instances' policy.

use serde_yaml::Value;

use super::stack::{stack, statements_in};
use super::template;
use autoproxy_tests::root;

/// The member account role the generator may assume in the deployment checked here.
const MEMBER_ROLE: &str = "arn:aws:iam::111111111111:role/autoproxy-route53-read";

/// The bucket the template names in that deployment.
const BUCKET_ARN: &str = "arn:aws:s3:::autoproxy-123456789012-0f1e2d3c";

/// Each grant moto cannot check (or checks only as sufficient), exactly: (function, Sid,
/// actions, resources).
const UNCHECKED: &[(&str, &str, &[&str], &[&str])] = &[
    (
        "GenerateFunction",
        "ListHostedZones",
        &["route53:ListHostedZones"],
        &["*"],
    ),
    (
        "GenerateFunction",
        "ReadHostedZones",
        &["route53:GetHostedZone", "route53:ListResourceRecordSets"],
        &["arn:aws:route53:::hostedzone/*"],
    ),
    (
        "GenerateFunction",
        "ListZonesOfProxyVpcs",
        &["ec2:DescribeVpcs", "route53:ListHostedZonesByVPC"],
        &["*"],
    ),
    (
        "GenerateFunction",
        "AssumeMemberAccountRoles",
        &["sts:AssumeRole"],
        &[MEMBER_ROLE],
    ),
    (
        "GenerateFunction",
        "ListConfigBucket",
        &["s3:ListBucket"],
        &[BUCKET_ARN],
    ),
    // The member role by name in any listed account (moto lets any role be assumed).
    (
        "GenerateFunction",
        "AssumeMemberRoles",
        &["sts:AssumeRole"],
        &["arn:aws:iam::*:role/autoproxy-route53-read"],
    ),
    (
        "AgentPublisherFunction",
        "ListConfigBucket",
        &["s3:ListBucket"],
        &[BUCKET_ARN],
    ),
    // moto checks these two, but only that they suffice: here, that they reach no further.
    (
        "AgentPublisherFunction",
        "FindPublishedAgent",
        &["s3:GetObject"],
        &["arn:aws:s3:::autoproxy-123456789012-0f1e2d3c/autoproxy-agent/*"],
    ),
    (
        "AgentPublisherFunction",
        "PublishAgent",
        &["s3:PutObject"],
        &["arn:aws:s3:::autoproxy-123456789012-0f1e2d3c/autoproxy-agent/*"],
    ),
    (
        "ConfigureFunction",
        "SendApplyDocument",
        &["ssm:SendCommand"],
        &["arn:aws:ssm:us-east-1:123456789012:document/autoproxy-ApplyConfigDocument-0TEST"],
    ),
    (
        "ConfigureFunction",
        "SendToTaggedInstances",
        &["ssm:SendCommand"],
        &["arn:aws:ec2:us-east-1:123456789012:instance/*"],
    ),
    // No resource-level permissions: the one action, on `*`.
    (
        "FleetReportFunction",
        "ListFleetInstances",
        &["ssm:DescribeInstanceInformation"],
        &["*"],
    ),
];

/// A statement as `(actions, resources)`, each sorted: what IAM grants, whatever the spelling.
pub(super) fn grant(statement: &serde_json::Value) -> (Vec<String>, Vec<String>) {
    let list = |value: &serde_json::Value| -> Vec<String> {
        let mut items: Vec<String> = match value {
            serde_json::Value::Array(items) => items
                .iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect(),
            serde_json::Value::String(item) => vec![item.clone()],
            _ => Vec::new(),
        };
        items.sort();
        items
    };
    (list(&statement["Action"]), list(&statement["Resource"]))
}

fn by_sid<'a>(statements: &'a [serde_json::Value], sid: &str) -> &'a serde_json::Value {
    statements
        .iter()
        .find(|s| s["Sid"].as_str() == Some(sid))
        .unwrap_or_else(|| panic!("no statement {sid}: {statements:#?}"))
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

/// What the IAM-enforcing test (least_privilege) cannot check, checked here on the template as
/// a stack deploys it: the Route53 grants (moto denies every Route53 call under enforcement),
/// the SSM resources and the tag condition (moto checks SSM calls against `*` and evaluates no
/// condition), `s3:ListBucket` (moto answers 404 without it), the role assumptions and the
/// member account's read role.
#[test]
fn what_moto_cannot_check_is_exactly_this() {
    let template = template();
    let mut stack = stack(&template);
    stack.conditions.insert("HasProxyVpcs".into(), true);
    stack.conditions.insert("HasAccountRoles".into(), true);
    stack
        .refs
        .insert("AccountRoleArns".into(), serde_json::json!([MEMBER_ROLE]));
    stack.conditions.insert("ListsMemberAccounts".into(), true);
    stack.refs.insert(
        "MemberRoleName".into(),
        serde_json::json!("autoproxy-route53-read"),
    );
    for (function, sid, actions, resources) in UNCHECKED {
        let statements = statements_in(&template, function, &stack);
        assert_eq!(
            grant(by_sid(&statements, sid)),
            (strings(actions), strings(resources)),
            "{sid}"
        );
    }
    let configure = statements_in(&template, "ConfigureFunction", &stack);
    assert_eq!(
        by_sid(&configure, "SendToTaggedInstances")["Condition"],
        serde_json::json!({"StringEquals": {"ssm:resourceTag/Role": "peering-proxy"}})
    );
    let report = statements_in(&template, "FleetReportFunction", &stack);
    assert_eq!(
        by_sid(&report, "ListFleetRecords")["Condition"],
        serde_json::json!({"StringLike": {"s3:prefix": "haproxy/haproxy.fleet/*"}})
    );
    // Without the settings, neither optional grant exists.
    let plain = super::stack::stack(&template);
    let sids: Vec<String> = statements_in(&template, "GenerateFunction", &plain)
        .iter()
        .filter_map(|s| s["Sid"].as_str().map(str::to_owned))
        .collect();
    assert!(!sids.iter().any(|s| {
        [
            "ListZonesOfProxyVpcs",
            "AssumeMemberAccountRoles",
            "AssumeMemberRoles",
            "ListMemberAccounts",
        ]
        .contains(&s.as_str())
    }));
    assert_member_role_only_reads_route53();
}

/// The member account's role: only reads Route53 and its VPCs' ranges, only for the
/// generator's role.
fn assert_member_role_only_reads_route53() {
    // The member account's role: only reads Route53, only for the generator's role.
    let text = std::fs::read_to_string(root().join("docs/member-account.yaml")).unwrap();
    let member: Value = serde_yaml::from_str(&text).unwrap();
    let mut member_stack = autoproxy_tests::cfn::Stack::new(
        &member,
        "111111111111",
        "us-east-1",
        "arn:aws:cloudformation:us-east-1:111111111111:stack/m/1",
    );
    let generator = "arn:aws:iam::123456789012:role/autoproxy-GenerateFunctionRole-X";
    member_stack
        .refs
        .insert("GeneratorRoleArn".into(), serde_json::json!(generator));
    let role = member_stack
        .resolve(&member["Resources"]["Route53ReadRole"]["Properties"])
        .unwrap();
    let policies = role["Policies"].as_array().unwrap();
    assert_eq!(policies.len(), 1, "{policies:#?}");
    let granted: Vec<(Vec<String>, Vec<String>)> = policies[0]["PolicyDocument"]["Statement"]
        .as_array()
        .unwrap()
        .iter()
        .map(grant)
        .collect();
    assert_eq!(
        granted,
        [
            (strings(&["route53:ListHostedZones"]), strings(&["*"])),
            (
                strings(&["route53:GetHostedZone", "route53:ListResourceRecordSets"]),
                strings(&["arn:aws:route53:::hostedzone/*"])
            ),
            (
                strings(&["ec2:DescribeRegions", "ec2:DescribeVpcs"]),
                strings(&["*"])
            ),
        ]
    );
    let trust = &role["AssumeRolePolicyDocument"]["Statement"];
    assert_eq!(trust.as_array().map(Vec::len), Some(1), "{trust:#?}");
    assert_eq!(trust[0]["Principal"], serde_json::json!({"AWS": generator}));
}

/// The proxy instances' policy, resolved as the stack deploys it: each statement as
/// `(Sid, actions, resources)`.
fn instance_grants() -> Vec<(String, Vec<String>, Vec<String>)> {
    let template = template();
    let mut stack = stack(&template);
    stack.attributes.insert(
        "CommandLogGroup.Arn".into(),
        "arn:aws:logs:us-east-1:123456789012:log-group:autoproxy-CommandLogGroup-0TEST:*".into(),
    );
    let policy = stack
        .resolve(&template["Resources"]["ProxyInstancePolicy"]["Properties"]["PolicyDocument"])
        .unwrap();
    policy["Statement"]
        .as_array()
        .expect("statements")
        .iter()
        .map(|statement| {
            let (actions, resources) = grant(statement);
            (
                statement["Sid"].as_str().unwrap_or("(no Sid)").to_owned(),
                actions,
                resources,
            )
        })
        .collect()
}

/// The instances read the agents the stack published, by their content-addressed keys, and
/// nothing else of the bucket beyond the config and the fleet report (the other proxies'
/// addresses).
#[test]
fn the_instances_may_read_the_published_agents_and_no_other_key() {
    let grants = instance_grants();
    let sids: Vec<&str> = grants.iter().map(|(sid, _, _)| sid.as_str()).collect();
    assert_eq!(
        sids,
        [
            "ReadConfig",
            "WriteFleetRecord",
            "ReadFleetReport",
            "ReadAgent",
            "ListAgent",
            "WriteCommandOutput",
            "FindCommandLogGroup",
            "PublishMetrics"
        ]
    );
    let agent = grants
        .iter()
        .find(|(sid, _, _)| sid == "ReadAgent")
        .unwrap();
    assert_eq!(agent.1, ["s3:GetObject"]);
    assert_eq!(
        agent.2,
        ["arn:aws:s3:::autoproxy-123456789012-0f1e2d3c/autoproxy-agent/*"]
    );
    let list = grants
        .iter()
        .find(|(sid, _, _)| sid == "ListAgent")
        .unwrap();
    assert_eq!(list.1, ["s3:ListBucket"]);
    assert_eq!(list.2, ["arn:aws:s3:::autoproxy-123456789012-0f1e2d3c"]);
    let template = template();
    let condition =
        autoproxy_tests::cfn::policy_statement(&template, "ProxyInstancePolicy", "ListAgent")
            .unwrap()["Condition"]["StringLike"]["s3:prefix"]
            .as_str()
            .map(str::to_owned);
    assert_eq!(condition.as_deref(), Some("autoproxy-agent/*"));
    let config = grants
        .iter()
        .find(|(sid, _, _)| sid == "ReadConfig")
        .unwrap();
    assert_eq!(
        config.2,
        ["arn:aws:s3:::autoproxy-123456789012-0f1e2d3c/haproxy/haproxy.cfg"]
    );
    let report = grants
        .iter()
        .find(|(sid, _, _)| sid == "ReadFleetReport")
        .unwrap();
    assert_eq!(report.1, ["s3:GetObject"]);
    assert_eq!(
        report.2,
        ["arn:aws:s3:::autoproxy-123456789012-0f1e2d3c/haproxy/haproxy.fleet.json"]
    );
}

/// The instances may publish metrics, and only in the namespace the address service publishes
/// to: PutMetricData names no resource, so the `cloudwatch:namespace` condition is the whole
/// limit (moto evaluates no conditions; least_privilege proves the grant is needed).
#[test]
fn the_instances_may_publish_metrics_only_in_the_agents_namespace() {
    let grants = instance_grants();
    let cloudwatch: Vec<&(String, Vec<String>, Vec<String>)> = grants
        .iter()
        .filter(|(_, actions, _)| actions.iter().any(|a| a.starts_with("cloudwatch:")))
        .collect();
    assert_eq!(
        cloudwatch,
        [&(
            "PublishMetrics".to_owned(),
            vec!["cloudwatch:PutMetricData".to_owned()],
            vec!["*".to_owned()]
        )]
    );
    let template = template();
    let publish =
        autoproxy_tests::cfn::policy_statement(&template, "ProxyInstancePolicy", "PublishMetrics")
            .unwrap();
    let namespace = autoproxy_agent::resolve::observe::cloudwatch::NAMESPACE;
    let expected: Value = serde_yaml::from_str(&format!(
        "StringEquals:\n  cloudwatch:namespace: {namespace}\n"
    ))
    .unwrap();
    assert_eq!(publish["Condition"], expected);
}

/// An instance writes its own fleet record and no other: the statement's one resource is the
/// record under `${ec2:SourceInstanceARN}` (which IAM sets to the ARN of the instance whose
/// role credentials sign the request), and that is exactly the key the agent writes, with the
/// ARN prefix the apply document fixes at deploy time.
#[test]
fn an_instance_may_write_only_its_own_fleet_record() {
    let template = template();
    let grants = instance_grants();
    let (_, actions, resources) = grants
        .iter()
        .find(|(sid, _, _)| sid == "WriteFleetRecord")
        .expect("a WriteFleetRecord statement");
    assert_eq!(actions, &["s3:PutObject"]);
    let [resource] = &resources[..] else {
        panic!("one resource: {resources:?}");
    };
    let own = |arn: &str| resource.replace("${ec2:SourceInstanceARN}", arn);
    assert!(
        resource.contains("${ec2:SourceInstanceARN}") && !resource.contains('*'),
        "an instance may write keys beyond its own record: {resource}"
    );
    // The document's fixed prefix, as the stack deploys it, and the agent's key with it.
    let document = &template["Resources"]["ApplyConfigDocument"]["Properties"]["Content"];
    let prefix = stack(&template)
        .resolve(&document["parameters"]["InstanceArnPrefix"]["default"])
        .unwrap();
    let prefix = prefix.as_str().expect("the ARN prefix");
    assert!(autoproxy::fleet::is_instance_arn_prefix(prefix), "{prefix}");
    let arn = format!("{prefix}i-0abc");
    let key = autoproxy::fleet::record_key("haproxy/haproxy.cfg", prefix, "i-0abc");
    assert_eq!(own(&arn), format!("{BUCKET_ARN}/{key}"));
    // Another instance's record is another resource.
    let other = autoproxy::fleet::record_key("haproxy/haproxy.cfg", prefix, "i-0def");
    assert_ne!(own(&arn), format!("{BUCKET_ARN}/{other}"));
}
