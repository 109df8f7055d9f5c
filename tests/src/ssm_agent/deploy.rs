//! The deploy step: the template's parameters as a deployer sets them (checked as CloudFormation checks them), and the document's `!Ref`s resolved with them; `!GetAtt` of another resource (the published agent) and `!Sub` over both resolve to the attributes the test gives, as CloudFormation resolves them to what the resource returned.

use serde_yaml::Value;

use super::error::AgentError;
use super::parameter::compile;
use crate::cfn::scalar;

/// A deploy of the template: its `Parameters`, and the values the deployer chose.
pub(super) struct Deploy<'a> {
    pub(super) declared: Option<&'a serde_yaml::Mapping>,
    pub(super) given: &'a [(&'a str, &'a str)],
    /// `Resource.Attribute` → value, for `!GetAtt`.
    pub(super) attributes: &'a [(String, String)],
}

impl<'a> Deploy<'a> {
    /// Refuses a given name the template does not declare, or a value its parameter's
    /// constraints refuse, as CloudFormation does before it creates anything.
    pub(super) fn new(
        template: &'a Value,
        given: &'a [(&'a str, &'a str)],
        attributes: &'a [(String, String)],
    ) -> Result<Deploy<'a>, AgentError> {
        let deploy = Deploy {
            declared: template.get("Parameters").and_then(Value::as_mapping),
            given,
            attributes,
        };
        for (name, value) in given {
            let spec = deploy
                .spec(name)
                .ok_or_else(|| AgentError::UnknownTemplateParameter {
                    name: (*name).to_owned(),
                })?;
            check_template_parameter(name, spec, value)?;
        }
        Ok(deploy)
    }

    pub(super) fn spec(&self, name: &str) -> Option<&'a Value> {
        self.declared?.get(name)
    }

    /// What `!Ref name` resolves to: the given value (the last, if named twice) or the
    /// parameter's `Default`.
    pub(super) fn value(&self, name: &str) -> Result<String, AgentError> {
        // The pseudo parameters, as the tests' stack has them.
        match name {
            "AWS::Partition" => return Ok("aws".to_owned()),
            "AWS::Region" => return Ok(crate::moto::REGION.to_owned()),
            "AWS::AccountId" => return Ok(crate::moto::OWN_ACCOUNT.to_owned()),
            _ => {}
        }
        let spec = self.spec(name).ok_or_else(|| AgentError::Unresolved {
            found: format!("!Ref {name}"),
        })?;
        if let Some((_, value)) = self.given.iter().rev().find(|(n, _)| *n == name) {
            return Ok((*value).to_owned());
        }
        let default = spec
            .get("Default")
            .and_then(scalar)
            .ok_or_else(|| AgentError::TemplateParameterMissing(name.to_owned()))?;
        check_template_parameter(name, spec, &default)?;
        Ok(default)
    }

    /// What `!GetAtt Resource.Attribute` resolves to: the attribute the test gave.
    fn attribute(&self, name: &str) -> Result<String, AgentError> {
        self.attributes
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
            .ok_or_else(|| AgentError::Unresolved {
                found: format!("!GetAtt {name} (no such attribute given)"),
            })
    }

    /// `!Sub` of a string: every `${Name}` a template parameter, every `${Resource.Attr}` an
    /// attribute; `${!Literal}` stays `${Literal}`.
    fn substitute(&self, text: &str) -> Result<String, AgentError> {
        let mut out = String::new();
        let mut rest = text;
        while let Some(start) = rest.find("${") {
            out.push_str(&rest[..start]);
            let after = &rest[start + 2..];
            let end = after.find('}').ok_or_else(|| AgentError::Unresolved {
                found: format!("!Sub {text:?}: an unclosed ${{"),
            })?;
            let name = &after[..end];
            if let Some(literal) = name.strip_prefix('!') {
                out.push_str("${");
                out.push_str(literal);
                out.push('}');
            } else if name.contains('.') {
                out.push_str(&self.attribute(name)?);
            } else {
                out.push_str(&self.value(name)?);
            }
            rest = &after[end + 1..];
        }
        out.push_str(rest);
        Ok(out)
    }

    /// `value` with every `!Ref <parameter>` (or `{Ref: <parameter>}`) replaced by its value,
    /// every `!GetAtt` by the given attribute and every `!Sub` string substituted; any other
    /// intrinsic function is refused.
    pub(super) fn resolve(&self, value: &Value) -> Result<Value, AgentError> {
        Ok(match value {
            Value::Tagged(tagged) if tagged.tag == "Ref" => {
                let name = tagged
                    .value
                    .as_str()
                    .ok_or_else(|| AgentError::Unresolved {
                        found: format!("{value:?}"),
                    })?;
                Value::String(self.value(name)?)
            }
            Value::Tagged(tagged) if tagged.tag == "GetAtt" => {
                let name = match &tagged.value {
                    Value::String(name) => name.clone(),
                    Value::Sequence(parts) => parts
                        .iter()
                        .filter_map(Value::as_str)
                        .collect::<Vec<_>>()
                        .join("."),
                    other => {
                        return Err(AgentError::Unresolved {
                            found: format!("!GetAtt {other:?}"),
                        });
                    }
                };
                Value::String(self.attribute(&name)?)
            }
            Value::Tagged(tagged) if tagged.tag == "Sub" => {
                let text = tagged
                    .value
                    .as_str()
                    .ok_or_else(|| AgentError::Unresolved {
                        found: "!Sub with a variable map (the stand-in takes a string)".to_owned(),
                    })?;
                Value::String(self.substitute(text)?)
            }
            Value::Tagged(tagged) => {
                return Err(AgentError::Unresolved {
                    found: format!("{}", tagged.tag),
                });
            }
            Value::Mapping(mapping) => {
                if let [(key, target)] = mapping.iter().collect::<Vec<_>>().as_slice()
                    && let Some(key) = key.as_str()
                    && (key == "Ref" || key.starts_with("Fn::"))
                {
                    return match (key, target.as_str()) {
                        ("Ref", Some(name)) => Ok(Value::String(self.value(name)?)),
                        _ => Err(AgentError::Unresolved {
                            found: key.to_owned(),
                        }),
                    };
                }
                let mut resolved = serde_yaml::Mapping::new();
                for (key, item) in mapping {
                    resolved.insert(key.clone(), self.resolve(item)?);
                }
                Value::Mapping(resolved)
            }
            Value::Sequence(items) => Value::Sequence(
                items
                    .iter()
                    .map(|item| self.resolve(item))
                    .collect::<Result<_, _>>()?,
            ),
            other => other.clone(),
        })
    }
}

/// A template parameter's `AllowedValues` and `AllowedPattern` (which CloudFormation matches
/// against the whole value).
pub(super) fn check_template_parameter(
    name: &str,
    spec: &Value,
    value: &str,
) -> Result<(), AgentError> {
    let rejected = |constraint: String| AgentError::TemplateParameterRejected {
        name: name.to_owned(),
        value: value.to_owned(),
        constraint,
    };
    if let Some(allowed) = spec.get("AllowedValues").and_then(Value::as_sequence) {
        let allowed: Vec<String> = allowed.iter().filter_map(scalar).collect();
        if !allowed.iter().any(|a| a == value) {
            return Err(rejected(format!("AllowedValues {allowed:?}")));
        }
    }
    if let Some(pattern) = spec.get("AllowedPattern").and_then(Value::as_str) {
        // Matched against the whole value: anchored here.
        let matcher = compile(name, &format!("^(?:{pattern})$"))?;
        if !matcher.is_match(value.as_bytes()) {
            return Err(rejected(format!("AllowedPattern {pattern}")));
        }
    }
    Ok(())
}
