//! docs/RUNBOOK.md, run as written with the AWS CLI against moto where moto allows it: the
//! upgrade and the roll back after docs/DEPLOY.md's first deploy of a bundle (`upgrade`), the
//! removal's emptying of a retained bucket (`removal`).

use std::path::PathBuf;

use autoproxy_tests::{root, tool};

mod removal;
mod upgrade;

/// The runbook's values as its first block sets them, in the operator's shell: the stack's
/// region and name (the names of its outputs are each test's own).
const VALUES: &str = "region=us-east-1\nstack=autoproxy\n";

/// The `sh` block of `doc` holding `needle` (the first that does), its lines unindented (a
/// block inside a list item is indented).
fn doc_block(doc: &str, needle: &str) -> String {
    let text = std::fs::read_to_string(root().join(doc)).unwrap();
    let at = text
        .find(needle)
        .unwrap_or_else(|| panic!("{doc} has no {needle:?}"));
    let start = text[..at].rfind("```sh\n").expect("in a sh block") + "```sh\n".len();
    let end = text[start..].find("```").expect("the block ends") + start;
    assert!(at < end, "{needle:?} is not inside a sh block");
    text[start..end]
        .lines()
        .map(str::trim_start)
        .collect::<Vec<_>>()
        .join("\n")
}

/// PATH with the installed AWS CLI first.
fn aws_first_on_path() -> String {
    let aws: PathBuf = tool("aws");
    format!(
        "{}:{}",
        aws.parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    )
}
