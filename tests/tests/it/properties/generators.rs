//! Generic generators: strings from patterns, junk, huge values, JSON, and mutations of valid JSON.

use super::*;

/// Strings matching `pattern`, compiled once (a `&str` strategy compiles it for every value).
pub(super) fn re(pattern: &str) -> BoxedStrategy<String> {
    string_regex(pattern).unwrap().boxed()
}

/// Short text built to hit the decoder and the validator: escapes (good, malformed, out of
/// range), separators, quotes, comment and brace characters, control and non-ASCII characters.
pub(super) fn junk() -> BoxedStrategy<String> {
    prop_oneof![
        3 => re(concat!(
            r#"([a-zA-Z0-9 #{}"'$;:*%@/_\t\n\r\x00\x7f-]"#,
            r"|\\[0-9]{1,3}|\\[ -/:-~]|\\|\.", // escapes: octal, of a character, lone
            r"|é|\x{85}|\x{a0}|\x{2028}){0,24}",
        )),
        1 => vec(any::<char>(), 0..16).prop_map(String::from_iter),
    ]
    .boxed()
}

/// A string far too large for any field: 20,000 to 240,000 bytes.
pub(super) fn huge() -> BoxedStrategy<String> {
    prop_oneof![
        (1_usize..4, any::<char>()).prop_map(|(n, c)| c.to_string().repeat(n * 20_000)),
        (1_usize..4).prop_map(|n| "123456789012".repeat(n * 5_000)),
    ]
    .boxed()
}

/// Keys that mean something to one of the parsers, and junk.
pub(super) fn key() -> BoxedStrategy<String> {
    prop_oneof![
        3 => select(vec![
            "detail-type", "source", "account", "detail", "eventName", "recipientAccountId",
            "requestParameters", "hostedZoneId", "id", "responseElements", "hostedZone",
            "dry_run", "force", "fleet", "Records", "s3", "bucket", "object", "key",
            "versionId", "name", "eventTime", "format", "generation", "zones", "routes", "sni",
            "backend", "pending",
        ])
        .prop_map(String::from),
        1 => junk(),
    ]
    .boxed()
}

/// Any JSON value, nested a few levels.
pub(super) fn json() -> BoxedStrategy<Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>()
            .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        hostile().prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            vec(inner.clone(), 0..5).prop_map(Value::Array),
            vec((key(), inner), 0..5).prop_map(|pairs| Value::Object(pairs.into_iter().collect())),
        ]
    })
    .boxed()
}

/// Text that must never reach a config line: one character or a few.
pub(super) fn hostile() -> BoxedStrategy<String> {
    prop_oneof![
        3 => select(vec![
            " ", "\n", "\r", "\t", "#", "{", "}", "\"", "'", "\\", "$", "${HOME}", "é", "\u{85}",
            "\u{a0}", "\u{2028}", "*", ":", "%", ";", "\u{0}", "\u{7f}", "..", "A", "a b",
            "\u{feff}", "\u{200b}",
        ])
        .prop_map(String::from),
        1 => junk(),
    ]
    .boxed()
}

/// One step into a JSON value.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Step {
    Key(String),
    Index(usize),
}

/// A change to a JSON value at the `n`th node (modulo the node count), in preorder.
#[derive(Debug, Clone)]
pub(super) enum Mutation {
    /// Insert text into the `n`th string (a field value keeps its shape but not its content).
    Splice(usize, usize, String),
    Replace(usize, Value),
    Remove(usize),
    Insert(usize, String, Value),
}

pub(super) fn mutation() -> BoxedStrategy<Mutation> {
    prop_oneof![
        4 => (any::<usize>(), any::<usize>(), hostile())
            .prop_map(|(n, at, s)| Mutation::Splice(n, at, s)),
        2 => (any::<usize>(), hostile()).prop_map(|(n, s)| Mutation::Replace(n, Value::String(s))),
        2 => (any::<usize>(), json()).prop_map(|(n, v)| Mutation::Replace(n, v)),
        1 => any::<usize>().prop_map(Mutation::Remove),
        1 => (any::<usize>(), key(), json()).prop_map(|(n, k, v)| Mutation::Insert(n, k, v)),
    ]
    .boxed()
}

/// Every node's path, in preorder, and whether the node is a string.
pub(super) fn paths(value: &Value, here: &mut Vec<Step>, out: &mut Vec<(Vec<Step>, bool)>) {
    out.push((here.clone(), value.is_string()));
    match value {
        Value::Object(map) => {
            for (key, child) in map {
                here.push(Step::Key(key.clone()));
                paths(child, here, out);
                here.pop();
            }
        }
        Value::Array(items) => {
            for (index, child) in items.iter().enumerate() {
                here.push(Step::Index(index));
                paths(child, here, out);
                here.pop();
            }
        }
        _ => {}
    }
}

pub(super) fn node_mut<'a>(value: &'a mut Value, path: &[Step]) -> Option<&'a mut Value> {
    path.iter().try_fold(value, |node, step| match step {
        Step::Key(key) => node.get_mut(key.as_str()),
        Step::Index(index) => node.get_mut(*index),
    })
}

pub(super) fn mutate(value: &mut Value, mutation: &Mutation) {
    let mut found = Vec::new();
    paths(value, &mut Vec::new(), &mut found);
    let pick = |n: usize, among: &[Vec<Step>]| among.get(n % among.len().max(1)).cloned();
    let strings: Vec<Vec<Step>> = found
        .iter()
        .filter(|(_, is_string)| *is_string)
        .map(|(path, _)| path.clone())
        .collect();
    let all: Vec<Vec<Step>> = found.into_iter().map(|(path, _)| path).collect();
    match mutation {
        Mutation::Splice(n, at, text) => {
            if let Some(path) = pick(*n, &strings)
                && let Some(Value::String(old)) = node_mut(value, &path)
            {
                let mut at = at % (old.len() + 1);
                while !old.is_char_boundary(at) {
                    at -= 1;
                }
                old.insert_str(at, text);
            }
        }
        Mutation::Replace(n, new) => {
            if let Some(path) = pick(*n, &all)
                && let Some(node) = node_mut(value, &path)
            {
                *node = new.clone();
            }
        }
        Mutation::Remove(n) => {
            let Some(path) = pick(*n, &all) else { return };
            let Some((last, parent)) = path.split_last() else {
                return;
            };
            match (node_mut(value, parent), last) {
                (Some(Value::Object(map)), Step::Key(key)) => {
                    map.remove(key);
                }
                (Some(Value::Array(items)), Step::Index(index)) if *index < items.len() => {
                    items.remove(*index);
                }
                _ => {}
            }
        }
        Mutation::Insert(n, key, new) => {
            if let Some(path) = pick(*n, &all)
                && let Some(Value::Object(map)) = node_mut(value, &path)
            {
                map.insert(key.clone(), new.clone());
            }
        }
    }
}
