//! Just enough of CloudFormation's intrinsic functions to turn a piece of `template.yaml` into
//! what a deployed stack holds (`!Ref`, `!Sub`, `!GetAtt`, `!Join`, `!Select`, `!Split`, `!If`,
//! `!FindInMap` and `AWS::NoValue`), so tests can use the template's own IAM policies rather than copies.

use std::collections::BTreeMap;

use serde_json::{Value as Json, json};
use serde_yaml::Value;

/// A deployed stack as the intrinsics see it.
#[derive(Debug, Clone, Default)]
pub struct Stack {
    /// Parameters, pseudo parameters (`AWS::Region`, …) and resources' physical ids, by name.
    pub refs: BTreeMap<String, Json>,
    /// `Resource.Attribute` → value.
    pub attributes: BTreeMap<String, String>,
    /// Condition name → its value in this deployment.
    pub conditions: BTreeMap<String, bool>,
    /// The template's `Mappings`, for `!FindInMap`.
    pub mappings: Value,
}

/// Why a piece of the template could not be resolved.
#[derive(Debug, thiserror::Error)]
#[error("cannot resolve {what}: {why}")]
pub struct CfnError {
    pub what: String,
    pub why: String,
}

fn error(what: impl std::fmt::Debug, why: &str) -> CfnError {
    CfnError {
        what: format!("{what:?}"),
        why: why.to_owned(),
    }
}

/// Stands for `AWS::NoValue`: dropped from the list or map that holds it.
const NO_VALUE: &str = "\u{0}AWS::NoValue";

impl Stack {
    /// A stack with the pseudo parameters set and every template parameter at its default
    /// (CommaDelimitedList defaults split), before the caller overrides some.
    pub fn new(template: &Value, account: &str, region: &str, stack_id: &str) -> Stack {
        let mut refs = BTreeMap::new();
        if let Some(parameters) = template["Parameters"].as_mapping() {
            for (name, spec) in parameters {
                let (Some(name), Some(default)) = (name.as_str(), scalar(&spec["Default"])) else {
                    continue;
                };
                let value = if spec["Type"].as_str() == Some("CommaDelimitedList") {
                    Json::Array(
                        default
                            .split(',')
                            .filter(|item| !item.is_empty())
                            .map(|item| json!(item.trim()))
                            .collect(),
                    )
                } else {
                    json!(default)
                };
                refs.insert(name.to_owned(), value);
            }
        }
        for (name, value) in [
            ("AWS::AccountId", account),
            ("AWS::Region", region),
            ("AWS::Partition", "aws"),
            ("AWS::URLSuffix", "amazonaws.com"),
            ("AWS::StackId", stack_id),
            ("AWS::StackName", "autoproxy"),
            ("AWS::NoValue", NO_VALUE),
        ] {
            refs.insert(name.to_owned(), json!(value));
        }
        Stack {
            refs,
            attributes: BTreeMap::new(),
            conditions: BTreeMap::new(),
            mappings: template["Mappings"].clone(),
        }
    }

    /// Sets every condition of `template`'s `Conditions` from this stack's parameters
    /// (`!Equals`, `!Not`, `!And`, `!Or`, `!Condition`), as CloudFormation decides them. A
    /// condition the caller has already set keeps its value, and so do the ones that name it.
    pub fn decide_conditions(&mut self, template: &Value) -> Result<(), CfnError> {
        let Some(conditions) = template["Conditions"].as_mapping() else {
            return Ok(());
        };
        for name in conditions.keys() {
            let name = name
                .as_str()
                .ok_or_else(|| error(name, "a condition name"))?;
            let holds = self.condition(template, name, 0)?;
            self.conditions.insert(name.to_owned(), holds);
        }
        Ok(())
    }

    /// Whether a condition function (a `Rules` assertion's `Assert`, say) holds in this stack.
    pub fn holds(&self, template: &Value, body: &Value) -> Result<bool, CfnError> {
        self.decide(template, body, 0)
    }

    fn condition(&self, template: &Value, name: &str, depth: usize) -> Result<bool, CfnError> {
        if let Some(holds) = self.conditions.get(name) {
            return Ok(*holds);
        }
        let body = template["Conditions"]
            .get(name)
            .ok_or_else(|| error(name, "no such condition"))?;
        self.decide(template, body, depth)
    }

    fn decide(&self, template: &Value, body: &Value, depth: usize) -> Result<bool, CfnError> {
        // Conditions may name each other; a cycle is a template error, not a hang.
        if depth > 32 {
            return Err(error(body, "conditions nested too deep (a cycle?)"));
        }
        let Value::Tagged(tagged) = body else {
            return Err(error(body, "a condition function"));
        };
        let args = || {
            tagged
                .value
                .as_sequence()
                .ok_or_else(|| error(body, "a list of arguments"))
        };
        match tagged.tag.to_string().as_str() {
            "!Equals" => {
                let (left, right) = pair(&tagged.value)?;
                Ok(self.eval(left)? == self.eval(right)?)
            }
            "!Not" => match args()?.as_slice() {
                [only] => Ok(!self.decide(template, only, depth + 1)?),
                _ => Err(error(body, "!Not takes one condition")),
            },
            "!And" => args()?.iter().try_fold(true, |all, item| {
                Ok(all && self.decide(template, item, depth + 1)?)
            }),
            "!Or" => args()?.iter().try_fold(false, |any, item| {
                Ok(any || self.decide(template, item, depth + 1)?)
            }),
            "!Condition" => {
                let name = tagged
                    .value
                    .as_str()
                    .ok_or_else(|| error(body, "!Condition of a non-string"))?;
                self.condition(template, name, depth + 1)
            }
            other => Err(error(
                other,
                "a condition function this resolver does not know",
            )),
        }
    }

    /// The value as the deployed stack holds it.
    pub fn resolve(&self, value: &Value) -> Result<Json, CfnError> {
        let resolved = self.eval(value)?;
        Ok(strip_no_value(resolved).unwrap_or(Json::Null))
    }

    fn eval(&self, value: &Value) -> Result<Json, CfnError> {
        match value {
            Value::Null => Ok(Json::Null),
            Value::Bool(b) => Ok(json!(b)),
            Value::Number(n) => Ok(serde_json::to_value(n).unwrap_or(Json::Null)),
            Value::String(s) => Ok(json!(s)),
            Value::Sequence(items) => Ok(Json::Array(
                items
                    .iter()
                    .map(|item| self.eval(item))
                    .collect::<Result<_, _>>()?,
            )),
            Value::Mapping(map) => {
                let mut out = serde_json::Map::new();
                for (key, item) in map {
                    let key = key.as_str().ok_or_else(|| error(key, "a non-string key"))?;
                    out.insert(key.to_owned(), self.eval(item)?);
                }
                Ok(Json::Object(out))
            }
            Value::Tagged(tagged) => self.intrinsic(&tagged.tag.to_string(), &tagged.value),
        }
    }

    fn intrinsic(&self, tag: &str, arg: &Value) -> Result<Json, CfnError> {
        match tag {
            "!Ref" => {
                let name = arg
                    .as_str()
                    .ok_or_else(|| error(arg, "!Ref of a non-string"))?;
                self.refs
                    .get(name)
                    .cloned()
                    .ok_or_else(|| error(name, "no such parameter or resource in this stack"))
            }
            "!GetAtt" => {
                let name = arg
                    .as_str()
                    .ok_or_else(|| error(arg, "!GetAtt in list form"))?;
                self.attributes
                    .get(name)
                    .map(|v| json!(v))
                    .ok_or_else(|| error(name, "no such attribute in this stack"))
            }
            "!Sub" => self.sub_intrinsic(arg),
            "!Join" => self.join(arg),
            "!Split" => {
                let (sep, text) = pair(arg)?;
                let sep = sep.as_str().ok_or_else(|| error(arg, "!Split separator"))?;
                let text = as_text(&self.eval(text)?)?;
                Ok(Json::Array(text.split(sep).map(|p| json!(p)).collect()))
            }
            "!Select" => self.select(arg),
            "!If" => self.if_intrinsic(arg),
            "!FindInMap" => self.find_in_map(arg),
            other => Err(error(other, "an intrinsic this resolver does not know")),
        }
    }

    /// `!FindInMap [map, key, key]`: a key the map lacks fails as CloudFormation fails the
    /// change set, "Unable to get mapping for map::key::key".
    fn find_in_map(&self, arg: &Value) -> Result<Json, CfnError> {
        let path = match arg.as_sequence().map(Vec::as_slice) {
            Some([map, first, second]) => [map, first, second]
                .iter()
                .map(|item| as_text(&self.eval(item)?))
                .collect::<Result<Vec<_>, _>>()?,
            _ => return Err(error(arg, "!FindInMap takes [map, key, key]")),
        };
        let found = &self.mappings[path[0].as_str()][path[1].as_str()][path[2].as_str()];
        scalar(found).map(|value| json!(value)).ok_or_else(|| {
            error(
                arg,
                &format!("Unable to get mapping for {}", path.join("::")),
            )
        })
    }

    /// `!Sub text` or `!Sub [text, {variables}]`.
    fn sub_intrinsic(&self, arg: &Value) -> Result<Json, CfnError> {
        match arg {
            Value::String(text) => self.sub(text, &BTreeMap::new()).map(Json::String),
            Value::Sequence(items) if items.len() == 2 => {
                let text = items[0].as_str().ok_or_else(|| error(arg, "!Sub text"))?;
                let mut vars = BTreeMap::new();
                for (key, value) in items[1].as_mapping().into_iter().flatten() {
                    let key = key.as_str().ok_or_else(|| error(key, "!Sub variable"))?;
                    vars.insert(key.to_owned(), as_text(&self.eval(value)?)?);
                }
                self.sub(text, &vars).map(Json::String)
            }
            _ => Err(error(arg, "!Sub takes a string or [string, map]")),
        }
    }

    /// `!Join [separator, list]`; `AWS::NoValue` items are left out.
    fn join(&self, arg: &Value) -> Result<Json, CfnError> {
        let (sep, items) = pair(arg)?;
        let sep = sep.as_str().ok_or_else(|| error(arg, "!Join separator"))?;
        let items = match self.eval(items)? {
            Json::Array(items) => items,
            other => return Err(error(other, "!Join of a non-list")),
        };
        let parts = items
            .iter()
            .filter(|item| item.as_str() != Some(NO_VALUE))
            .map(as_text)
            .collect::<Result<Vec<_>, _>>()?;
        Ok(json!(parts.join(sep)))
    }

    /// `!Select [index, list]`.
    fn select(&self, arg: &Value) -> Result<Json, CfnError> {
        let (index, list) = pair(arg)?;
        let index = scalar(index)
            .and_then(|i| i.parse::<usize>().ok())
            .ok_or_else(|| error(arg, "!Select index"))?;
        match self.eval(list)? {
            Json::Array(items) => items
                .get(index)
                .cloned()
                .ok_or_else(|| error(arg, "!Select index out of range")),
            other => Err(error(other, "!Select of a non-list")),
        }
    }

    /// `!If [condition, then, else]`.
    fn if_intrinsic(&self, arg: &Value) -> Result<Json, CfnError> {
        let items = arg
            .as_sequence()
            .filter(|items| items.len() == 3)
            .ok_or_else(|| error(arg, "!If takes [condition, then, else]"))?;
        let name = items[0]
            .as_str()
            .ok_or_else(|| error(arg, "!If condition"))?;
        let holds = self
            .conditions
            .get(name)
            .ok_or_else(|| error(name, "condition not set for this stack"))?;
        self.eval(&items[if *holds { 1 } else { 2 }])
    }

    /// `${Name}`, `${Resource.Attribute}` and `${AWS::…}` in `text`, `vars` first.
    fn sub(&self, text: &str, vars: &BTreeMap<String, String>) -> Result<String, CfnError> {
        let mut out = String::new();
        let mut rest = text;
        while let Some(start) = rest.find("${") {
            out.push_str(&rest[..start]);
            let after = &rest[start + 2..];
            let end = after
                .find('}')
                .ok_or_else(|| error(text, "an unclosed ${"))?;
            let name = &after[..end];
            let value = if let Some(literal) = name.strip_prefix('!') {
                // `${!Literal}` stays `${Literal}` (an IAM policy variable, say).
                format!("${{{literal}}}")
            } else if let Some(value) = vars.get(name) {
                value.clone()
            } else if let Some(value) = self.attributes.get(name) {
                value.clone()
            } else {
                let value = self
                    .refs
                    .get(name)
                    .ok_or_else(|| error(name, "no such name for !Sub"))?;
                as_text(value)?
            };
            out.push_str(&value);
            rest = &after[end + 1..];
        }
        out.push_str(rest);
        Ok(out)
    }
}

fn pair(arg: &Value) -> Result<(&Value, &Value), CfnError> {
    match arg.as_sequence().map(Vec::as_slice) {
        Some([first, second]) => Ok((first, second)),
        _ => Err(error(arg, "expected a two-item list")),
    }
}

/// A YAML scalar as CloudFormation passes it on: a string.
pub fn scalar(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

fn as_text(value: &Json) -> Result<String, CfnError> {
    match value {
        Json::String(s) => Ok(s.clone()),
        Json::Number(n) => Ok(n.to_string()),
        Json::Bool(b) => Ok(b.to_string()),
        other => Err(error(other, "expected a string")),
    }
}

/// Drops `AWS::NoValue` from lists and maps; `None` when the value itself is one.
fn strip_no_value(value: Json) -> Option<Json> {
    match value {
        Json::String(s) if s == NO_VALUE => None,
        Json::Array(items) => Some(Json::Array(
            items.into_iter().filter_map(strip_no_value).collect(),
        )),
        Json::Object(map) => Some(Json::Object(
            map.into_iter()
                .filter_map(|(k, v)| strip_no_value(v).map(|v| (k, v)))
                .collect(),
        )),
        other => Some(other),
    }
}

/// The statement `sid` of the standalone policy resource `policy` in `template`, as written
/// (intrinsics unresolved).
pub fn policy_statement<'a>(template: &'a Value, policy: &str, sid: &str) -> Option<&'a Value> {
    template["Resources"][policy]["Properties"]["PolicyDocument"]["Statement"]
        .as_sequence()?
        .iter()
        .find(|s| s["Sid"].as_str() == Some(sid))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn yaml(text: &str) -> Value {
        serde_yaml::from_str(text).unwrap()
    }

    #[test]
    fn the_template_s_own_shapes_resolve() {
        let template = yaml(
            "Parameters:\n  ConfigKey: {Type: String, Default: haproxy/haproxy.cfg}\n  Roles: {Type: CommaDelimitedList, Default: ''}\n",
        );
        let mut stack = Stack::new(
            &template,
            "123456789012",
            "us-east-1",
            "arn:aws:cloudformation:us-east-1:123456789012:stack/autoproxy/0f1e2d3c-aaaa-bbbb",
        );
        stack
            .attributes
            .insert("ConfigBucket.Arn".into(), "arn:aws:s3:::b".into());
        stack.conditions.insert("HasRoles".into(), false);
        let policy = yaml(
            r#"
- !Sub
  - "arn:${AWS::Partition}:s3:::autoproxy-${AWS::AccountId}-${StackSuffix}/${Stem}.fleet/*"
  - StackSuffix: !Select [0, !Split ["-", !Select [2, !Split ["/", !Ref AWS::StackId]]]]
    Stem: !Select [0, !Split [".cfg", !Ref ConfigKey]]
- !Sub "${ConfigBucket.Arn}/${ConfigKey}"
- !If [HasRoles, !Ref Roles, !Ref AWS::NoValue]
- !Join [",", !Ref Roles]
"#,
        );
        assert_eq!(
            stack.resolve(&policy).unwrap(),
            json!([
                "arn:aws:s3:::autoproxy-123456789012-0f1e2d3c/haproxy/haproxy.fleet/*",
                "arn:aws:s3:::b/haproxy/haproxy.cfg",
                ""
            ])
        );
        assert!(stack.resolve(&yaml("!Ref Nowhere")).is_err());

        let template = yaml(
            "Parameters:\n  Region: {Type: String, Default: ''}\nConditions:\n  Given: !Not [!Equals [!Ref Region, '']]\n  Here: !And [!Condition Given, !Equals [!Ref Region, !Ref AWS::Region]]\n  Either: !Or [!Condition Here, !Not [!Condition Given]]\n",
        );
        let decided = |region: &str| {
            let mut stack = Stack::new(&template, "123456789012", "us-east-1", "id");
            stack.refs.insert("Region".into(), json!(region));
            stack.decide_conditions(&template).unwrap();
            stack.conditions
        };
        let holds = |pairs: &[(&str, bool)]| {
            pairs
                .iter()
                .map(|(name, holds)| ((*name).to_owned(), *holds))
                .collect::<BTreeMap<_, _>>()
        };
        assert_eq!(
            decided(""),
            holds(&[("Either", true), ("Given", false), ("Here", false)])
        );
        assert_eq!(
            decided("us-east-1"),
            holds(&[("Either", true), ("Given", true), ("Here", true)])
        );
        assert_eq!(
            decided("eu-west-1"),
            holds(&[("Either", false), ("Given", true), ("Here", false)])
        );
        let cycle = yaml("Conditions:\n  A: !Condition B\n  B: !Condition A\n");
        let mut stack = Stack::new(&cycle, "123456789012", "us-east-1", "id");
        assert!(stack.decide_conditions(&cycle).is_err());
        assert!(stack.resolve(&yaml("!If [Unknown, a, b]")).is_err());
    }
}
