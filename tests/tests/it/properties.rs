//! Property tests: outside input, generated at volume, through the pure paths, checked for
//! what must hold whatever arrives.
//!
//! * Route53 data → `rules::zone_routes` → `rules::resolve` → the embedded template: nothing
//!   panics or fails to render, only plain host names reach the config (every byte printable
//!   ASCII or a newline, no line or field added), and every rejected name is a warning. A
//!   well-formed zone always gives its route, however Route53 spells it.
//! * Invocation payloads → the generator's trigger and configure's `dispatches` /
//!   `is_fleet_request`: nothing panics, every refusal says what was expected, an accepted zone
//!   hint carries a well-formed account and zone id.
//! * Stored manifests → `Manifest::from_json` → the sweep's merge → resolve → render: nothing
//!   panics, no line is injected, and no byte outside the allowed set is rendered
//!   (`manifest_values_reach_the_config_only_when_clean`): a manifest whose values are not what
//!   their rule makes of their zone is refused on load.
//!
//! The seed is fixed, so every run tries the same inputs and a failure reproduces;
//! `PROPTEST_RNG_SEED=<u64>` tries others and `PROPTEST_CASES=<n>` overrides every property's
//! case count. Each property prints how many cases it ran (`-- --nocapture` shows it).
// The printed counts are part of the report: how much input each property saw.
#![allow(clippy::print_stdout)]

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::fmt::Write as _;
use std::net::SocketAddr;

use autoproxy::artifact::{self, MapFiles, ROUTE_LINE, SUFFIX_LINE};
use autoproxy::discovery::{self, Matching, Scope};
use autoproxy::manifest::{Manifest, ZoneEntry, zone_key};
use autoproxy::model::{RecordSet, Route, SniMatch, Zone, ZoneKey, ZoneRecords};
use autoproxy::names::{HostName, normalize};
use autoproxy::ownership;
use autoproxy::publish;
use autoproxy::render::{DEFAULT_TEMPLATE, RenderInput, RenderOptions, Renderer};
use autoproxy::rules::{DEFAULT_RULES, Warning, resolve, zone_routes};
use autoproxy::settings::IgnoreZones;
use autoproxy_configure::handler::{Dispatch, dispatches, is_fleet_request};
use autoproxy_generate::trigger::{self, ROUTE53_EVENTS, Trigger, TriggerError};
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::select;
use proptest::string::string_regex;
use proptest::test_runner::{Config, RngSeed, TestCaseError, TestRunner};
use serde_json::{Value, json};

/// The seed every property starts from unless `PROPTEST_RNG_SEED` says otherwise.
const SEED: u64 = 0x6175_746f_7072_6f78;
const PROXY: &str = "peering-proxy.tools.example.com";
const CONFIG_KEY: &str = "haproxy/haproxy.cfg";
const GENERATED_AT: &str = "2026-11-23T03:14:02Z";
const NOW: u64 = 1_795_403_642;

// ---------------------------------------------------------------------------------------------
// The runner

/// Runs `check` on `cases` inputs from `strategy` and returns the line to print; panics with
/// the smallest failing input proptest finds.
fn check_property<S: Strategy>(
    name: &str,
    cases: u32,
    strategy: S,
    check: impl Fn(S::Value) -> Result<(), TestCaseError>,
) -> String {
    let mut config = Config::default();
    if std::env::var_os("PROPTEST_CASES").is_none() {
        config.cases = cases;
    }
    if config.rng_seed == RngSeed::Random {
        config.rng_seed = RngSeed::Fixed(SEED);
    }
    // The fixed seed reproduces a failure; no regression files in the work tree.
    config.failure_persistence = None;
    config.max_shrink_iters = 2_000;
    let seed = config.rng_seed;
    let (ran, failed) = (Cell::new(0_u32), Cell::new(0_u32));
    let result = TestRunner::new(config).run(&strategy, |input| {
        ran.set(ran.get() + 1);
        let outcome = check(input);
        if outcome.is_err() {
            failed.set(failed.get() + 1);
        }
        outcome
    });
    let line = format!(
        "{name}: {} cases, {} failures (seed {seed})",
        ran.get(),
        failed.get()
    );
    if let Err(err) = result {
        panic!("{line} (failures include shrinking steps)\n{err}");
    }
    line
}

/// How often each outcome came up, to show the generators reach every branch.
#[derive(Default)]
struct Tally(RefCell<std::collections::BTreeMap<&'static str, usize>>);

impl Tally {
    fn add(&self, what: &'static str, n: usize) {
        *self.0.borrow_mut().entry(what).or_default() += n;
    }
}

impl std::fmt::Display for Tally {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let counts = self.0.borrow();
        let parts: Vec<String> = counts
            .iter()
            .map(|(what, n)| format!("{what} {n}"))
            .collect();
        f.write_str(&parts.join(", "))
    }
}

// ---------------------------------------------------------------------------------------------
// Generic generators

/// Strings matching `pattern`, compiled once (a `&str` strategy compiles it for every value).
fn re(pattern: &str) -> BoxedStrategy<String> {
    string_regex(pattern).unwrap().boxed()
}

/// Short text built to hit the decoder and the validator: escapes (good, malformed, out of
/// range), separators, quotes, comment and brace characters, control and non-ASCII characters.
fn junk() -> BoxedStrategy<String> {
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
fn huge() -> BoxedStrategy<String> {
    prop_oneof![
        (1_usize..4, any::<char>()).prop_map(|(n, c)| c.to_string().repeat(n * 20_000)),
        (1_usize..4).prop_map(|n| "123456789012".repeat(n * 5_000)),
    ]
    .boxed()
}

/// Keys that mean something to one of the parsers, and junk.
fn key() -> BoxedStrategy<String> {
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
fn json() -> BoxedStrategy<Value> {
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
fn hostile() -> BoxedStrategy<String> {
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
enum Step {
    Key(String),
    Index(usize),
}

/// A change to a JSON value at the `n`th node (modulo the node count), in preorder.
#[derive(Debug, Clone)]
enum Mutation {
    /// Insert text into the `n`th string (a field value keeps its shape but not its content).
    Splice(usize, usize, String),
    Replace(usize, Value),
    Remove(usize),
    Insert(usize, String, Value),
}

fn mutation() -> BoxedStrategy<Mutation> {
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
fn paths(value: &Value, here: &mut Vec<Step>, out: &mut Vec<(Vec<Step>, bool)>) {
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

fn node_mut<'a>(value: &'a mut Value, path: &[Step]) -> Option<&'a mut Value> {
    path.iter().try_fold(value, |node, step| match step {
        Step::Key(key) => node.get_mut(key.as_str()),
        Step::Index(index) => node.get_mut(*index),
    })
}

fn mutate(value: &mut Value, mutation: &Mutation) {
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

// ---------------------------------------------------------------------------------------------
// Route53 names

/// One label as bytes, and whether it is a plain host-name label, so that a name built only
/// of plain labels must be accepted and one with any other label must be rejected.
#[derive(Debug, Clone)]
struct Label {
    bytes: Vec<u8>,
    plain: bool,
}

impl Label {
    fn plain(text: &str) -> Label {
        Label {
            bytes: text.as_bytes().to_vec(),
            plain: true,
        }
    }
}

/// How a name is spelled: per character, escaped as `\ddd` or not and upper-cased or not (the
/// choices cycle), and whether it ends with a dot.
#[derive(Debug, Clone)]
struct Spelling {
    choices: Vec<u8>,
    trailing_dot: bool,
}

fn spelling() -> BoxedStrategy<Spelling> {
    (vec(any::<u8>(), 1..12), any::<bool>())
        .prop_map(|(choices, trailing_dot)| Spelling {
            choices,
            trailing_dot,
        })
        .boxed()
}

fn is_plain_byte(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || byte == b'-' || byte == b'_'
}

/// The name as Route53 (or a caller) may write it: every byte outside a-z 0-9 - _ as `\ddd`
/// (a few printable ones raw, as a caller may send them), plain bytes in any case and
/// sometimes escaped too.
fn spell(labels: &[&Label], spelling: &Spelling) -> String {
    let mut out = String::new();
    let mut k = 0;
    for (index, label) in labels.iter().enumerate() {
        if index > 0 {
            out.push('.');
        }
        for &byte in &label.bytes {
            let choice = spelling.choices[k % spelling.choices.len()];
            k += 1;
            let wildcard = label.bytes == b"*";
            let raw_ok = is_plain_byte(byte)
                || wildcard
                || (choice % 8 == 1 && byte.is_ascii_graphic() && byte != b'.' && byte != b'\\')
                || (choice % 8 == 1 && byte == b' ');
            if raw_ok && !choice.is_multiple_of(4) {
                let byte = if choice & 4 == 0 {
                    byte
                } else {
                    byte.to_ascii_uppercase()
                };
                out.push(char::from(byte));
            } else {
                let _ = write!(out, "\\{byte:03o}");
            }
        }
    }
    if spelling.trailing_dot {
        out.push('.');
    }
    out
}

fn plain_label() -> BoxedStrategy<Label> {
    prop_oneof![
        1 => select(vec!["example", "internal", "a", "k8s", "int", "api"]).prop_map(Label::plain),
        3 => re("[a-zA-Z0-9_-]{1,20}").prop_map(|text| Label::plain(&text)),
    ]
    .boxed()
}

/// A label with at least one byte that no host name may carry (after decoding).
fn hostile_label() -> BoxedStrategy<Label> {
    let bad = prop_oneof![
        3 => select(vec![
            b' ', b'\n', b'\r', b'\t', b'#', b'{', b'}', b'"', b'\'', b'\\', b'$', b'.', b'*',
            b';', 0, 0x7f, 0x80, 0xc3, 0xff, b':', b'/', b'%', b'@',
        ]),
        1 => any::<u8>().prop_map(|b| if is_plain_byte(b) { b'!' } else { b }),
    ];
    (re("[a-z0-9]{0,6}"), bad, re("[a-z0-9]{0,6}"))
        .prop_map(|(before, bad, after)| {
            let mut bytes = before.into_bytes();
            bytes.push(bad);
            bytes.extend(after.into_bytes());
            if bytes == b"*" {
                // A lone `*` label is a wildcard, which is allowed first.
                bytes.push(b'x');
            }
            Label {
                bytes,
                plain: false,
            }
        })
        .boxed()
}

/// A zone's name: labels known plain or hostile, or arbitrary text.
#[derive(Debug, Clone)]
enum ZoneName {
    Built(Vec<Label>, Spelling),
    Raw(String),
}

impl ZoneName {
    fn text(&self) -> String {
        match self {
            ZoneName::Built(labels, spelling) => {
                spell(&labels.iter().collect::<Vec<_>>(), spelling)
            }
            ZoneName::Raw(text) => text.clone(),
        }
    }

    /// Whether the name must be accepted (`None`: arbitrary text, no independent verdict).
    fn verdict(&self) -> Option<bool> {
        match self {
            ZoneName::Built(labels, _) => Some(labels.iter().all(|l| l.plain)),
            ZoneName::Raw(_) => None,
        }
    }
}

fn zone_name() -> BoxedStrategy<ZoneName> {
    let label = prop_oneof![8 => plain_label(), 1 => hostile_label()];
    // A few names recur, so that two zones (in two accounts) claim the same SNI now and then.
    let shared = select(vec!["example.internal", "shared.internal", "a.b.internal"]);
    prop_oneof![
        4 => (vec(label, 1..=4), spelling()).prop_map(|(labels, s)| ZoneName::Built(labels, s)),
        2 => (shared, spelling()).prop_map(|(name, s)| {
            ZoneName::Built(name.split('.').map(Label::plain).collect(), s)
        }),
        1 => junk().prop_map(ZoneName::Raw),
    ]
    .boxed()
}

/// A record's name: labels before the zone's (a rule's front or back, or anything), or
/// arbitrary text.
#[derive(Debug, Clone)]
enum RecordName {
    InZone(Vec<Label>, Spelling),
    Raw(String),
}

fn rule_prefix() -> BoxedStrategy<Vec<Label>> {
    select(vec![
        "proxy.api",
        "api",
        "proxy.api.k8s",
        "api.k8s",
        "*.int",
        "ingress-int",
        "",
    ])
    .prop_map(|prefix| {
        prefix
            .split('.')
            .filter(|l| !l.is_empty())
            .map(Label::plain)
            .collect()
    })
    .boxed()
}

fn record_name() -> BoxedStrategy<RecordName> {
    let prefix = prop_oneof![
        6 => rule_prefix(),
        1 => vec(plain_label(), 1..3),
        2 => (rule_prefix(), hostile_label(), any::<usize>()).prop_map(|(mut labels, bad, at)| {
            let at = at % (labels.len() + 1);
            labels.insert(at, bad);
            labels
        }),
    ];
    prop_oneof![
        8 => (prefix, spelling()).prop_map(|(labels, s)| RecordName::InZone(labels, s)),
        1 => junk().prop_map(RecordName::Raw),
    ]
    .boxed()
}

/// The peering proxy's name in any spelling.
fn the_proxy() -> BoxedStrategy<String> {
    let proxy: Vec<Label> = PROXY.split('.').map(Label::plain).collect();
    spelling()
        .prop_map(move |s| spell(&proxy.iter().collect::<Vec<_>>(), &s))
        .boxed()
}

/// A CNAME target, A value or alias target: often the proxy, or anything.
fn target() -> BoxedStrategy<String> {
    prop_oneof![
        3 => the_proxy(),
        1 => select(vec!["10.0.0.1", "internal-a.elb.amazonaws.com", "tools.example.com"])
            .prop_map(String::from),
        1 => junk(),
        1 => (vec(prop_oneof![plain_label(), hostile_label()], 1..4), spelling())
            .prop_map(|(labels, s)| spell(&labels.iter().collect::<Vec<_>>(), &s)),
    ]
    .boxed()
}

fn record_type() -> BoxedStrategy<String> {
    prop_oneof![
        4 => Just("CNAME".to_owned()),
        4 => Just("A".to_owned()),
        1 => select(vec!["AAAA", "TXT", "cname", "a", ""]).prop_map(String::from),
        1 => junk(),
    ]
    .boxed()
}

#[derive(Debug, Clone)]
struct GenRecord {
    name: RecordName,
    rtype: String,
    values: Vec<String>,
    alias_target: Option<String>,
}

fn record() -> BoxedStrategy<GenRecord> {
    (
        record_name(),
        record_type(),
        vec(target(), 0..3),
        proptest::option::weighted(0.2, target()),
    )
        .prop_map(|(name, rtype, values, alias_target)| GenRecord {
            name,
            rtype,
            values,
            alias_target,
        })
        .boxed()
}

/// A rule's front and back records, mostly as the rule wants them (a CNAME to the proxy, a
/// back of the rule's type), sometimes of another type or pointing elsewhere.
fn rule_pair() -> BoxedStrategy<Vec<GenRecord>> {
    let other_type = || prop_oneof![6 => Just(None), 1 => record_type().prop_map(Some)];
    (
        select(DEFAULT_RULES.to_vec()),
        (spelling(), spelling()),
        (other_type(), prop_oneof![4 => the_proxy(), 1 => target()]),
        (
            other_type(),
            vec(target(), 0..2),
            proptest::option::weighted(0.3, target()),
        ),
    )
        .prop_map(|(rule, (front_spelling, back_spelling), front, back)| {
            let labels = |relative: &str| relative.split('.').map(Label::plain).collect();
            let (front_type, front_target) = front;
            let (back_type, values, alias_target) = back;
            vec![
                GenRecord {
                    name: RecordName::InZone(labels(rule.front), front_spelling),
                    rtype: front_type.unwrap_or_else(|| "CNAME".to_owned()),
                    values: vec![front_target],
                    alias_target: None,
                },
                GenRecord {
                    name: RecordName::InZone(labels(rule.back), back_spelling),
                    rtype: back_type.unwrap_or_else(|| rule.back_types[0].to_owned()),
                    values,
                    alias_target,
                },
            ]
        })
        .boxed()
}

#[derive(Debug, Clone)]
struct GenZone {
    account: String,
    id: String,
    name: ZoneName,
    private: bool,
    records: Vec<GenRecord>,
}

impl GenZone {
    /// The record's name as Route53 would return it, and whether it must be accepted.
    fn record_name(&self, name: &RecordName) -> (String, Option<bool>) {
        match (name, &self.name) {
            (RecordName::Raw(text), _) => (text.clone(), None),
            (RecordName::InZone(prefix, spelling), ZoneName::Built(zone, _)) => {
                let labels: Vec<&Label> = prefix.iter().chain(zone).collect();
                let plain = labels.iter().all(|l| l.plain);
                (spell(&labels, spelling), Some(plain))
            }
            (RecordName::InZone(prefix, spelling), ZoneName::Raw(zone)) => {
                let mut text = spell(&prefix.iter().collect::<Vec<_>>(), spelling);
                if !prefix.is_empty() && !text.ends_with('.') {
                    text.push('.');
                }
                text.push_str(zone);
                (text, None)
            }
        }
    }

    fn zone_records(&self) -> ZoneRecords {
        ZoneRecords {
            zone: Zone {
                account: self.account.clone(),
                id: self.id.clone(),
                name: self.name.text(),
                private: self.private,
            },
            records: self
                .records
                .iter()
                .map(|record| RecordSet {
                    name: self.record_name(&record.name).0,
                    rtype: record.rtype.clone(),
                    values: record.values.clone(),
                    alias_target: record.alias_target.clone(),
                })
                .collect(),
        }
    }
}

fn zone() -> BoxedStrategy<GenZone> {
    (
        select(vec!["111111111111", "222222222222", "333333333333"]),
        re("Z[0-9A-Z]{1,21}"),
        zone_name(),
        proptest::bool::weighted(0.9),
        vec(rule_pair(), 0..3),
        vec(record(), 0..6),
    )
        .prop_map(|(account, id, name, private, pairs, others)| GenZone {
            account: account.to_owned(),
            id,
            name,
            private,
            records: pairs.into_iter().flatten().chain(others).collect(),
        })
        .boxed()
}

// ---------------------------------------------------------------------------------------------
// What a clean config is

/// Labels of a-z 0-9 - _, none empty, at most 63 each and 253 in all: what `names.rs` admits
/// (without the wildcard, which never reaches a route).
fn is_host(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= 253
        && text.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
        })
}

/// A route's SNI: a host name, or for a suffix a dot and a host name.
fn is_sni(route: &Route) -> bool {
    match route.sni_match {
        SniMatch::Exact => is_host(&route.sni),
        SniMatch::Suffix => route.sni.strip_prefix('.').is_some_and(is_host),
    }
}

/// The provenance fields of a route line (rule, account, zone id): one token of letters,
/// digits, `-`, `_` and `.`.
fn is_token(text: &str) -> bool {
    !text.is_empty()
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
}

/// Every line of a config but the route lines and the two header lines that depend on them:
/// what no route may change.
fn skeleton(text: &str) -> Vec<&str> {
    text.split('\n')
        .filter(|line| {
            !line.starts_with(ROUTE_LINE)
                && !line.starts_with(SUFFIX_LINE)
                && !line.starts_with("# sha256: ")
                && !line.starts_with("# rules: ")
        })
        .collect()
}

fn route_lines(text: &str) -> Vec<&str> {
    text.split('\n')
        .filter(|line| line.starts_with(ROUTE_LINE) || line.starts_with(SUFFIX_LINE))
        .collect()
}

fn expected_line(route: &Route) -> String {
    let (prefix, key) = match route.sni_match {
        SniMatch::Exact => (ROUTE_LINE, route.sni.as_str()),
        SniMatch::Suffix => (
            SUFFIX_LINE,
            route.sni.strip_prefix('.').unwrap_or(&route.sni),
        ),
    };
    format!(
        "{prefix}{key} {}:{} {} {} {}",
        route.backend, route.port, route.rule, route.account, route.zone_id
    )
}

/// The checks every rendered config must pass whatever it was made from: no line added or
/// changed outside the route lines, one route line per route. (The renderer itself checks that
/// the header reads back.)
fn check_structure(text: &str, routes: &[Route], baseline: &[String]) -> Result<(), TestCaseError> {
    prop_assert!(!text.contains('\r'), "a carriage return in the config");
    prop_assert_eq!(
        skeleton(text),
        baseline,
        "a line outside the route table changed"
    );
    let lines = route_lines(text);
    let expected: Vec<String> = routes.iter().map(expected_line).collect();
    prop_assert_eq!(lines, expected, "the route lines are not one per route");
    Ok(())
}

/// What only allowed bytes in every value give: printable ASCII and newlines only, each route
/// line six fields of the allowed sets, and the route maps the apply document writes holding
/// exactly the routes.
fn check_clean(text: &str, routes: &[Route]) -> Result<(), TestCaseError> {
    if let Some(bad) = text
        .bytes()
        .find(|b| *b != b'\n' && !(0x20..0x7f).contains(b))
    {
        return Err(TestCaseError::fail(format!(
            "byte {bad:#04x} in the config: {:?}",
            route_lines(text)
        )));
    }
    for (line, route) in route_lines(text).iter().zip(routes) {
        prop_assert!(is_sni(route), "SNI {:?} reached the config", route.sni);
        prop_assert!(
            is_host(route.backend.as_str()),
            "backend {:?}",
            route.backend
        );
        for token in [&route.rule, &route.account, &route.zone_id] {
            prop_assert!(is_token(token), "{token:?} reached the config");
        }
        prop_assert_eq!(line.split(' ').count(), 6, "{}", line);
    }
    let (mut exact, mut suffixes) = (String::new(), String::new());
    for route in routes {
        let (table, key) = match route.sni_match {
            SniMatch::Exact => (&mut exact, route.sni.as_str()),
            SniMatch::Suffix => (&mut suffixes, route.sni.trim_start_matches('.')),
        };
        let _ = writeln!(table, "{key} {}:{}", route.backend, route.port);
    }
    prop_assert_eq!(MapFiles::route_tables(text), (exact, suffixes));
    Ok(())
}

/// The embedded template, as the generator's handler renders it.
struct Render {
    renderer: Renderer,
    resolvers: Vec<SocketAddr>,
    options: RenderOptions,
    baselines: RefCell<HashMap<u64, Vec<String>>>,
}

impl Render {
    fn new() -> Render {
        Render {
            renderer: Renderer::new(DEFAULT_TEMPLATE).unwrap(),
            resolvers: vec!["169.254.169.253:53".parse().unwrap()],
            options: RenderOptions::default(),
            baselines: RefCell::new(HashMap::new()),
        }
    }

    fn render(
        &self,
        routes: &[Route],
        generation: u64,
    ) -> Result<String, autoproxy::render::RenderError> {
        self.renderer
            .render(&RenderInput {
                routes,
                resolvers: &self.resolvers,
                options: &self.options,
                generation,
                generated_at: GENERATED_AT,
                trigger: "schedule",
            })
            .map(|rendered| rendered.text)
    }

    /// The skeleton of the config without routes, at this generation.
    fn baseline(&self, generation: u64) -> Vec<String> {
        self.baselines
            .borrow_mut()
            .entry(generation)
            .or_insert_with(|| {
                let text = self.render(&[], generation).unwrap();
                skeleton(&text).into_iter().map(str::to_owned).collect()
            })
            .clone()
    }
}

fn proxies() -> Vec<HostName> {
    vec![HostName::parse(PROXY).unwrap()]
}

/// A warning about a skipped name reads as an error: it says what was expected, on one line.
fn check_warning_text(warning: &Warning) -> Result<(), TestCaseError> {
    let text = warning.to_string();
    prop_assert!(
        text.contains("skipped: expected"),
        "unclear warning: {text}"
    );
    prop_assert!(
        !text.chars().any(char::is_control),
        "a control character in the warning {text:?}"
    );
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// 1. Route53 data → rendered config

#[test]
fn route53_data_reaches_the_config_only_as_plain_host_names() {
    let render = Render::new();
    let proxies = proxies();
    let tally = Tally::default();
    let line = check_property("route53→config", 1_000, vec(zone(), 1..=3), |estate| {
        let mut candidates = Vec::new();
        for zone in &estate {
            let data = zone.zone_records();
            let outcome = zone_routes(DEFAULT_RULES, &data, &proxies);
            if !zone.private {
                prop_assert!(outcome.routes.is_empty() && outcome.warnings.is_empty());
                continue;
            }
            let zone_ok = normalize(&data.zone.name).to_host().is_ok();
            if let Some(verdict) = zone.name.verdict() {
                prop_assert_eq!(zone_ok, verdict, "zone name {:?}", data.zone.name);
            }
            if !zone_ok {
                tally.add("zone names refused", 1);
                prop_assert!(outcome.routes.is_empty());
                prop_assert_eq!(outcome.warnings.len(), 1);
                prop_assert!(
                    matches!(outcome.warnings[0], Warning::ZoneName { .. }),
                    "{:?}",
                    outcome.warnings
                );
                check_warning_text(&outcome.warnings[0])?;
                continue;
            }
            // Every record name is accepted or named in a warning; where the generator
            // knows which, the validator agrees.
            let mut rejected = 0;
            for (record, set) in zone.records.iter().zip(&data.records) {
                let accepted = normalize(&set.name).to_host().is_ok();
                if let (_, Some(verdict)) = zone.record_name(&record.name) {
                    prop_assert_eq!(accepted, verdict, "record name {:?}", set.name);
                }
                rejected += usize::from(!accepted);
            }
            let named = outcome
                .warnings
                .iter()
                .filter(|w| matches!(w, Warning::RecordName { .. }))
                .count();
            prop_assert_eq!(named, rejected, "{:?}", outcome.warnings);
            tally.add("record names refused", rejected);
            tally.add("record names read", data.records.len() - rejected);
            for warning in &outcome.warnings {
                if matches!(warning, Warning::RecordName { .. }) {
                    check_warning_text(warning)?;
                }
            }
            for route in &outcome.routes {
                prop_assert!(is_sni(route), "SNI {:?}", route.sni);
                prop_assert!(is_host(route.backend.as_str()), "{:?}", route.backend);
            }
            candidates.extend(outcome.routes);
        }
        let (routes, conflicts) = resolve(candidates);
        tally.add("routes rendered", routes.len());
        tally.add("SNI conflicts", conflicts.len());
        let text = match render.render(&routes, NOW) {
            Ok(text) => text,
            Err(err) => return Err(TestCaseError::fail(format!("render failed: {err}"))),
        };
        check_structure(&text, &routes, &render.baseline(NOW))?;
        check_clean(&text, &routes)
    });
    println!("{line}: {tally}");
}

/// A zone with the API pair, every name in its own spelling, among noise that routes nothing.
#[derive(Debug, Clone)]
struct ApiZone {
    zone: Vec<Label>,
    spellings: [Spelling; 4],
    account: String,
    id: String,
    /// The back record as an alias (no values) or a plain A record.
    alias: bool,
    /// Extra records: hostile names (each a warning), and names no rule reads.
    noise: Vec<(Vec<Label>, String, String)>,
    shuffle: Vec<usize>,
}

fn api_zone() -> BoxedStrategy<ApiZone> {
    let lower = re("[a-z0-9_-]{1,20}").prop_map(|text| Label::plain(&text));
    let noise_name = prop_oneof![
        2 => hostile_label().prop_map(|l| vec![l]),
        1 => re("n[a-z0-9]{0,8}").prop_map(|text| vec![Label::plain(&text)]),
        1 => Just(vec![Label::plain("proxy"), Label::plain("api"), Label::plain("k8s")]),
        1 => Just(vec![Label::plain("*"), Label::plain("int")]),
    ];
    (
        vec(lower, 1..=4),
        [spelling(), spelling(), spelling(), spelling()],
        re("[0-9]{12}"),
        re("Z[0-9A-Z]{1,21}"),
        any::<bool>(),
        vec((noise_name, record_type(), junk()), 0..6),
        vec(any::<usize>(), 8),
    )
        .prop_map(
            |(zone, spellings, account, id, alias, noise, shuffle)| ApiZone {
                zone,
                spellings,
                account,
                id,
                alias,
                noise,
                shuffle,
            },
        )
        .boxed()
}

#[test]
fn a_well_formed_api_pair_always_routes_whatever_its_spelling() {
    let render = Render::new();
    let proxies = proxies();
    let line = check_property("route53 api pair→route", 500, api_zone(), |case| {
        let zone: Vec<&Label> = case.zone.iter().collect();
        let with = |prefix: &[&str], spelling: &Spelling| {
            let front: Vec<Label> = prefix.iter().map(|l| Label::plain(l)).collect();
            let labels: Vec<&Label> = front.iter().chain(zone.iter().copied()).collect();
            spell(&labels, spelling)
        };
        let proxy: Vec<Label> = PROXY.split('.').map(Label::plain).collect();
        let proxy = spell(&proxy.iter().collect::<Vec<_>>(), &case.spellings[3]);
        let back_name = with(&["api"], &case.spellings[1]);
        let mut records = vec![
            RecordSet::new(
                &with(&["proxy", "api"], &case.spellings[0]),
                "CNAME",
                &[&proxy],
            ),
            if case.alias {
                RecordSet::alias(&back_name, "A", "nlb.elb.amazonaws.com.")
            } else {
                RecordSet::new(&back_name, "A", &["10.0.0.1"])
            },
        ];
        let mut hostile = 0;
        for (prefix, rtype, value) in &case.noise {
            let labels: Vec<&Label> = prefix.iter().chain(zone.iter().copied()).collect();
            hostile += usize::from(prefix.iter().any(|l| !l.plain));
            // A front of another rule never points at the proxy here.
            let value = if value.contains("peering-proxy") {
                "elsewhere"
            } else {
                value
            };
            records.push(RecordSet::new(
                &spell(&labels, &case.spellings[2]),
                rtype,
                &[value],
            ));
        }
        let count = records.len();
        for (i, pick) in case.shuffle.iter().enumerate().take(count) {
            records.swap(i, pick % count);
        }
        let data = ZoneRecords {
            zone: Zone {
                account: case.account.clone(),
                id: case.id.clone(),
                name: spell(&zone, &case.spellings[2]),
                private: true,
            },
            records,
        };
        let outcome = zone_routes(DEFAULT_RULES, &data, &proxies);
        let name: Vec<&str> = case
            .zone
            .iter()
            .map(|l| std::str::from_utf8(&l.bytes).unwrap())
            .collect();
        let name = name.join(".");
        let warned = outcome
            .warnings
            .iter()
            .filter(|w| matches!(w, Warning::RecordName { .. }))
            .count();
        prop_assert_eq!(warned, hostile, "{:?}", outcome.warnings);
        prop_assert_eq!(outcome.warnings.len(), hostile, "{:?}", outcome.warnings);
        let (routes, conflicts) = resolve(outcome.routes);
        prop_assert!(conflicts.is_empty());
        prop_assert_eq!(routes.len(), 1, "{:?}", routes);
        let route = &routes[0];
        prop_assert_eq!(route.rule.as_str(), "api");
        prop_assert_eq!(route.sni_match, SniMatch::Exact);
        prop_assert_eq!(&route.sni, &format!("proxy.api.{name}"));
        prop_assert_eq!(route.backend.as_str(), format!("api.{name}"));
        prop_assert_eq!(route.port, 443);
        let text = match render.render(&routes, NOW) {
            Ok(text) => text,
            Err(err) => return Err(TestCaseError::fail(format!("render failed: {err}"))),
        };
        prop_assert_eq!(
            route_lines(&text),
            vec![format!(
                "#@route proxy.api.{name} api.{name}:443 api {} {}",
                case.account, case.id
            )]
        );
        check_clean(&text, &routes)
    });
    println!("{line}");
}

// ---------------------------------------------------------------------------------------------
// 2. Events → trigger, S3 events → dispatch

/// A field: missing, a typical value, or any JSON value.
fn field(typical: BoxedStrategy<String>) -> BoxedStrategy<Option<Value>> {
    prop_oneof![
        1 => Just(None),
        14 => typical.prop_map(|s| Some(Value::String(s))),
        1 => json().prop_map(Some),
    ]
    .boxed()
}

/// A well-formed value with one character put in, or one changed.
fn near(valid: BoxedStrategy<String>) -> BoxedStrategy<String> {
    let odd = prop_oneof![
        3 => select(vec![
            '.', ' ', '\n', '/', '-', '_', ':', '\0', '١', '１', 'Ｚ', 'é', '\u{a0}', '#', '*',
        ]),
        1 => any::<char>(),
    ];
    (valid, odd, any::<usize>(), any::<bool>())
        .prop_map(|(text, odd, at, replace)| {
            let mut chars: Vec<char> = text.chars().collect();
            let at = at % (chars.len() + 1);
            if replace && at < chars.len() {
                chars[at] = odd;
            } else {
                chars.insert(at, odd);
            }
            chars.into_iter().collect()
        })
        .boxed()
}

fn account_id() -> BoxedStrategy<String> {
    prop_oneof![
        12 => re("[0-9]{12}"),
        3 => near(re("[0-9]{12}")),
        1 => re("[0-9]{0,11}"),
        1 => re("[0-9]{13,20}"),
        2 => select(vec![
            "١٢٣٤٥٦٧٨٩٠١٢", " 12345678901", "12345678901\n", "123456789012 ", "0x1234567890",
            "-12345678901", "+12345678901", "1234567890１２", "12345678901\u{0}",
        ])
        .prop_map(String::from),
        1 => junk(),
    ]
    .boxed()
}

fn zone_id() -> BoxedStrategy<String> {
    prop_oneof![
        6 => re("Z[0-9A-Z]{1,30}"),
        6 => re("/hostedzone/Z[0-9A-Za-z]{1,30}"),
        4 => near(re("(/hostedzone/)?Z[0-9A-Z]{1,30}")),
        2 => select(vec![
            "/hostedzone/../x", "/hostedzone/", "", "/", "..", "/hostedzone/Z1/", "Z1; rm -rf /",
            "/hostedzone/Z1 ", "Z\u{0}1", "/change/C0EXAMPLE", "../../../etc/passwd", "Z1\nZ2",
            "Ｚ１", "/hostedzone/Z1%2F..", "Z1\\", "/hostedzone/é",
        ])
        .prop_map(String::from),
        1 => re("(/hostedzone/)?[ -~]{0,40}"),
        1 => re("[Zz][0-9a-z]{31,40}"),
        1 => junk(),
    ]
    .boxed()
}

/// An EventBridge event shaped like the ones the generator takes, each field missing, typical
/// or any JSON value.
fn eventbridge() -> BoxedStrategy<Value> {
    let detail_type = prop_oneof![
        8 => Just("AWS API Call via CloudTrail".to_owned()),
        2 => Just("Scheduled Event".to_owned()),
        1 => junk(),
    ]
    .boxed();
    let source = prop_oneof![
        8 => Just("aws.route53".to_owned()),
        1 => select(vec!["aws.events", "aws.ec2", "AWS.ROUTE53", "aws.route53 "])
            .prop_map(String::from),
        1 => junk(),
    ]
    .boxed();
    let event_name = prop_oneof![
        8 => select(ROUTE53_EVENTS.to_vec()).prop_map(String::from),
        1 => select(vec!["ListHostedZones", "changeresourcerecordsets", ""]).prop_map(String::from),
        1 => junk(),
    ]
    .boxed();
    (
        (field(detail_type), field(source), field(account_id())),
        (field(event_name), field(account_id())),
        (field(zone_id()), field(zone_id()), field(zone_id())),
        proptest::option::weighted(0.1, json()),
        proptest::option::weighted(0.1, json()),
        proptest::option::weighted(0.2, (key(), json())),
        proptest::option::weighted(0.05, (0_usize..5, huge())),
    )
        .prop_map(
            |(
                (mut detail_type, source, mut account),
                (event_name, mut recipient),
                (mut hosted_zone_id, id, mut response_id),
                detail_instead,
                parameters_instead,
                extra,
                huge,
            )| {
                if let Some((which, text)) = huge {
                    let text = Some(Value::String(text));
                    match which {
                        0 => account = text,
                        1 => recipient = text,
                        2 => hosted_zone_id = text,
                        3 => response_id = text,
                        _ => detail_type = text,
                    }
                }
                let mut parameters = serde_json::Map::new();
                put(&mut parameters, "hostedZoneId", hosted_zone_id);
                put(&mut parameters, "id", id);
                let mut detail = serde_json::Map::new();
                put(&mut detail, "eventName", event_name);
                put(&mut detail, "recipientAccountId", recipient);
                detail.insert(
                    "requestParameters".into(),
                    parameters_instead.unwrap_or(Value::Object(parameters)),
                );
                if let Some(id) = response_id {
                    detail.insert("responseElements".into(), json!({"hostedZone": {"id": id}}));
                }
                let mut event = serde_json::Map::new();
                event.insert("version".into(), json!("0"));
                put(&mut event, "detail-type", detail_type);
                put(&mut event, "source", source);
                put(&mut event, "account", account);
                event.insert(
                    "detail".into(),
                    detail_instead.unwrap_or(Value::Object(detail)),
                );
                if let Some((key, value)) = extra {
                    event.insert(key, value);
                }
                Value::Object(event)
            },
        )
        .boxed()
}

fn put(map: &mut serde_json::Map<String, Value>, key: &str, value: Option<Value>) {
    if let Some(value) = value {
        map.insert(key.to_owned(), value);
    }
}

/// `{"dry_run": …, "force": …}`, each missing, a bool or anything, and now and then a key more.
fn manual() -> BoxedStrategy<Value> {
    let flag = prop_oneof![
        1 => Just(None),
        4 => any::<bool>().prop_map(|b| Some(Value::Bool(b))),
        1 => json().prop_map(Some),
    ];
    (
        flag.clone(),
        flag,
        proptest::option::weighted(0.2, (key(), json())),
    )
        .prop_map(|(dry_run, force, extra)| {
            let mut object = serde_json::Map::new();
            put(&mut object, "dry_run", dry_run);
            put(&mut object, "force", force);
            if let Some((key, value)) = extra {
                object.insert(key, value);
            }
            Value::Object(object)
        })
        .boxed()
}

fn generator_payload() -> BoxedStrategy<Value> {
    prop_oneof![
        6 => eventbridge(),
        1 => manual(),
        1 => json(),
        1 => (eventbridge(), vec(mutation(), 1..4)).prop_map(|(mut event, mutations)| {
            for m in &mutations {
                mutate(&mut event, m);
            }
            event
        }),
    ]
    .boxed()
}

/// The last `/`-separated part of a zone id, as the hint should carry it.
fn bare_upper(raw: &str) -> String {
    raw.rsplit('/').next().unwrap_or(raw).to_ascii_uppercase()
}

fn check_trigger(payload: &Value, tally: &Tally) -> Result<(), TestCaseError> {
    let detail_type = payload.get("detail-type").and_then(Value::as_str);
    let parsed = trigger::parse(payload);
    tally.add(
        match &parsed {
            Ok(Trigger::Schedule) => "schedule",
            Ok(Trigger::Manual { .. }) => "manual",
            Ok(Trigger::Route53 { .. }) => "zone hint",
            Err(TriggerError::Unrecognised { .. }) => "refused (shape)",
            Err(TriggerError::Route53 { .. }) => "refused (route53 field)",
        },
        1,
    );
    match parsed {
        Ok(Trigger::Schedule) => prop_assert_eq!(detail_type, Some("Scheduled Event")),
        Ok(Trigger::Manual { dry_run, force }) => {
            let object = payload.as_object();
            prop_assert!(object.is_some());
            let object = object.unwrap();
            for (key, value) in object {
                prop_assert!(
                    (key == "dry_run" || key == "force") && value.is_boolean(),
                    "accepted {key:?}: {value}"
                );
            }
            let flag = |name: &str| object.get(name).and_then(Value::as_bool).unwrap_or(false);
            prop_assert_eq!((dry_run, force), (flag("dry_run"), flag("force")));
        }
        Ok(Trigger::Route53 { event_name, zone }) => {
            prop_assert_eq!(detail_type, Some("AWS API Call via CloudTrail"));
            prop_assert_eq!(payload["source"].as_str(), Some("aws.route53"));
            prop_assert!(ROUTE53_EVENTS.contains(&event_name.as_str()));
            let account = &zone.account;
            prop_assert!(
                account.len() == 12 && account.bytes().all(|b| b.is_ascii_digit()),
                "account {account:?} accepted"
            );
            let id = &zone.id;
            prop_assert!(
                !id.is_empty()
                    && id.len() <= 32
                    && id
                        .bytes()
                        .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit()),
                "zone id {id:?} accepted"
            );
            let detail = &payload["detail"];
            prop_assert!(
                [
                    detail["recipientAccountId"].as_str(),
                    payload["account"].as_str()
                ]
                .contains(&Some(account.as_str())),
                "account {account:?} is not the event's"
            );
            let ids = [
                &detail["requestParameters"]["hostedZoneId"],
                &detail["requestParameters"]["id"],
                &detail["responseElements"]["hostedZone"]["id"],
            ];
            prop_assert!(
                ids.iter()
                    .filter_map(|v| v.as_str())
                    .any(|raw| bare_upper(raw) == *id),
                "zone id {id:?} is not the event's"
            );
        }
        Err(err) => {
            let message = err.to_string();
            prop_assert!(message.starts_with("expected "), "{message}");
            prop_assert!(message.contains("; got "), "{message}");
            prop_assert!(
                !message.contains('\n') && !message.contains('\r'),
                "a line break in {message:?}"
            );
            match err {
                TriggerError::Unrecognised { .. } => {
                    for shape in [
                        "\"Scheduled Event\"",
                        "AWS API Call via CloudTrail",
                        "dry_run",
                    ] {
                        prop_assert!(message.contains(shape), "{message}");
                    }
                }
                TriggerError::Route53 { expected, .. } => {
                    prop_assert!(message.contains(expected), "{message}");
                    prop_assert!(
                        ["12-digit account", "hosted zone id", "zone-changing calls"]
                            .iter()
                            .any(|what| expected.contains(what)),
                        "{message}"
                    );
                }
            }
        }
    }
    Ok(())
}

#[test]
fn generator_events_are_accepted_only_when_well_formed() {
    let tally = Tally::default();
    let line = check_property("events→trigger", 2_000, generator_payload(), |payload| {
        check_trigger(&payload, &tally)
    });
    println!("{line}: {tally}");
}

/// An S3 event record and, when every field is well formed, what `dispatches` must make of it.
#[derive(Debug, Clone)]
struct S3Record {
    value: Value,
    /// `Some(Some(version))`: dispatch this version; `Some(None)`: ignore; `None`: unknown.
    expected: Option<Option<String>>,
}

/// The config key as S3 may encode it (true), or another key (false).
fn object_key() -> BoxedStrategy<(String, bool)> {
    let encoded: String = CONFIG_KEY.bytes().map(|b| format!("%{b:02X}")).collect();
    prop_oneof![
        3 => Just((CONFIG_KEY.to_owned(), true)),
        1 => select(vec![
            "haproxy%2Fhaproxy.cfg", "haproxy%2fhaproxy%2ecfg", "%68aproxy/haproxy.cfg",
        ])
        .prop_map(|k| (k.to_owned(), true)),
        1 => Just((encoded, true)),
        2 => select(vec![
            "haproxy/haproxy.manifest.json", "haproxy/haproxy.cfg.tmp", "haproxy/haproxy+cfg",
            "haproxy/haproxy.cfg%00", "HAPROXY/haproxy.cfg", "haproxy/haproxy.fleet/i-1.json",
            "%zz", "%ff%fe", "haproxy/haproxy.cfg ", "",
        ])
        .prop_map(|k| (k.to_owned(), false)),
    ]
    .boxed()
}

fn s3_record() -> BoxedStrategy<S3Record> {
    let well_formed = (
        select(vec![
            "ObjectCreated:Put",
            "ObjectCreated:CompleteMultipartUpload",
            "ObjectCreated:Copy",
            "ObjectRemoved:Delete",
            "ObjectRemoved:DeleteMarkerCreated",
        ]),
        object_key(),
        re("[A-Za-z0-9._]{1,32}"),
    )
        .prop_map(|(event_name, (key, is_config), version)| {
            let value = json!({
                "eventVersion": "2.1", "eventSource": "aws:s3", "awsRegion": "us-east-1",
                "eventTime": "2026-11-23T03:14:03.000Z", "eventName": event_name,
                "userIdentity": {"principalId": "AWS:AROAEXAMPLE"},
                "requestParameters": {"sourceIPAddress": "10.0.0.1"}, "responseElements": {},
                "s3": {"s3SchemaVersion": "1.0", "configurationId": "autoproxy",
                       "bucket": {"name": "config-bucket", "arn": "arn:aws:s3:::config-bucket"},
                       "object": {"key": key, "size": 20, "versionId": version, "sequencer": "0A"}}
            });
            let created = event_name.starts_with("ObjectCreated:");
            S3Record {
                value,
                expected: Some((created && is_config).then_some(version)),
            }
        })
        .boxed();
    prop_oneof![
        3 => well_formed.clone(),
        2 => (well_formed.clone(), s3_edge()).prop_map(|(mut record, (path, new))| {
            let (last, parent) = path.split_last().unwrap();
            let steps: Vec<Step> = parent.iter().map(|k| Step::Key((*k).to_owned())).collect();
            if let Some(Value::Object(map)) = node_mut(&mut record.value, &steps) {
                match new {
                    Some(new) => map.insert((*last).to_owned(), new),
                    None => map.remove(*last),
                };
            }
            S3Record { value: record.value, expected: None }
        }),
        2 => (well_formed, vec(mutation(), 1..3)).prop_map(|(mut record, mutations)| {
            for m in &mutations {
                mutate(&mut record.value, m);
            }
            S3Record { value: record.value, expected: None }
        }),
        1 => json().prop_map(|value| S3Record { value, expected: None }),
    ]
    .boxed()
}

/// One field of an S3 record at an edge: missing (`None`), null, empty, of another type or
/// almost right.
fn s3_edge() -> BoxedStrategy<(Vec<&'static str>, Option<Value>)> {
    let edges = |path: &[&'static str], values: Vec<Option<Value>>| {
        let path = path.to_vec();
        select(values).prop_map(move |value| (path.clone(), value))
    };
    prop_oneof![
        edges(
            &["s3", "object", "versionId"],
            vec![
                None,
                Some(json!(null)),
                Some(json!("")),
                Some(json!(7)),
                Some(json!([]))
            ]
        ),
        edges(
            &["eventName"],
            vec![
                None,
                Some(json!(null)),
                Some(json!("ObjectCreated")),
                Some(json!("objectcreated:put")),
                Some(json!("ObjectCreated:*")),
                Some(json!(1))
            ]
        ),
        edges(
            &["s3", "object", "key"],
            vec![
                None,
                Some(json!(null)),
                Some(json!("")),
                Some(json!("haproxy/haproxy.cfg\u{0}")),
                Some(json!(["haproxy/haproxy.cfg"]))
            ]
        ),
        edges(
            &["s3", "bucket", "name"],
            vec![None, Some(json!(null)), Some(json!("")), Some(json!({}))]
        ),
        edges(
            &["eventTime"],
            vec![
                None,
                Some(json!("yesterday")),
                Some(json!(0)),
                Some(json!(null))
            ]
        ),
        edges(&["s3"], vec![None, Some(json!(null)), Some(json!({}))]),
        edges(&["userIdentity"], vec![None, Some(json!("x"))]),
        edges(
            &["responseElements"],
            vec![None, Some(json!(null)), Some(json!({"x": 1}))]
        ),
    ]
    .boxed()
}

/// An invocation payload of the configure function and, when known, the dispatches it holds
/// (the versions, in order, duplicates dropped) and how many keys it ignores.
#[derive(Debug, Clone)]
struct S3Case {
    payload: Value,
    expected: Option<(Vec<String>, usize)>,
}

fn configure_payload() -> BoxedStrategy<S3Case> {
    let unknown = |payload| S3Case {
        payload,
        expected: None,
    };
    prop_oneof![
        6 => vec(s3_record(), 1..4).prop_map(|records| {
            let expected = records
                .iter()
                .map(|r| r.expected.clone())
                .collect::<Option<Vec<_>>>()
                .map(|outcomes| {
                    let mut versions: Vec<String> = Vec::new();
                    let mut ignored = 0;
                    for outcome in outcomes {
                        match outcome {
                            Some(v) if !versions.contains(&v) => versions.push(v),
                            Some(_) => {}
                            None => ignored += 1,
                        }
                    }
                    (versions, ignored)
                });
            let records: Vec<Value> = records.into_iter().map(|r| r.value).collect();
            let payload = json!({ "Records": records });
            S3Case { payload, expected }
        }),
        1 => Just(unknown(json!({"Records": []}))),
        1 => Just(unknown(json!({"fleet": true}))),
        1 => json().prop_map(move |v| unknown(json!({"fleet": v}))),
        1 => (key(), json()).prop_map(move |(k, v)| {
            let mut object = serde_json::Map::new();
            object.insert("fleet".into(), Value::Bool(true));
            object.insert(k, v);
            unknown(Value::Object(object))
        }),
        1 => json().prop_map(move |v| unknown(json!({"Records": v}))),
        1 => json().prop_map(unknown),
    ]
    .boxed()
}

fn check_dispatch(case: &S3Case, tally: &Tally) -> Result<(), TestCaseError> {
    let payload = &case.payload;
    let fleet = is_fleet_request(payload);
    tally.add("fleet", usize::from(fleet));
    prop_assert_eq!(fleet, *payload == json!({"fleet": true}));
    let result = dispatches(payload, CONFIG_KEY);
    match &result {
        Ok((wanted, ignored)) => {
            tally.add("dispatched", wanted.len());
            tally.add("ignored", ignored.len());
        }
        Err(_) => tally.add("refused", 1),
    }
    match result {
        Ok((wanted, ignored)) => {
            let records = payload["Records"].as_array().map_or(0, Vec::len);
            prop_assert!(records > 0, "accepted without records: {payload}");
            prop_assert!(wanted.len() + ignored.len() <= records);
            for (index, dispatch) in wanted.iter().enumerate() {
                prop_assert_eq!(dispatch.key.as_str(), CONFIG_KEY);
                prop_assert!(!dispatch.version_id.is_empty());
                prop_assert!(!wanted[..index].contains(dispatch), "dispatched twice");
            }
            if let Some((versions, ignored_count)) = &case.expected {
                let expected: Vec<Dispatch> = versions
                    .iter()
                    .map(|version| Dispatch {
                        bucket: "config-bucket".into(),
                        key: CONFIG_KEY.into(),
                        version_id: version.clone(),
                    })
                    .collect();
                prop_assert_eq!(&wanted, &expected);
                prop_assert_eq!(ignored.len(), *ignored_count);
            }
        }
        Err(err) => {
            prop_assert!(
                case.expected.is_none(),
                "a well-formed event refused: {err}"
            );
            let message = err.to_string();
            prop_assert!(
                message.starts_with("expected an S3 event notification"),
                "{message}"
            );
            prop_assert!(message.contains("{\"fleet\": true}"), "{message}");
            prop_assert!(message.ends_with("nothing was sent"), "{message}");
            prop_assert!(!message.contains('\n'), "a line break in {message:?}");
            // The payload is echoed cut to 300 bytes.
            prop_assert!(message.len() < 600, "{} bytes", message.len());
        }
    }
    Ok(())
}

#[test]
fn configure_payloads_dispatch_only_the_config_key() {
    let tally = Tally::default();
    let line = check_property("s3 event→dispatch", 2_000, configure_payload(), |case| {
        check_dispatch(&case, &tally)
    });
    println!("{line}: {tally}");
}

// ---------------------------------------------------------------------------------------------
// 3. Manifests → merge → render

/// A manifest as the generator writes it: each zone with both rules' routes.
fn valid_manifest() -> BoxedStrategy<Manifest> {
    let zone = (
        vec(re("[a-z0-9-]{1,12}"), 1..4),
        select(vec!["111111111111", "222222222222"]),
        re("Z[0-9A-Z]{1,21}"),
    );
    (vec(zone, 1..4), 0..=NOW)
        .prop_map(|(zones, generation)| {
            let mut manifest = Manifest {
                generation,
                ..Manifest::default()
            };
            for (labels, account, id) in zones {
                let name = labels.join(".");
                let zone_name = HostName::parse(&name).unwrap();
                let route = |rule: &str, sni: String, sni_match, back: &str| Route {
                    rule: rule.to_owned(),
                    account: account.to_owned(),
                    zone_id: id.clone(),
                    zone_name: zone_name.clone(),
                    sni,
                    sni_match,
                    backend: zone_name.with_prefix(back),
                    port: 443,
                    records: vec![zone_name.with_prefix(back)],
                };
                let routes = vec![
                    route("api", format!("proxy.api.{name}"), SniMatch::Exact, "api"),
                    route(
                        "ingress-int",
                        format!(".int.{name}"),
                        SniMatch::Suffix,
                        "ingress-int",
                    ),
                ];
                let zone = Zone {
                    account: account.to_owned(),
                    id: id.clone(),
                    name: format!("{name}."),
                    private: true,
                };
                manifest
                    .zones
                    .insert(zone_key(&zone.key()), ZoneEntry::new(&zone, routes, vec![]));
            }
            manifest
        })
        .boxed()
}

/// A stored manifest's text: a valid one changed in a few places (text put into its strings,
/// which keeps it loadable, or any change), or any JSON.
fn manifest_text() -> BoxedStrategy<String> {
    let splice = (any::<usize>(), any::<usize>(), hostile())
        .prop_map(|(n, at, text)| Mutation::Splice(n, at, text));
    let changed = |mutations: BoxedStrategy<Vec<Mutation>>| {
        (valid_manifest(), mutations).prop_map(|(manifest, mutations)| {
            let mut value = serde_json::to_value(&manifest).unwrap();
            for m in &mutations {
                mutate(&mut value, m);
            }
            value.to_string()
        })
    };
    prop_oneof![
        5 => changed(vec(splice, 1..4).boxed()),
        4 => changed(vec(mutation(), 1..4).boxed()),
        1 => valid_manifest().prop_map(|m| m.to_json()),
        1 => json().prop_map(|mut value| {
            if let Some(object) = value.as_object_mut() {
                object.insert("format".into(), json!(1));
            }
            value.to_string()
        }),
    ]
    .boxed()
}

/// What the generator does with a stored manifest before rendering: the sweep merges it (here
/// an event for a zone of an account not configured, so nothing is read), the ownership rules
/// pick the zones that may route, then the routes are resolved and numbered from it.
fn merge_and_resolve(
    runtime: &tokio::runtime::Runtime,
    manifest: &Manifest,
) -> Result<(Vec<Route>, u64), TestCaseError> {
    let proxies = proxies();
    let ignore = IgnoreZones::default();
    let matching = Matching {
        rules: DEFAULT_RULES,
        proxies: &proxies,
        ignore: &ignore,
    };
    let hint = ZoneKey {
        account: "999999999999".into(),
        id: "ZHINT".into(),
    };
    let swept = runtime
        .block_on(discovery::sweep(
            &[],
            Some(manifest),
            &Scope::Zones(vec![hint]),
            matching,
            None,
        ))
        .map_err(|err| TestCaseError::fail(format!("the merge failed: {err}")))?;
    prop_assert_eq!(
        &swept.manifest.zones,
        &manifest.zones,
        "the merge lost zones"
    );
    let owned = ownership::owned_routes(
        &swept.manifest.zones,
        &manifest.holders,
        ownership::Mode::FirstHolder,
    );
    let (routes, _conflicts) = resolve(owned.candidates);
    Ok((routes, publish::next_generation(manifest.generation, NOW)))
}

/// `Some((routes, config))` when the manifest loads and renders, `None` when it is refused (or
/// of another format); the refusals are checked to say why.
fn load_and_render(
    text: &str,
    runtime: &tokio::runtime::Runtime,
    render: &Render,
    tally: &Tally,
) -> Result<Option<(Vec<Route>, String, u64)>, TestCaseError> {
    let manifest = match Manifest::from_json(text) {
        Ok(Some(manifest)) => manifest,
        Ok(None) => {
            tally.add("other format", 1);
            let value: Value = serde_json::from_str(text).unwrap();
            prop_assert!(value.get("format") != Some(&json!(1)), "{text}");
            return Ok(None);
        }
        Err(err) => {
            tally.add("refused on load", 1);
            prop_assert!(!err.to_string().is_empty());
            return Ok(None);
        }
    };
    prop_assert!(manifest.generation <= artifact::MAX_GENERATION);
    let (routes, generation) = merge_and_resolve(runtime, &manifest)?;
    match render.render(&routes, generation) {
        Ok(config) => {
            tally.add("rendered", 1);
            Ok(Some((routes, config, generation)))
        }
        Err(err) => {
            tally.add("refused by the renderer", 1);
            let message = err.to_string();
            prop_assert!(
                message.contains("refusing to write") && message.contains("it contains"),
                "unclear refusal: {message}"
            );
            Ok(None)
        }
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap()
}

#[test]
fn manifests_never_panic_or_inject_a_line() {
    let render = Render::new();
    let runtime = runtime();
    let tally = Tally::default();
    let line = check_property(
        "manifest→config (structure)",
        1_000,
        manifest_text(),
        |text| {
            if let Some((routes, config, generation)) =
                load_and_render(&text, &runtime, &render, &tally)?
            {
                check_structure(&config, &routes, &render.baseline(generation))?;
            }
            Ok(())
        },
    );
    println!("{line}: {tally}");
}

#[test]
fn manifest_values_reach_the_config_only_when_clean() {
    let render = Render::new();
    let runtime = runtime();
    let tally = Tally::default();
    let line = check_property("manifest→config (bytes)", 1_000, manifest_text(), |text| {
        if let Some((routes, config, generation)) =
            load_and_render(&text, &runtime, &render, &tally)?
        {
            check_structure(&config, &routes, &render.baseline(generation))?;
            check_clean(&config, &routes)?;
        }
        Ok(())
    });
    println!("{line}: {tally}");
}
