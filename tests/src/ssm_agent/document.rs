//! The apply document as a deploy creates it from `template.yaml`, and the values SSM lets a
//! caller give its parameters.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_yaml::Value;

use super::deploy::Deploy;
use super::download::Download;
use super::error::AgentError;
use super::parameter::Parameter;
use super::shape::{expect_str, get, shape};

/// The logical id of the document in `template.yaml`.
pub const RESOURCE: &str = "ApplyConfigDocument";

/// The apply document as a deploy created it: its parameters and the script of its single
/// step.
#[derive(Debug, Clone)]
pub struct Document {
    pub parameters: Vec<Parameter>,
    /// The `aws:downloadContent` steps before the script, in order.
    pub downloads: Vec<Download>,
    pub script: String,
    /// The document's `Content` with every `!Ref` resolved: what `CreateDocument` receives.
    pub content: Value,
}

impl Document {
    /// The document in the workspace's `template.yaml`, or in the template file named by
    /// `AUTOPROXY_TEMPLATE` (to run the tests against a deliberately broken copy of the
    /// script and see them fail), deployed with the template parameters `deploy` (name,
    /// value); the others keep their `Default`.
    pub fn from_workspace(deploy: &[(&str, &str)]) -> Result<Document, AgentError> {
        Document::from_workspace_with(
            deploy,
            &crate::agent::Published::describe(crate::agent::BUCKET).attributes(),
        )
    }

    /// The same, with the attributes the stack's other resources returned (`!GetAtt`): the
    /// published agent's.
    pub fn from_workspace_with(
        deploy: &[(&str, &str)],
        attributes: &[(String, String)],
    ) -> Result<Document, AgentError> {
        let path = std::env::var_os("AUTOPROXY_TEMPLATE")
            .map_or_else(|| crate::root().join("template.yaml"), PathBuf::from);
        let text = std::fs::read_to_string(&path).map_err(|source| AgentError::Read {
            path: path.clone(),
            source,
        })?;
        Document::from_template_text_with(&text, deploy, attributes)
    }

    /// The document in a SAM/CloudFormation template file, deployed with `deploy`.
    pub fn from_template(path: &Path, deploy: &[(&str, &str)]) -> Result<Document, AgentError> {
        let text = std::fs::read_to_string(path).map_err(|source| AgentError::Read {
            path: path.to_owned(),
            source,
        })?;
        Document::from_template_text(&text, deploy)
    }

    /// A template's text, deployed with `deploy`, the agent described for the default bucket.
    pub fn from_template_text(text: &str, deploy: &[(&str, &str)]) -> Result<Document, AgentError> {
        Document::from_template_text_with(
            text,
            deploy,
            &crate::agent::Published::describe(crate::agent::BUCKET).attributes(),
        )
    }

    /// The document in a template's text, deployed with the template parameters `deploy`
    /// (name, value; unnamed ones take their `Default`) and the other resources' `attributes`
    /// (`AgentBinary.Sha256`, …, for `!GetAtt`). Refuses, as CloudFormation would, a name the
    /// template does not declare and a value outside its parameter's `AllowedPattern` or
    /// `AllowedValues`. Refuses a document that breaks the contract the script relies on:
    /// schema 2.2, `aws:downloadContent` steps from S3 followed by one `aws:runShellScript`
    /// step, every parameter a `String` passed as `ENV_VAR` with an `allowedPattern` or
    /// `allowedValues` its default satisfies, no intrinsic but `!Ref` of template parameters,
    /// `!GetAtt` and `!Sub` over both, and no `{{ }}` in the script.
    pub fn from_template_text_with(
        text: &str,
        deploy: &[(&str, &str)],
        attributes: &[(String, String)],
    ) -> Result<Document, AgentError> {
        let template: Value = serde_yaml::from_str(text)?;
        let deploy = Deploy::new(&template, deploy, attributes)?;
        let properties = get(&template, &["Resources", RESOURCE, "Properties"])?;
        expect_str(
            get(properties, &["DocumentType"])?,
            "Command",
            "DocumentType",
        )?;
        let content = deploy.resolve(get(properties, &["Content"])?)?;
        expect_str(get(&content, &["schemaVersion"])?, "2.2", "schemaVersion")?;
        let parameters = get(&content, &["parameters"])?
            .as_mapping()
            .ok_or_else(|| shape("a mapping of parameters", "something else"))?
            .iter()
            .map(|(name, spec)| Parameter::from_spec(name, spec))
            .collect::<Result<Vec<_>, _>>()?;
        let (downloads, script) = steps(&content)?;
        Ok(Document {
            parameters,
            downloads,
            script,
            content,
        })
    }

    /// The autoproxy-resolver program the script installs: the text of its quoted heredoc.
    pub fn resolver_script(&self) -> Result<&str, AgentError> {
        const START: &str = "<<'AUTOPROXY_RESOLVER'\n";
        const END: &str = "\nAUTOPROXY_RESOLVER\n";
        let start = self
            .script
            .find(START)
            .ok_or_else(|| shape("a heredoc <<'AUTOPROXY_RESOLVER' in the script", "none"))?
            + START.len();
        let len = self.script[start..]
            .find(END)
            .ok_or_else(|| shape("the line AUTOPROXY_RESOLVER ending the heredoc", "none"))?;
        Ok(&self.script[start..=start + len])
    }

    pub fn parameter(&self, name: &str) -> Option<&Parameter> {
        self.parameters.iter().find(|p| p.name == name)
    }

    /// Fills in defaults and checks every value against its `allowedValues` and
    /// `allowedPattern`, as the SSM service does before a command reaches any instance.
    pub fn resolve(&self, given: &[(&str, &str)]) -> Result<BTreeMap<String, String>, AgentError> {
        for (name, _) in given {
            if self.parameter(name).is_none() {
                let known: Vec<&str> = self.parameters.iter().map(|p| p.name.as_str()).collect();
                return Err(AgentError::Unknown {
                    name: (*name).to_owned(),
                    known: known.join(", "),
                });
            }
        }
        let mut values = BTreeMap::new();
        for parameter in &self.parameters {
            let value = given
                .iter()
                .rev()
                .find(|(name, _)| *name == parameter.name)
                .map(|(_, value)| (*value).to_owned())
                .or_else(|| parameter.default.clone())
                .ok_or_else(|| AgentError::Missing(parameter.name.clone()))?;
            parameter.check(&value)?;
            values.insert(parameter.name.clone(), value);
        }
        Ok(values)
    }
}

/// The document's `mainSteps`: `aws:downloadContent` steps, then one `aws:runShellScript`
/// step whose lines are the script.
fn steps(content: &Value) -> Result<(Vec<Download>, String), AgentError> {
    let steps = get(content, &["mainSteps"])?
        .as_sequence()
        .ok_or_else(|| shape("mainSteps as a list", "something else"))?;
    let Some((step, downloads)) = steps.split_last() else {
        return Err(shape("at least one step", "none"));
    };
    let downloads = downloads
        .iter()
        .map(Download::from_step)
        .collect::<Result<Vec<_>, _>>()?;
    expect_str(
        get(step, &["action"])?,
        "aws:runShellScript",
        "the last step's action",
    )?;
    let lines = get(step, &["inputs", "runCommand"])?
        .as_sequence()
        .ok_or_else(|| shape("runCommand as a list of lines", "something else"))?;
    let lines = lines
        .iter()
        .map(|line| {
            line.as_str()
                .ok_or_else(|| shape("runCommand lines as strings", "other"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    // The agent joins the lines with newlines into one script file.
    let script = lines.join("\n");
    if script.contains("{{") {
        return Err(shape(
            "no {{ }} interpolation in the script (parameters arrive as SSM_ variables)",
            "{{",
        ));
    }
    Ok((downloads, script))
}
