//! docs/DEPLOY.md's "Day 2 with a release bundle", run as written with the AWS CLI against moto
//! where moto allows it: the upgrade and the roll back (`upgrade`), the removal's emptying of a
//! retained bucket (`removal`).

use std::path::PathBuf;

use autoproxy_tests::{root, tool};

mod removal;
mod upgrade;

/// The `sh` block of docs/DEPLOY.md holding `needle` (the first that does), its lines
/// unindented (a block inside a list item is indented).
fn deploy_block(needle: &str) -> String {
    let text = std::fs::read_to_string(root().join("docs/DEPLOY.md")).unwrap();
    let at = text
        .find(needle)
        .unwrap_or_else(|| panic!("docs/DEPLOY.md has no {needle:?}"));
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
