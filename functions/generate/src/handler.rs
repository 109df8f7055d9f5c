//! autoproxy-generate: Route53 of every configured account → haproxy.cfg in S3, written only
//! when it changed.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use autoproxy::accounts::{self, Counts};
use autoproxy::discovery::{self, Matching, Scope, SweepError};
use autoproxy::manifest::Manifest;
use autoproxy::model::Route;
use autoproxy::publish::Decision;
use autoproxy::render::{RenderError, RenderInput, Renderer};
use autoproxy::route53::AccountRoute53;
use autoproxy::s3::{CurrentConfig, StoreError};
use autoproxy::time::Stamp;
use aws_lambda_events::event::sqs::SqsBatchResponse;
use lambda_runtime::{Context, Diagnostic, LambdaEvent};
use serde::Serialize;
use serde_json::Value;
use tracing::{info, warn};

use crate::batch::Batch;
pub use crate::deps::{Deps, ProxyVpcsError, sdk_config, vpc_zones};
use crate::explain::{self, ExplainFailed, Explanation};
pub use crate::invocation::{Invocation, InvocationError};
use crate::members::Members;
use crate::plan::{self, Plan, Write};
use crate::queue::{self, QueueRun};
use crate::report::{Costs, Route53Calls, report_run};
use crate::trigger::Trigger;

/// Why an invocation failed. Nothing was published.
#[derive(Debug, thiserror::Error)]
pub enum GenerateError {
    /// The payload is none of the accepted shapes: nothing was read.
    #[error(transparent)]
    Invalid(#[from] InvocationError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Sweep(#[from] SweepError),
    /// With no manifest to fall back on, a run that cannot list the members reads none.
    #[error(
        "listing the member accounts (MEMBER_ACCOUNTS) failed and no manifest names them, \
         nothing published: {0}"
    )]
    Members(#[source] autoproxy::organizations::ListError),
    /// With `PROXY_VPCS` set, nobody may route until the VPCs' zones are known.
    #[error("listing the zones of the proxy VPCs failed, nothing published: {0}")]
    ProxyVpcs(#[from] ProxyVpcsError),
    #[error("rendering haproxy.cfg failed, nothing published: {0}")]
    Render(#[source] RenderError),
}

/// An explanation's failed read fails it as the same read fails a run.
impl From<ExplainFailed> for GenerateError {
    fn from(failed: ExplainFailed) -> Self {
        match failed {
            ExplainFailed::Store(err) => GenerateError::Store(err),
            ExplainFailed::ProxyVpcs(err) => GenerateError::ProxyVpcs(err),
        }
    }
}

impl From<GenerateError> for Diagnostic {
    fn from(err: GenerateError) -> Self {
        let kind = match &err {
            GenerateError::Invalid(_) => "InvalidEvent",
            GenerateError::Store(_) => "S3Error",
            GenerateError::Sweep(_) => "ScanFailed",
            GenerateError::Members(_) => "OrganizationsFailed",
            GenerateError::ProxyVpcs(_) => "ProxyVpcsFailed",
            GenerateError::Render(_) => "RenderFailed",
        };
        Diagnostic {
            error_type: kind.to_owned(),
            error_message: err.to_string(),
        }
    }
}

/// The JSON summary every invocation returns (docs/ARCHITECTURE.md, "Generator events").
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Summary {
    pub trigger: String,
    pub zones_scanned: usize,
    pub rules: usize,
    pub changed: bool,
    pub published: bool,
    pub sha256: String,
    pub version_id: Option<String>,
    pub diff: String,
    pub warnings: Vec<String>,
    /// Accounts by state; the manifest names them.
    pub accounts: Counts,
    /// Accounts with zones never read yet, and how many: they keep their published routes
    /// while every other account publishes. Absent when none.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub unread_zones: BTreeMap<String, usize>,
    /// A run of the event queue: its batch, what it took from the queue, how long it waited.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queue: Option<QueueRun>,
    /// The EMF metric documents the run wrote to its log (not part of the JSON answer).
    #[serde(skip)]
    pub metrics: Vec<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub config: Option<String>,
}

/// What one invocation returns. Untagged: each kind serialises exactly as its own type, so a
/// run answers as it always has. Each is boxed: all three are large, and the reply is built
/// once per invocation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum Reply {
    /// A run of a [`Trigger`]: the schedule, a manual payload, one CloudTrail event.
    Run(Box<Summary>),
    /// For `{"explain": "<name>"}`.
    Explain(Box<Explanation>),
    /// For a batch of the event queue.
    Batch(Box<BatchReply>),
}

/// What a batch of the event queue gets back: the run's summary, and the records SQS must
/// keep (`batchItemFailures`, for `ReportBatchItemFailures`; empty when every record was read).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BatchReply {
    #[serde(flatten)]
    pub summary: Summary,
    #[serde(flatten)]
    pub response: SqsBatchResponse,
}

/// The function's timeout: `GenerateFunction`'s `Timeout` in template.yaml, Lambda's longest.
pub const FUNCTION_TIMEOUT: Duration = Duration::from_secs(900);

/// Time kept back from the Lambda deadline for rendering and publishing after the reads: this,
/// or a quarter of the invocation's time when that is less (see [`publish_reserve`]).
pub const PUBLISH_RESERVE: Duration = Duration::from_secs(60);

/// What a run keeps back for publishing when `remaining` is left of its invocation:
/// [`PUBLISH_RESERVE`] of the [`FUNCTION_TIMEOUT`] the stack gives, a quarter of a shorter
/// time (a test's, or a timeout lowered by hand), which would otherwise read nothing at all.
pub fn publish_reserve(remaining: Duration) -> Duration {
    PUBLISH_RESERVE.min(remaining / 4)
}

/// The Lambda entry point: the payload read once as an [`Invocation`], handled with a time
/// budget that stops zone reads [`publish_reserve`] before the function's deadline.
pub async fn function_handler(
    deps: &Deps,
    event: LambdaEvent<Value>,
) -> Result<Reply, GenerateError> {
    let invocation = Invocation::parse(&event.payload)?;
    handle(deps, invocation, reads_deadline(&event.context)).await
}

/// One invocation, each kind's path in one place. A run is stamped when it starts (a batch's
/// after it has gathered the queue) and starts no zone read after `deadline`.
pub async fn handle(
    deps: &Deps,
    invocation: Invocation,
    deadline: Option<tokio::time::Instant>,
) -> Result<Reply, GenerateError> {
    match invocation {
        // Reads the config, the manifest and the zones that may hold the name; writes nothing.
        Invocation::Explain(name) => {
            let answer = explain::explain(deps, &name).await?;
            Ok(Reply::Explain(Box::new(answer)))
        }
        // Gathers what else waits in the queue, one run of the zones named, then deletes.
        Invocation::Batch(batch) => {
            let reply = batch_run(deps, batch, deadline).await?;
            Ok(Reply::Batch(Box::new(reply)))
        }
        // The schedule and a manual payload sweep; one CloudTrail event reads its zone.
        Invocation::Run(trigger) => {
            let summary = run(deps, &trigger, Stamp::now(), deadline).await?;
            Ok(Reply::Run(Box::new(summary)))
        }
    }
}

/// When zone reads stop: [`publish_reserve`] before the invocation's deadline. A deadline
/// already past when the invocation starts is not one Lambda sends: `cargo lambda watch` (1.9)
/// sends the timeout itself (600000 ms), which reads as 1970. Under it every run would read no
/// zone at all; run without a budget instead.
fn reads_deadline(context: &Context) -> Option<tokio::time::Instant> {
    match context
        .deadline()
        .duration_since(std::time::SystemTime::now())
    {
        Ok(remaining) => {
            Some(tokio::time::Instant::now() + remaining.saturating_sub(publish_reserve(remaining)))
        }
        Err(_) => {
            warn!(
                deadline_ms = context.deadline,
                "the invocation's deadline has already passed (a local emulator?): no time budget"
            );
            None
        }
    }
}

/// A batch of the event queue as one run (see [`queue`]): take what else waits in the queue
/// (a burst soon after an event run's publish waits out the spacing first), read each zone
/// named once, write, then delete the messages taken. A failed run deletes nothing: SQS shows
/// the batch and the taken messages again.
async fn batch_run(
    deps: &Deps,
    mut batch: Batch,
    deadline: Option<tokio::time::Instant>,
) -> Result<BatchReply, GenerateError> {
    let records = batch.changes.events() + batch.refused.len();
    // Only the mapping's own records are its to keep (an id it did not deliver would fail the
    // whole batch); a taken message that is refused is simply not deleted.
    let response = batch.failures();
    // How long a taken message stays hidden, asked at each take: the time left to the reads'
    // deadline plus the most ever kept back from it for publishing (PUBLISH_RESERVE), which is
    // at least until this invocation ends and at most a minute past it (rounded up to whole
    // seconds by the take); the whole FUNCTION_TIMEOUT without a deadline.
    let hold = || {
        deadline.map_or(FUNCTION_TIMEOUT, |deadline| {
            deadline.saturating_duration_since(tokio::time::Instant::now()) + PUBLISH_RESERVE
        })
    };
    let (drained, wait) = queue::gather(deps.queue.as_ref(), &deps.store, &mut batch, hold).await?;
    info!(
        records,
        drained = drained.messages,
        events = batch.changes.events(),
        zones = batch.changes.zones.len(),
        refused = batch.refused.len(),
        "queue run"
    );
    let trigger = Trigger::Route53(batch.changes.clone());
    let mut summary = run(deps, &trigger, Stamp::now(), deadline).await?;
    if let Some(queue) = &deps.queue
        && !drained.receipts.is_empty()
    {
        queue.delete(&drained.receipts).await;
    }
    summary.queue = Some(QueueRun {
        records,
        drained: drained.messages,
        refused: batch.refused.len(),
        waited_ms: millis(wait),
    });
    for refused in &batch.refused {
        warn!(message_id = %refused.message_id, error = %refused.error, "queued message refused (no Route53 event, or one naming another account): left to SQS's retries");
    }
    Ok(BatchReply { summary, response })
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// One run of `trigger` stamped `at` (the floor of its generation, its header's
/// `generated-at`): the reads, the [`plan`], then the writes it decided. No zone read starts
/// after `deadline`.
pub async fn run(
    deps: &Deps,
    trigger: &Trigger,
    at: Stamp,
    deadline: Option<tokio::time::Instant>,
) -> Result<Summary, GenerateError> {
    let started = Instant::now();
    let generated_at = at.to_string();
    info!(trigger = %trigger.label(), "run started");

    let (current, previous) = read_state(deps).await?;
    let scope = plan::scope(trigger, previous.as_ref());
    let SweepRun { swept, costs } = sweep(deps, &scope, previous.as_ref(), deadline).await?;
    let zones_scanned = swept.zones_scanned;
    let associated = match deps.settings.proxy_vpcs.as_slice() {
        [] => None,
        vpcs => Some(vpc_zones(deps, vpcs).await?),
    };
    let custom = custom_renderer(deps).await?;
    let renderer = custom.as_ref().unwrap_or(&deps.default_renderer);
    let label = trigger.label();
    // The borders the sweep judged the literal addresses by (the members' VPCs it read or
    // kept, and the operator's ranges) travel in the artifact: the agent judges the addresses
    // it resolves by them.
    let borders = deps.borders_with(&swept.manifest.networks);
    let render = |routes: &[Route], generation: u64| {
        let input = RenderInput {
            routes,
            resolvers: &deps.settings.dns_resolvers,
            proxies: &deps.settings.proxy_hostnames,
            options: &deps.settings.render_options,
            generation,
            generated_at: &generated_at,
            trigger: &label,
        };
        renderer.render_within(&input, &borders)
    };
    let location = format!("s3://{}/{}", deps.store.bucket, deps.store.config_key);
    let inputs = plan::Inputs {
        trigger,
        current: current.as_ref(),
        previous: previous.as_ref(),
        swept,
        associated: associated.as_ref(),
        now: at,
        max_rule_drop_percent: deps.settings.max_rule_drop_percent,
        grace_hours: deps.settings.ownership_grace_hours,
        config_location: &location,
    };
    let plan = plan::plan(inputs, &render).map_err(GenerateError::Render)?;
    for refusal in &plan.refusals {
        warn!(%refusal, "route refused: not the zone the proxy resolves for this name");
    }
    let version_id = write(deps, &plan, current.as_ref()).await?;
    let published = plan.publishes();
    let metrics = report_run(&plan, zones_scanned, &costs, started, at.unix());
    Ok(Summary {
        config: trigger.dry_run().then(|| plan.rendered.text.clone()),
        trigger: label,
        zones_scanned,
        rules: plan.routes,
        changed: plan.changed(),
        published,
        sha256: plan.rendered.header.sha256,
        version_id,
        diff: plan.diff,
        warnings: plan.warnings,
        accounts: accounts::counts(&plan.manifest.accounts),
        unread_zones: plan.unread,
        queue: None,
        metrics,
    })
}

/// A sweep and what it cost.
struct SweepRun {
    swept: discovery::Swept,
    costs: Costs,
}

/// The accounts this run reads (the static ones, and the members listed now), then the sweep
/// of them.
async fn sweep(
    deps: &Deps,
    scope: &Scope,
    previous: Option<&Manifest>,
    deadline: Option<tokio::time::Instant>,
) -> Result<SweepRun, GenerateError> {
    let organizations_before = deps
        .members
        .as_ref()
        .map_or(0, Members::organizations_calls);
    let (accounts, listing_warning) = run_accounts(deps, scope, previous).await?;
    let learned = deps.vpcs.learn(scope, previous, &accounts, deadline).await;
    let borders = deps.borders_with(&learned.networks);
    let matching = Matching {
        rules: &deps.settings.routing_rules,
        proxies: &deps.settings.proxy_hostnames,
        ignore: &deps.settings.ignore_zones,
        borders: &borders,
    };
    let before = Route53Calls::now(&accounts);
    let mut swept = discovery::sweep(&accounts, previous, scope, matching, deadline).await?;
    swept.warnings.extend(listing_warning);
    swept.warnings.extend(learned.warnings);
    swept.manifest.networks = learned.networks;
    if let Some(members) = &deps.members {
        let warning = members.note_management(&mut swept.outcomes).await;
        swept.warnings.extend(warning);
    }
    let organizations = deps
        .members
        .as_ref()
        .map_or(0, Members::organizations_calls)
        .saturating_sub(organizations_before);
    Ok(SweepRun {
        swept,
        costs: Costs {
            route53: before.since(&accounts),
            organizations,
            ec2: learned.calls,
        },
    })
}

/// The accounts to read: the own one and `ACCOUNT_ROLE_ARNS`' (built once), then the
/// members. A full sweep lists them; a run that reads one zone, or whose listing failed,
/// takes the onboarded ones the last manifest names (with a warning for a failed listing).
async fn run_accounts(
    deps: &Deps,
    scope: &Scope,
    previous: Option<&Manifest>,
) -> Result<(Vec<AccountRoute53>, Option<String>), GenerateError> {
    let mut accounts = deps.accounts.clone();
    let Some(members) = &deps.members else {
        return Ok((accounts, None));
    };
    let mut skip: BTreeSet<String> = accounts.iter().map(|a| a.account.clone()).collect();
    skip.extend(deps.vpc_owner.iter().map(|own| own.account.clone()));
    let states = previous.map_or(&[][..], |m| m.accounts.as_slice());
    let mut warning = None;
    let more = match scope {
        Scope::Zones(_) => members.known(states, &skip).await,
        Scope::Full => match members.listed(&skip).await {
            Ok(listed) => listed,
            Err(err) if previous.is_some() => {
                warn!(error = %err, "member listing failed: sweeping the members last known");
                warning = Some(format!(
                    "{err}; sweeping the onboarded members the last manifest names instead"
                ));
                members.known(states, &skip).await
            }
            Err(err) => return Err(GenerateError::Members(err)),
        },
    };
    accounts.extend(more);
    Ok((accounts, warning))
}

/// The config and the manifest as S3 holds them. A manifest that cannot be read (or fails its
/// checks) is no reason to stop: the run becomes a full sweep.
async fn read_state(
    deps: &Deps,
) -> Result<(Option<CurrentConfig>, Option<Manifest>), GenerateError> {
    let current = deps.store.current_config().await?;
    let previous = match deps.store.manifest(&deps.settings.routing_rules).await {
        Ok(manifest) => manifest,
        Err(err) => {
            warn!(error = %err, "manifest unreadable: this run is a full sweep");
            None
        }
    };
    Ok((current, previous))
}

/// The template at `TEMPLATE_KEY`, compiled; `None` for the embedded one.
async fn custom_renderer(deps: &Deps) -> Result<Option<Renderer>, GenerateError> {
    let Some(key) = &deps.settings.template_key else {
        return Ok(None);
    };
    let text = deps.store.template(key).await?;
    Renderer::new(&text)
        .map(Some)
        .map_err(GenerateError::Render)
}

/// Writes what the plan decided: the manifest first, so that if the config write fails the
/// next run still sees a difference and publishes (the other order could lose the manifest).
/// Returns the config's version id, the new one when published.
async fn write(
    deps: &Deps,
    plan: &Plan,
    current: Option<&CurrentConfig>,
) -> Result<Option<String>, GenerateError> {
    let current_version = current.and_then(|c| c.version_id.clone());
    match &plan.write {
        Write::Nothing(why) => {
            if let Decision::Blocked(reason) = &plan.decision {
                warn!(reason = %reason, "{why}");
            } else {
                info!(changed = plan.changed(), "{why}");
            }
            Ok(current_version)
        }
        Write::Manifest(why) => {
            deps.store.put_manifest(&plan.manifest).await?;
            info!(pending = plan.manifest.pending.len(), "{why}");
            Ok(current_version)
        }
        Write::Publish => {
            deps.store.put_manifest(&plan.manifest).await?;
            let version_id = deps
                .store
                .put_config(&plan.rendered.text, &plan.rendered.header, current)
                .await?;
            info!(
                generation = plan.rendered.header.generation,
                rules = plan.routes,
                sha256 = %plan.rendered.header.sha256,
                version_id = version_id.as_deref().unwrap_or(""),
                "published"
            );
            Ok(version_id)
        }
    }
}
