//! The central stack's region is one shell variable, `region`, set once in each doc's first
//! block: every command of the docs' blocks that reaches the central stack or what it made (a
//! deploy of `template.yaml`, the stack by its name, its functions, queues, logs, alarms,
//! topic, association, the default bus and the artifact bucket beside it) names `--region "$region"`.
//! us-east-1 is written out only where it must be: the member and forwarding stacks, the
//! StackSet, Organizations' trusted access (and an EKS cluster names its own region).

use super::{DOCS, blocks, commands, option_values};

/// The services whose every command in the docs is about the central stack's resources (EC2's
/// are about the members' networks too).
const CENTRAL_SERVICES: [&str; 8] = [
    "lambda",
    "sqs",
    "ssm",
    "logs",
    "sns",
    "cloudwatch",
    "events",
    "autoscaling",
];

/// A command's words, a capture's (`name=$(aws …)`) unwrapped to the command inside.
fn unwrapped(words: &[String]) -> Vec<String> {
    let mut words = words.to_vec();
    if let Some(first) = words.first_mut()
        && let Some((_, inner)) = first.split_once("=$(")
    {
        *first = inner.to_owned();
        if let Some(last) = words.last_mut()
            && let Some(head) = last.strip_suffix(')')
        {
            *last = head.to_owned();
        }
    }
    words.retain(|w| !w.is_empty());
    words
}

/// Whether `words` (a command, unwrapped) reaches the central stack or what it made.
fn central(words: &[String]) -> bool {
    let word = |i: usize| words.get(i).map(String::as_str).unwrap_or_default();
    let stack = option_values(words, "--stack-name");
    match (word(0), word(1), word(2)) {
        // A bare `sam deploy` deploys what samconfig.toml says, its region included.
        ("sam", "deploy", _) => words.len() > 2,
        ("aws", "cloudformation", "deploy") => {
            option_values(words, "--template-file") == ["packaged.yaml"]
        }
        ("aws", "cloudformation", _) => {
            matches!(stack.as_slice(), ["autoproxy" | "$stack"])
                && !words.iter().any(|w| w == "--stack-set-name")
        }
        ("aws", "s3", "mb") => true,
        ("aws", service, _) => CENTRAL_SERVICES.contains(&service),
        _ => false,
    }
}

/// Every command of `doc`'s blocks that reaches the central stack without `--region "$region"`.
pub(super) fn region_problems(doc: &str, text: &str) -> (Vec<String>, usize) {
    let mut problems = Vec::new();
    let mut checked = 0;
    for (index, block) in blocks(text).iter().enumerate() {
        for words in commands(block) {
            let words = unwrapped(&words);
            if !central(&words) {
                continue;
            }
            checked += 1;
            if option_values(&words, "--region") != ["$region"] {
                problems.push(format!(
                    "{doc}, code block {}: `{}` reaches the central stack without --region \"$region\"",
                    index + 1,
                    words.join(" ")
                ));
            }
        }
    }
    (problems, checked)
}

#[test]
fn every_central_stack_command_names_the_region_variable() {
    let mut all = Vec::new();
    let mut checked = 0;
    for doc in DOCS {
        let text = std::fs::read_to_string(autoproxy_tests::root().join(doc)).unwrap();
        let (found, seen) = region_problems(doc, &text);
        all.extend(found);
        checked += seen;
    }
    assert!(
        all.is_empty() && checked >= 20,
        "{}\n{checked} central-stack commands found, expected 20 or more",
        all.join("\n")
    );
}

#[test]
fn a_hard_coded_or_missing_region_is_reported_and_the_member_stacks_keep_theirs() {
    let doc = "```sh\nsam deploy --stack-name autoproxy --region us-east-1\n\
               out=$(aws cloudformation describe-stacks --stack-name \"$stack\" --output text)\n\
               aws lambda invoke --function-name f out.json\n\
               aws cloudformation deploy --region us-east-1 --template-file \
               docs/central-forwarding.yaml --stack-name autoproxy-central-forwarding\n\
               aws cloudformation create-stack-set --region us-east-1 --stack-set-name m\n\
               aws eks describe-cluster --name prod --region us-east-1\n```\n";
    let (found, checked) = region_problems("x", doc);
    assert_eq!(checked, 3, "{found:#?}");
    super::reported(
        &found,
        &[
            "`sam deploy --stack-name autoproxy --region us-east-1` reaches",
            "`aws cloudformation describe-stacks --stack-name $stack --output text` reaches",
            "`aws lambda invoke --function-name f out.json` reaches",
        ],
    );
    let right = doc
        .replace(
            "autoproxy --region us-east-1",
            "autoproxy --region \"$region\"",
        )
        .replace("--output text)", "--region \"$region\" --output text)")
        .replace(
            "invoke --function-name",
            "invoke --region \"$region\" --function-name",
        );
    assert_eq!(region_problems("x", &right), (Vec::new(), 3));
}
