//! The only Organizations I/O: which accounts are members, listed at run time so a new account
//! in an onboarded unit is routed with no change to the central stack.
//!
//! Every call here works from the Organization's management account or from a member that is
//! a delegated administrator (docs/ARCHITECTURE.md, "Member accounts"): `ListAccounts` for the
//! whole Organization; `ListAccountsForParent` and `ListOrganizationalUnitsForParent` for
//! units. A unit includes the units below it, as a service-managed StackSet deploying to it
//! does: a StackSet that onboards a unit and a generator that reads it agree on its accounts.

use std::collections::{BTreeSet, VecDeque};
use std::sync::Arc;

use aws_sdk_organizations::Client;
use aws_sdk_organizations::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_organizations::types::{Account, AccountState, AccountStatus};

use crate::model::is_account_id;
use crate::route53::{CallCounter, CountAttempts};
use crate::settings::{MemberSource, is_unit_id};

/// A listing that failed (after the SDK's retries): no account list is trusted then.
#[derive(Debug, thiserror::Error)]
#[error("organizations:{operation} {target}: {message}")]
pub struct ListError {
    pub operation: &'static str,
    pub target: String,
    pub message: String,
}

/// Organizations, counted like Route53 (every HTTP attempt).
#[derive(Debug, Clone)]
pub struct Organizations {
    client: Client,
    counter: Arc<CallCounter>,
}

impl Organizations {
    pub fn new(config: &aws_sdk_organizations::Config) -> Self {
        let counter = Arc::new(CallCounter::default());
        let config = config
            .to_builder()
            .interceptor(CountAttempts(counter.clone()))
            .build();
        Organizations {
            client: Client::from_conf(config),
            counter,
        }
    }

    /// HTTP attempts so far (retries included).
    pub fn calls(&self) -> u64 {
        self.counter.attempts()
    }

    /// The active member accounts `source` names, sorted, without duplicates. An explicit
    /// list is returned as it is, with no call.
    pub async fn accounts(&self, source: &MemberSource) -> Result<Vec<String>, ListError> {
        let mut found = BTreeSet::new();
        match source {
            MemberSource::Accounts(ids) => found.extend(ids.iter().cloned()),
            MemberSource::Organization => {
                let mut pages = self.client.list_accounts().into_paginator().send();
                while let Some(page) = pages.next().await {
                    let page = page.map_err(|err| failed("ListAccounts", "", err))?;
                    found.extend(active_ids(page.accounts()));
                }
            }
            MemberSource::Units(units) => {
                for unit in units {
                    found.extend(self.unit_accounts(unit).await?);
                }
            }
        }
        Ok(found.into_iter().collect())
    }

    /// The Organization's management account (`DescribeOrganization`), which a
    /// service-managed StackSet never deploys to.
    pub async fn management_account(&self) -> Result<String, ListError> {
        let out = self
            .client
            .describe_organization()
            .send()
            .await
            .map_err(|err| failed("DescribeOrganization", "", err))?;
        let id = out.organization().and_then(|o| o.master_account_id());
        match id {
            Some(id) if is_account_id(id) => Ok(id.to_owned()),
            other => Err(ListError {
                operation: "DescribeOrganization",
                target: String::new(),
                message: format!("expected the management account's 12-digit id, got {other:?}"),
            }),
        }
    }

    /// The active accounts of a unit and of every unit below it.
    async fn unit_accounts(&self, unit: &str) -> Result<BTreeSet<String>, ListError> {
        let mut found = BTreeSet::new();
        let mut parents = VecDeque::from([unit.to_owned()]);
        let mut seen = BTreeSet::new();
        while let Some(parent) = parents.pop_front() {
            if !seen.insert(parent.clone()) {
                continue;
            }
            let mut pages = self
                .client
                .list_accounts_for_parent()
                .parent_id(&parent)
                .into_paginator()
                .send();
            while let Some(page) = pages.next().await {
                let page = page.map_err(|err| failed("ListAccountsForParent", &parent, err))?;
                found.extend(active_ids(page.accounts()));
            }
            let mut pages = self
                .client
                .list_organizational_units_for_parent()
                .parent_id(&parent)
                .into_paginator()
                .send();
            while let Some(page) = pages.next().await {
                let page =
                    page.map_err(|err| failed("ListOrganizationalUnitsForParent", &parent, err))?;
                // Only well-formed ids are followed: the answer is outside data.
                parents.extend(
                    page.organizational_units()
                        .iter()
                        .filter_map(|unit| unit.id())
                        .filter(|id| is_unit_id(id))
                        .map(str::to_owned),
                );
            }
        }
        Ok(found)
    }
}

/// The ids of the active accounts among `accounts`. `State` is the current field; `Status`
/// (deprecated) is read when an endpoint sends only that.
fn active_ids(accounts: &[Account]) -> impl Iterator<Item = String> + '_ {
    accounts
        .iter()
        .filter(|account| match (account.state(), account.status()) {
            (Some(state), _) => *state == AccountState::Active,
            (None, Some(status)) => *status == AccountStatus::Active,
            (None, None) => false,
        })
        .filter_map(Account::id)
        .filter(|id| is_account_id(id))
        .map(str::to_owned)
}

// By value: every caller hands over the error it is done with (`map_err`).
#[allow(clippy::needless_pass_by_value)]
fn failed<E>(operation: &'static str, target: &str, err: SdkError<E>) -> ListError
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
{
    ListError {
        operation,
        target: target.to_owned(),
        message: crate::aws_error::reason(&err),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_active_well_formed_accounts_are_members() {
        let account = |id: &str, state: Option<AccountState>, status: Option<AccountStatus>| {
            Account::builder()
                .id(id)
                .set_state(state)
                .set_status(status)
                .build()
        };
        let accounts = [
            account("111111111111", Some(AccountState::Active), None),
            account("222222222222", None, Some(AccountStatus::Active)),
            account("333333333333", Some(AccountState::Suspended), None),
            account(
                "444444444444",
                Some(AccountState::PendingClosure),
                Some(AccountStatus::Active),
            ),
            account("555555555555", None, Some(AccountStatus::Suspended)),
            account("666666666666", None, None),
            account("1; rm -rf /", Some(AccountState::Active), None),
        ];
        let ids: Vec<String> = active_ids(&accounts).collect();
        assert_eq!(ids, ["111111111111", "222222222222"]);
    }
}
