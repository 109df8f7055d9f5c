//! `ROUTING_RULES`: the operator's rule table as a JSON list, checked field by field at cold
//! start (docs/ARCHITECTURE.md, "The rules"). A refusal names the rule (its id, or its index
//! when the id is missing or malformed) and the field, and says what was expected and what
//! arrived, so the operator fixes it from the error alone.

use std::fmt;

use serde_json::{Map, Value};

use super::mode::{BackType, SniMode};
use super::table::Rule;
use crate::excerpt;
use crate::names::HostName;

/// More rules than this is a mistake, not a table: each is looked up in every zone.
pub const MAX_RULES: usize = 64;
/// The fields a rule may have.
pub const FIELDS: [&str; 6] = ["id", "front", "back", "back_types", "sni", "port"];
/// How much of a refused value an error quotes.
const QUOTED: usize = 120;

/// Which rule a refusal is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleRef {
    /// Its place in the list, from 0.
    pub index: usize,
    /// Its id, once the id itself passed.
    pub id: Option<String>,
}

impl fmt::Display for RuleRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.id {
            Some(id) => write!(f, "rule {id:?} (index {})", self.index),
            None => write!(f, "rule at index {} (no valid id)", self.index),
        }
    }
}

/// Why `ROUTING_RULES` is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RulesError {
    #[error("expected a JSON list of rules, got {got} ({reason})")]
    NotAList { got: String, reason: String },
    #[error(
        "expected at least one rule (leave ROUTING_RULES empty for the built-in rules), got []"
    )]
    Empty,
    #[error("expected at most {MAX_RULES} rules, got {got}")]
    TooMany { got: usize },
    #[error("{rule}, field {field:?}: expected {expected}, got {got}")]
    Field {
        rule: RuleRef,
        field: String,
        expected: String,
        got: String,
    },
}

/// Parses and checks a whole table; the result replaces the built-in rules.
pub fn parse_rules(raw: &str) -> Result<Vec<Rule>, RulesError> {
    let value: Value = serde_json::from_str(raw).map_err(|err| RulesError::NotAList {
        got: excerpt(raw, QUOTED),
        reason: err.to_string(),
    })?;
    let Value::Array(items) = value else {
        return Err(RulesError::NotAList {
            got: quoted(&value),
            reason: "not a list".to_owned(),
        });
    };
    if items.is_empty() {
        return Err(RulesError::Empty);
    }
    if items.len() > MAX_RULES {
        return Err(RulesError::TooMany { got: items.len() });
    }
    let mut rules: Vec<Rule> = Vec::with_capacity(items.len());
    for (index, item) in items.iter().enumerate() {
        let rule = parse_rule(index, item)?;
        let at = RuleRef {
            index,
            id: Some(rule.id.clone()),
        };
        if let Some(other) = rules.iter().position(|r| r.id == rule.id) {
            return Err(field_error(
                at,
                "id",
                format!("an id no other rule has (the rule at index {other} has it)"),
                &Value::String(rule.id),
            ));
        }
        if let Some(other) = rules.iter().find(|r| r.front == rule.front) {
            return Err(field_error(
                at,
                "front",
                format!("a front no other rule has (rule {:?} has it)", other.id),
                &Value::String(rule.front),
            ));
        }
        rules.push(rule);
    }
    Ok(rules)
}

fn parse_rule(index: usize, item: &Value) -> Result<Rule, RulesError> {
    let mut at = RuleRef { index, id: None };
    let Value::Object(fields) = item else {
        return Err(field_error(
            at,
            "(the rule itself)",
            format!("a JSON object with the fields {}", FIELDS.join(", ")),
            item,
        ));
    };
    let id = id(&at, fields.get("id"))?;
    at.id = Some(id.clone());
    if let Some(unknown) = fields.keys().find(|key| !FIELDS.contains(&key.as_str())) {
        return Err(field_error(
            at,
            unknown,
            format!("only the fields {}", FIELDS.join(", ")),
            &fields[unknown],
        ));
    }
    let sni = sni(&at, fields.get("sni"))?;
    let front = front(&at, fields.get("front"), sni)?;
    let back = name(&at, "back", fields.get("back"))?;
    if back == front {
        return Err(field_error(
            at,
            "back",
            "a name other than the front's",
            &Value::String(back),
        ));
    }
    let back_types = back_types(&at, fields, sni)?;
    let port = port(&at, fields.get("port"))?;
    Ok(Rule {
        id,
        front,
        back,
        back_types,
        sni_mode: sni,
        port,
    })
}

fn id(at: &RuleRef, value: Option<&Value>) -> Result<String, RulesError> {
    let expected = "1 to 32 characters of a-z, 0-9 and '-'";
    let raw = string(at, "id", value, expected)?;
    let valid = (1..=32).contains(&raw.len())
        && raw
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if !valid {
        return Err(field_error(at.clone(), "id", expected, &Value::from(raw)));
    }
    Ok(raw.to_owned())
}

fn sni(at: &RuleRef, value: Option<&Value>) -> Result<SniMode, RulesError> {
    let names: Vec<&str> = SniMode::ALL.iter().map(|m| m.as_str()).collect();
    let expected = format!("one of {}", names.join(", "));
    let raw = string(at, "sni", value, &expected)?;
    SniMode::ALL
        .into_iter()
        .find(|mode| mode.as_str() == raw)
        .ok_or_else(|| field_error(at.clone(), "sni", expected, &Value::from(raw)))
}

/// A name relative to the zone: a host name, no wildcard.
fn name(at: &RuleRef, field: &str, value: Option<&Value>) -> Result<String, RulesError> {
    let expected = "a name relative to the zone, of labels of a-z, 0-9, '-', '_'";
    let raw = string(at, field, value, expected)?;
    let host = HostName::parse(raw).map_err(|err| {
        field_error(
            at.clone(),
            field,
            format!("{expected} ({err})"),
            &Value::from(raw),
        )
    })?;
    if host.as_str().starts_with('*') {
        return Err(field_error(
            at.clone(),
            field,
            format!("{expected}, without '*'"),
            &Value::from(raw),
        ));
    }
    Ok(host.as_str().to_owned())
}

/// The front: a `*.` wildcard exactly when the SNI is `front-suffix`.
fn front(at: &RuleRef, value: Option<&Value>, sni: SniMode) -> Result<String, RulesError> {
    if !sni.wildcard_front() {
        return name(at, "front", value);
    }
    let expected = format!("a name starting with '*.' (sni {sni} routes every name under it)");
    let raw = string(at, "front", value, &expected)?;
    let Some(rest) = raw.strip_prefix("*.") else {
        return Err(field_error(
            at.clone(),
            "front",
            expected,
            &Value::from(raw),
        ));
    };
    let rest = name(at, "front", Some(&Value::from(rest)))?;
    Ok(format!("*.{rest}"))
}

fn back_types(
    at: &RuleRef,
    fields: &Map<String, Value>,
    sni: SniMode,
) -> Result<Vec<BackType>, RulesError> {
    let value = fields.get("back_types");
    let expected = sni.back_types_expected();
    let refuse = || {
        field_error(
            at.clone(),
            "back_types",
            expected,
            value.unwrap_or(&Value::Null),
        )
    };
    let Some(Value::Array(items)) = value else {
        return Err(refuse());
    };
    let mut types = Vec::with_capacity(items.len());
    for item in items {
        let kind = BackType::ALL
            .into_iter()
            .find(|t| item.as_str() == Some(t.as_str()))
            .ok_or_else(refuse)?;
        if types.contains(&kind) {
            return Err(refuse());
        }
        types.push(kind);
    }
    let fits = match sni.required_back_types() {
        Some(required) => types == required,
        None => !types.is_empty(),
    };
    if !fits {
        return Err(refuse());
    }
    Ok(types)
}

fn port(at: &RuleRef, value: Option<&Value>) -> Result<u16, RulesError> {
    let Some(value) = value else { return Ok(443) };
    value
        .as_u64()
        .and_then(|port| u16::try_from(port).ok())
        .filter(|port| *port > 0)
        .ok_or_else(|| {
            field_error(
                at.clone(),
                "port",
                "a whole number from 1 to 65535 (443 when left out)",
                value,
            )
        })
}

fn string<'a>(
    at: &RuleRef,
    field: &str,
    value: Option<&'a Value>,
    expected: &str,
) -> Result<&'a str, RulesError> {
    match value {
        Some(Value::String(raw)) => Ok(raw),
        other => Err(field_error(
            at.clone(),
            field,
            format!("a string: {expected}"),
            other.unwrap_or(&Value::Null),
        )),
    }
}

fn field_error(rule: RuleRef, field: &str, expected: impl Into<String>, got: &Value) -> RulesError {
    RulesError::Field {
        rule,
        field: field.to_owned(),
        expected: expected.into(),
        got: if got.is_null() {
            "nothing".to_owned()
        } else {
            quoted(got)
        },
    }
}

fn quoted(value: &Value) -> String {
    excerpt(&value.to_string(), QUOTED)
}

#[cfg(test)]
mod tests {
    use super::*;

    const EKS: &str = r#"{"id": "eks", "front": "proxy.eks", "back": "eks", "back_types": ["CNAME"], "sni": "back-target"}"#;

    /// One rule's JSON with `field` replaced by `value` (or removed when `None`).
    fn with(field: &str, value: Option<Value>) -> String {
        let mut rule: Map<String, Value> = serde_json::from_str(EKS).unwrap();
        match value {
            Some(value) => rule.insert(field.to_owned(), value),
            None => rule.remove(field),
        };
        Value::Array(vec![Value::Object(rule)]).to_string()
    }

    /// The refusal of `raw` names `rule` and `field`, and carries `got`; or, with
    /// `field == ""`, `raw` is accepted.
    fn check(raw: &str, rule: &str, field: &str, got: &str) {
        match parse_rules(raw) {
            Ok(rules) => assert!(field.is_empty(), "{raw}: accepted as {rules:?}"),
            Err(err) => {
                let text = err.to_string();
                assert!(!field.is_empty(), "{raw}: refused: {text}");
                assert!(text.contains(rule), "{raw}: {text} should name {rule}");
                assert!(
                    text.contains(&format!("field {field:?}")),
                    "{raw}: {text} should name field {field}"
                );
                assert!(text.contains(got), "{raw}: {text} should quote {got}");
                assert!(text.contains("expected"), "{text}");
            }
        }
    }

    use serde_json::json;

    #[test]
    fn id() {
        let ok = |v| check(&with("id", Some(v)), "", "", "");
        ok(json!("eks"));
        ok(json!("a-1"));
        ok(json!("x".repeat(32)));
        let bad = |v: Value, got: &str| check(&with("id", Some(v)), "index 0", "id", got);
        bad(json!(""), "\"\"");
        bad(json!("x".repeat(33)), "xxxx");
        bad(json!("EKS"), "\"EKS\"");
        bad(json!("e_k"), "\"e_k\"");
        bad(json!(7), "7");
        check(&with("id", None), "index 0", "id", "nothing");
        let twice = format!("[{EKS}, {}]", EKS.replace("proxy.eks", "p2"));
        check(&twice, "rule \"eks\" (index 1)", "id", "\"eks\"");
    }

    #[test]
    fn front() {
        check(&with("front", Some(json!("Proxy.EKS."))), "", "", "");
        let bad = |v: Value, got: &str| check(&with("front", Some(v)), "\"eks\"", "front", got);
        bad(json!("*.int"), "\"*.int\"");
        bad(json!("a b"), "\"a b\"");
        bad(json!("*"), "\"*\"");
        bad(json!(""), "\"\"");
        bad(json!(["proxy"]), "[\"proxy\"]");
        check(&with("front", None), "\"eks\"", "front", "nothing");
        // A wildcard front is the suffix mode's, and the suffix mode needs one.
        let suffix = r#"[{"id": "i", "front": "*.int", "back": "b", "back_types": ["A"], "sni": "front-suffix"}]"#;
        check(suffix, "", "", "");
        check(&suffix.replace("*.int", "int"), "\"i\"", "front", "\"int\"");
        check(
            &suffix.replace("*.int", "*.*.int"),
            "\"i\"",
            "front",
            "\"*.int\"",
        );
        check(&suffix.replace("*.int", "*."), "\"i\"", "front", "\"\"");
        let twice = format!("[{EKS}, {}]", EKS.replace("\"eks\"", "\"two\""));
        check(&twice, "\"two\"", "front", "\"proxy.eks\"");
    }

    #[test]
    fn back() {
        let bad = |v: Value, got: &str| check(&with("back", Some(v)), "\"eks\"", "back", got);
        bad(json!("*.eks"), "\"*.eks\"");
        bad(json!("e#ks"), "\"e#ks\"");
        bad(json!(1), "1");
        check(&with("back", None), "\"eks\"", "back", "nothing");
    }

    #[test]
    fn back_types() {
        let api = r#"[{"id": "api", "front": "proxy.api", "back": "api", "back_types": ["A"], "sni": "front"}]"#;
        let types = |v: &str| api.replace("[\"A\"]", v);
        check(&types(r#"["A", "CNAME"]"#), "", "", "");
        check(&types(r#"["CNAME"]"#), "", "", "");
        for bad in [
            r#"[]"#,
            r#"["AAAA"]"#,
            r#"["A", "A"]"#,
            r#"["a"]"#,
            r#""A""#,
        ] {
            check(&types(bad), "\"api\"", "back_types", &bad.replace(' ', ""));
        }
        // back-target reads a CNAME's target: nothing else will do.
        check(
            &with("back_types", Some(json!(["A"]))),
            "\"eks\"",
            "back_types",
            "[\"A\"]",
        );
        check(
            &with("back_types", Some(json!(["A", "CNAME"]))),
            "\"eks\"",
            "back_types",
            "[\"A\",\"CNAME\"]",
        );
        check(
            &with("back_types", None),
            "\"eks\"",
            "back_types",
            "nothing",
        );
    }

    #[test]
    fn sni() {
        let bad = |v: Value, got: &str| check(&with("sni", Some(v)), "\"eks\"", "sni", got);
        bad(json!("sideways"), "\"sideways\"");
        bad(json!("Back-Target"), "\"Back-Target\"");
        bad(json!(null), "nothing");
        check(&with("sni", None), "\"eks\"", "sni", "nothing");
        for mode in ["front", "back"] {
            check(&with("sni", Some(json!(mode))), "", "", "");
        }
    }

    #[test]
    fn port() {
        assert_eq!(parse_rules(&format!("[{EKS}]")).unwrap()[0].port, 443);
        assert_eq!(
            parse_rules(&with("port", Some(json!(6443)))).unwrap()[0].port,
            6443
        );
        assert_eq!(
            parse_rules(&with("port", Some(json!(65535)))).unwrap()[0].port,
            65535
        );
        let bad = |v: Value, got: &str| check(&with("port", Some(v)), "\"eks\"", "port", got);
        bad(json!(0), "0");
        bad(json!(65536), "65536");
        bad(json!(-1), "-1");
        bad(json!(443.5), "443.5");
        bad(json!("443"), "\"443\"");
    }

    #[test]
    fn unknown_fields_are_refused_by_name() {
        check(&with("ports", Some(json!(443))), "\"eks\"", "ports", "443");
        check(
            &with("Front", Some(json!("x"))),
            "\"eks\"",
            "Front",
            "\"x\"",
        );
    }

    #[test]
    fn the_whole_value() {
        for (raw, expected) in [
            ("", "expected a JSON list"),
            ("{", "expected a JSON list"),
            (r#"{"id": "x"}"#, "not a list"),
            ("[]", "at least one rule"),
        ] {
            let err = parse_rules(raw).unwrap_err().to_string();
            assert!(err.contains(expected), "{raw}: {err}");
        }
        let many = format!("[{}]", vec!["1"; MAX_RULES + 1].join(","));
        assert!(matches!(
            parse_rules(&many),
            Err(RulesError::TooMany { .. })
        ));
        check("[1]", "index 0", "(the rule itself)", "1");
    }

    #[test]
    fn every_mode_parses_to_its_rule() {
        for mode in SniMode::ALL {
            let front = if mode.wildcard_front() {
                "*.int"
            } else {
                "proxy.x"
            };
            let types = match mode.required_back_types() {
                Some(required) => serde_json::to_string(required).unwrap(),
                None => r#"["A", "CNAME"]"#.to_owned(),
            };
            let raw = format!(
                r#"[{{"id": "x", "front": "{front}", "back": "x", "back_types": {types}, "sni": "{mode}", "port": 6443}}]"#
            );
            let rules = parse_rules(&raw).unwrap_or_else(|err| panic!("{raw}: {err}"));
            assert_eq!(rules[0].sni_mode, mode);
            assert_eq!(rules[0].port, 6443);
            assert_eq!(rules[0].front, front);
        }
    }
}
