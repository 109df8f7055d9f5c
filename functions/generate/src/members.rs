//! The member accounts of `MEMBER_ACCOUNTS`, listed at run time: one Route53 client per
//! account, its role (`MEMBER_ROLE_NAME`) assumed when first used and kept across warm
//! invocations, so a steady estate costs Organizations' listing pages and no extra STS call.

use std::collections::{BTreeMap, BTreeSet};

use autoproxy::accounts::{self, AccountState, Outcome, State};
use autoproxy::organizations::{ListError, Organizations};
use autoproxy::route53::AccountRoute53;
use autoproxy::settings::{MemberAccounts, MemberSource};
use aws_config::SdkConfig;
use aws_config::sts::AssumeRoleProvider;
use aws_sdk_route53::config::SharedCredentialsProvider;
use tokio::sync::Mutex;
use tracing::{info, warn};

/// The members and the clients built for them so far.
#[derive(Debug)]
pub struct Members {
    pub settings: MemberAccounts,
    /// The caller's partition, for the role ARNs (`aws`, `aws-cn`, `aws-us-gov`).
    partition: String,
    organizations: Organizations,
    sdk: SdkConfig,
    requests_per_second: f64,
    clients: Mutex<BTreeMap<String, AccountRoute53>>,
    /// Route53 endpoints by account (the benchmark's recording proxies); empty in production.
    route53_endpoints: BTreeMap<String, String>,
    /// The Organization's management account, once asked.
    management: Mutex<Option<String>>,
}

impl Members {
    pub fn new(
        settings: MemberAccounts,
        sdk: &SdkConfig,
        partition: &str,
        requests_per_second: f64,
    ) -> Self {
        Members {
            settings,
            partition: partition.to_owned(),
            organizations: Organizations::new(&aws_sdk_organizations::Config::new(sdk)),
            sdk: sdk.clone(),
            requests_per_second,
            clients: Mutex::new(BTreeMap::new()),
            route53_endpoints: BTreeMap::new(),
            management: Mutex::new(None),
        }
    }

    /// Each listed account's Route53 at its own endpoint (the benchmark's recording proxies).
    #[must_use]
    pub fn with_route53_endpoints(mut self, endpoints: BTreeMap<String, String>) -> Self {
        self.route53_endpoints = endpoints;
        self
    }

    /// The clients built so far (their call counts are the members' Route53 cost).
    pub async fn clients(&self) -> Vec<AccountRoute53> {
        self.clients.lock().await.values().cloned().collect()
    }

    /// Organizations calls so far (retries included).
    pub fn organizations_calls(&self) -> u64 {
        self.organizations.calls()
    }

    /// Every member listed now, but those in `skip` (read otherwise: the own account, an
    /// `ACCOUNT_ROLE_ARNS` role). Clients of accounts no longer listed are dropped.
    pub async fn listed(&self, skip: &BTreeSet<String>) -> Result<Vec<AccountRoute53>, ListError> {
        let listed = self.organizations.accounts(&self.settings.source).await?;
        let wanted: Vec<String> = listed
            .into_iter()
            .filter(|account| !skip.contains(account))
            .collect();
        info!(
            members = wanted.len(),
            organizations_calls = self.organizations_calls(),
            "member accounts listed"
        );
        let clients = self.clients_for(&wanted).await;
        let keep: BTreeSet<&String> = wanted.iter().collect();
        self.clients
            .lock()
            .await
            .retain(|account, _| keep.contains(account));
        Ok(clients)
    }

    /// The members the last manifest knows as onboarded (`ok`, `failing` or `held`): what a
    /// run reading one zone, or one whose listing failed, sweeps without listing again.
    pub async fn known(
        &self,
        states: &[AccountState],
        skip: &BTreeSet<String>,
    ) -> Vec<AccountRoute53> {
        let wanted: Vec<String> = states
            .iter()
            .filter(|state| state.state != State::NotOnboarded && !skip.contains(&state.account))
            .map(|state| state.account.clone())
            .collect();
        self.clients_for(&wanted).await
    }

    /// When a member's role was refused and it is the Organization's management account, says
    /// in its reason that no StackSet onboards it (docs/DEPLOY.md, "The management account").
    /// Organizations is asked once per container, and only then: a healthy estate costs no
    /// call. A refused `DescribeOrganization` is the warning returned; the run goes on.
    pub async fn note_management(
        &self,
        outcomes: &mut BTreeMap<String, Outcome>,
    ) -> Option<String> {
        let refused = outcomes
            .values()
            .any(|outcome| matches!(outcome, Outcome::AssumeDenied(_)));
        if !refused || matches!(self.settings.source, MemberSource::Accounts(_)) {
            return None;
        }
        let mut management = self.management.lock().await;
        if management.is_none() {
            match self.organizations.management_account().await {
                Ok(id) => *management = Some(id),
                Err(err) => {
                    warn!(error = %err, "management account unknown");
                    return Some(format!(
                        "{err}: a refused role is not told apart for the management account"
                    ));
                }
            }
        }
        if let Some(id) = management.as_deref() {
            accounts::note_management(outcomes, id);
        }
        None
    }

    async fn clients_for(&self, accounts: &[String]) -> Vec<AccountRoute53> {
        let mut clients = self.clients.lock().await;
        let mut found = Vec::with_capacity(accounts.len());
        for account in accounts {
            if let Some(client) = clients.get(account) {
                found.push(client.clone());
                continue;
            }
            let client = self.client(account).await;
            clients.insert(account.clone(), client.clone());
            found.push(client);
        }
        found
    }

    /// A Route53 client acting through the account's member role; credentials are fetched on
    /// first use, so a refused role shows up as that account's scan error.
    async fn client(&self, account: &str) -> AccountRoute53 {
        let provider =
            AssumeRoleProvider::builder(self.settings.role_arn(&self.partition, account))
                .session_name("autoproxy-generate")
                .configure(&self.sdk)
                .build()
                .await;
        let credentials = SharedCredentialsProvider::new(provider);
        let mut config = aws_sdk_route53::config::Builder::from(&self.sdk);
        config.set_credentials_provider(Some(credentials.clone()));
        if let Some(endpoint) = self.route53_endpoints.get(account) {
            config = config.endpoint_url(endpoint);
        }
        let config = config.build();
        AccountRoute53::new(account, &config, self.requests_per_second)
            .with_credentials(credentials)
    }
}
