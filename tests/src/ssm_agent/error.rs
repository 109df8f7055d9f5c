//! Why the document could not be read or run.

use std::path::PathBuf;

/// Why the document could not be read or run.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("template.yaml is not YAML: {0}")]
    Yaml(#[from] serde_yaml::Error),
    #[error("expected {expected} in the document, found {found}")]
    Shape { expected: String, found: String },
    #[error("parameter {name}: allowedPattern {pattern:?} does not compile: {source}")]
    Pattern {
        name: String,
        pattern: String,
        #[source]
        source: Box<regex_automata::dfa::dense::BuildError>,
    },
    #[error("expected one of the document's parameters ({known}), got {name}")]
    Unknown { name: String, known: String },
    #[error("parameter {0} is required: it has no default and no value was given")]
    Missing(String),
    #[error("parameter {name}: {value:?} does not match allowedPattern {pattern}")]
    Rejected {
        name: String,
        value: String,
        pattern: String,
    },
    #[error("parameter {name}: {value:?} is not one of its allowedValues {allowed:?}")]
    NotAllowed {
        name: String,
        value: String,
        allowed: Vec<String>,
    },
    #[error("deploy: {name} is not a parameter of the template (CloudFormation refuses the stack)")]
    UnknownTemplateParameter { name: String },
    #[error("deploy: template parameter {0} has no Default and no value was given")]
    TemplateParameterMissing(String),
    #[error("deploy: template parameter {name}: {value:?} breaks its {constraint}")]
    TemplateParameterRejected {
        name: String,
        value: String,
        constraint: String,
    },
    #[error(
        "deploy: {found} in the document: the stand-in resolves only !Ref of a template parameter"
    )]
    Unresolved { found: String },
    #[error("cannot run the script: {0}")]
    Spawn(#[source] std::io::Error),
}
