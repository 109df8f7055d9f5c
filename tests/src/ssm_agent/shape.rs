//! The shape the template and the document must have: a value found by its path, a string
//! that must be one thing, and the error that says what was expected and what was found.

use serde_yaml::Value;

use super::error::AgentError;

/// The value at `path` (keys, outermost first) under `value`.
pub(super) fn get<'a>(value: &'a Value, path: &[&str]) -> Result<&'a Value, AgentError> {
    let mut here = value;
    for (depth, key) in path.iter().enumerate() {
        here = here
            .get(key)
            .ok_or_else(|| shape(&path[..=depth].join("."), "nothing"))?;
    }
    Ok(here)
}

/// Refuses `value` unless it is the string `expected`; `what` names it in the error.
pub(super) fn expect_str(value: &Value, expected: &str, what: &str) -> Result<(), AgentError> {
    match value.as_str() {
        Some(found) if found == expected => Ok(()),
        found => Err(shape(&format!("{what} {expected}"), &format!("{found:?}"))),
    }
}

pub(super) fn shape(expected: &str, found: &str) -> AgentError {
    AgentError::Shape {
        expected: expected.to_owned(),
        found: found.to_owned(),
    }
}
