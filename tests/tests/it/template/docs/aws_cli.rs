//! The documented `aws cloudformation deploy` commands run as written: each goes through bash
//! (with `aws` a function that writes its argv) and then through the AWS CLI's own command line
//! (`awscli.clidriver`, in the AWS CLI's venv, with the deploy command's work replaced by its
//! `--parameter-overrides` parsing), and each parameter must arrive whole, the JSON of
//! `RoutingRules` from a `rules.json` included. The two CLIs parse a value differently: SAM's
//! escaped form reaches the AWS CLI with its quotes and backslashes.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use autoproxy_tests::root;
use serde_json::Value as Json;

use super::as_written::{RULES, bash, compare, filled, meant, overrides};
use super::{DOCS, blocks, raw_commands};

/// The AWS CLI's Python (its venv beside the tools' bin directory).
fn aws_python() -> PathBuf {
    autoproxy_tests::moto::tools_bin()
        .parent()
        .map(|cache| cache.join("venv-awscli/bin/python"))
        .unwrap_or_else(|| "python3".into())
}

/// The argv of every `aws` call `line` makes, as bash hands it over.
fn aws_argv(dir: &Path, line: &str) -> Result<Vec<Vec<String>>, String> {
    let out = bash(
        dir,
        r#"aws() { printf '%s\0' "$#" "$@"; }"#,
        &filled(line),
        &[],
    )?;
    let text = String::from_utf8(out).map_err(|err| err.to_string())?;
    let mut fields = text.split('\0');
    let mut calls = Vec::new();
    while let Some(count) = fields.next().filter(|f| !f.is_empty()) {
        let count: usize = count.parse().map_err(|_| format!("argc {count:?}"))?;
        calls.push(fields.by_ref().take(count).map(str::to_owned).collect());
    }
    Ok(calls)
}

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
    let mut child = Command::new(aws_python())
        .args(["-c", PARSER])
        .env("AWS_CONFIG_FILE", "/dev/null")
        .env("AWS_SHARED_CREDENTIALS_FILE", "/dev/null")
        .env("AWS_ACCESS_KEY_ID", "testing")
        .env("AWS_SECRET_ACCESS_KEY", "testing")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run the AWS CLI's python (.ci/tools.sh)");
    let input = serde_json::to_vec(argvs).unwrap();
    child.stdin.take().unwrap().write_all(&input).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "the AWS CLI's parser: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|line| {
            let answer: Json = serde_json::from_str(line).unwrap();
            match answer.get("ok") {
                Some(ok) => Ok(ok.clone()),
                None => Err(answer["error"].as_str().unwrap_or_default().to_owned()),
            }
        })
        .collect()
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
        for line in raw_commands(block) {
            if !line.contains("aws cloudformation deploy") {
                continue;
            }
            let calls = match aws_argv(dir.path(), &line) {
                Ok(calls) => calls,
                Err(err) => {
                    problems.push(format!("{at}: {err}"));
                    continue;
                }
            };
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
    }
    let argvs: Vec<Vec<String>> = checks.iter().map(|(_, _, argv)| argv.clone()).collect();
    let mut rules = 0;
    for ((at, meant, _), got) in checks.iter().zip(aws_parses(&argvs)) {
        let found = compare("the AWS CLI", at, meant, &got);
        if found.is_empty() && meant.iter().any(|(name, _)| name == "RoutingRules") {
            rules += 1;
        }
        problems.extend(found);
    }
    (problems, rules)
}

#[test]
fn every_documented_aws_cli_deploy_hands_the_cli_each_parameter_whole() {
    let mut all = Vec::new();
    let mut rules = 0;
    for doc in DOCS {
        let text = std::fs::read_to_string(root().join(doc)).unwrap();
        let (problems, whole) = aws_problems(doc, &text);
        all.extend(problems);
        rules += whole;
    }
    assert!(all.is_empty(), "{}", all.join("\n"));
    assert!(
        rules >= 1,
        "no documented aws cloudformation deploy sets RoutingRules from rules.json"
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
    for expected in [
        "RoutingRules arrives as Some(\"\\\"[",
        "not rules.json's list",
        "the AWS CLI refuses it: exit 255: Unknown options: --resolve-s3",
    ] {
        assert!(
            found.iter().any(|f| f.contains(expected)),
            "{expected:?} not in {found:#?}"
        );
    }
    // The AWS CLI's own form arrives whole.
    let right = "```sh\naws cloudformation deploy --template-file packaged.yaml --stack-name a \\\n  \
                 --parameter-overrides \"RoutingRules=$(tr -d '\\n' < rules.json)\"\n```\n";
    assert_eq!(aws_problems("x", right), (Vec::new(), 1));
}
