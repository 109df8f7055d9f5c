//! The documented `aws cloudformation deploy` commands run as written: each goes through bash
//! (with `aws` a function that writes its argv) and then through the AWS CLI's own command line
//! (`awscli.clidriver`, in the AWS CLI's venv, with the deploy command's work replaced by its
//! `--parameter-overrides` parsing), and each parameter must arrive whole, the JSON of
//! `RoutingRules` from a `rules.json` included. The two CLIs parse a value differently: SAM's
//! escaped form reaches the AWS CLI with its quotes and backslashes.

use std::path::PathBuf;

use serde_json::{Value as Json, json};

use super::as_written::{RULES, calls_in, judged, meant, over_docs, overrides, python_answers};
use super::{blocks, reported};

/// The AWS CLI's Python (its venv beside the tools' bin directory).
pub(super) fn aws_python() -> PathBuf {
    autoproxy_tests::moto::tools_bin()
        .parent()
        .map(|cache| cache.join("venv-awscli/bin/python"))
        .unwrap_or_else(|| "python3".into())
}

/// The AWS CLI's environment in these checks: no profile, test credentials, a region.
pub(super) const AWS_CLI_ENV: [(&str, &str); 5] = [
    ("AWS_CONFIG_FILE", "/dev/null"),
    ("AWS_SHARED_CREDENTIALS_FILE", "/dev/null"),
    ("AWS_ACCESS_KEY_ID", "testing"),
    ("AWS_SECRET_ACCESS_KEY", "testing"),
    ("AWS_DEFAULT_REGION", "us-east-1"),
];

/// What the AWS CLI makes of each argv (without `aws`): the `--parameter-overrides` it would
/// send, or how it refused the command line.
fn aws_parses(argvs: &[Vec<String>]) -> Vec<Result<Json, String>> {
    const PARSER: &str = r#"
import contextlib, io, json, sys
from awscli.clidriver import create_clidriver
from awscli.customizations.cloudformation.deploy import DeployCommand
got = {}
def parsed(self, args, globals_):
    got["ok"] = self.parse_key_value_arg(args.parameter_overrides or [], "parameter-overrides")
    return 0
DeployCommand._run_main = parsed
for argv in json.load(sys.stdin):
    got.clear()
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            rc = create_clidriver().main(argv)
        except SystemExit as exit:
            rc = exit.code
    if rc == 0 and "ok" in got:
        print(json.dumps({"ok": got["ok"]}))
    else:
        print(json.dumps({"error": "exit %s: %s" % (rc, err.getvalue().strip())}))
"#;
    python_answers(&aws_python(), PARSER, &json!(argvs), &AWS_CLI_ENV)
}

/// Every problem of the `aws cloudformation deploy` commands of `doc`; and how many
/// `RoutingRules` arrived whole.
fn aws_problems(doc: &str, text: &str) -> (Vec<String>, usize) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("rules.json"), RULES).unwrap();
    let mut problems = Vec::new();
    let mut checks = Vec::new();
    for (index, block) in blocks(text).iter().enumerate() {
        let at = format!("{doc}, code block {}", index + 1);
        let (calls, failed) = calls_in(dir.path(), "aws", "aws cloudformation deploy ", block);
        problems.extend(failed.into_iter().map(|err| format!("{at}: {err}")));
        for argv in calls {
            if argv.get(..2) != Some(&["cloudformation".to_owned(), "deploy".to_owned()]) {
                continue;
            }
            let shown = format!("{at}: `aws {}`", argv.join(" "));
            let words = overrides(&argv).unwrap_or_default();
            let meant: Vec<(String, String)> = words.iter().map(|w| meant(w)).collect();
            checks.push((shown, meant, argv));
        }
    }
    let argvs: Vec<Vec<String>> = checks.iter().map(|(_, _, argv)| argv.clone()).collect();
    let (found, rules) = judged("the AWS CLI", &checks, aws_parses(&argvs));
    problems.extend(found);
    (problems, rules)
}

#[test]
fn every_documented_aws_cli_deploy_hands_the_cli_each_parameter_whole() {
    let (all, rules) = over_docs(aws_problems);
    let problems = all.join("\n");
    assert!(
        all.is_empty() && rules >= 1,
        "{problems}\nRoutingRules from rules.json arrived whole through {rules} documented aws \
         cloudformation deploy command(s), expected 1 or more"
    );
}

#[test]
fn sams_escaped_form_or_an_unknown_option_is_reported_for_the_aws_cli() {
    let doc = r#"
```sh
aws cloudformation deploy --template-file packaged.yaml --stack-name autoproxy \
  --parameter-overrides PeeringProxyHostname=p \
  "RoutingRules=\"$(tr -d '\n' < rules.json | sed 's/"/\\"/g')\""
aws cloudformation deploy --template-file packaged.yaml --stack-name autoproxy --resolve-s3
```
"#;
    let (found, rules) = aws_problems("docs/DEPLOY.md", doc);
    assert_eq!(rules, 0);
    reported(
        &found,
        &[
            "RoutingRules arrives as Some(\"\\\"[",
            "not rules.json's list",
            "the AWS CLI refuses it: exit 255: Unknown options: --resolve-s3",
        ],
    );
    // The AWS CLI's own form arrives whole.
    let right = "```sh\naws cloudformation deploy --template-file packaged.yaml --stack-name a \\\n  \
                 --parameter-overrides \"RoutingRules=$(tr -d '\\n' < rules.json)\"\n```\n";
    assert_eq!(aws_problems("x", right), (Vec::new(), 1));
}
