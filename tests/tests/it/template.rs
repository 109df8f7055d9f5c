//! `template.yaml` held to what the code and the deployment need, statically: the settings
//! each function reads, the bucket and its policy, the grants moto cannot check, the apply
//! document's parameters fixed at deploy time, and the order a deploy runs in.

use std::collections::BTreeSet;

use autoproxy_tests::root;
use serde_yaml::Value;

mod alarms;
mod assertions;
mod bucket;
mod dataplane;
mod dead_letters;
mod docs;
mod first_run;
mod fleet;
mod fleet_report;
mod grants;
mod linted;
mod log_groups;
mod parameters;
mod proxy_vpcs;
mod queue;
pub(super) mod stack;
mod variables;

/// `template.yaml` as YAML; CloudFormation tags kept.
pub(super) fn template() -> Value {
    let path = root().join("template.yaml");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|err| panic!("{path:?}: {err}"));
    // serde_yaml keeps CloudFormation's `!Ref`/`!Sub` tags as `Value::Tagged`.
    serde_yaml::from_str(&text).unwrap_or_else(|err| panic!("{path:?} is not YAML: {err}"))
}

/// The variable names a mapping at `path` declares; an absent mapping declares none.
fn keys_at(template: &Value, path: &[&str]) -> BTreeSet<String> {
    let mut node = template;
    for segment in path {
        match node.get(segment) {
            Some(next) => node = next,
            None => return BTreeSet::new(),
        }
    }
    let mapping = node
        .as_mapping()
        .unwrap_or_else(|| panic!("{} is not a mapping: {node:?}", path.join(".")));
    mapping
        .keys()
        .map(|key| {
            key.as_str()
                .unwrap_or_else(|| {
                    panic!("{}: a key that is not a string: {key:?}", path.join("."))
                })
                .to_owned()
        })
        .collect()
}
