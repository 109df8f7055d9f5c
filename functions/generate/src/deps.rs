//! What every invocation works with, built once per cold start: the settings, the S3 store,
//! the Route53 clients of every account, the embedded template; and the one read both a run
//! and `explain` make of them, the zones of the proxy VPCs.

use std::collections::BTreeSet;

use autoproxy::model::ZoneKey;
use autoproxy::networks::{Borders, Networks};
use autoproxy::render::{DEFAULT_TEMPLATE, RenderError, Renderer};
use autoproxy::route53::AccountRoute53;
use autoproxy::s3::ConfigStore;
use autoproxy::settings::{GenerateSettings, ProxyVpc};
use aws_config::retry::RetryConfig;
use aws_config::sts::AssumeRoleProvider;
use aws_config::{BehaviorVersion, SdkConfig};
use aws_sdk_route53::config::SharedCredentialsProvider;
use tracing::info;

use crate::members::Members;
use crate::queue::EventQueue;
use crate::vpcs::VpcReader;

/// The SDK configuration the function runs with: the environment's, with adaptive retries
/// that back off on Route53's Throttling and PriorRequestNotComplete.
pub async fn sdk_config() -> SdkConfig {
    aws_config::defaults(BehaviorVersion::latest())
        .retry_config(RetryConfig::adaptive().with_max_attempts(5))
        .load()
        .await
}

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
    /// The accounts of `MEMBER_ACCOUNTS`, listed at each run.
    pub members: Option<Members>,
    /// The Route53 event queue a queue run drains (`EVENT_QUEUE_URL`).
    pub queue: Option<EventQueue>,
    /// Reads the members' VPC ranges on a full sweep (docs/ARCHITECTURE.md, "Where a back may
    /// point").
    pub vpcs: VpcReader,
    pub default_renderer: Renderer,
}

impl Deps {
    /// [`Deps::new_in`] in the `aws` partition.
    pub async fn new(
        settings: GenerateSettings,
        sdk: &SdkConfig,
        own_account: &str,
    ) -> Result<Self, RenderError> {
        Self::new_in(settings, sdk, own_account, "aws").await
    }

    /// Builds the clients: the own account's Route53, one assumed-role client per
    /// `ACCOUNT_ROLE_ARNS` entry (credentials are fetched lazily, on first use), and the
    /// member accounts' source (`MEMBER_ACCOUNTS`; role ARNs in the caller's `partition`).
    pub async fn new_in(
        settings: GenerateSettings,
        sdk: &SdkConfig,
        own_account: &str,
        partition: &str,
    ) -> Result<Self, RenderError> {
        let rate = settings.route53_requests_per_second;
        let own = AccountRoute53::new(own_account, &aws_sdk_route53::Config::new(sdk), rate);
        let mut accounts = Vec::new();
        if settings.scans_own_account(own_account) {
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
            let credentials = SharedCredentialsProvider::new(provider);
            let mut config = aws_sdk_route53::config::Builder::from(sdk);
            config.set_credentials_provider(Some(credentials.clone()));
            let config = config.build();
            accounts.push(
                AccountRoute53::new(&role.account, &config, rate).with_credentials(credentials),
            );
        }
        let members = settings
            .member_accounts
            .clone()
            .map(|members| Members::new(members, sdk, partition, rate));
        let mut deps = Self::with_accounts(settings, sdk, accounts)?;
        deps.vpcs = VpcReader::new(
            sdk,
            network_regions(&deps.settings, sdk),
            deps.settings.member_regions.clone(),
            Some(own.account.clone()),
        );
        deps.vpc_owner = Some(own);
        deps.members = members;
        Ok(deps)
    }

    /// The rest of the wiring around Route53 clients built elsewhere (the benchmark and the
    /// rate-limit test point each account at its own recording proxy).
    pub fn with_accounts(
        settings: GenerateSettings,
        sdk: &SdkConfig,
        accounts: Vec<AccountRoute53>,
    ) -> Result<Self, RenderError> {
        let store = ConfigStore::new(
            aws_sdk_s3::Client::new(sdk),
            &settings.config_bucket,
            &settings.config_key,
            &settings.manifest_key(),
        );
        let queue = settings
            .event_queue_url
            .as_deref()
            .map(|url| EventQueue::new(sdk, url));
        let vpcs = VpcReader::new(
            sdk,
            network_regions(&settings, sdk),
            settings.member_regions.clone(),
            None,
        );
        Ok(Deps {
            vpcs,
            default_renderer: Renderer::new(DEFAULT_TEMPLATE)?,
            settings,
            store,
            accounts,
            vpc_owner: None,
            members: None,
            queue,
        })
    }

    /// Where a member's back may point (docs/ARCHITECTURE.md, "Where a back may point"): the
    /// networks read from the members' VPCs (`learned`) and the ranges of `MEMBER_NETWORKS`,
    /// and public addresses only with `ALLOW_PUBLIC_BACKS`. What a run, its artifact and
    /// `explain` judge backs by.
    pub fn borders_with(&self, learned: &Networks) -> Borders {
        self.settings.borders.borders(learned)
    }
}

/// The regions the members' VPCs are always read in (each member's own regions besides, see
/// `vpcs.rs`): where the proxies are, the regions of `PROXY_VPCS`, else the function's own.
fn network_regions(settings: &GenerateSettings, sdk: &SdkConfig) -> Vec<String> {
    let mut regions: Vec<String> = settings
        .proxy_vpcs
        .iter()
        .map(|vpc| vpc.region.clone())
        .collect();
    if regions.is_empty() {
        regions.extend(sdk.region().map(ToString::to_string));
    }
    regions.sort();
    regions.dedup();
    regions
}

/// Listing the zones of a proxy VPC failed: with `PROXY_VPCS` set, nobody may route until
/// they are known.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ProxyVpcsError(pub String);

/// Every zone associated with one of the proxy VPCs, as listed by the VPCs' owner (this
/// account).
pub async fn vpc_zones(
    deps: &Deps,
    vpcs: &[ProxyVpc],
) -> Result<BTreeSet<ZoneKey>, ProxyVpcsError> {
    let owner = deps
        .vpc_owner
        .as_ref()
        .ok_or_else(|| ProxyVpcsError("no Route53 client for the VPCs' own account".to_owned()))?;
    let mut zones = BTreeSet::new();
    for vpc in vpcs {
        let listed = owner
            .list_zones_by_vpc(vpc)
            .await
            .map_err(|err| ProxyVpcsError(format!("{}:{}: {err}", vpc.region, vpc.vpc_id)))?;
        zones.extend(listed);
    }
    info!(
        vpcs = vpcs.len(),
        zones = zones.len(),
        "zones associated with the proxy VPCs"
    );
    Ok(zones)
}
