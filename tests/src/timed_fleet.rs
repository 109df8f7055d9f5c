//! SSM Run Command whose rollouts take time, for the configure function's tests: moto marks
//! every command `Success` the moment it is sent, so there a rollout is never in flight.
//!
//! The client is the real `aws_sdk_ssm::Client` with `aws-smithy-mocks` answering its calls
//! (`SendCommand`, `ListCommands` by id or by filters, newest first, `ListCommandInvocations`
//! empty as moto's). A command runs as SSM runs one with `MaxConcurrency` 1: its instances one
//! after the other, each apply taking `apply`; commands do not wait for each other (SSM does not
//! serialise them). Status and applies are computed from the clock when asked.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use aws_sdk_ssm::config::retry::RetryConfig;
use aws_sdk_ssm::config::{BehaviorVersion, Credentials, Region};
use aws_sdk_ssm::operation::list_command_invocations::ListCommandInvocationsOutput;
use aws_sdk_ssm::operation::list_commands::ListCommandsOutput;
use aws_sdk_ssm::operation::send_command::SendCommandOutput;
use aws_sdk_ssm::primitives::DateTime;
use aws_sdk_ssm::types::{Command, CommandStatus};
use aws_smithy_mocks::{MockResponseInterceptor, Rule, RuleMode, create_mock_http_client, mock};

/// One command as sent.
#[derive(Debug, Clone)]
struct Sent {
    id: String,
    document: String,
    parameters: HashMap<String, Vec<String>>,
    at: Instant,
    requested: SystemTime,
}

/// One instance's apply of one command's version, as it ran (or runs) on the clock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Apply {
    pub instance: String,
    pub version_id: String,
    pub start: Instant,
    pub end: Instant,
}

/// The fleet behind the fake SSM.
#[derive(Debug, Clone)]
pub struct TimedFleet {
    instances: Vec<String>,
    apply: Duration,
    sent: Arc<Mutex<Vec<Sent>>>,
}

impl TimedFleet {
    pub fn new(instances: &[&str], apply: Duration) -> TimedFleet {
        TimedFleet {
            instances: instances.iter().map(|i| (*i).to_owned()).collect(),
            apply,
            sent: Arc::default(),
        }
    }

    /// How long one command takes to reach the whole fleet.
    pub fn rollout(&self) -> Duration {
        self.apply * u32::try_from(self.instances.len()).unwrap()
    }

    /// Commands sent so far.
    pub fn commands(&self) -> usize {
        self.sent.lock().unwrap().len()
    }

    /// Every apply of every command, started or not, in the order sent.
    pub fn applies(&self) -> Vec<Apply> {
        let sent = self.sent.lock().unwrap().clone();
        sent.iter()
            .flat_map(|command| {
                self.instances
                    .iter()
                    .zip(0u32..)
                    .map(|(instance, n)| Apply {
                        instance: instance.clone(),
                        version_id: first(&command.parameters, "ConfigVersion"),
                        start: command.at + self.apply * n,
                        end: command.at + self.apply * (n + 1),
                    })
            })
            .collect()
    }

    /// The version each instance installed last among the applies over by now, by `rank`
    /// (the apply document skips a generation older than the one running).
    pub fn installed(&self, rank: impl Fn(&str) -> usize) -> HashMap<String, String> {
        let now = Instant::now();
        let mut installed: HashMap<String, String> = HashMap::new();
        for apply in self.applies().into_iter().filter(|a| a.end <= now) {
            let newer = installed
                .get(&apply.instance)
                .is_none_or(|held| rank(held) < rank(&apply.version_id));
            if newer {
                installed.insert(apply.instance, apply.version_id);
            }
        }
        installed
    }

    fn command(&self, sent: &Sent) -> Command {
        let done = Instant::now() >= sent.at + self.rollout();
        Command::builder()
            .command_id(&sent.id)
            .document_name(&sent.document)
            .set_parameters(Some(sent.parameters.clone()))
            .requested_date_time(DateTime::from(sent.requested))
            .status(if done {
                CommandStatus::Success
            } else {
                CommandStatus::InProgress
            })
            .target_count(i32::try_from(self.instances.len()).unwrap())
            .build()
    }

    /// An SSM client whose calls this fleet answers; nothing leaves the process.
    pub fn client(&self) -> aws_sdk_ssm::Client {
        let fleet = self.clone();
        let send = mock!(aws_sdk_ssm::Client::send_command).then_compute_output(move |input| {
            let mut sent = fleet.sent.lock().unwrap();
            let command = Sent {
                id: format!("command-{}", sent.len() + 1),
                document: input.document_name().unwrap_or_default().to_owned(),
                parameters: input.parameters().cloned().unwrap_or_default(),
                at: Instant::now(),
                requested: SystemTime::now(),
            };
            sent.push(command.clone());
            SendCommandOutput::builder()
                .command(fleet.command(&command))
                .build()
        });
        let fleet = self.clone();
        let list = mock!(aws_sdk_ssm::Client::list_commands).then_compute_output(move |input| {
            let sent = fleet.sent.lock().unwrap().clone();
            let commands = sent
                .iter()
                .rev()
                .filter(|c| input.command_id().is_none_or(|id| id == c.id))
                .map(|c| fleet.command(c))
                .collect();
            ListCommandsOutput::builder()
                .set_commands(Some(commands))
                .build()
        });
        let invocations = mock!(aws_sdk_ssm::Client::list_command_invocations)
            .then_output(|| ListCommandInvocationsOutput::builder().build());
        ssm_answering(&[&send, &list, &invocations])
    }
}

/// An SSM client whose calls the rules answer (`aws-smithy-mocks`); nothing leaves the process.
pub fn ssm_answering(rules: &[&Rule]) -> aws_sdk_ssm::Client {
    let interceptor = rules.iter().fold(
        MockResponseInterceptor::new().rule_mode(RuleMode::MatchAny),
        |interceptor, rule| interceptor.with_rule(rule),
    );
    let config = aws_sdk_ssm::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new("testing", "testing", None, None, "test"))
        .retry_config(RetryConfig::disabled())
        .http_client(create_mock_http_client())
        .interceptor(interceptor)
        .build();
    aws_sdk_ssm::Client::from_conf(config)
}

fn first(parameters: &HashMap<String, Vec<String>>, name: &str) -> String {
    parameters
        .get(name)
        .and_then(|values| values.first())
        .cloned()
        .unwrap_or_default()
}
