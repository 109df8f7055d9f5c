//! `ROUTING_RULES` → `rules::parse_rules`: whatever arrives, nothing panics; a list of rule
//! objects is either accepted as rules that hold the table's invariants, or refused naming
//! the rule (its index, and its id once the id passed) and a field that rule has or lacks.

use autoproxy::rules::{FIELDS, RulesError, SniMode, parse_rules};
use serde_json::Map;

use super::*;

/// A value for `field`: mostly one that passes, else one of the ways it goes wrong.
fn field_value(field: &'static str) -> BoxedStrategy<Option<Value>> {
    let good: BoxedStrategy<Value> = match field {
        "id" => string_regex("[a-z0-9-]{1,32}")
            .unwrap()
            .prop_map(Value::from)
            .boxed(),
        "front" => prop_oneof![
            Just(json!("proxy.eks")),
            Just(json!("*.int")),
            Just(json!("Proxy.API.k8s.")),
        ]
        .boxed(),
        "back" => prop_oneof![Just(json!("eks")), Just(json!("api.k8s"))].boxed(),
        "back_types" => prop_oneof![
            Just(json!(["CNAME"])),
            Just(json!(["A"])),
            Just(json!(["A", "CNAME"])),
        ]
        .boxed(),
        "sni" => select(SniMode::ALL.to_vec())
            .prop_map(|mode| Value::from(mode.as_str()))
            .boxed(),
        _ => (1_u64..=65_535).prop_map(Value::from).boxed(),
    };
    let bad = prop_oneof![
        Just(Value::Null),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(|f| json!(f)),
        string_regex("[ -~]{0,40}").unwrap().prop_map(Value::from),
        string_regex("\\PC{0,8}").unwrap().prop_map(Value::from),
        Just(json!(["A", "A"])),
        Just(json!([])),
        Just(json!({"nested": 1})),
    ];
    prop_oneof![
        12 => good.prop_map(Some),
        2 => bad.prop_map(Some),
        1 => Just(None),
    ]
    .boxed()
}

/// One rule object, sometimes with a field no rule has.
fn rule_object() -> BoxedStrategy<Value> {
    let fields: Vec<BoxedStrategy<Option<Value>>> =
        FIELDS.iter().map(|field| field_value(field)).collect();
    (
        fields,
        proptest::option::weighted(0.05, string_regex("[a-z_]{1,8}").unwrap()),
    )
        .prop_map(|(values, extra)| {
            let mut rule = Map::new();
            for (field, value) in FIELDS.iter().zip(values) {
                if let Some(value) = value {
                    rule.insert((*field).to_owned(), value);
                }
            }
            if let Some(extra) = extra {
                rule.entry(extra).or_insert(json!(1));
            }
            Value::Object(rule)
        })
        .boxed()
}

fn check_rules(items: &[Value], tally: &Tally) -> Result<(), TestCaseError> {
    let raw = Value::Array(items.to_vec()).to_string();
    match parse_rules(&raw) {
        Ok(rules) => {
            tally.add("accepted", 1);
            prop_assert_eq!(rules.len(), items.len());
            for rule in &rules {
                prop_assert!((1..=32).contains(&rule.id.len()), "{:?}", rule);
                prop_assert_eq!(
                    rule.front.starts_with("*."),
                    rule.sni_mode.wildcard_front(),
                    "{:?}",
                    rule
                );
                prop_assert!(!rule.back_types.is_empty() && rule.port > 0, "{:?}", rule);
            }
        }
        Err(RulesError::Field {
            rule,
            field,
            expected,
            got,
        }) => {
            let text = format!("rule {rule}, field {field}: {expected}, got {got}");
            prop_assert!(rule.index < items.len(), "{text}");
            let object = items[rule.index].as_object();
            if let (Some(id), Some(object)) = (&rule.id, object) {
                prop_assert_eq!(
                    object.get("id"),
                    Some(&Value::from(id.as_str())),
                    "{}",
                    text
                );
            }
            let named =
                FIELDS.contains(&field.as_str()) || object.is_some_and(|o| o.contains_key(&field));
            prop_assert!(
                named,
                "the field named is neither a rule field nor the rule's: {}",
                text
            );
            prop_assert!(!expected.is_empty() && !got.is_empty(), "{text}");
            tally.add(
                match field.as_str() {
                    "id" => "refused id",
                    "front" => "refused front",
                    "back" => "refused back",
                    "back_types" => "refused back_types",
                    "sni" => "refused sni",
                    "port" => "refused port",
                    _ => "refused unknown field",
                },
                1,
            );
        }
        Err(other) => prop_assert!(false, "a list of rule objects refused as a whole: {other}"),
    }
    Ok(())
}

#[test]
pub(super) fn rule_tables_are_refused_naming_the_rule_and_field() {
    let tally = Tally::default();
    let line = check_property(
        "ROUTING_RULES→rules",
        3_000,
        vec(rule_object(), 1..4),
        |items| check_rules(&items, &tally),
    );
    println!("{line}: {tally}");
    tally.require(&[
        "accepted",
        "refused id",
        "refused front",
        "refused back",
        "refused back_types",
        "refused sni",
        "refused port",
        "refused unknown field",
    ]);
}

#[test]
pub(super) fn any_text_as_rules_never_panics() {
    let text = prop_oneof![
        string_regex("\\PC{0,64}").unwrap(),
        string_regex("[\\[\\]{}\",:0-9a-z *.-]{0,64}").unwrap(),
    ];
    let line = check_property("text→rules", 3_000, text, |raw| {
        if let Err(err) = parse_rules(&raw) {
            prop_assert!(err.to_string().contains("expected"), "{err}");
        }
        Ok(())
    });
    println!("{line}");
}
