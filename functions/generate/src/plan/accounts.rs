//! The per-account mass-deletion guard and the accounts' states, for the plan.

use std::collections::BTreeMap;

use autoproxy::accounts::{self, Outcome};
use autoproxy::discovery::Scope;
use autoproxy::manifest::{Manifest, is_accounts};
use autoproxy::publish::{self, Force, Guard, Hold};
use autoproxy::time::Stamp;

use crate::trigger::Trigger;

/// What the per-account guard and the account states need besides the manifests.
#[derive(Debug, Clone)]
pub struct AccountGuard {
    force: Force,
    max_drop_percent: u8,
    /// The run's time: when a state it changes began.
    now: Stamp,
    /// Whether accounts not read in this run keep their last state (a run that read a zone).
    carry: bool,
    /// Whether there is a manifest to compare each account with.
    per_account: bool,
}

impl AccountGuard {
    pub fn of(
        trigger: &Trigger,
        previous: Option<&Manifest>,
        max_drop_percent: u8,
        now: Stamp,
    ) -> Self {
        AccountGuard {
            force: trigger.force(),
            max_drop_percent,
            now,
            carry: super::scope(trigger, previous) != Scope::Full,
            per_account: previous.is_some(),
        }
    }

    /// The estate-wide guard on the config's rule count: only without a manifest, when
    /// there is no per-account baseline.
    pub fn estate(&self) -> Guard {
        Guard {
            max_drop_percent: self.max_drop_percent,
            force: self.force == Force::All || self.per_account,
        }
    }
}

/// The per-account mass-deletion guard, then every account's state (`unread`: the accounts
/// with zones never read, and how many). A held account's zones (and pending zones, and their
/// progress) go back to what the last manifest had, so it publishes nothing new and the next
/// run compares against the same routes again.
pub fn guard_accounts(
    manifest: &mut Manifest,
    previous: Option<&Manifest>,
    outcomes: &BTreeMap<String, Outcome>,
    unread: &BTreeMap<String, usize>,
    guard: &AccountGuard,
) -> Vec<Hold> {
    let last_states = previous.map_or(&[][..], |m| m.accounts.as_slice());
    let holds = match previous {
        // No manifest, no per-account baseline: `publish::decide` guards the whole estate.
        None => Vec::new(),
        Some(previous) => publish::holds(
            &route_counts(previous),
            &route_counts(manifest),
            guard.max_drop_percent,
            &guard.force,
        ),
    };
    if let Some(previous) = previous {
        for hold in &holds {
            restore_account(manifest, previous, &hold.account);
        }
    }
    let held: BTreeMap<String, String> = holds
        .iter()
        .map(|hold| (hold.account.clone(), hold.to_string()))
        .collect();
    let now = guard.now.to_string();
    let run = accounts::Run {
        outcomes,
        holds: &held,
        unread,
        now: &now,
        carry: guard.carry,
    };
    manifest.accounts = accounts::next(last_states, &run);
    holds
}

/// Routes (before ownership) per account, as the manifest's zones give them.
fn route_counts(manifest: &Manifest) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for entry in manifest.zones.values() {
        *counts.entry(entry.account.clone()).or_default() += entry.routes.len();
    }
    counts
}

/// The account's zones, pending zones, zones never read and progress as `previous` had them.
fn restore_account(manifest: &mut Manifest, previous: &Manifest, account: &str) {
    let theirs = |key: &String| is_accounts(key, account);
    manifest.zones.retain(|key, _| !theirs(key));
    manifest.progress.retain(|key, _| !theirs(key));
    manifest.unread.retain(|key, _| !theirs(key));
    manifest.pending.retain(|key| !theirs(key));
    let entries = previous.zones.iter().filter(|(key, _)| theirs(key));
    manifest
        .zones
        .extend(entries.map(|(k, e)| (k.clone(), e.clone())));
    let entries = previous.progress.iter().filter(|(key, _)| theirs(key));
    manifest
        .progress
        .extend(entries.map(|(k, e)| (k.clone(), e.clone())));
    let names = previous.unread.iter().filter(|(key, _)| theirs(key));
    manifest
        .unread
        .extend(names.map(|(k, n)| (k.clone(), n.clone())));
    manifest
        .pending
        .extend(previous.pending.iter().filter(|key| theirs(key)).cloned());
}
