//! Every `aws` command the docs tell an operator to run works with the AWS CLI v1 (the one the
//! tests install) and v2 as written: each `sh` block parses with `dash` (what `sh` is on
//! Debian and Ubuntu), and each `aws` line that needs nothing the block computes (no `$` but
//! the variables the docs set: the region, the stack's name, the names saved for removal) goes
//! through the AWS CLI's own command line (`awscli.clidriver`) up to the API call it would
//! make, which is recorded instead of sent. A Lambda payload must be JSON read from a file
//! (`fileb://`): v2 reads a literal `--payload` as base64, and `--cli-binary-format`, which
//! changes that, is v2's alone ("Unknown options" in v1).

use std::path::Path;
use std::process::Command;

use autoproxy_tests::root;
use serde_json::{Value as Json, json};

use super::as_written::{argvs_written, bash, filled, python_answers};
use super::aws_cli::{AWS_CLI_ENV, aws_python};
use super::{Block, DOCS, blocks, raw_commands, reported};

/// What the AWS CLI makes of each `{"dir", "argv"}`: the API operation it would call (its
/// payload, if any, checked as JSON), or how it refused.
fn aws_calls(inputs: &[Json]) -> Vec<Result<Json, String>> {
    const PARSER: &str = r#"
import contextlib, io, json, os, sys
from awscli.clidriver import create_clidriver
import botocore.client
got = {}
def recorded(self, operation, params):
    got["op"] = operation
    got["params"] = params
    raise SystemExit(0)
botocore.client.BaseClient._make_api_call = recorded
driver = create_clidriver()
for item in json.load(sys.stdin):
    got.clear()
    os.chdir(item["dir"])
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            rc = driver.main(item["argv"])
        except SystemExit as exit:
            rc = exit.code
    said = [line for line in err.getvalue().splitlines() if line.strip()]
    if "op" not in got:
        print(json.dumps({"error": "exit %s: %s" % (rc, said[-1] if said else "nothing said")}))
        continue
    payload = got["params"].get("Payload")
    try:
        json.loads(payload) if payload is not None else None
    except ValueError as bad:
        print(json.dumps({"error": "its payload %r is not JSON: %s" % (payload, bad)}))
        continue
    print(json.dumps({"ok": got["op"]}))
"#;
    python_answers(&aws_python(), PARSER, &json!(inputs), &AWS_CLI_ENV)
}

/// The lines of `block` this check runs: the `aws` commands that need nothing the block
/// computes, and the `echo`/`printf` lines that write their payload files. `aws cloudformation
/// package` and `deploy` read the bundle's files: `aws_cli` checks them.
fn runnable(block: &Block) -> Vec<String> {
    raw_commands(block)
        .into_iter()
        .map(|line| captured(line.trim()).unwrap_or(line.trim()).to_owned())
        .filter(|line| {
            let aws = line.starts_with("aws ")
                && !line.starts_with("aws cloudformation package")
                && !line.starts_with("aws cloudformation deploy");
            let writes =
                (line.starts_with("echo ") || line.starts_with("printf ")) && line.contains('>');
            // A line with an odd number of single quotes goes on over the next lines (a
            // JSON document): checked as part of its block only.
            let whole = line.matches('\'').count() % 2 == 0;
            (aws || writes) && whole && !needs_the_block(line)
        })
        // A pipe's other end (`| grep …`) may find nothing here: the call was made.
        .map(|line| format!("{line} || true"))
        .collect()
}

/// The command a capture (`name=$(aws …)`, the whole line) runs: the docs save the stack's
/// outputs and resources into variables that way.
fn captured(line: &str) -> Option<&str> {
    let (name, rest) = line.split_once("=$(")?;
    let valid = !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    let inner = rest.strip_suffix(')')?;
    (valid && inner.starts_with("aws ") && !inner.contains("$(")).then_some(inner)
}

/// The shell variables the docs' blocks set for the commands after them (the stack's region,
/// its name, what the runbook's first block saves from its outputs and resources, the ids the
/// bundle's README saves, the names saved before removal), as an operator's shell holds them.
const SET: [(&str, &str); 19] = [
    ("region", "us-east-1"),
    ("stack", "autoproxy"),
    ("generate", "autoproxy-GenerateFunction-1"),
    ("configure", "autoproxy-ConfigureFunction-1"),
    ("report", "autoproxy-FleetReportFunction-1"),
    ("config_bucket", "autoproxy-configbucket-1"),
    (
        "failed_queue",
        "https://sqs.us-east-1.amazonaws.com/123456789012/autoproxy-FailedInvocationsQueue-1",
    ),
    (
        "dead_events",
        "https://sqs.us-east-1.amazonaws.com/123456789012/autoproxy-Route53EventsDeadLetterQueue-1",
    ),
    ("command_logs", "autoproxy-CommandLogGroup-1"),
    ("generate_logs", "autoproxy-GenerateLogGroup-1"),
    ("association", "11111111-2222-3333-4444-666666666666"),
    ("since", "1700000000000"),
    ("account", "123456789012"),
    ("org", "o-abcd1234ef"),
    ("root", "r-ab12"),
    ("vpc", "vpc-0abc1234"),
    ("access_log_bucket", "autoproxy-accesslogbucket-1"),
    (
        "sam_bucket",
        "aws-sam-cli-managed-default-samclisourcebucket-1",
    ),
    ("op", "11111111-2222-3333-4444-555555555555"),
];

/// Whether `line` uses what only its block computes: a `$` other than a variable of [`SET`].
fn needs_the_block(line: &str) -> bool {
    let mut rest = line.to_owned();
    for (name, _) in SET {
        rest = rest.replace(&format!("${name}"), "");
    }
    rest.contains('$')
}

/// Why `dash` refuses the block's syntax, if it does.
fn dash_refuses(block: &Block) -> Option<String> {
    let script = filled(&block.lines.join("\n"));
    let out = Command::new("dash")
        .args(["-n", "-c", &script])
        .output()
        .unwrap_or_else(|e| panic!("run dash: {e}"));
    (!out.status.success()).then(|| String::from_utf8_lossy(&out.stderr).trim().to_owned())
}

/// Every problem of the `aws` commands of `doc`, and how many reached their API call.
fn problems(doc: &str, text: &str) -> (Vec<String>, usize) {
    let root_dir = tempfile::tempdir().unwrap();
    let mut problems = Vec::new();
    let mut inputs = Vec::new();
    let mut shown = Vec::new();
    for (index, block) in blocks(text).iter().enumerate() {
        let at = format!("{doc}, code block {}", index + 1);
        if block.lang == "sh"
            && let Some(why) = dash_refuses(block)
        {
            problems.push(format!("{at} is fenced `sh`, and dash refuses it: {why}"));
        }
        let lines = runnable(block);
        if !lines.iter().any(|line| line.starts_with("aws ")) {
            continue;
        }
        // The commands run where the bundle is unpacked: `file://docs/…` is there.
        let dir = root_dir.path().join(index.to_string());
        std::fs::create_dir(&dir).unwrap();
        std::os::unix::fs::symlink(root().join("docs"), dir.join("docs")).unwrap();
        match argvs(&dir, &lines) {
            Ok(made) => {
                for argv in made {
                    problems.extend(literal_payload(&at, &argv));
                    shown.push(format!("{at}: `aws {}`", argv.join(" ")));
                    inputs.push(json!({"dir": dir, "argv": argv}));
                }
            }
            Err(err) => problems.push(format!("{at}: {err}")),
        }
    }
    let mut called = 0;
    for (shown, answer) in shown.iter().zip(aws_calls(&inputs)) {
        match answer {
            Ok(_) => called += 1,
            Err(err) => problems.push(format!("{shown}: the AWS CLI v1 refuses it: {err}")),
        }
    }
    (problems, called)
}

/// The argv of each `aws` call `lines` make, run in order by bash in `dir` (`aws` a function
/// that appends its argv to a file).
fn argvs(dir: &Path, lines: &[String]) -> Result<Vec<Vec<String>>, String> {
    let calls = dir.join(".calls");
    let mut prelude = format!(
        r#"aws() {{ printf '%s\0' "$#" "$@" >>'{}'; }}"#,
        calls.display()
    );
    for (name, value) in SET {
        prelude.push_str(&format!("\n{name}={value}"));
    }
    bash(dir, &prelude, &filled(&lines.join("\n")), &[])?;
    argvs_written(&std::fs::read_to_string(&calls).unwrap_or_default())
}

/// A `--payload` that is not read from a file: v2 takes it as base64.
fn literal_payload(at: &str, argv: &[String]) -> Option<String> {
    let at_payload = argv.iter().position(|w| w == "--payload")?;
    let value = argv.get(at_payload + 1)?;
    (!value.starts_with("fileb://")).then(|| {
        format!(
            "{at}: `--payload {value}` is literal: the AWS CLI v2 reads it as base64; write it \
             to a file and pass `--payload fileb://<file>`"
        )
    })
}

#[test]
fn every_documented_aws_command_runs_with_either_cli_and_every_sh_block_under_dash() {
    let mut all = Vec::new();
    let mut called = 0;
    for doc in DOCS {
        let text = std::fs::read_to_string(root().join(doc)).unwrap();
        let (found, reached) = problems(doc, &text);
        all.extend(found);
        called += reached;
    }
    let problems = all.join("\n");
    assert!(
        all.is_empty() && called >= 20,
        "{problems}\n{called} documented aws commands reached their API call, expected 20 or more"
    );
}

#[test]
fn the_templates_invoke_commands_read_their_payload_from_a_file() {
    let text = std::fs::read_to_string(root().join("template.yaml")).unwrap();
    let invokes: Vec<&str> = text
        .lines()
        .filter(|line| line.contains("aws lambda invoke") || line.contains("--payload"))
        .collect();
    assert!(invokes.len() >= 4, "{invokes:#?}");
    let wrong: Vec<&&str> = invokes
        .iter()
        .filter(|line| line.contains("--cli-binary-format") || line.contains("--payload '"))
        .collect();
    assert!(
        wrong.is_empty(),
        "the template's descriptions tell a command only the AWS CLI v2 takes: {wrong:#?}"
    );
}

#[test]
fn a_v2_only_option_a_literal_payload_or_bash_in_an_sh_block_is_reported() {
    let doc = "```sh\naws lambda invoke --function-name f \\\n  --cli-binary-format \
               raw-in-base64-out --payload '{}' out.json\ngrep -q x <<<\"$y\"\n```\n";
    let (found, called) = problems("x", doc);
    assert_eq!(called, 0, "{found:#?}");
    reported(
        &found,
        &[
            "dash refuses it",
            "Unknown options: --cli-binary-format",
            "`--payload {}` is literal",
        ],
    );
    let right = "```sh\necho '{\"force\": true}' > payload.json\naws lambda invoke \
                 --function-name f --payload fileb://payload.json out.json\n```\n";
    assert_eq!(problems("x", right), (Vec::new(), 1));
    let broken = "```sh\necho '{\"force\": true' > payload.json\naws lambda invoke \
                  --function-name f --payload fileb://payload.json out.json\n```\n";
    let (found, _) = problems("x", broken);
    assert!(
        found.iter().any(|f| f.contains("is not JSON")),
        "{found:#?}"
    );
}

#[test]
fn a_capture_runs_its_aws_command_through_the_cli_too() {
    let doc = "```sh\nname=$(aws lambda get-function --function-name f --no-such-option \\\n  \
               --query Configuration.Version --output text)\n```\n";
    let (found, called) = problems("x", doc);
    assert_eq!(called, 0, "{found:#?}");
    reported(&found, &["Unknown options: --no-such-option"]);
    let right = doc.replace(" --no-such-option", "");
    assert_eq!(problems("x", &right), (Vec::new(), 1));
}
