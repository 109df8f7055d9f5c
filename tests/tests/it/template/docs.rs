//! The commands README.md and docs/DEPLOY.md tell an operator to run, held to the templates:
//! every parameter a `sam` or `aws cloudformation` command (or a `samconfig.toml` snippet) names
//! exists in the template it deploys; a `sam deploy` carries the `Architecture` its block's
//! `sam build` was given; StackSet commands carry `--call-as DELEGATED_ADMIN`; and no doc tells
//! to `cargo lambda invoke` a deployed function (that calls a local emulator).

use std::collections::BTreeSet;

use autoproxy_tests::root;
use serde_yaml::Value;

use super::keys_at;

mod as_written;
mod aws_cli;
mod either_cli;
mod region;
mod runbook;

/// Fails unless each of `expected` is in one of the problems `found`.
fn reported(found: &[String], expected: &[&str]) {
    for expected in expected {
        assert!(
            found.iter().any(|f| f.contains(expected)),
            "{expected:?} not in {found:#?}"
        );
    }
}

/// The docs whose commands are checked: the repository's (the runbook a bundle carries too),
/// and the release bundle's README.
const DOCS: [&str; 4] = [
    "README.md",
    "docs/DEPLOY.md",
    "docs/RUNBOOK.md",
    "tests/src/dist/README.md",
];

/// A code block: its info string (`sh`, `toml`, empty for an indented block) and its lines,
/// the indentation of the block removed.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Block {
    lang: String,
    lines: Vec<String>,
}

/// The fenced blocks (also inside list items, indented) and the indented blocks of `text`.
fn blocks(text: &str) -> Vec<Block> {
    let mut blocks = Vec::new();
    let mut lines = text.lines().peekable();
    let mut previous_blank = true;
    while let Some(line) = lines.next() {
        let trimmed = line.trim_start();
        if let Some(lang) = trimmed.strip_prefix("```") {
            let indent = line.len() - trimmed.len();
            let mut body = Vec::new();
            for inner in lines.by_ref() {
                if inner.trim_start().starts_with("```") {
                    break;
                }
                body.push(inner.get(indent..).unwrap_or(inner.trim_start()).to_owned());
            }
            blocks.push(Block {
                lang: lang.trim().to_owned(),
                lines: body,
            });
            previous_blank = false;
            continue;
        }
        if previous_blank && line.starts_with("    ") && !trimmed.is_empty() {
            let mut body = vec![line[4..].to_owned()];
            while let Some(next) = lines.peek() {
                if !next.starts_with("    ") {
                    break;
                }
                body.push(next[4..].to_owned());
                lines.next();
            }
            blocks.push(Block {
                lang: String::new(),
                lines: body,
            });
        }
        previous_blank = line.trim().is_empty();
    }
    blocks
}

/// A block's commands as written: continuation lines joined, blank lines dropped, nothing
/// else changed.
fn raw_commands(block: &Block) -> Vec<String> {
    let mut joined = Vec::new();
    let mut current = String::new();
    for line in &block.lines {
        match line.trim_end().strip_suffix('\\') {
            Some(head) => {
                current.push_str(head);
                current.push(' ');
            }
            None => {
                current.push_str(line);
                joined.push(std::mem::take(&mut current));
            }
        }
    }
    joined.push(current);
    joined.retain(|line| !line.trim().is_empty());
    joined
}

/// A block's shell commands as words: continuations joined, comments dropped, quotes removed,
/// split at `&&`, `;` and `|`.
fn commands(block: &Block) -> Vec<Vec<String>> {
    let joined = raw_commands(block);
    let mut commands = Vec::new();
    for line in joined {
        let mut words: Vec<String> = Vec::new();
        for word in shell_words(&line) {
            if ["&&", ";", "|", "||"].contains(&word.as_str()) {
                commands.push(std::mem::take(&mut words));
            } else {
                words.push(word);
            }
        }
        commands.push(words);
    }
    commands.retain(|words| !words.is_empty());
    commands
}

/// `line` split as sh splits it (single and double quotes; `#` at a word's start ends it; `;`
/// and `|` separate), a `<placeholder>` kept whole.
fn shell_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                in_word = true;
                word.extend(chars.by_ref().take_while(|&c| c != '\''));
            }
            '"' => {
                in_word = true;
                while let Some(c) = chars.next() {
                    match c {
                        '"' => break,
                        '\\' => word.extend(chars.next()),
                        c => word.push(c),
                    }
                }
            }
            '#' if !in_word => break,
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            ';' | '|' => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
                words.push(c.to_string());
            }
            // The docs' placeholders (`<central account id>`) stand for one word.
            '<' => {
                in_word = true;
                word.push(c);
                for c in chars.by_ref() {
                    word.push(c);
                    if c == '>' {
                        break;
                    }
                }
            }
            c => {
                in_word = true;
                word.push(c);
            }
        }
    }
    if in_word {
        words.push(word);
    }
    words
}

/// The words after `option`, up to the next option.
fn option_values<'a>(words: &'a [String], option: &str) -> Vec<&'a str> {
    let Some(at) = words.iter().position(|w| w == option) else {
        return Vec::new();
    };
    words[at + 1..]
        .iter()
        .take_while(|w| !w.starts_with("--"))
        .map(String::as_str)
        .collect()
}

/// `Name=value` pairs of `--parameter-overrides` and `--parameters` (also
/// `ParameterKey=Name,ParameterValue=value`), and of a `parameter_overrides` string.
fn parameters<'a>(values: impl IntoIterator<Item = &'a str>) -> Vec<(String, String)> {
    let mut found = Vec::new();
    // A word holding a command substitution was made one word by the command line's own
    // quotes (`"RoutingRules=$(tr -d '\n' < rules.json)"`): its spaces split nothing.
    let words = values.into_iter().flat_map(|value| {
        if value.contains("$(") {
            vec![value.to_owned()]
        } else {
            shell_words(value)
        }
    });
    for value in words {
        if let Some(rest) = value.strip_prefix("ParameterKey=") {
            let (name, rest) = rest.split_once(',').unwrap_or((rest, ""));
            let value = rest.strip_prefix("ParameterValue=").unwrap_or(rest);
            found.push((name.to_owned(), value.to_owned()));
        } else if let Some((name, value)) = value.split_once('=') {
            found.push((name.to_owned(), value.to_owned()));
        } else {
            found.push((value, String::new()));
        }
    }
    found
}

/// The parameters a template declares.
fn declared(path: &str) -> BTreeSet<String> {
    let file = root().join(path);
    let text = std::fs::read_to_string(&file).unwrap_or_else(|err| panic!("{file:?}: {err}"));
    let template: Value =
        serde_yaml::from_str(&text).unwrap_or_else(|err| panic!("{file:?}: {err}"));
    keys_at(&template, &["Parameters"])
}

/// Which template a command deploys, and the parameters it names; `None` for a command that
/// deploys none.
fn deploys(words: &[String]) -> Option<(String, Vec<(String, String)>)> {
    let word = |i: usize| words.get(i).map(String::as_str);
    let file = option_values(words, "--template-file")
        .into_iter()
        .chain(
            option_values(words, "--template-body")
                .into_iter()
                .map(|v| v.trim_start_matches("file://")),
        )
        // What `aws cloudformation package` writes from template.yaml: the same parameters.
        .map(|file| {
            if file == "packaged.yaml" {
                "template.yaml"
            } else {
                file
            }
        })
        .next();
    let stack_set = words.iter().any(|w| w == "--stack-set-name");
    let template = match (word(0), word(1)) {
        (Some("sam"), Some("build" | "deploy")) => file.unwrap_or("template.yaml"),
        (Some("aws"), Some("cloudformation")) => match file {
            Some(file) => file,
            None if stack_set => "docs/member-account.yaml",
            None => return None,
        },
        _ => return None,
    };
    let named = option_values(words, "--parameter-overrides")
        .into_iter()
        .chain(option_values(words, "--parameters"));
    Some((template.to_owned(), parameters(named)))
}

/// Every problem with the commands of one doc.
fn problems(doc: &str, text: &str) -> Vec<String> {
    let main = declared("template.yaml");
    let mut problems = Vec::new();
    // In prose too: an inline `cargo lambda invoke --remote` (across a line break).
    let prose = text.split_whitespace().collect::<Vec<_>>().join(" ");
    for (start, _) in prose.match_indices("cargo lambda invoke") {
        let span = prose[start..].split('`').next().unwrap_or_default();
        if span.contains("--remote") {
            problems.push(format!("{doc}: `{span}` invokes the deployed function through cargo lambda: aws lambda invoke --function-name <output>"));
        }
    }
    for (index, block) in blocks(text).iter().enumerate() {
        let at = format!("{doc}, code block {}", index + 1);
        let mut built: Option<String> = None;
        let mut deployed: Vec<Option<String>> = Vec::new();
        if block.lang == "toml" {
            for line in &block.lines {
                if let Some(value) = line.trim().strip_prefix("parameter_overrides = ") {
                    let value = shell_words(value).concat();
                    for (name, _) in parameters([value.as_str()]) {
                        if !main.contains(&name) {
                            problems.push(format!("{at}: {name} is no parameter of template.yaml"));
                        }
                    }
                }
            }
            continue;
        }
        for words in commands(block) {
            let line = words.join(" ");
            if line.starts_with("cargo lambda invoke")
                && (doc == "docs/DEPLOY.md" || words.iter().any(|w| w == "--remote"))
            {
                problems.push(format!("{at}: `{line}` invokes a local emulator, not the deployed function: aws lambda invoke --function-name <output>"));
            }
            let stack_set = words.iter().any(|w| w == "--stack-set-name");
            if stack_set && !line.contains("--call-as DELEGATED_ADMIN") {
                problems.push(format!(
                    "{at}: `{line}`: a StackSet command without --call-as DELEGATED_ADMIN"
                ));
            }
            let Some((template, named)) = deploys(&words) else {
                continue;
            };
            let known = declared(&template);
            for (name, _) in &named {
                if !known.contains(name) {
                    problems.push(format!(
                        "{at}: `{line}` names {name}, no parameter of {template}"
                    ));
                }
            }
            let architecture = named
                .iter()
                .find(|(name, _)| name == "Architecture")
                .map(|(_, value)| value.clone());
            match words.get(1).map(String::as_str) {
                Some("build") if words[0] == "sam" => built = architecture,
                Some("deploy") if words[0] == "sam" => deployed.push(architecture),
                _ => {}
            }
        }
        if let Some(arch) = &built {
            for deploy in &deployed {
                if deploy.as_ref() != Some(arch) {
                    problems.push(format!("{at}: sam build has Architecture={arch}, a sam deploy has {deploy:?}: x86_64 binaries deployed as arm64 functions"));
                }
            }
        }
    }
    problems
}

#[test]
fn the_docs_commands_name_only_parameters_their_templates_declare() {
    let mut checked = 0;
    let mut all = Vec::new();
    for doc in DOCS {
        let text = std::fs::read_to_string(root().join(doc)).unwrap();
        checked += blocks(&text)
            .iter()
            .flat_map(commands)
            .filter(|words| deploys(words).is_some())
            .count();
        all.extend(problems(doc, &text));
    }
    assert!(all.is_empty(), "{}", all.join("\n"));
    // The ones DEPLOY.md shows today: sam build and deploy, the StackSet, the member stacks.
    assert!(checked >= 8, "only {checked} deploying commands found");
}

#[test]
fn a_wrong_parameter_a_lost_architecture_or_a_local_invoke_is_reported() {
    let doc = r#"
Intro.

```sh
sam build --parameter-overrides Architecture=x86_64   # CI
sam deploy --guided \
  --parameter-overrides 'MemberAcounts=organization' Architecture=arm64
```

1. In a list:

   ```sh
   aws cloudformation create-stack-set --stack-set-name m \
     --template-body file://docs/member-account.yaml \
     --parameters ParameterKey=GeneratorRoleArn,ParameterValue=a ParameterKey=Central,ParameterValue=b
   aws cloudformation deploy --template-file docs/member-account.yaml \
     --parameter-overrides RoleName=r && echo done
   ```

```toml
parameter_overrides = "PeeringProxyHostname=\"p\" MemberRole=\"r\""
```

    cargo lambda invoke autoproxy-generate --remote --data-ascii '{}'

Against AWS, `cargo lambda invoke
--remote` it.
"#;
    let found = problems("docs/DEPLOY.md", doc);
    let expected = [
        "docs/DEPLOY.md: `cargo lambda invoke autoproxy-generate --remote --data-ascii '{}' Against AWS, ` invokes the deployed function",
        "docs/DEPLOY.md: `cargo lambda invoke --remote` invokes the deployed function",
        "code block 1: `sam deploy --guided --parameter-overrides MemberAcounts=organization Architecture=arm64` names MemberAcounts",
        "code block 1: sam build has Architecture=x86_64, a sam deploy has Some(\"arm64\")",
        "code block 2: `aws cloudformation create-stack-set",
        "code block 2: `aws cloudformation create-stack-set --stack-set-name m --template-body file://docs/member-account.yaml --parameters ParameterKey=GeneratorRoleArn,ParameterValue=a ParameterKey=Central,ParameterValue=b` names Central, no parameter of docs/member-account.yaml",
        "code block 3: MemberRole is no parameter of template.yaml",
        "code block 4: `cargo lambda invoke autoproxy-generate --remote --data-ascii {}` invokes a local emulator",
    ];
    assert_eq!(found.len(), expected.len(), "{found:#?}");
    for (found, expected) in found.iter().zip(expected) {
        assert!(found.contains(expected), "{found}\n  expected: {expected}");
    }
    // The same commands, right, report nothing; a local invoke is README's to show.
    let right = doc
        .replace("MemberAcounts", "MemberAccounts")
        .replace("Architecture=arm64", "Architecture=x86_64")
        .replace(
            "--stack-set-name m",
            "--stack-set-name m --call-as DELEGATED_ADMIN",
        )
        .replace("ParameterKey=Central,", "ParameterKey=CentralAccountId,")
        .replace("MemberRole=", "MemberRoleName=")
        .replace(" --remote", "")
        .replace("\n--remote", "");
    assert_eq!(problems("README.md", &right), Vec::<String>::new());
}

#[test]
fn shell_words_split_as_sh_does() {
    for (line, expected) in [
        (
            "sam deploy  --x 'A=1 B' \"C=\\\"2\\\"\"",
            &["sam", "deploy", "--x", "A=1 B", "C=\"2\""][..],
        ),
        ("aws s3 ls   # a comment", &["aws", "s3", "ls"]),
        ("echo a#b", &["echo", "a#b"]),
        ("a;b | c", &["a", ";", "b", "|", "c"]),
        (
            "x --p K=<central account id> L",
            &["x", "--p", "K=<central account id>", "L"],
        ),
    ] {
        assert_eq!(shell_words(line), expected, "{line}");
    }
}
