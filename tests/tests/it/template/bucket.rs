//! The config bucket as the template declares it: who may write it, how long fleet records
//! live, and the order a deploy fills it in.

use serde_yaml::Value;

use super::grants::grant;
use super::stack::stack;
use super::template;

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
    let silence = &template["Resources"]["FleetReportFunction"]["Properties"]["Environment"]["Variables"]
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
    for role in ["ConfigureFunctionRole", "FleetReportFunctionRole"] {
        assert!(
            !exempt.contains(role),
            "the configure code never writes the config: {exempt}"
        );
    }
}

/// The bucket policy's write protection names exact keys (the config, the manifest, the
/// template): it never covers `autoproxy-agent/`, which only the publisher's role writes.
#[test]
fn the_bucket_policy_leaves_the_agent_keys_to_the_publisher() {
    let template = template();
    let mut stack = stack(&template);
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
