//! autoproxy-generate: Route53 of every configured account → haproxy.cfg in S3, written only
//! when it changed.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use autoproxy::discovery::{self, Matching, Scope, SweepError};
use autoproxy::metrics::Metrics;
use autoproxy::model::ZoneKey;
use autoproxy::ownership::{self, Mode};
use autoproxy::publish::{self, Current, Decision};
use autoproxy::render::{DEFAULT_TEMPLATE, RenderError, RenderInput, Rendered, Renderer};
use autoproxy::route53::AccountRoute53;
use autoproxy::rules::{DEFAULT_RULES, resolve};
use autoproxy::s3::{ConfigStore, CurrentConfig, StoreError};
use autoproxy::settings::{GenerateSettings, ProxyVpc};
use aws_config::SdkConfig;
use aws_config::sts::AssumeRoleProvider;
use lambda_runtime::{Diagnostic, LambdaEvent};
use serde::Serialize;
use serde_json::Value;
use tracing::{info, warn};

use crate::trigger::{self, Trigger, TriggerError};

/// Everything a run needs, built once per cold start.
#[derive(Debug)]
pub struct Deps {
    pub settings: GenerateSettings,
    pub store: ConfigStore,
    /// The function's own account first (unless `SCAN_OWN_ACCOUNT=false`), then one per role.
    pub accounts: Vec<AccountRoute53>,
    /// The own account's Route53, which owns the proxy VPCs and lists the zones associated
    /// with them (`PROXY_VPCS`); `None` when built by [`Deps::with_accounts`].
    pub vpc_owner: Option<AccountRoute53>,
    pub default_renderer: Renderer,
}

impl Deps {
    /// Builds the clients: the own account's Route53 and one assumed-role client per
    /// `ACCOUNT_ROLE_ARNS` entry (credentials are fetched lazily, on first use).
    pub async fn new(
        settings: GenerateSettings,
        sdk: &SdkConfig,
        own_account: &str,
    ) -> Result<Self, GenerateError> {
        let rate = settings.route53_requests_per_second;
        let own = AccountRoute53::new(own_account, &aws_sdk_route53::Config::new(sdk), rate);
        let mut accounts = Vec::new();
        if settings.scan_own_account {
            accounts.push(own.clone());
        }
        for role in &settings.account_roles {
            if role.account == own_account {
                continue;
            }
            let provider = AssumeRoleProvider::builder(&role.arn)
                .session_name("autoproxy-generate")
                .configure(sdk)
                .build()
                .await;
            let config = aws_sdk_route53::config::Builder::from(sdk)
                .credentials_provider(provider)
                .build();
            accounts.push(AccountRoute53::new(&role.account, &config, rate));
        }
        let mut deps = Self::with_accounts(settings, sdk, accounts)?;
        deps.vpc_owner = Some(own);
        Ok(deps)
    }

    /// The rest of the wiring around Route53 clients built elsewhere (the benchmark and the
    /// rate-limit test point each account at its own recording proxy).
    pub fn with_accounts(
        settings: GenerateSettings,
        sdk: &SdkConfig,
        accounts: Vec<AccountRoute53>,
    ) -> Result<Self, GenerateError> {
        let store = ConfigStore::new(
            aws_sdk_s3::Client::new(sdk),
            &settings.config_bucket,
            &settings.config_key,
            &settings.manifest_key(),
        );
        Ok(Deps {
            default_renderer: Renderer::new(DEFAULT_TEMPLATE).map_err(GenerateError::Render)?,
            settings,
            store,
            accounts,
            vpc_owner: None,
        })
    }
}

/// Why a run failed. Nothing was published.
#[derive(Debug, thiserror::Error)]
pub enum GenerateError {
    #[error(transparent)]
    Trigger(#[from] TriggerError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Sweep(#[from] SweepError),
    /// With `PROXY_VPCS` set, nobody may route until the VPCs' zones are known.
    #[error("listing the zones of the proxy VPCs failed, nothing published: {0}")]
    ProxyVpcs(String),
    #[error("rendering haproxy.cfg failed, nothing published: {0}")]
    Render(#[source] RenderError),
    /// The run's time stamp is the floor of the next generation: without it, nothing runs.
    #[error(
        "generated_at: expected an RFC 3339 time no earlier than 1970 (2026-11-23T03:14:02Z), got \
         {0:?}; nothing read or published"
    )]
    GeneratedAt(String),
}

impl From<GenerateError> for Diagnostic {
    fn from(err: GenerateError) -> Self {
        let kind = match &err {
            GenerateError::Trigger(_) => "InvalidEvent",
            GenerateError::Store(_) => "S3Error",
            GenerateError::Sweep(_) => "ScanFailed",
            GenerateError::ProxyVpcs(_) => "ProxyVpcsFailed",
            GenerateError::Render(_) => "RenderFailed",
            GenerateError::GeneratedAt(_) => "InvalidTime",
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
    #[serde(skip_serializing_if = "Option::is_none")]
    pub config: Option<String>,
}

/// Time kept back from the Lambda deadline for rendering and publishing after the sweep.
pub const PUBLISH_RESERVE: Duration = Duration::from_secs(60);

/// The Lambda entry point: the sweep stops starting zone reads [`PUBLISH_RESERVE`] before the
/// function's deadline.
pub async fn function_handler(
    deps: &Deps,
    event: LambdaEvent<Value>,
) -> Result<Summary, GenerateError> {
    // A deadline already past when the invocation starts is not one Lambda sends: `cargo lambda
    // watch` (1.9) sends the timeout itself (600000 ms), which reads as 1970. Under it every
    // run would read no zone at all; run without a budget instead.
    let Ok(remaining) = event
        .context
        .deadline()
        .duration_since(std::time::SystemTime::now())
    else {
        warn!(
            deadline_ms = event.context.deadline,
            "the invocation's deadline has already passed (a local emulator?): no time budget"
        );
        return handle_until(deps, &event.payload, &now_rfc3339(), None).await;
    };
    let deadline = tokio::time::Instant::now() + remaining.saturating_sub(PUBLISH_RESERVE);
    handle_until(deps, &event.payload, &now_rfc3339(), Some(deadline)).await
}

/// One run without a time budget, callable from tests: `generated_at` is the time stamped
/// into the header.
pub async fn handle(
    deps: &Deps,
    payload: &Value,
    generated_at: &str,
) -> Result<Summary, GenerateError> {
    handle_until(deps, payload, generated_at, None).await
}

/// One run whose full sweep starts no zone read after `deadline`.
pub async fn handle_until(
    deps: &Deps,
    payload: &Value,
    generated_at: &str,
    deadline: Option<tokio::time::Instant>,
) -> Result<Summary, GenerateError> {
    let started = Instant::now();
    let trigger = trigger::parse(payload)?;
    let now = unix_seconds(generated_at)?;
    let calls_before: u64 = deps.accounts.iter().map(AccountRoute53::calls).sum();
    let retries_before: u64 = deps.accounts.iter().map(AccountRoute53::retries).sum();
    info!(trigger = %trigger.label(), "run started");

    let current = deps.store.current_config().await?;
    let previous = match deps.store.manifest().await {
        Ok(manifest) => manifest,
        Err(err) => {
            warn!(error = %err, "manifest unreadable: this run is a full sweep");
            None
        }
    };
    let scope = match (&trigger, &previous) {
        (Trigger::Route53 { zone, .. }, Some(_)) => Scope::Zones(vec![zone.clone()]),
        _ => Scope::Full,
    };
    let matching = Matching {
        rules: DEFAULT_RULES,
        proxies: &deps.settings.proxy_hostnames,
        ignore: &deps.settings.ignore_zones,
    };
    let swept = discovery::sweep(
        &deps.accounts,
        previous.as_ref(),
        &scope,
        matching,
        deadline,
    )
    .await?;
    let mut warnings = swept.failures.clone();
    warnings.extend(swept.warnings.iter().cloned());
    let pending = swept.manifest.pending.len();
    // Zones listed but never read yet (a first sweep that ran out of time, or new zones
    // behind it) have no routes to keep: publishing would silently drop them. Save the
    // progress and publish nothing until each has been read once.
    let never_read = swept
        .manifest
        .pending
        .iter()
        .filter(|key| !swept.manifest.zones.contains_key(*key))
        .count();
    let hold = never_read > 0;
    if pending > 0 {
        warnings.push(format!(
            "sweep unfinished: {pending} zone(s) not read before the time budget ran out; {}",
            if hold {
                format!(
                    "{never_read} of them were never read, so progress is saved in the manifest \
                     and nothing is published until the next run reads them (they go first)"
                )
            } else {
                "they keep their last known routes and are read first by the next run".to_owned()
            }
        ));
    }

    let mut swept = swept;
    let associated = match deps.settings.proxy_vpcs.as_slice() {
        [] => None,
        vpcs => Some(vpc_zones(deps, vpcs).await?),
    };
    let mode = associated.as_ref().map_or(Mode::FirstHolder, Mode::Vpc);
    let remembered = previous
        .as_ref()
        .map(|m| m.holders.clone())
        .unwrap_or_default();
    let owned = ownership::owned_routes(&swept.manifest.zones, &remembered, mode);
    swept.manifest.holders = owned.holders;
    for refusal in &owned.refusals {
        warn!(%refusal, "route refused: zone name held by another zone");
    }
    warnings.extend(owned.refusals.iter().map(ToString::to_string));
    let (routes, conflicts) = resolve(owned.candidates);
    warnings.extend(conflicts.iter().map(ToString::to_string));

    let custom;
    let renderer = match &deps.settings.template_key {
        Some(key) => {
            custom =
                Renderer::new(&deps.store.template(key).await?).map_err(GenerateError::Render)?;
            &custom
        }
        None => &deps.default_renderer,
    };
    let render = |generation: u64| -> Result<Rendered, GenerateError> {
        renderer
            .render(&RenderInput {
                routes: &routes,
                resolvers: &deps.settings.dns_resolvers,
                options: &deps.settings.render_options,
                generation,
                generated_at,
                trigger: &trigger.label(),
            })
            .map_err(GenerateError::Render)
    };
    let current_generation = current.as_ref().map_or(0, CurrentConfig::generation);
    // Never number below what was last published: someone may have copied an old version
    // over the current object, and the fleet skips generations it has already passed. The
    // manifest remembers the highest, and is never written with less.
    let recorded = current_generation.max(previous.as_ref().map_or(0, |m| m.generation));
    let next_generation = publish::next_generation(recorded, now);
    // Rendered with the current generation, an unchanged state gives the current body.
    let same_generation = render(current_generation)?;
    let decision = publish::decide(
        current.as_ref().and_then(|c| {
            c.header.as_ref().map(|h| Current {
                sha256: &h.sha256,
                rules: h.rules,
            })
        }),
        &same_generation.header.sha256,
        routes.len(),
        deps.settings.max_rule_drop_percent,
        trigger.force(),
    );
    let decision = if hold && decision != Decision::Unchanged {
        Decision::Blocked("zones never read yet: nothing published until they are".to_owned())
    } else {
        decision
    };
    let changed = decision != Decision::Unchanged;
    let rendered = if changed {
        render(next_generation)?
    } else {
        same_generation
    };
    let diff = match &current {
        Some(current) if changed => autoproxy::diff::unified(
            &current.text,
            &rendered.text,
            &format!("s3://{}/{}", deps.store.bucket, deps.store.config_key),
            "rendered",
        ),
        None => autoproxy::diff::unified("", &rendered.text, "/dev/null", "rendered"),
        _ => String::new(),
    };

    let mut manifest = swept.manifest;
    let mut version_id = current.as_ref().and_then(|c| c.version_id.clone());
    let mut published = false;
    match (&decision, trigger.dry_run()) {
        (_, true) => info!(changed, "dry run: nothing written"),
        (Decision::Blocked(_), false) if hold => {
            manifest.generation = recorded;
            deps.store.put_manifest(&manifest).await?;
            warn!(
                pending,
                "zones never read yet: progress saved, config not written"
            );
        }
        (Decision::Blocked(reason), false) => {
            warn!(reason = %reason, "mass-deletion guard: nothing written");
            warnings.push(reason.clone());
        }
        (Decision::Unchanged, false) => {
            if previous.as_ref().is_none_or(|p| !p.same_content(&manifest)) {
                manifest.generation = recorded;
                deps.store.put_manifest(&manifest).await?;
                info!("config unchanged; manifest updated");
            } else {
                info!("config unchanged: nothing written");
            }
        }
        (Decision::Publish, false) => {
            // Manifest first: if the config write fails, the next run still sees a
            // difference and publishes; the other order could lose the manifest.
            manifest.generation = rendered.header.generation;
            deps.store.put_manifest(&manifest).await?;
            version_id = deps
                .store
                .put_config(&rendered.text, &rendered.header, current.as_ref())
                .await?;
            published = true;
            info!(
                generation = rendered.header.generation,
                rules = routes.len(),
                sha256 = %rendered.header.sha256,
                version_id = version_id.as_deref().unwrap_or(""),
                "published"
            );
        }
    }

    let calls: u64 = deps.accounts.iter().map(AccountRoute53::calls).sum::<u64>() - calls_before;
    let retries: u64 = deps
        .accounts
        .iter()
        .map(AccountRoute53::retries)
        .sum::<u64>()
        - retries_before;
    let elapsed = started.elapsed().as_millis();
    Metrics::new("generate")
        .count("ZonesScanned", swept.zones_scanned as u64)
        .count("Routes", routes.len() as u64)
        .count("OwnershipRefused", owned.refusals.len() as u64)
        .count("Route53Calls", calls)
        .count("Throttles", retries)
        .count("Changed", u64::from(changed))
        .count("Published", u64::from(published))
        .count(
            "GuardBlocked",
            u64::from(matches!(decision, Decision::Blocked(_))),
        )
        .milliseconds("DurationMs", elapsed)
        .emit();
    info!(
        trigger = %trigger.label(),
        zones_scanned = swept.zones_scanned,
        routes = routes.len(),
        route53_calls = calls,
        changed,
        published,
        duration_ms = u64::try_from(elapsed).unwrap_or(u64::MAX),
        "run finished"
    );
    Ok(Summary {
        trigger: trigger.label(),
        zones_scanned: swept.zones_scanned,
        rules: routes.len(),
        changed,
        published,
        sha256: rendered.header.sha256.clone(),
        version_id,
        diff,
        warnings,
        config: trigger.dry_run().then(|| rendered.text.clone()),
    })
}

/// Every zone associated with one of the proxy VPCs, as listed by the VPCs' owner (this
/// account).
async fn vpc_zones(deps: &Deps, vpcs: &[ProxyVpc]) -> Result<BTreeSet<ZoneKey>, GenerateError> {
    let owner = deps.vpc_owner.as_ref().ok_or_else(|| {
        GenerateError::ProxyVpcs("no Route53 client for the VPCs' own account".to_owned())
    })?;
    let mut zones = BTreeSet::new();
    for vpc in vpcs {
        let listed = owner.list_zones_by_vpc(vpc).await.map_err(|err| {
            GenerateError::ProxyVpcs(format!("{}:{}: {err}", vpc.region, vpc.vpc_id))
        })?;
        zones.extend(listed);
    }
    info!(
        vpcs = vpcs.len(),
        zones = zones.len(),
        "zones associated with the proxy VPCs"
    );
    Ok(zones)
}

/// A run's `generated_at` (RFC 3339, as [`now_rfc3339`] writes it) in Unix seconds.
fn unix_seconds(generated_at: &str) -> Result<u64, GenerateError> {
    use aws_smithy_types::date_time::{DateTime, Format};
    DateTime::from_str(generated_at, Format::DateTime)
        .ok()
        .and_then(|time| u64::try_from(time.secs()).ok())
        .ok_or_else(|| GenerateError::GeneratedAt(generated_at.to_owned()))
}

/// Now, as RFC 3339 UTC to the second.
pub fn now_rfc3339() -> String {
    use aws_smithy_types::date_time::{DateTime, Format};
    let now = DateTime::from(std::time::SystemTime::now());
    let secs = DateTime::from_secs(now.secs());
    secs.fmt(Format::DateTime).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_at_is_read_as_unix_seconds_or_refused() {
        assert_eq!(unix_seconds("2026-11-23T03:14:02Z").unwrap(), 1_795_403_642);
        assert_eq!(unix_seconds("1970-01-01T00:00:00Z").unwrap(), 0);
        let clock = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        assert!(unix_seconds(&now_rfc3339()).unwrap().abs_diff(clock) <= 1);
        for bad in [
            "",
            "yesterday",
            "1795403642",
            "2026-11-23",
            "1969-12-31T23:59:59Z",
        ] {
            let err = unix_seconds(bad).unwrap_err();
            assert!(matches!(err, GenerateError::GeneratedAt(ref got) if got == bad));
            assert!(err.to_string().contains(&format!("got {bad:?}")), "{err}");
        }
    }
}
