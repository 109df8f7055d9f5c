//! A local stand-in for the SSM agent running the apply document.
//!
//! moto records `SendCommand` but runs nothing, so the tests (and the demo) run the document
//! themselves, the way the stack and the agent do: take it from `template.yaml` as a deploy
//! creates it (every `!Ref` of a template parameter replaced by the value the deployer chose,
//! or the parameter's `Default`, each checked against its `AllowedPattern`/`AllowedValues` as
//! CloudFormation checks them), fill in parameter defaults, refuse a value outside a
//! parameter's `allowedValues` or `allowedPattern` as SSM does at `SendCommand`, carry out the
//! `aws:downloadContent` steps (the published agent, from moto's S3, to the step's
//! `destinationPath` under the key's last part), and run the `aws:runShellScript` text with
//! `sh` in a fresh directory, each parameter passed only as the environment variable
//! `SSM_<Name>` (`interpolationType: ENV_VAR`). What is run is exactly the text in
//! `template.yaml`: there is no second copy of the script.

mod deploy;
mod document;
mod download;
mod error;
mod parameter;
mod pipe;
mod run;
mod script;
mod shape;

pub use document::{Document, RESOURCE};
pub use download::Download;
pub use error::AgentError;
pub use parameter::Parameter;
pub use run::Run;
pub use script::Background;

/// The template parameter that fixes the document's `ConfigPath` at deploy time.
pub const CONFIG_PATH_PARAMETER: &str = "ProxyConfigPath";

/// The template parameter that fixes where the document caches the agent.
pub const AGENT_DIRECTORY_PARAMETER: &str = "ProxyAgentDirectory";

/// The template parameter that fixes the document's `ReloadCommand` at deploy time.
pub const RELOAD_COMMAND_PARAMETER: &str = "ProxyReloadCommand";
