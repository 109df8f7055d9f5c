//! A rollout: one SSM command per config version to the tagged proxies, followed until it ends (or the invocation must), never sent twice for the same version, failing loudly when an instance fails or none is reached.

use super::*;

/// Rolls out each config version the S3 event announces that is still the key's current one,
/// then, while time remains, the version that replaced it during the rollout (its own event may
/// wait behind Lambda's retries of a throttled invocation).
pub async fn roll_out(
    deps: &Deps,
    payload: &Value,
    follow_until: Instant,
) -> Result<Outcome, ConfigureError> {
    let (wanted, ignored) = dispatches(payload, &deps.settings.config_key)?;
    let mut outcome = Outcome {
        dispatched: Vec::new(),
        superseded: Vec::new(),
        ignored,
    };
    let mut failures = Vec::new();
    let mut queue: std::collections::VecDeque<Dispatch> = wanted.into();
    while let Some(dispatch) = queue.pop_front() {
        let generation = current::generation_of(deps, &dispatch).await?;
        if let Some(superseded) = current::superseded(deps, &dispatch, &generation).await? {
            outcome.superseded.push(superseded);
            continue;
        }
        let rollout = dispatch_one(deps, &dispatch, generation, follow_until).await?;
        let verdict = record(deps, &rollout)?;
        if let Verdict::Failed(detail) = &verdict {
            failures.push((rollout.generation.clone(), detail.clone()));
        }
        outcome.dispatched.push(rollout);
        if queue.is_empty()
            && verdict == Verdict::Succeeded
            && Instant::now() < follow_until
            && let Some(newer) = current::replacement(deps, &dispatch, &outcome).await?
        {
            queue.push_back(newer);
        }
    }
    Metrics::new("configure")
        .count("Superseded", outcome.superseded.len() as u64)
        .emit();
    if let Some((generation, _)) = failures.first() {
        let failures = failures
            .iter()
            .map(|(_, detail)| detail.as_str())
            .collect::<Vec<_>>()
            .join(" | ");
        error!(generation, failures, "rollout failed");
        return Err(ConfigureError::Rollout {
            generation: generation.clone(),
            failures,
        });
    }
    Ok(outcome)
}

/// Emits the rollout's metrics; its verdict, or the error of one that reached no instance.
fn record(deps: &Deps, rollout: &Rollout) -> Result<Verdict, ConfigureError> {
    let verdict = verdict(rollout);
    Metrics::new("configure")
        .count("Dispatched", u64::from(rollout.sent))
        .count("NoTargets", u64::from(verdict == Verdict::NoTargets))
        .count(
            "InstancesSucceeded",
            rollout.instances.len() as u64 - failed_count(rollout),
        )
        .count("InstancesFailed", failed_count(rollout))
        .emit();
    if verdict == Verdict::NoTargets {
        error!(command_id = %rollout.command_id, "the rollout reached no instance");
        return Err(ConfigureError::NoTargets {
            generation: rollout.generation.clone(),
            command_id: rollout.command_id.clone(),
            tag_key: deps.settings.target_tag_key.clone(),
            tag_value: deps.settings.target_tag_value.clone(),
        });
    }
    Ok(verdict)
}

/// How one rollout ended, from its command's status and its instances' results.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Verdict {
    Succeeded,
    /// Still running when the invocation had to end; SSM carries on.
    StillRunning,
    /// The command ended having targeted no instance (a tag typo, a fleet elsewhere).
    NoTargets,
    /// The command failed, or an instance did: what failed, for the error.
    Failed(String),
}

fn failed_count(rollout: &Rollout) -> u64 {
    rollout
        .instances
        .iter()
        .filter(|i| i.status != Some(CommandInvocationStatus::Success))
        .count() as u64
}

/// Decides how a rollout ended. Per-instance results win over the command's status (they
/// name the instance); without them (moto does not list invocations) the status decides.
pub(super) fn verdict(rollout: &Rollout) -> Verdict {
    if rollout.targets == 0 && !is_running(&rollout.status) {
        return Verdict::NoTargets;
    }
    let failed: Vec<String> = rollout
        .instances
        .iter()
        .filter(|i| i.status != Some(CommandInvocationStatus::Success))
        .map(|i| format!("{} {}: {}", i.instance_id, i.status_str(), i.detail))
        .collect();
    if !failed.is_empty() {
        return Verdict::Failed(failed.join("; "));
    }
    if is_failure(&rollout.status) {
        return Verdict::Failed(format!(
            "command {} ended {}",
            rollout.command_id,
            rollout.status.as_str()
        ));
    }
    if is_running(&rollout.status) {
        Verdict::StillRunning
    } else {
        Verdict::Succeeded
    }
}

pub(super) fn is_failure(status: &CommandStatus) -> bool {
    matches!(
        status,
        CommandStatus::Failed
            | CommandStatus::TimedOut
            | CommandStatus::Cancelled
            | CommandStatus::Cancelling
    )
}

pub(super) fn is_running(status: &CommandStatus) -> bool {
    matches!(status, CommandStatus::Pending | CommandStatus::InProgress)
}

/// How far back a command for the same version counts as this rollout.
pub(super) const SAME_ROLLOUT_WITHIN: Duration = Duration::from_secs(3_600);

/// Whether a command that has ended reached no instance: it targeted none (a tag that matched
/// nothing when it was sent), or every target's delivery timed out. One still pending or
/// running is under way whatever its count says: SSM fills `TargetCount` in as it resolves
/// the tag.
pub(super) fn reached_nobody(command: &aws_sdk_ssm::types::Command) -> bool {
    let running = command.status().is_none_or(is_running);
    let targets = command.target_count();
    !running && (targets <= 0 || command.delivery_timed_out_count() >= targets)
}

/// Whether `command` is this rollout, sent earlier: the apply document, for exactly this
/// bucket, key and version, sent since `since`, and neither failed nor ended having reached no
/// instance (both are sent again: the retry is the point).
pub(super) fn is_earlier_rollout(
    command: &aws_sdk_ssm::types::Command,
    apply_document: &str,
    dispatch: &Dispatch,
    since: &aws_sdk_ssm::primitives::DateTime,
) -> bool {
    let param = |name: &str| -> Option<&str> {
        command.parameters()?.get(name)?.first().map(String::as_str)
    };
    command.document_name() == Some(apply_document)
        && command.requested_date_time().is_some_and(|t| t >= since)
        && param("ConfigBucket") == Some(dispatch.bucket.as_str())
        && param("ConfigKey") == Some(dispatch.key.as_str())
        && param("ConfigVersion") == Some(dispatch.version_id.as_str())
        && !command.status().is_some_and(is_failure)
        && !reached_nobody(command)
}

/// The id of a command of the apply document for exactly this version, sent within the last
/// hour, neither failed nor ended without reaching an instance: pending, running or done. A
/// Lambda retry after a timeout, or S3 delivering the event twice, follows it instead of
/// sending a second command that would meet the first one's lock on every instance. A failed
/// one, or one that targeted nobody (the tag fixed since), is sent again.
pub(super) async fn earlier_command(
    deps: &Deps,
    dispatch: &Dispatch,
) -> Result<Option<String>, String> {
    use aws_sdk_ssm::primitives::{DateTime, DateTimeFormat};
    use aws_sdk_ssm::types::{CommandFilter, CommandFilterKey};
    let since = std::time::SystemTime::now()
        .checked_sub(SAME_ROLLOUT_WITHIN)
        .unwrap_or(std::time::UNIX_EPOCH);
    let since = DateTime::from(since);
    let filter = |key: CommandFilterKey, value: String| {
        CommandFilter::builder()
            .key(key)
            .value(value)
            .build()
            .map_err(|err| err.to_string())
    };
    let mut pages = deps
        .ssm
        .list_commands()
        .filters(filter(
            CommandFilterKey::DocumentName,
            deps.settings.apply_document.clone(),
        )?)
        .filters(filter(
            CommandFilterKey::InvokedAfter,
            since
                .fmt(DateTimeFormat::DateTime)
                .map_err(|err| err.to_string())?,
        )?)
        .into_paginator()
        .send();
    while let Some(page) = pages.next().await {
        let page = page.map_err(|err| aws_error::reason(&err))?;
        // Newest first as SSM lists them; the filters are checked here too.
        let found = page.commands().iter().find(|command| {
            is_earlier_rollout(command, &deps.settings.apply_document, dispatch, &since)
        });
        if let Some(command) = found {
            return Ok(Some(command.command_id().unwrap_or_default().to_owned()));
        }
    }
    Ok(None)
}

pub(super) async fn dispatch_one(
    deps: &Deps,
    dispatch: &Dispatch,
    generation: String,
    follow_until: Instant,
) -> Result<Rollout, ConfigureError> {
    let failed = |operation: &'static str, message: String| ConfigureError::Aws {
        operation,
        bucket: dispatch.bucket.clone(),
        key: dispatch.key.clone(),
        version_id: dispatch.version_id.clone(),
        message,
    };
    let earlier = earlier_command(deps, dispatch)
        .await
        .map_err(|message| failed("ListCommands", message))?;
    let sent = earlier.is_none();
    let command_id = match earlier {
        Some(command_id) => {
            info!(
                command_id,
                generation,
                version_id = %dispatch.version_id,
                "a command for this version is already under way or done: following it, not sending another"
            );
            command_id
        }
        None => send(deps, dispatch, &generation)
            .await
            .map_err(|message| failed("SendCommand", message))?,
    };

    let (status, targets) = follow(deps, &command_id, follow_until)
        .await
        .map_err(|message| failed("ListCommands", message))?;
    let instances = instance_results(deps, &command_id).await;
    for instance in &instances {
        info!(
            command_id,
            instance_id = %instance.instance_id,
            status = instance.status_str(),
            detail = %instance.detail,
            "instance result"
        );
    }
    Ok(Rollout {
        command_id,
        sent,
        targets,
        generation,
        version_id: dispatch.version_id.clone(),
        status,
        instances,
    })
}

/// Sends the apply document to the tagged fleet; the command's id.
pub(super) async fn send(
    deps: &Deps,
    dispatch: &Dispatch,
    generation: &str,
) -> Result<String, String> {
    let settings = &deps.settings;
    let mut output = CloudWatchOutputConfig::builder().cloud_watch_output_enabled(true);
    if let Some(group) = &settings.command_log_group {
        output = output.cloud_watch_log_group_name(group);
    }
    let sent = deps
        .ssm
        .send_command()
        .document_name(&settings.apply_document)
        .targets(
            Target::builder()
                .key(format!("tag:{}", settings.target_tag_key))
                .values(&settings.target_tag_value)
                .build(),
        )
        .parameters("ConfigBucket", vec![dispatch.bucket.clone()])
        .parameters("ConfigKey", vec![dispatch.key.clone()])
        .parameters("ConfigVersion", vec![dispatch.version_id.clone()])
        .max_concurrency(&settings.max_concurrency)
        .max_errors(&settings.max_errors)
        // An instance whose agent is gone is given up after this, not after SSM's hour.
        .timeout_seconds(settings.delivery_timeout_seconds)
        .comment(command_comment(generation, &dispatch.version_id))
        .cloud_watch_output_config(output.build())
        .send()
        .await
        .map_err(|err| aws_error::reason(&err))?;
    let command_id = sent
        .command()
        .and_then(|c| c.command_id())
        .unwrap_or_default()
        .to_owned();
    info!(command_id, generation, version_id = %dispatch.version_id, "command sent");
    Ok(command_id)
}

/// Polls the command until it ends or time runs out; returns its last status and how many
/// instances it targeted.
pub(super) async fn follow(
    deps: &Deps,
    command_id: &str,
    until: Instant,
) -> Result<(CommandStatus, i32), String> {
    loop {
        let listed = deps
            .ssm
            .list_commands()
            .command_id(command_id)
            .send()
            .await
            .map_err(|err| aws_error::reason(&err))?;
        let command = listed.commands().first();
        let status = command
            .and_then(|c| c.status())
            .cloned()
            .unwrap_or(CommandStatus::Pending);
        let targets = command.map_or(0, |c| c.target_count());
        if !is_running(&status) {
            return Ok((status, targets));
        }
        if Instant::now() + deps.poll_every > until {
            warn!(
                command_id,
                status = status.as_str(),
                "still running when this invocation must end; SSM carries on and the \
                 command's own output and alarms report the end"
            );
            return Ok((status, targets));
        }
        tokio::time::sleep(deps.poll_every).await;
    }
}

/// Per-instance results. This is the one call moto does not implement; without it the
/// command's own status still decides success or failure.
pub(super) async fn instance_results(deps: &Deps, command_id: &str) -> Vec<InstanceResult> {
    let mut results = Vec::new();
    let mut pages = deps
        .ssm
        .list_command_invocations()
        .command_id(command_id)
        .details(true)
        .into_paginator()
        .send();
    while let Some(page) = pages.next().await {
        match page {
            Ok(page) => results.extend(page.command_invocations().iter().map(|inv| {
                let output = inv
                    .command_plugins()
                    .iter()
                    .filter_map(|p| p.output())
                    .collect::<Vec<_>>()
                    .join(" ");
                let last_line = output
                    .lines()
                    .rev()
                    .find(|l| !l.trim().is_empty())
                    .unwrap_or("");
                InstanceResult {
                    instance_id: inv.instance_id().unwrap_or_default().to_owned(),
                    status: inv.status().cloned(),
                    detail: format!(
                        "{}{}",
                        inv.status_details().unwrap_or_default(),
                        if last_line.is_empty() {
                            String::new()
                        } else {
                            format!(": {last_line}")
                        }
                    ),
                }
            })),
            Err(err) => {
                warn!(command_id, error = %aws_error::reason(&err), "per-instance results unavailable");
                break;
            }
        }
    }
    results
}

/// SSM's limit on a command's comment, in characters.
const SSM_COMMENT_MAX_CHARS: usize = 100;

/// The command's comment, within SSM's limit: a version id may be up to 1,024 characters.
fn command_comment(generation: &str, version_id: &str) -> String {
    let text = format!("autoproxy generation {generation} (version {version_id})");
    // Cut (ASCII: a version id is) one short of the limit, for the "…" that marks the cut.
    autoproxy::excerpt(&text, SSM_COMMENT_MAX_CHARS - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_comment_never_exceeds_ssms_limit() {
        let short = command_comment("7", "abc");
        assert_eq!(short, "autoproxy generation 7 (version abc)");
        let long = command_comment("999999999999999999", &"v".repeat(1024));
        assert_eq!(long.chars().count(), SSM_COMMENT_MAX_CHARS, "{long}");
        assert!(long.ends_with('…'));
    }

    /// An earlier command for the same version, sent at 1,000 s, with `status`, `targets`
    /// and `timed_out` deliveries; whether a new event for that version follows it.
    fn check_follows(status: Option<CommandStatus>, targets: i32, timed_out: i32, follows: bool) {
        use aws_sdk_ssm::primitives::DateTime;
        let dispatch = Dispatch {
            bucket: "b".into(),
            key: "haproxy/haproxy.cfg".into(),
            version_id: "v7".into(),
        };
        let command = aws_sdk_ssm::types::Command::builder()
            .command_id("c-1")
            .document_name("apply")
            .requested_date_time(DateTime::from_secs(1_000))
            .parameters("ConfigBucket", vec!["b".into()])
            .parameters("ConfigKey", vec!["haproxy/haproxy.cfg".into()])
            .parameters("ConfigVersion", vec!["v7".into()])
            .set_status(status)
            .target_count(targets)
            .delivery_timed_out_count(timed_out)
            .build();
        let since = DateTime::from_secs(900);
        assert_eq!(
            is_earlier_rollout(&command, "apply", &dispatch, &since),
            follows,
            "{:?}, {targets} targets, {timed_out} timed out",
            command.status()
        );
    }

    #[test]
    fn a_command_that_reached_nobody_is_never_followed() {
        use CommandStatus as C;
        // Under way or done with targets: followed, not sent again.
        check_follows(Some(C::Success), 2, 0, true);
        check_follows(Some(C::InProgress), 2, 0, true);
        check_follows(Some(C::Success), 2, 1, true);
        // Still resolving its tag: under way.
        check_follows(Some(C::Pending), 0, 0, true);
        check_follows(Some(C::InProgress), 0, 0, true);
        check_follows(None, 0, 0, true);
        // Ended having targeted nobody, or reached nobody: sent again.
        check_follows(Some(C::Success), 0, 0, false);
        check_follows(Some(C::Success), 2, 2, false);
        // Failed: sent again, as before.
        check_follows(Some(C::Failed), 2, 0, false);
        check_follows(Some(C::TimedOut), 2, 0, false);
        check_follows(Some(C::Cancelled), 2, 0, false);
    }

    #[test]
    fn only_a_command_for_this_very_version_is_followed() {
        use aws_sdk_ssm::primitives::DateTime;
        let dispatch = Dispatch {
            bucket: "b".into(),
            key: "k.cfg".into(),
            version_id: "v7".into(),
        };
        let command = |document: &str, sent: i64, version: &str| {
            aws_sdk_ssm::types::Command::builder()
                .document_name(document)
                .requested_date_time(DateTime::from_secs(sent))
                .parameters("ConfigBucket", vec!["b".into()])
                .parameters("ConfigKey", vec!["k.cfg".into()])
                .parameters("ConfigVersion", vec![version.into()])
                .status(CommandStatus::Success)
                .target_count(1)
                .build()
        };
        let since = DateTime::from_secs(900);
        for (document, sent, version, follows) in [
            ("apply", 1_000, "v7", true),
            ("apply", 900, "v7", true),
            ("apply", 899, "v7", false),
            ("other", 1_000, "v7", false),
            ("apply", 1_000, "v8", false),
            ("apply", 1_000, "", false),
        ] {
            assert_eq!(
                is_earlier_rollout(
                    &command(document, sent, version),
                    "apply",
                    &dispatch,
                    &since
                ),
                follows,
                "{document} at {sent} for {version:?}"
            );
        }
    }

    fn rollout(
        status: CommandStatus,
        targets: i32,
        instances: &[(&str, Option<CommandInvocationStatus>)],
    ) -> Rollout {
        Rollout {
            command_id: "c-1".into(),
            sent: true,
            targets,
            generation: "7".into(),
            version_id: "v7".into(),
            status,
            instances: instances
                .iter()
                .map(|(id, status)| InstanceResult {
                    instance_id: (*id).to_owned(),
                    status: status.clone(),
                    detail: "exit 1: FAILED haproxy -c".into(),
                })
                .collect(),
        }
    }

    #[test]
    fn each_ending_of_a_rollout_gets_its_verdict() {
        use CommandInvocationStatus as I;
        use CommandStatus as C;
        let failed_on = |ids: &str| Verdict::Failed(ids.to_owned());
        for (rollout, expected) in [
            (rollout(C::Success, 2, &[]), Verdict::Succeeded),
            (
                rollout(
                    C::Success,
                    2,
                    &[("i-1", Some(I::Success)), ("i-2", Some(I::Success))],
                ),
                Verdict::Succeeded,
            ),
            (rollout(C::Success, 0, &[]), Verdict::NoTargets),
            (rollout(C::Failed, 0, &[]), Verdict::NoTargets),
            (rollout(C::InProgress, 0, &[]), Verdict::StillRunning),
            (rollout(C::InProgress, 3, &[]), Verdict::StillRunning),
            (
                rollout(C::Failed, 2, &[]),
                failed_on("command c-1 ended Failed"),
            ),
            (
                rollout(C::TimedOut, 2, &[]),
                failed_on("command c-1 ended TimedOut"),
            ),
            (
                rollout(
                    C::Failed,
                    2,
                    &[("i-1", Some(I::Success)), ("i-2", Some(I::Failed))],
                ),
                failed_on("i-2 Failed: exit 1: FAILED haproxy -c"),
            ),
            (
                rollout(C::Success, 1, &[("i-1", None)]),
                failed_on("i-1 Unknown: exit 1: FAILED haproxy -c"),
            ),
        ] {
            assert_eq!(verdict(&rollout), expected, "{rollout:?}");
        }
    }
}
