//! The documented `sam` and `aws eks` commands run as written: every `sam` command goes through
//! bash (with `sam` a function that writes its argv) and then through SAM CLI's own
//! `--parameter-overrides` parser (`samcli.cli.types.CfnParameterOverridesType`, in the SAM CLI's
//! venv), and each parameter must arrive whole, the JSON of `RoutingRules` from a `rules.json`
//! included; every `sam deploy` names its stack and artifact bucket (or asks them, `--guided`);
//! the EKS recipe's kubeconfig commands run with kubectl on a kubeconfig as
//! `aws eks update-kubeconfig` writes it.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use autoproxy_tests::root;
use serde_json::{Value as Json, json};

use super::{Block, DOCS, blocks, commands, parameters, raw_commands, shell_words};

/// The rules file the docs tell the operator to keep: JSON over several lines, with spaces.
pub(super) const RULES: &str = r#"[
  {"id": "eks", "front": "proxy.eks", "back": "eks", "back_types": ["CNAME"], "sni": "back-target"},
  {"id": "kubeadm", "front": "proxy.api", "back": "api", "back_types": ["A"], "sni": "back", "port": 6443}
]
"#;

/// What the EKS recipe's `aws eks update-kubeconfig` stand-in writes: the cluster named by its
/// ARN, its endpoint and CA, a user whose token `aws eks get-token` gives, and a context.
const UPDATE_KUBECONFIG: &str = r#"aws() {
  [ "$1 $2" = "eks update-kubeconfig" ] || return 0
  shift 2; name= region=
  while [ $# -gt 0 ]; do case $1 in --name) name=$2; shift ;; --region) region=$2; shift ;; esac; shift; done
  [ -n "$name" ] || { echo "aws eks update-kubeconfig: --name is required" >&2; return 252; }
  arn="arn:aws:eks:$region:123456789012:cluster/$name"
  cat >"$KUBECONFIG" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: $arn
  cluster:
    server: https://ABC123DEF456.gr7.us-east-1.eks.amazonaws.com
    certificate-authority-data: Q0EK
users:
- name: $arn
  user:
    exec: {apiVersion: client.authentication.k8s.io/v1beta1, command: aws, args: [eks, get-token, --cluster-name, $name]}
contexts:
- name: $arn
  context: {cluster: $arn, user: $arn}
current-context: $arn
EOF
}
kubectl() { [ "$1" = config ] || return 0; command kubectl "$@"; }
"#;

/// `line` with each `<placeholder>` (a `<` followed by a letter) made one word, as an operator
/// fills it in.
pub(super) fn filled(line: &str) -> String {
    let mut out = String::new();
    let mut rest = line;
    while let Some(at) = rest.find('<') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        match (after.chars().next(), after.find('>')) {
            (Some(c), Some(end)) if c.is_ascii_alphabetic() => {
                out.push_str(if after[..end].contains("account id") {
                    "123456789012"
                } else {
                    "filled-in"
                });
                rest = &after[end + 1..];
            }
            _ => {
                out.push('<');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// Runs `script` with bash in `dir` (`prelude` first); its stdout, or the failure.
pub(super) fn bash(
    dir: &Path,
    prelude: &str,
    script: &str,
    env: &[(&str, &Path)],
) -> Result<Vec<u8>, String> {
    let out = Command::new("bash")
        .arg("-c")
        .arg(format!("set -e\n{prelude}\n{script}"))
        .current_dir(dir)
        .envs(env.iter().map(|(k, v)| (*k, *v)))
        .output()
        .map_err(|err| format!("run bash: {err}"))?;
    if !out.status.success() {
        return Err(format!(
            "`{script}` exited {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(out.stdout)
}

/// The argv of every `program` call `line` makes, as bash hands it over (`program` a shell
/// function that writes its argv).
fn argv_of(dir: &Path, program: &str, line: &str) -> Result<Vec<Vec<String>>, String> {
    let prelude = format!(r#"{program}() {{ printf '%s\0' "$#" "$@"; }}"#);
    let out = bash(dir, &prelude, &filled(line), &[])?;
    let text = String::from_utf8(out).map_err(|err| err.to_string())?;
    argvs_written(&text)
}

/// The argvs a stand-in wrote as `printf '%s\0' "$#" "$@"` does: each count, then its words.
pub(super) fn argvs_written(text: &str) -> Result<Vec<Vec<String>>, String> {
    let mut fields = text.split('\0');
    let mut calls = Vec::new();
    while let Some(count) = fields.next().filter(|f| !f.is_empty()) {
        let count: usize = count.parse().map_err(|_| format!("argc {count:?}"))?;
        calls.push(fields.by_ref().take(count).map(str::to_owned).collect());
    }
    Ok(calls)
}

/// The argv of every `program` call the lines of `block` that start with `command` make, and
/// why a line could not run.
pub(super) fn calls_in(
    dir: &Path,
    program: &str,
    command: &str,
    block: &Block,
) -> (Vec<Vec<String>>, Vec<String>) {
    let mut calls = Vec::new();
    let mut failed = Vec::new();
    for line in raw_commands(block) {
        if !line.trim_start().starts_with(command) {
            continue;
        }
        match argv_of(dir, program, &line) {
            Ok(made) => calls.extend(made),
            Err(err) => failed.push(err),
        }
    }
    (calls, failed)
}

/// The words after `--parameter-overrides`, up to the next option.
pub(super) fn overrides(argv: &[String]) -> Option<Vec<String>> {
    let at = argv.iter().position(|w| w == "--parameter-overrides")?;
    Some(
        argv[at + 1..]
            .iter()
            .take_while(|w| !w.starts_with("--"))
            .cloned()
            .collect(),
    )
}

/// SAM CLI's Python (its venv beside the tools' bin directory).
fn sam_python() -> PathBuf {
    autoproxy_tests::moto::tools_bin()
        .parent()
        .map(|cache| cache.join("venv-sam/bin/python"))
        .unwrap_or_else(|| "python3".into())
}

/// What SAM CLI's parser makes of each input: the command line's words (a list) or a
/// `samconfig.toml` line (a string, read with tomllib as SAM reads the file).
fn sam_parses(inputs: &[Json]) -> Vec<Result<Json, String>> {
    const PARSER: &str = r#"
import json, sys, tomllib
from samcli.cli.types import CfnParameterOverridesType
parser = CfnParameterOverridesType()
for item in json.load(sys.stdin):
    try:
        value = tuple(item) if isinstance(item, list) else tomllib.loads(item)["parameter_overrides"]
        print(json.dumps({"ok": parser.convert(value, None, None)}))
    except Exception as err:
        print(json.dumps({"error": "%s: %s" % (type(err).__name__, err)}))
"#;
    python_answers(&sam_python(), PARSER, &json!(inputs), &[])
}

/// Runs `script` with `python`, `input` on its stdin; each line it prints is `{"ok": …}` or
/// `{"error": "…"}`.
pub(super) fn python_answers(
    python: &Path,
    script: &str,
    input: &Json,
    env: &[(&str, &str)],
) -> Vec<Result<Json, String>> {
    let mut child = Command::new(python)
        .args(["-c", script])
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("run {} (.ci/tools.sh all): {e}", python.display()));
    let input = serde_json::to_vec(input).unwrap();
    child.stdin.take().unwrap().write_all(&input).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}: {}",
        python.display(),
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

/// A word `Name=value` as the operator meant it: the value without one pair of surrounding
/// double quotes, its `\"` meaning `"`.
pub(super) fn meant(word: &str) -> (String, String) {
    let (name, value) = word.split_once('=').unwrap_or((word, ""));
    let value = value
        .strip_prefix('"')
        .and_then(|v| v.strip_suffix('"'))
        .unwrap_or(value);
    (name.to_owned(), value.replace("\\\"", "\""))
}

/// The problems of one documented override set: what `cli`'s parser got against what was meant.
fn compare(
    cli: &str,
    at: &str,
    meant: &[(String, String)],
    got: &Result<Json, String>,
) -> Vec<String> {
    let got = match got {
        Ok(got) => got,
        Err(err) => return vec![format!("{at}: {cli} refuses it: {err}")],
    };
    let mut problems = Vec::new();
    let names: Vec<&String> = meant.iter().map(|(name, _)| name).collect();
    for name in got.as_object().into_iter().flat_map(|o| o.keys()) {
        if !names.contains(&name) {
            problems.push(format!("{at}: {cli} got a parameter {name} nobody named"));
        }
    }
    for (name, value) in meant {
        match got[name].as_str() {
            Some(arrived) if arrived == value => {}
            arrived => problems.push(format!(
                "{at}: {name} arrives as {arrived:?}, meant {value:?}"
            )),
        }
        if name == "RoutingRules" {
            let rules: Json = serde_json::from_str(RULES).unwrap();
            let arrived = got[name]
                .as_str()
                .and_then(|v| serde_json::from_str::<Json>(v).ok());
            if arrived.as_ref() != Some(&rules) {
                problems.push(format!(
                    "{at}: RoutingRules arrives as {:?}, not rules.json's list",
                    got[name]
                ));
            }
        }
    }
    problems
}

/// One override set to hand SAM's parser: where it is documented, what each parameter was meant
/// to be, and the parser's input.
pub(super) type Check<T = Json> = (String, Vec<(String, String)>, T);

/// Every problem of the `sam` commands and `samconfig.toml` lines of `doc`; and how many
/// `RoutingRules` arrived whole.
fn sam_problems(doc: &str, text: &str) -> (Vec<String>, usize) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("rules.json"), RULES).unwrap();
    let mut problems = Vec::new();
    let mut checks: Vec<Check> = Vec::new();
    for (index, block) in blocks(text).iter().enumerate() {
        let at = format!("{doc}, code block {}", index + 1);
        if block.lang == "toml" {
            problems.extend(samconfig_problems(&at, block));
            for line in &block.lines {
                if let Some(value) = line.trim().strip_prefix("parameter_overrides = ") {
                    let meant = parameters([shell_words(value).concat().as_str()]);
                    checks.push((
                        format!("{at}: `{}`", line.trim()),
                        meant,
                        json!(line.trim()),
                    ));
                }
            }
            continue;
        }
        let (calls, failed) = calls_in(dir.path(), "sam", "sam ", block);
        problems.extend(failed.into_iter().map(|err| format!("{at}: {err}")));
        for argv in calls {
            let shown = format!("{at}: `sam {}`", argv.join(" "));
            problems.extend(deploy_problems(&shown, &argv));
            if let Some(words) = overrides(&argv) {
                let meant = words.iter().map(|w| meant(w)).collect();
                checks.push((shown, meant, json!(words)));
            }
        }
    }
    let inputs: Vec<Json> = checks.iter().map(|(_, _, input)| input.clone()).collect();
    let (found, rules) = judged("SAM CLI", &checks, sam_parses(&inputs));
    problems.extend(found);
    (problems, rules)
}

/// What `cli`'s parser answered for each check (where it is documented, what was meant),
/// compared: every problem, and how many `RoutingRules` arrived whole.
pub(super) fn judged<T>(
    cli: &str,
    checks: &[Check<T>],
    answers: Vec<Result<Json, String>>,
) -> (Vec<String>, usize) {
    let mut problems = Vec::new();
    let mut rules = 0;
    for ((at, meant, _), got) in checks.iter().zip(answers) {
        let found = compare(cli, at, meant, &got);
        if found.is_empty() && meant.iter().any(|(name, _)| name == "RoutingRules") {
            rules += 1;
        }
        problems.extend(found);
    }
    (problems, rules)
}

/// A `sam deploy` on a fresh clone (no `samconfig.toml`) needs its stack's name and a bucket
/// for the artifacts, unless `--guided` asks them.
fn deploy_problems(at: &str, argv: &[String]) -> Vec<String> {
    let has = |option: &str| argv.iter().any(|w| w == option);
    if argv.first().map(String::as_str) != Some("deploy") || has("--guided") || argv.len() == 1 {
        return Vec::new();
    }
    let mut problems = Vec::new();
    if !has("--stack-name") {
        problems.push(format!(
            "{at}: no --stack-name (a fresh clone has no samconfig.toml)"
        ));
    }
    if !has("--resolve-s3") && !has("--s3-bucket") {
        problems.push(format!(
            "{at}: no --resolve-s3 (nor --s3-bucket): SAM has nowhere to upload the build"
        ));
    }
    problems
}

/// A `samconfig.toml` deploy section names the stack and the artifact bucket.
fn samconfig_problems(at: &str, block: &Block) -> Vec<String> {
    let text = block.lines.join("\n");
    if !text.contains("[default.deploy.parameters]") {
        return Vec::new();
    }
    let mut problems = Vec::new();
    if !text.contains("stack_name = ") {
        problems.push(format!(
            "{at}: samconfig.toml's deploy section has no stack_name"
        ));
    }
    if !text.contains("resolve_s3 = true") && !text.contains("s3_bucket = ") {
        problems.push(format!(
            "{at}: samconfig.toml's deploy section has no resolve_s3 = true (nor s3_bucket)"
        ));
    }
    problems
}

/// `check` over every doc of [`DOCS`]: all their problems, and how many `RoutingRules` arrived
/// whole.
pub(super) fn over_docs(check: fn(&str, &str) -> (Vec<String>, usize)) -> (Vec<String>, usize) {
    let mut all = Vec::new();
    let mut rules = 0;
    for doc in DOCS {
        let text = std::fs::read_to_string(root().join(doc)).unwrap();
        let (problems, whole) = check(doc, &text);
        all.extend(problems);
        rules += whole;
    }
    (all, rules)
}

#[test]
fn every_documented_sam_command_hands_sam_each_parameter_whole() {
    let (all, rules) = over_docs(sam_problems);
    assert!(all.is_empty(), "{}", all.join("\n"));
    assert!(
        rules >= 1,
        "no documented command sets RoutingRules from rules.json"
    );
}

#[test]
fn a_broken_value_a_missing_stack_name_or_bucket_is_reported() {
    let doc = r#"
```sh
sam deploy --region us-east-1 --parameter-overrides "RoutingRules=$(cat rules.json)" A=b
sam deploy --guided --parameter-overrides 'X=a b'
```

```toml
[default.deploy.parameters]
stack_name = "autoproxy"
parameter_overrides = "P=\"p\""
```
"#;
    let (found, rules) = sam_problems("docs/DEPLOY.md", doc);
    let expected = [
        "code block 1: `sam deploy --region us-east-1 --parameter-overrides RoutingRules=[",
        "no --stack-name",
        "no --resolve-s3",
        "RoutingRules arrives as Some(\"[\\n\")",
        "RoutingRules arrives as String(\"[\\n\"), not rules.json's list",
        "X arrives as Some(\"a\"), meant \"a b\"",
        "code block 2: samconfig.toml's deploy section has no resolve_s3",
    ];
    assert_eq!(rules, 0);
    for expected in expected {
        assert!(
            found.iter().any(|f| f.contains(expected)),
            "{expected:?} not in {found:#?}"
        );
    }
}

/// Every `aws eks` command in `text`'s code blocks names its cluster, and prints the endpoint
/// without JSON quotes.
fn eks_problems(doc: &str, text: &str) -> Vec<String> {
    let mut problems = Vec::new();
    for (index, block) in blocks(text).iter().enumerate() {
        for words in commands(block) {
            if words.len() < 3 || words[0] != "aws" || words[1] != "eks" {
                continue;
            }
            let line = words.join(" ");
            let at = format!("{doc}, code block {}: `{line}`", index + 1);
            if !words.iter().any(|w| w == "--name") {
                problems.push(format!("{at}: no --name"));
            }
            if words.iter().any(|w| w == "--query") && !line.contains("--output text") {
                problems.push(format!(
                    "{at}: --query without --output text prints JSON quotes"
                ));
            }
        }
    }
    problems
}

/// The part of DEPLOY.md from `start` to `end`.
fn section<'a>(text: &'a str, start: &str, end: &str) -> &'a str {
    let from = text.find(start).unwrap_or_else(|| panic!("no {start:?}"));
    let to = text[from..].find(end).map_or(text.len(), |to| from + to);
    &text[from..to]
}

#[test]
fn the_eks_and_kubeadm_recipes_run_as_written() {
    let mut problems = Vec::new();
    for doc in DOCS {
        let text = std::fs::read_to_string(root().join(doc)).unwrap();
        problems.extend(eks_problems(doc, &text));
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert_eq!(
        eks_problems(
            "x",
            "```sh\naws eks describe-cluster --query cluster.endpoint\n```\n"
        )
        .len(),
        2
    );

    let text = std::fs::read_to_string(root().join("docs/DEPLOY.md")).unwrap();
    let eks = section(&text, "**EKS.**", "**external-dns.**");
    let kubeadm = section(&text, "**kubeadm", "## The proxy instances");
    for (part, needed) in [
        (eks, "endpointPublicAccess=false"),
        (eks, "authorize-security-group-ingress"),
        (eks, "--port 443"),
        (kubeadm, "authorize-security-group-ingress"),
        (kubeadm, "--port 6443"),
    ] {
        assert!(part.contains(needed), "the recipe lacks {needed}");
    }

    // The kubeconfig: update-kubeconfig, then set-cluster on the entry it wrote.
    let block = blocks(eks)
        .into_iter()
        .find(|b| {
            b.lines
                .iter()
                .any(|l| l.contains("aws eks update-kubeconfig"))
        })
        .expect("the EKS recipe runs aws eks update-kubeconfig");
    let script: Vec<String> = raw_commands(&block).iter().map(|l| filled(l)).collect();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("config");
    bash(
        dir.path(),
        UPDATE_KUBECONFIG,
        &script.join("\n"),
        &[("KUBECONFIG", &kubeconfig)],
    )
    .unwrap_or_else(|err| panic!("the EKS recipe's kubeconfig commands: {err}"));
    let view = Command::new("kubectl")
        .args(["config", "view", "--raw", "-o", "json"])
        .env("KUBECONFIG", &kubeconfig)
        .output()
        .expect("run kubectl");
    let view: Json = serde_json::from_slice(&view.stdout).expect("kubectl's view as JSON");
    let clusters = view["clusters"].as_array().expect("clusters");
    assert_eq!(
        clusters.len(),
        1,
        "set-cluster named another cluster than update-kubeconfig wrote: {view:#}"
    );
    let cluster = &clusters[0]["cluster"];
    assert_eq!(
        cluster["server"], "https://proxy.eks.prod.example.internal",
        "{view:#}"
    );
    assert_eq!(
        cluster["tls-server-name"], "ABC123DEF456.gr7.us-east-1.eks.amazonaws.com",
        "the endpoint's name, sent and checked: {view:#}"
    );
    assert_eq!(
        cluster["certificate-authority-data"], "Q0EK",
        "the CA kept: {view:#}"
    );
    assert_eq!(view["current-context"], clusters[0]["name"], "{view:#}");
}
