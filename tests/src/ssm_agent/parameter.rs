//! One document parameter as SSM enforces it: its default, and the `allowedValues` or
//! `allowedPattern` a value must satisfy.

use regex_automata::dfa::regex::Regex;
use regex_automata::util::syntax;
use serde_yaml::Value;

use super::error::AgentError;
use super::shape::shape;

/// One document parameter as SSM enforces it (after the deploy resolved its `!Ref`s).
#[derive(Debug, Clone)]
pub struct Parameter {
    pub name: String,
    pub default: Option<String>,
    /// As the document spells it, if it has one.
    pub allowed_pattern: Option<String>,
    /// Compiled with ASCII classes, as Java (SSM) reads them; searched, not anchored: the
    /// document's patterns carry their own `^...$`.
    matcher: Option<Regex>,
    /// The only values SSM accepts, if the document lists them.
    pub allowed_values: Option<Vec<String>>,
}

impl Parameter {
    /// The parameter `name` as the document declares it (`spec`), held to the contract the
    /// script relies on: a `String` passed as `ENV_VAR`, with an `allowedPattern` or
    /// `allowedValues` that its default satisfies.
    pub(super) fn from_spec(name: &Value, spec: &Value) -> Result<Parameter, AgentError> {
        let name = name
            .as_str()
            .ok_or_else(|| shape("parameter names as strings", &format!("{name:?}")))?
            .to_owned();
        let field = |key: &str| spec.get(key).and_then(Value::as_str);
        for (key, want) in [("type", "String"), ("interpolationType", "ENV_VAR")] {
            if field(key) != Some(want) {
                return Err(shape(
                    &format!("{name}: {key} {want}"),
                    &format!("{:?}", field(key)),
                ));
            }
        }
        let allowed_values = spec
            .get("allowedValues")
            .map(|list| allowed_values(&name, list))
            .transpose()?;
        let pattern = field("allowedPattern");
        if pattern.is_none() && allowed_values.is_none() {
            return Err(shape(
                &format!("{name}: an allowedPattern or allowedValues"),
                "neither",
            ));
        }
        let matcher = pattern.map(|pattern| compile(&name, pattern)).transpose()?;
        let parameter = Parameter {
            default: field("default").map(str::to_owned),
            name,
            allowed_pattern: pattern.map(str::to_owned),
            matcher,
            allowed_values,
        };
        if let Some(default) = &parameter.default {
            parameter.check(default)?;
        }
        Ok(parameter)
    }

    /// Refuses a value outside `allowedValues` or not matching `allowedPattern`.
    pub fn check(&self, value: &str) -> Result<(), AgentError> {
        if let Some(allowed) = &self.allowed_values
            && !allowed.iter().any(|a| a == value)
        {
            return Err(AgentError::NotAllowed {
                name: self.name.clone(),
                value: value.to_owned(),
                allowed: allowed.clone(),
            });
        }
        if let (Some(pattern), Some(matcher)) = (&self.allowed_pattern, &self.matcher)
            && !matcher.is_match(value.as_bytes())
        {
            return Err(AgentError::Rejected {
                name: self.name.clone(),
                value: value.to_owned(),
                pattern: pattern.clone(),
            });
        }
        Ok(())
    }
}

/// Parameter `name`'s pattern compiled with ASCII classes, as Java (SSM, CloudFormation)
/// reads it.
pub(super) fn compile(name: &str, pattern: &str) -> Result<Regex, AgentError> {
    Regex::builder()
        .syntax(syntax::Config::new().unicode(false))
        .build(pattern)
        .map_err(|source| AgentError::Pattern {
            name: name.to_owned(),
            pattern: pattern.to_owned(),
            source: Box::new(source),
        })
}

/// Parameter `name`'s `allowedValues`: a list of strings, not empty.
fn allowed_values(name: &str, list: &Value) -> Result<Vec<String>, AgentError> {
    list.as_sequence()
        .filter(|list| !list.is_empty())
        .and_then(|list| {
            list.iter()
                .map(|v| v.as_str().map(str::to_owned))
                .collect::<Option<Vec<_>>>()
        })
        .ok_or_else(|| {
            shape(
                &format!("{name}: allowedValues as a list of strings"),
                &format!("{list:?}"),
            )
        })
}
