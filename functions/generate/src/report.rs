//! What a run reports besides its answer: its metrics (EMF) and its last log lines.

use std::time::Instant;

use autoproxy::accounts;
use autoproxy::metrics::Metrics;
use autoproxy::publish::Decision;
use autoproxy::route53::AccountRoute53;
use serde_json::Value;
use tracing::{info, warn};

use crate::plan::Plan;

/// Route53 calls so far, summed over the accounts: the difference across a run is its cost.
pub struct Route53Calls {
    calls: u64,
    retries: u64,
}

impl Route53Calls {
    pub fn now(accounts: &[AccountRoute53]) -> Self {
        Route53Calls {
            calls: accounts.iter().map(AccountRoute53::calls).sum(),
            retries: accounts.iter().map(AccountRoute53::retries).sum(),
        }
    }

    pub fn since(&self, accounts: &[AccountRoute53]) -> Self {
        let now = Route53Calls::now(accounts);
        Route53Calls {
            calls: now.calls.saturating_sub(self.calls),
            retries: now.retries.saturating_sub(self.retries),
        }
    }
}

/// What a run's reads cost.
pub struct Costs {
    pub route53: Route53Calls,
    pub organizations: u64,
    /// `DescribeVpcs` attempts: one per member and region on a full sweep, none otherwise.
    pub ec2: u64,
}

/// The run's metrics (EMF) and its last log lines. Accounts are counted, never one metric
/// each, but for a held account: that is rare, and the alarm must say which (dimension
/// `Account`). The names of the accounts not `ok` go to the log and the manifest.
pub fn report_run(
    plan: &Plan,
    zones_scanned: usize,
    costs: &Costs,
    started: Instant,
    now_unix: u64,
) -> Vec<Value> {
    let elapsed_ms = started.elapsed().as_millis();
    let published = plan.publishes();
    let states = &plan.manifest.accounts;
    let counts = accounts::counts(states);
    for state in states.iter().filter(|s| s.state != accounts::State::Ok) {
        warn!(
            account = %state.account,
            state = ?state.state,
            since = %state.since,
            reason = %state.reason,
            "account not ok"
        );
    }
    info!(
        zones_scanned,
        routes = plan.routes,
        route53_calls = costs.route53.calls,
        organizations_calls = costs.organizations,
        ec2_calls = costs.ec2,
        changed = plan.changed(),
        published,
        accounts_ok = counts.ok,
        accounts_failing = counts.failing,
        accounts_not_onboarded = counts.not_onboarded,
        accounts_held = counts.held,
        accounts_pending = counts.pending,
        duration_ms = u64::try_from(elapsed_ms).unwrap_or(u64::MAX),
        "run finished"
    );
    let run = Metrics::new("generate")
        .count("ZonesScanned", zones_scanned as u64)
        .count("Routes", plan.routes as u64)
        .count("OwnershipRefused", plan.refusals.len() as u64)
        .count("Route53Calls", costs.route53.calls)
        .count("Throttles", costs.route53.retries)
        .count("OrganizationsCalls", costs.organizations)
        .count("Ec2Calls", costs.ec2)
        .count("Changed", u64::from(plan.changed()))
        .count("Published", u64::from(published))
        .count(
            "GuardBlocked",
            u64::from(matches!(plan.decision, Decision::Blocked(_))),
        )
        .count("AccountsOk", counts.ok as u64)
        .count("AccountsFailing", counts.failing as u64)
        .count("AccountsNotOnboarded", counts.not_onboarded as u64)
        .count("AccountsHeld", counts.held as u64)
        .count("AccountsPending", counts.pending as u64)
        .count(
            "LongestFailingMinutes",
            accounts::longest_failing_minutes(states, now_unix),
        )
        .milliseconds("DurationMs", elapsed_ms)
        .emit();
    let held = plan.holds.iter().map(|hold| {
        Metrics::new("generate")
            .dimension("Account", &hold.account)
            .count("AccountHeld", 1)
            .emit()
    });
    std::iter::once(run).chain(held).collect()
}
