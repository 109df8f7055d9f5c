//! Route53 names as Route53 spells them (any case, `\\ddd` escapes, trailing dots), plain or hostile, and zones of records built from them.

use super::*;

/// One label as bytes, and whether it is a plain host-name label, so that a name built only
/// of plain labels must be accepted and one with any other label must be rejected.
#[derive(Debug, Clone)]
pub(super) struct Label {
    pub(super) bytes: Vec<u8>,
    pub(super) plain: bool,
}

impl Label {
    pub(super) fn plain(text: &str) -> Label {
        Label {
            bytes: text.as_bytes().to_vec(),
            plain: true,
        }
    }
}

/// How a name is spelled: per character, escaped as `\ddd` or not and upper-cased or not (the
/// choices cycle), and whether it ends with a dot.
#[derive(Debug, Clone)]
pub(super) struct Spelling {
    pub(super) choices: Vec<u8>,
    pub(super) trailing_dot: bool,
}

pub(super) fn spelling() -> BoxedStrategy<Spelling> {
    (vec(any::<u8>(), 1..12), any::<bool>())
        .prop_map(|(choices, trailing_dot)| Spelling {
            choices,
            trailing_dot,
        })
        .boxed()
}

pub(super) fn is_plain_byte(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || byte == b'-' || byte == b'_'
}

/// The name as Route53 (or a caller) may write it: every byte outside a-z 0-9 - _ as `\ddd`
/// (a few printable ones raw, as a caller may send them), plain bytes in any case and
/// sometimes escaped too.
pub(super) fn spell(labels: &[&Label], spelling: &Spelling) -> String {
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

pub(super) fn plain_label() -> BoxedStrategy<Label> {
    prop_oneof![
        1 => select(vec!["example", "internal", "a", "k8s", "int", "api"]).prop_map(Label::plain),
        3 => re("[a-zA-Z0-9_-]{1,20}").prop_map(|text| Label::plain(&text)),
    ]
    .boxed()
}

/// A label with at least one byte that no host name may carry (after decoding).
pub(super) fn hostile_label() -> BoxedStrategy<Label> {
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
pub(super) enum ZoneName {
    Built(Vec<Label>, Spelling),
    Raw(String),
}

impl ZoneName {
    pub(super) fn text(&self) -> String {
        match self {
            ZoneName::Built(labels, spelling) => {
                spell(&labels.iter().collect::<Vec<_>>(), spelling)
            }
            ZoneName::Raw(text) => text.clone(),
        }
    }

    /// Whether the name must be accepted (`None`: arbitrary text, no independent verdict).
    pub(super) fn verdict(&self) -> Option<bool> {
        match self {
            ZoneName::Built(labels, _) => Some(labels.iter().all(|l| l.plain)),
            ZoneName::Raw(_) => None,
        }
    }
}

pub(super) fn zone_name() -> BoxedStrategy<ZoneName> {
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
pub(super) enum RecordName {
    InZone(Vec<Label>, Spelling),
    Raw(String),
}

pub(super) fn rule_prefix() -> BoxedStrategy<Vec<Label>> {
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

pub(super) fn record_name() -> BoxedStrategy<RecordName> {
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
pub(super) fn the_proxy() -> BoxedStrategy<String> {
    let proxy: Vec<Label> = PROXY.split('.').map(Label::plain).collect();
    spelling()
        .prop_map(move |s| spell(&proxy.iter().collect::<Vec<_>>(), &s))
        .boxed()
}

/// A CNAME target, A value or alias target: often the proxy, or anything.
pub(super) fn target() -> BoxedStrategy<String> {
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

pub(super) fn record_type() -> BoxedStrategy<String> {
    prop_oneof![
        4 => Just("CNAME".to_owned()),
        4 => Just("A".to_owned()),
        1 => select(vec!["AAAA", "TXT", "cname", "a", ""]).prop_map(String::from),
        1 => junk(),
    ]
    .boxed()
}

#[derive(Debug, Clone)]
pub(super) struct GenRecord {
    pub(super) name: RecordName,
    pub(super) rtype: String,
    pub(super) values: Vec<String>,
    pub(super) alias_target: Option<String>,
}

pub(super) fn record() -> BoxedStrategy<GenRecord> {
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
pub(super) fn rule_pair() -> BoxedStrategy<Vec<GenRecord>> {
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
                    name: RecordName::InZone(labels(&rule.front), front_spelling),
                    rtype: front_type.unwrap_or_else(|| "CNAME".to_owned()),
                    values: vec![front_target],
                    alias_target: None,
                },
                GenRecord {
                    name: RecordName::InZone(labels(&rule.back), back_spelling),
                    rtype: back_type.unwrap_or_else(|| rule.back_types[0].as_str().to_owned()),
                    values,
                    alias_target,
                },
            ]
        })
        .boxed()
}

#[derive(Debug, Clone)]
pub(super) struct GenZone {
    pub(super) account: String,
    pub(super) id: String,
    pub(super) name: ZoneName,
    pub(super) private: bool,
    pub(super) records: Vec<GenRecord>,
}

impl GenZone {
    /// The record's name as Route53 would return it, and whether it must be accepted.
    pub(super) fn record_name(&self, name: &RecordName) -> (String, Option<bool>) {
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

    pub(super) fn zone_records(&self) -> ZoneRecords {
        ZoneRecords {
            unnamed_left: 0,
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
                    set_identifier: None,
                })
                .collect(),
        }
    }
}

pub(super) fn zone() -> BoxedStrategy<GenZone> {
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
