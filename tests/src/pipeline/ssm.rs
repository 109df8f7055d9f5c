//! The SSM side: the command autoproxy-configure sent, as moto recorded it, and the agent stand-in that runs it on the local HAProxy.

use super::*;

/// The command autoproxy-configure sent, as moto recorded it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SentCommand {
    pub command_id: String,
    pub document: String,
    pub parameters: BTreeMap<String, String>,
    pub targets: Vec<String>,
    pub instance_ids: Vec<String>,
}

/// One pass of the pipeline for one event.
#[derive(Debug)]
pub struct Rollout {
    /// The generator's summary.
    pub summary: Value,
    /// The generation of the config published, read back from S3 (the summary does not carry
    /// it).
    pub generation: Option<u64>,
    pub generate_time: Duration,
    /// The configure function's outcome, when a config was published.
    pub outcome: Option<Value>,
    pub configure_time: Duration,
    pub command: Option<SentCommand>,
    /// The apply document's runs, per instance, in order (the first failure stops the rest).
    pub runs: Vec<(String, Run)>,
    pub apply_time: Duration,
}

impl Rollout {
    pub fn published(&self) -> bool {
        self.summary["published"] == json!(true)
    }

    /// The rule count of the rendered config.
    pub fn rules(&self) -> u64 {
        self.summary["rules"].as_u64().unwrap_or(0)
    }

    pub fn applied(&self) -> bool {
        !self.runs.is_empty() && self.runs.iter().all(|(_, run)| run.success())
    }
}

impl Pipeline {
    /// The command as moto recorded it (`ListCommands`).
    pub async fn sent_command(&self, command_id: &str) -> Result<SentCommand, PipelineError> {
        let listed = aws_sdk_ssm::Client::new(&self.sdk)
            .list_commands()
            .command_id(command_id)
            .send()
            .await
            .map_err(|e| step_error("ListCommands", autoproxy::aws_error::reason(&e)))?;
        let command = listed
            .commands()
            .first()
            .ok_or_else(|| step_error("ListCommands", format!("no command {command_id}")))?;
        let parameters = command
            .parameters()
            .map(|p| {
                p.iter()
                    .map(|(k, v)| (k.clone(), v.first().cloned().unwrap_or_default()))
                    .collect()
            })
            .unwrap_or_default();
        Ok(SentCommand {
            command_id: command_id.to_owned(),
            document: command.document_name().unwrap_or_default().to_owned(),
            parameters,
            targets: command
                .targets()
                .iter()
                .map(|t| format!("{}={}", t.key().unwrap_or_default(), t.values().join(",")))
                .collect(),
            instance_ids: command.instance_ids().to_vec(),
        })
    }

    /// The SSM agent's part: for each instance the command targets, one at a time, runs the
    /// apply document with the command's parameters (`ConfigPath` and `ReloadCommand` at
    /// their defaults, the values this stand-in stack was deployed with); stops at the first
    /// failure (`MaxErrors` 0).
    pub fn apply(&self, command: &SentCommand) -> Result<Vec<(String, Run)>, PipelineError> {
        if command.document != DOCUMENT {
            return Err(step_error(
                "apply",
                format!(
                    "expected document {DOCUMENT}, the command names {}",
                    command.document
                ),
            ));
        }
        let given: Vec<(&str, &str)> = command
            .parameters
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let mut runs = Vec::new();
        for instance in &command.instance_ids {
            // As the SSM agent does: the fleet record is named after it.
            let mut env = self.moto.env();
            env.push(("AWS_SSM_INSTANCE_ID".to_owned(), instance.clone()));
            let run = self.document.run(&given, &env, APPLY_TIMEOUT)?;
            let ok = run.success();
            runs.push((instance.clone(), run));
            if !ok {
                break;
            }
        }
        Ok(runs)
    }
}

/// The apply document in moto's SSM, with the content CloudFormation would create from
/// template.yaml (its `!Ref`s resolved).
pub(crate) async fn create_document(
    sdk: &SdkConfig,
    document: &Document,
) -> Result<(), PipelineError> {
    let content =
        serde_yaml::to_string(&document.content).map_err(|e| step_error("document content", e))?;
    aws_sdk_ssm::Client::new(sdk)
        .create_document()
        .name(DOCUMENT)
        .document_type(aws_sdk_ssm::types::DocumentType::Command)
        .document_format(aws_sdk_ssm::types::DocumentFormat::Yaml)
        .content(content)
        .send()
        .await
        .map_err(|e| step_error("CreateDocument", autoproxy::aws_error::reason(&e)))?;
    Ok(())
}

/// The peering-proxy instances, created with the AWS CLI (no EC2 crate to compile).
pub(crate) fn run_instances(moto: &Moto) -> Result<Vec<String>, PipelineError> {
    let mut command = Command::new(crate::tool("aws"));
    command
        .args([
            "ec2",
            "run-instances",
            "--image-id",
            "ami-12c6146b",
            "--instance-type",
            "t3.micro",
        ])
        .args(["--count", &INSTANCES.to_string()])
        .args([
            "--tag-specifications",
            &format!("ResourceType=instance,Tags=[{{Key={TAG_KEY},Value={TAG_VALUE}}}]"),
        ])
        .args(["--query", "Instances[].InstanceId", "--output", "text"])
        .envs(moto.env());
    let out = run_bounded(command, "aws ec2 run-instances", Duration::from_secs(60))?;
    let ids: Vec<String> = out.split_whitespace().map(str::to_owned).collect();
    if ids.len() != INSTANCES {
        return Err(step_error(
            "aws ec2 run-instances",
            format!("expected {INSTANCES} ids, got {out:?}"),
        ));
    }
    Ok(ids)
}
