//! docs/RUNBOOK.md's upgrade and roll back of a release, its AWS CLI blocks run as written
//! against moto, in a shell holding the runbook's values: the first deploy of docs/DEPLOY.md
//! (naming one parameter more), the upgrade to the next bundle, and the roll back, which the docs make the upgrade's block
//! run on the previous bundle. Each unpacks its bundle, packages it to the artifact bucket and
//! deploys it through a change set from the template's URL in that bucket.
//!
//! moto's CloudFormation cannot take a bundle's template (it expands no SAM transform), so each
//! release is a stand-in bundle, `autoproxy-<version>.tar.gz`, whose template has the
//! repository template's `String` and `Number` parameters (moto answers `UsePreviousValue` with
//! a parameter's resolved value, which it cannot take back for an SSM-typed or a list
//! parameter; CloudFormation keeps what was given) and one resource, an SSM parameter whose
//! value names the release and every parameter's value as the deploy resolved them: moto
//! updates neither a stack's outputs nor its parameters when it executes a change set, only
//! its resources, so the documented `describe-stacks` check is not run here. The next release
//! adds a parameter and drops one, as a release may.
//!
//! What each deploy resolved: the parameters the first deploy named carry over; a parameter
//! new in a release takes its default; one the deployed release lacks is gone, and when the
//! roll back brings it back it takes its default, not the value it had.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use autoproxy_tests::moto::Moto;
use autoproxy_tests::user_data;
use serde_yaml::{Mapping, Value};

use super::{VALUES, aws_first_on_path, doc_block};

const PREVIOUS: &str = "0.1.0";
const NEXT: &str = "0.2.0";
/// The artifact bucket the docs' AWS CLI commands name.
const BUCKET: &str = "my-artifacts-us-east-1";
/// The value the docs' first deploy names.
const HOSTNAME: &str = "peering-proxy.tools.example.com";
/// A parameter the first deploy names too, and the next release drops: its value, its default.
const DROPPED: (&str, &str, &str) = ("MaxRuleDropPercent", "20", "50");
/// A parameter only the next release has, and its default.
const ADDED: (&str, &str) = ("NewInTheNextRelease", "its-default");
/// The stand-in's one resource (its logical id, its name): an SSM parameter whose value names
/// the release and every parameter's value, as the deploy resolved them.
const WITNESS: (&str, &str) = ("Release", "/autoproxy/stand-in/release");

/// The stand-in template of release `version`.
fn stand_in(version: &str) -> String {
    let template = user_data::template();
    let mut parameters = Mapping::new();
    for (name, spec) in template["Parameters"].as_mapping().unwrap() {
        if matches!(spec["Type"].as_str(), Some("String" | "Number")) {
            parameters.insert(name.clone(), spec.clone());
        }
    }
    assert!(
        parameters.contains_key(DROPPED.0) && parameters.contains_key("PeeringProxyHostname"),
        "template.yaml's parameters changed: {:?}",
        parameters.keys().collect::<Vec<_>>()
    );
    if version == NEXT {
        parameters.remove(DROPPED.0);
        let added: Value =
            serde_yaml::from_str(&format!("{{Type: String, Default: {}}}", ADDED.1)).unwrap();
        parameters.insert(ADDED.0.into(), added);
    }
    // The witness: every parameter's value as CloudFormation resolved it for this deploy.
    let witness: Vec<String> = parameters
        .keys()
        .map(|name| {
            let name = name.as_str().unwrap();
            format!("{name}=${{{name}}}")
        })
        .collect();
    // One a line: values may hold spaces.
    let witness = format!("release={version}\n{}", witness.join("\n"));
    let rest = serde_json::json!({
        "Resources": {WITNESS.0: {"Type": "AWS::SSM::Parameter", "Properties": {
            "Name": WITNESS.1, "Type": "String", "Value": {"Fn::Sub": witness},
        }}},
        "Outputs": {"ReleaseVersion": {"Value": version}, "FirstRun": {"Value": "ok"}},
    });
    let rest: Value = serde_yaml::to_value(rest).unwrap();
    let mut out = Mapping::new();
    out.insert("AWSTemplateFormatVersion".into(), "2010-09-09".into());
    out.insert(
        "Description".into(),
        format!("autoproxy stand-in. Release {version}").into(),
    );
    out.insert("Parameters".into(), Value::Mapping(parameters));
    for (key, value) in rest.as_mapping().unwrap() {
        out.insert(key.clone(), value.clone());
    }
    serde_yaml::to_string(&Value::Mapping(out)).unwrap()
}

/// `autoproxy-<version>.tar.gz` in `dir`, holding `autoproxy-<version>/template.yaml`.
fn bundle(dir: &Path, version: &str) {
    let scratch = tempfile::tempdir().unwrap();
    let unpacked = scratch.path().join(format!("autoproxy-{version}"));
    std::fs::create_dir(&unpacked).unwrap();
    std::fs::write(unpacked.join("template.yaml"), stand_in(version)).unwrap();
    let status = Command::new("tar")
        .arg("-czf")
        .arg(dir.join(format!("autoproxy-{version}.tar.gz")))
        .arg("-C")
        .arg(scratch.path())
        .arg(format!("autoproxy-{version}"))
        .status()
        .unwrap();
    assert!(status.success(), "tar -czf autoproxy-{version}.tar.gz");
}

/// `script` run by bash in `dir` with the AWS CLI against moto, after the runbook's values;
/// its output.
fn run(moto: &Moto, dir: &Path, what: &str, script: &str) -> String {
    // The CLI hands CloudFormation the uploaded template's URL on its own endpoint; moto finds
    // the bucket in that URL's path only when its host is `localhost`.
    let endpoint = moto.endpoint().replace("127.0.0.1", "localhost");
    let out = Command::new("bash")
        .args(["-e", "-c", &format!("{VALUES}{script}")])
        .current_dir(dir)
        .env("PATH", aws_first_on_path())
        .envs(moto.env())
        .env("AWS_ENDPOINT_URL", endpoint)
        .output()
        .unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "{what} exited {}:\n{script}\n{said}",
        out.status
    );
    said
}

/// The witness's value, read back: the release and each parameter's value, by name.
fn deployed(moto: &Moto, dir: &Path) -> BTreeMap<String, String> {
    let said = run(
        moto,
        dir,
        "get-parameter",
        &format!(
            "aws ssm get-parameter --name {} --query Parameter.Value --output text",
            WITNESS.1
        ),
    );
    said.lines()
        .filter_map(|pair| pair.split_once('='))
        .map(|(name, value)| (name.to_owned(), value.to_owned()))
        .collect()
}

/// The stack runs `version`, with `expected` among its parameters and none of `absent`.
#[track_caller]
fn holds(
    moto: &Moto,
    dir: &Path,
    step: &str,
    version: &str,
    expected: &[(&str, &str)],
    absent: &[&str],
) {
    let parameters = deployed(moto, dir);
    assert_eq!(
        parameters.get("release").map(String::as_str),
        Some(version),
        "{step}: {parameters:?}"
    );
    for (name, value) in expected {
        assert_eq!(
            parameters.get(*name).map(String::as_str),
            Some(*value),
            "{step}: {name} in {parameters:?}"
        );
    }
    for name in absent {
        assert!(
            !parameters.contains_key(*name),
            "{step}: {name} is still a parameter: {parameters:?}"
        );
    }
}

#[test]
fn the_documented_upgrade_and_roll_back_keep_the_parameters_the_stack_was_deployed_with() {
    let moto = Moto::start();
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    bundle(dir, PREVIOUS);
    bundle(dir, NEXT);
    run(
        &moto,
        dir,
        "the bucket",
        &format!("aws s3 mb s3://{BUCKET}"),
    );

    // The first deploy, as documented, naming one more parameter (a value changed from its
    // default, which the next release drops).
    let first = doc_block(
        "docs/DEPLOY.md",
        &format!(
            "--s3-bucket {BUCKET} --region \"$region\" --capabilities CAPABILITY_IAM \\\n  \
             --parameter-overrides PeeringProxyHostname={HOSTNAME}"
        ),
    );
    assert!(
        first.contains(&format!("tar -xzf autoproxy-{PREVIOUS}.tar.gz"))
            && first.contains("aws cloudformation deploy"),
        "{first}"
    );
    let first = first.replace(
        &format!("PeeringProxyHostname={HOSTNAME}"),
        &format!(
            "PeeringProxyHostname={HOSTNAME} {}={}",
            DROPPED.0, DROPPED.1
        ),
    );
    run(&moto, dir, "the first deploy", &first);
    holds(
        &moto,
        dir,
        "first deploy",
        PREVIOUS,
        &[("PeeringProxyHostname", HOSTNAME), (DROPPED.0, DROPPED.1)],
        &[ADDED.0],
    );

    // The upgrade: the next bundle, no parameter named.
    let upgrade = doc_block(
        "docs/RUNBOOK.md",
        &format!(
            "tar -xzf autoproxy-{NEXT}.tar.gz && cd autoproxy-{NEXT}\naws cloudformation package"
        ),
    );
    assert!(!upgrade.contains("--parameter-overrides"), "{upgrade}");
    run(&moto, dir, "the upgrade", &upgrade);
    holds(
        &moto,
        dir,
        "upgrade",
        NEXT,
        &[("PeeringProxyHostname", HOSTNAME), ADDED],
        &[DROPPED.0],
    );
    // The roll back: the upgrade's block, run on the previous bundle.
    let back = upgrade.replace(NEXT, PREVIOUS);
    run(&moto, dir, "the roll back", &back);
    holds(
        &moto,
        dir,
        "roll back",
        PREVIOUS,
        &[("PeeringProxyHostname", HOSTNAME), (DROPPED.0, DROPPED.2)],
        &[ADDED.0],
    );
}
