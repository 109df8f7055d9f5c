//! `template.yaml` sets exactly the environment variables each function reads
//! (`autoproxy::settings::GENERATE_VARIABLES` / `CONFIGURE_VARIABLES`): a setting added to the
//! code but not to the template, or left in the template after the code stopped reading it,
//! fails here instead of in a deployed function.

use std::collections::BTreeSet;

use autoproxy::settings::{CONFIGURE_VARIABLES, GENERATE_VARIABLES};
use autoproxy_tests::root;
use serde_yaml::Value;

pub(super) fn template() -> Value {
    let path = root().join("template.yaml");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|err| panic!("{path:?}: {err}"));
    // serde_yaml keeps CloudFormation's `!Ref`/`!Sub` tags as `Value::Tagged`.
    serde_yaml::from_str(&text).unwrap_or_else(|err| panic!("{path:?} is not YAML: {err}"))
}

/// The variable names a mapping at `path` declares; an absent mapping declares none.
fn keys_at(template: &Value, path: &[&str]) -> BTreeSet<String> {
    let mut node = template;
    for segment in path {
        match node.get(segment) {
            Some(next) => node = next,
            None => return BTreeSet::new(),
        }
    }
    let mapping = node
        .as_mapping()
        .unwrap_or_else(|| panic!("{} is not a mapping: {node:?}", path.join(".")));
    mapping
        .keys()
        .map(|key| {
            key.as_str()
                .unwrap_or_else(|| {
                    panic!("{}: a key that is not a string: {key:?}", path.join("."))
                })
                .to_owned()
        })
        .collect()
}

/// The function's variables merged with `Globals.Function` (SAM merges the two maps).
fn function_variables(template: &Value, function: &str) -> BTreeSet<String> {
    assert!(
        template["Resources"].get(function).is_some(),
        "template.yaml has no resource {function}"
    );
    let own = [
        "Resources",
        function,
        "Properties",
        "Environment",
        "Variables",
    ];
    let global = ["Globals", "Function", "Environment", "Variables"];
    let mut names = keys_at(template, &own);
    names.extend(keys_at(template, &global));
    names
}

/// Empty when the template sets exactly `expected`; otherwise one line per direction.
fn differences(function: &str, set: &BTreeSet<String>, expected: &[&str]) -> Vec<String> {
    let expected: BTreeSet<String> = expected.iter().map(|name| (*name).to_owned()).collect();
    let missing: Vec<&String> = expected.difference(set).collect();
    let orphans: Vec<&String> = set.difference(&expected).collect();
    let mut lines = Vec::new();
    if !missing.is_empty() {
        lines.push(format!(
            "{function}: read by the code, not set in template.yaml: {missing:?}"
        ));
    }
    if !orphans.is_empty() {
        lines.push(format!(
            "{function}: set in template.yaml, not read by the code: {orphans:?}"
        ));
    }
    lines
}

#[test]
fn each_function_gets_exactly_the_settings_its_code_reads() {
    let template = template();
    let mut problems = Vec::new();
    for (function, expected) in [
        ("GenerateFunction", GENERATE_VARIABLES),
        ("ConfigureFunction", CONFIGURE_VARIABLES),
        // Its only input is the layer's file and the resource's properties.
        ("AgentPublisherFunction", &[]),
    ] {
        let set = function_variables(&template, function);
        problems.extend(differences(function, &set, expected));
    }
    assert!(problems.is_empty(), "\n{}", problems.join("\n"));
}

/// The comparison itself must be able to fail, in both directions.
#[test]
fn a_missing_or_an_orphan_variable_is_reported() {
    let set: BTreeSet<String> = ["CONFIG_KEY", "STALE"].map(str::to_owned).into();
    let lines = differences("F", &set, &["CONFIG_KEY", "NEW"]);
    assert_eq!(
        lines,
        [
            r#"F: read by the code, not set in template.yaml: ["NEW"]"#,
            r#"F: set in template.yaml, not read by the code: ["STALE"]"#,
        ]
    );
    assert!(differences("F", &set, &["CONFIG_KEY", "STALE"]).is_empty());
}

/// A push stops at its first failure (a bad config reaches one instance); the association never
/// stops for errors, so one broken instance cannot keep the others from converging.
#[test]
fn the_association_never_stops_for_a_broken_instance() {
    let template = template();
    let association = &template["Resources"]["ApplyConfigAssociation"]["Properties"];
    assert_eq!(
        association["MaxErrors"].as_str(),
        Some("100%"),
        "{association:?}"
    );
    let push = &template["Resources"]["ConfigureFunction"]["Properties"]["Environment"]["Variables"]
        ["MAX_ERRORS"];
    assert_eq!(
        format!("{push:?}"),
        format!(
            "{:?}",
            serde_yaml::from_str::<Value>("!Ref MaxErrors").unwrap()
        )
    );
}

/// A terminated instance's record goes silent in the report and then leaves the bucket: the
/// lifecycle rule covers the records' prefix, and the report's silence limit comes from the
/// template, not only from the code's default.
#[test]
fn records_of_gone_instances_expire_and_the_silence_limit_is_a_parameter() {
    let template = template();
    let rules =
        template["Resources"]["ConfigBucket"]["Properties"]["LifecycleConfiguration"]["Rules"]
            .as_sequence()
            .expect("the config bucket has lifecycle rules");
    let rule = rules
        .iter()
        .find(|rule| rule["Id"].as_str() == Some("expire-fleet-records-of-gone-instances"))
        .unwrap_or_else(|| panic!("no rule for the fleet records: {rules:?}"));
    let prefix = format!("{:?}", rule["Prefix"]);
    assert!(prefix.contains("${Stem}.fleet/"), "{prefix}");
    let days = rule["ExpirationInDays"].as_u64().expect("ExpirationInDays");
    assert!((1..=30).contains(&days), "{days}");
    let silence = &template["Resources"]["ConfigureFunction"]["Properties"]["Environment"]["Variables"]
        ["FLEET_SILENT_AFTER_MINUTES"];
    assert_eq!(
        format!("{silence:?}"),
        format!(
            "{:?}",
            serde_yaml::from_str::<Value>("!Ref FleetSilentAfterMinutes").unwrap()
        )
    );
    // A record must go silent long before it expires, or an instance vanishes unreported.
    let default = template["Parameters"]["FleetSilentAfterMinutes"]["Default"]
        .as_u64()
        .expect("a numeric default");
    assert!(
        default * 60 < days * 86_400,
        "{default} minutes vs {days} days"
    );
}

/// Bucket write is fleet control: the bucket policy denies writing or deleting the config, the
/// manifest and the template to every principal but the generator's role and the optional
/// break-glass role. moto does not evaluate bucket policies, so this is checked here, on the
/// template itself.
#[test]
fn only_the_generator_may_write_the_config_the_manifest_and_the_template() {
    let template = template();
    let statements =
        template["Resources"]["ConfigBucketPolicy"]["Properties"]["PolicyDocument"]["Statement"]
            .as_sequence()
            .expect("the config bucket has a policy");
    let deny = statements
        .iter()
        .find(|s| s["Sid"].as_str() == Some("OnlyTheGeneratorWritesTheConfig"))
        .unwrap_or_else(|| panic!("no write-protection statement: {statements:?}"));
    assert_eq!(deny["Effect"].as_str(), Some("Deny"));
    assert_eq!(deny["Principal"].as_str(), Some("*"));
    let actions: Vec<&str> = deny["Action"]
        .as_sequence()
        .expect("a list of actions")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    for needed in ["s3:PutObject", "s3:DeleteObject", "s3:DeleteObjectVersion"] {
        assert!(
            actions.contains(&needed),
            "{needed} not denied: {actions:?}"
        );
    }
    let resources = format!("{:?}", deny["Resource"]);
    for key in ["${ConfigKey}", "${Stem}.manifest.json", "${TemplateKey}"] {
        assert!(resources.contains(key), "{key} not protected: {resources}");
    }
    let exempt = format!(
        "{:?}",
        deny["Condition"]["ArnNotEquals"]["aws:PrincipalArn"]
    );
    assert!(exempt.contains("GenerateFunctionRole.Arn"), "{exempt}");
    assert!(exempt.contains("BreakGlassRoleArn"), "{exempt}");
    assert!(
        !exempt.contains("ConfigureFunctionRole"),
        "the configure function never writes the config: {exempt}"
    );
}

/// A statement as `(actions, resources)`, each sorted: what IAM grants, whatever the spelling.
fn grant(statement: &serde_json::Value) -> (Vec<String>, Vec<String>) {
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

/// What the IAM-enforcing test (least_privilege) cannot check, checked here on the template as
/// a stack deploys it: the Route53 grants (moto denies every Route53 call under enforcement),
/// the SSM resources and the tag condition (moto checks SSM calls against `*` and evaluates no
/// condition), `s3:ListBucket` (moto answers 404 without it), the role assumptions and the
/// member account's read role.
#[test]
fn what_moto_cannot_check_is_exactly_this() {
    use super::least_privilege::{stack, statements_in};
    let template = template();
    let mut stack = stack(&template);
    stack.conditions.insert("HasProxyVpcs".into(), true);
    stack.conditions.insert("HasAccountRoles".into(), true);
    let role = "arn:aws:iam::111111111111:role/autoproxy-route53-read";
    stack
        .refs
        .insert("AccountRoleArns".into(), serde_json::json!([role]));
    let generate = statements_in(&template, "GenerateFunction", &stack);
    let configure = statements_in(&template, "ConfigureFunction", &stack);
    let publisher = statements_in(&template, "AgentPublisherFunction", &stack);
    let strings = |items: &[&str]| items.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    for (statements, sid, actions, resources) in [
        (
            &generate,
            "ListHostedZones",
            &["route53:ListHostedZones"][..],
            &["*"][..],
        ),
        (
            &generate,
            "ReadHostedZones",
            &["route53:GetHostedZone", "route53:ListResourceRecordSets"],
            &["arn:aws:route53:::hostedzone/*"],
        ),
        (
            &generate,
            "ListZonesOfProxyVpcs",
            &["ec2:DescribeVpcs", "route53:ListHostedZonesByVPC"],
            &["*"],
        ),
        (
            &generate,
            "AssumeMemberAccountRoles",
            &["sts:AssumeRole"],
            &[role],
        ),
        (
            &generate,
            "ListConfigBucket",
            &["s3:ListBucket"],
            &["arn:aws:s3:::autoproxy-123456789012-0f1e2d3c"],
        ),
        (
            &publisher,
            "ListConfigBucket",
            &["s3:ListBucket"],
            &["arn:aws:s3:::autoproxy-123456789012-0f1e2d3c"],
        ),
        // moto checks these two, but only that they suffice: here, that they reach no further.
        (
            &publisher,
            "FindPublishedAgent",
            &["s3:GetObject"],
            &["arn:aws:s3:::autoproxy-123456789012-0f1e2d3c/autoproxy-agent/*"],
        ),
        (
            &publisher,
            "PublishAgent",
            &["s3:PutObject"],
            &["arn:aws:s3:::autoproxy-123456789012-0f1e2d3c/autoproxy-agent/*"],
        ),
        (
            &configure,
            "SendApplyDocument",
            &["ssm:SendCommand"],
            &["arn:aws:ssm:us-east-1:123456789012:document/autoproxy-ApplyConfigDocument-0TEST"],
        ),
        (
            &configure,
            "SendToTaggedInstances",
            &["ssm:SendCommand"],
            &["arn:aws:ec2:us-east-1:123456789012:instance/*"],
        ),
        // No resource-level permissions: the one action, on `*`.
        (
            &configure,
            "ListFleetInstances",
            &["ssm:DescribeInstanceInformation"],
            &["*"],
        ),
    ] {
        assert_eq!(
            grant(by_sid(statements, sid)),
            (strings(actions), strings(resources)),
            "{sid}"
        );
    }
    assert_eq!(
        by_sid(&configure, "SendToTaggedInstances")["Condition"],
        serde_json::json!({"StringEquals": {"ssm:resourceTag/Role": "peering-proxy"}})
    );
    assert_eq!(
        by_sid(&configure, "ListFleetRecords")["Condition"],
        serde_json::json!({"StringLike": {"s3:prefix": "haproxy/haproxy.fleet/*"}})
    );
    // Without the settings, neither optional grant exists.
    let plain = super::least_privilege::stack(&template);
    let sids: Vec<String> = statements_in(&template, "GenerateFunction", &plain)
        .iter()
        .filter_map(|s| s["Sid"].as_str().map(str::to_owned))
        .collect();
    assert!(
        !sids
            .iter()
            .any(|s| s == "ListZonesOfProxyVpcs" || s == "AssumeMemberAccountRoles")
    );

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
        ]
    );
    let trust = &role["AssumeRolePolicyDocument"]["Statement"];
    assert_eq!(trust.as_array().map(Vec::len), Some(1), "{trust:#?}");
    assert_eq!(trust[0]["Principal"], serde_json::json!({"AWS": generator}));
}

/// The apply document's parameters a caller of `ssm:SendCommand` may choose: the config
/// object to install. Every other one is fixed when the stack is deployed.
const CALLER_CHOSEN: [&str; 3] = ["ConfigBucket", "ConfigKey", "ConfigVersion"];

/// The template parameter `value` names, if it is `!Ref <name>` (or `{Ref: <name>}`).
fn ref_target(value: &Value) -> Option<&str> {
    match value {
        Value::Tagged(tagged) if tagged.tag == "Ref" => tagged.value.as_str(),
        Value::Mapping(mapping) if mapping.len() == 1 => mapping.get("Ref")?.as_str(),
        _ => None,
    }
}

/// `!GetAtt Resource.Attribute` (or `{Fn::GetAtt: [Resource, Attribute]}`) as `Resource.Attribute`.
fn get_att_target(value: &Value) -> Option<String> {
    let target = match value {
        Value::Tagged(tagged) if tagged.tag == "GetAtt" => &tagged.value,
        Value::Mapping(mapping) if mapping.len() == 1 => mapping.get("Fn::GetAtt")?,
        _ => return None,
    };
    match target {
        Value::String(name) => Some(name.clone()),
        Value::Sequence(parts) => Some(
            parts
                .iter()
                .map(Value::as_str)
                .collect::<Option<Vec<_>>>()?
                .join("."),
        ),
        _ => None,
    }
}

/// One line per apply-document parameter, outside `CALLER_CHOSEN`, that a caller could set
/// to something the deployer did not choose: its `allowedValues` must be exactly one
/// `!Ref` of a template parameter that constrains its value, or one `!GetAtt` of a resource of
/// the stack (what the stack published: the agent's sha256), and its `default` the same.
fn free_parameters(template: &Value) -> Vec<String> {
    let parameters =
        template["Resources"]["ApplyConfigDocument"]["Properties"]["Content"]["parameters"]
            .as_mapping()
            .expect("the apply document declares parameters");
    let mut problems = Vec::new();
    for (name, spec) in parameters {
        let name = name.as_str().expect("parameter names are strings");
        if CALLER_CHOSEN.contains(&name) {
            continue;
        }
        let only = match spec.get("allowedValues").and_then(Value::as_sequence) {
            Some(values) if values.len() == 1 => Some(&values[0]),
            _ => None,
        };
        if let Some(attribute) = only.and_then(get_att_target) {
            let resource = attribute.split('.').next().unwrap_or_default();
            if template["Resources"].get(resource).is_none() {
                problems.push(format!(
                    "{name}: allowedValues names {attribute}, not an attribute of a resource of the stack"
                ));
            }
            if spec.get("default").and_then(get_att_target).as_deref() != Some(attribute.as_str()) {
                problems.push(format!(
                    "{name}: default is not !GetAtt {attribute}: {:?}",
                    spec.get("default")
                ));
            }
            continue;
        }
        let Some(bound) = only.and_then(ref_target) else {
            problems.push(format!(
                "{name}: allowedValues is not [!Ref <template parameter>] or [!GetAtt <resource>.<attribute>]: {:?}",
                spec.get("allowedValues")
            ));
            continue;
        };
        match template["Parameters"].get(bound) {
            None => problems.push(format!(
                "{name}: allowedValues names {bound}, not a template parameter"
            )),
            Some(declared)
                if declared.get("AllowedPattern").is_none()
                    && declared.get("AllowedValues").is_none() =>
            {
                problems.push(format!(
                    "{name}: template parameter {bound} has no AllowedPattern or AllowedValues"
                ));
            }
            Some(_) => {}
        }
        if spec.get("default").and_then(ref_target) != Some(bound) {
            problems.push(format!(
                "{name}: default is not !Ref {bound}: {:?}",
                spec.get("default")
            ));
        }
    }
    problems
}

/// Whoever may call `ssm:SendCommand` with the apply document chooses the config object and
/// nothing else: the file it writes and the command it runs as root are the deployer's.
#[test]
fn every_apply_document_parameter_but_the_config_object_is_fixed_at_deploy_time() {
    let template = template();
    let problems = free_parameters(&template);
    assert!(problems.is_empty(), "\n{}", problems.join("\n"));
    // The configure function and the association pass exactly the caller-chosen ones.
    let association = &template["Resources"]["ApplyConfigAssociation"]["Properties"]["Parameters"];
    assert_eq!(
        keys_at(association, &[]),
        CALLER_CHOSEN.map(str::to_owned).into()
    );
}

/// The check itself must be able to fail: a free parameter, one bound to nothing, one whose
/// default escapes the binding.
#[test]
fn a_free_apply_document_parameter_is_reported() {
    let template: Value = serde_yaml::from_str(
        r"
Parameters:
  ProxyThing: {Type: String, Default: a, AllowedPattern: '^[a-z]+$'}
  Loose: {Type: String, Default: a}
Resources:
  Published: {Type: Custom::Thing}
  ApplyConfigDocument:
    Properties:
      Content:
        parameters:
          ConfigBucket: {type: String, allowedPattern: '^.*$'}
          Fixed: {type: String, default: !Ref ProxyThing, allowedValues: [!Ref ProxyThing]}
          Free: {type: String, default: x, allowedPattern: '^.*$'}
          Unbound: {type: String, default: !Ref Loose, allowedValues: [!Ref Loose]}
          Escapes: {type: String, default: other, allowedValues: [!Ref ProxyThing]}
          Missing: {type: String, default: !Ref Nowhere, allowedValues: [!Ref Nowhere]}
          Pinned: {type: String, default: !GetAtt Published.Sha, allowedValues: [!GetAtt Published.Sha]}
          Unpinned: {type: String, default: x, allowedValues: [!GetAtt Published.Sha]}
          Elsewhere: {type: String, default: !GetAtt Gone.Sha, allowedValues: [!GetAtt Gone.Sha]}
",
    )
    .unwrap();
    let problems = free_parameters(&template);
    let names: Vec<&str> = problems
        .iter()
        .map(|line| line.split(':').next().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "Free",
            "Unbound",
            "Escapes",
            "Missing",
            "Unpinned",
            "Elsewhere"
        ],
        "{problems:#?}"
    );
}

/// The proxy instances' policy, resolved as the stack deploys it: each statement as
/// `(Sid, actions, resources)`.
fn instance_grants() -> Vec<(String, Vec<String>, Vec<String>)> {
    let template = template();
    let mut stack = super::least_privilege::stack(&template);
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
/// nothing else of the bucket beyond the config: exactly one statement more than before.
#[test]
fn the_instances_may_read_the_published_agents_and_no_other_key() {
    let grants = instance_grants();
    let sids: Vec<&str> = grants.iter().map(|(sid, _, _)| sid.as_str()).collect();
    assert_eq!(
        sids,
        [
            "ReadConfig",
            "WriteFleetRecord",
            "ReadAgent",
            "ListAgent",
            "WriteCommandOutput",
            "FindCommandLogGroup"
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
    let statements =
        &template["Resources"]["ProxyInstancePolicy"]["Properties"]["PolicyDocument"]["Statement"];
    let condition = statements
        .as_sequence()
        .unwrap()
        .iter()
        .find(|s| s["Sid"].as_str() == Some("ListAgent"))
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
}

/// The bucket policy's write protection names exact keys (the config, the manifest, the
/// template): it never covers `autoproxy-agent/`, which only the publisher's role writes.
#[test]
fn the_bucket_policy_leaves_the_agent_keys_to_the_publisher() {
    let template = template();
    let mut stack = super::least_privilege::stack(&template);
    stack.attributes.insert(
        "GenerateFunctionRole.Arn".into(),
        "arn:aws:iam::123456789012:role/autoproxy-GenerateFunctionRole-0TEST".into(),
    );
    let policy = stack
        .resolve(&template["Resources"]["ConfigBucketPolicy"]["Properties"]["PolicyDocument"])
        .unwrap();
    let deny = policy["Statement"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["Sid"] == "OnlyTheGeneratorWritesTheConfig")
        .expect("the write protection");
    let (_, resources) = grant(deny);
    assert!(!resources.is_empty());
    for resource in resources {
        assert!(
            !resource.contains('*') && !resource.contains("/autoproxy-agent/"),
            "the deny reaches the agent keys: {resource}"
        );
    }
}

/// The order a deploy runs in. The bucket's notification depends on the configure function,
/// which names the apply document, which pins `AgentBinary`'s attributes: on a stack's first
/// create the bucket comes after `AgentBinary`, which therefore names the bucket by its computed
/// name and may find it missing. `AgentBinaryUpload` references the bucket (so it runs after it)
/// and the pinned sha256; the association, whose first run downloads the agent, waits for it.
#[test]
fn the_agent_is_in_the_bucket_before_an_instance_downloads_it() {
    let template = template();
    let resources = &template["Resources"];
    let yaml = |text: &str| format!("{:?}", serde_yaml::from_str::<Value>(text).unwrap());
    let show = |value: &Value| format!("{value:?}");

    let binary = &resources["AgentBinary"]["Properties"];
    assert_eq!(
        show(&binary["BucketName"]),
        show(&resources["ConfigBucket"]["Properties"]["BucketName"]),
        "AgentBinary must name the bucket exactly as the bucket names itself"
    );
    assert_eq!(binary["WhenBucketMissing"].as_str(), Some("Skip"));
    assert_eq!(show(&binary["Layer"]), yaml("!Ref AgentLayer"));

    let upload = &resources["AgentBinaryUpload"]["Properties"];
    assert_eq!(show(&upload["BucketName"]), yaml("!Ref ConfigBucket"));
    assert_eq!(show(&upload["Sha256"]), yaml("!GetAtt AgentBinary.Sha256"));
    assert_eq!(show(&upload["Layer"]), yaml("!Ref AgentLayer"));
    assert!(upload.get("WhenBucketMissing").is_none(), "{upload:?}");
    for resource in ["AgentBinary", "AgentBinaryUpload"] {
        assert_eq!(
            resources[resource]["Type"].as_str(),
            Some("Custom::AutoproxyAgent")
        );
        assert_eq!(
            show(&resources[resource]["Properties"]["ServiceToken"]),
            yaml("!GetAtt AgentPublisherFunction.Arn")
        );
    }
    assert_eq!(
        resources["ApplyConfigAssociation"]["DependsOn"].as_str(),
        Some("AgentBinaryUpload")
    );
    // The function reads the layer; nothing else has it.
    let publisher = &resources["AgentPublisherFunction"]["Properties"];
    assert_eq!(show(&publisher["Layers"]), yaml("[!Ref AgentLayer]"));
    let layer = &resources["AgentLayer"];
    assert_eq!(layer["Metadata"]["BuildMethod"].as_str(), Some("makefile"));
}
