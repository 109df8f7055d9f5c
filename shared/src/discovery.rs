//! Discovery: which private zones exist in every configured account and what routes they give,
//! merged with the manifest so a failed account or zone keeps its last known routes.
//!
//! Accounts are swept concurrently, each paced by its own limiter; within an account a few
//! zones are read at once so the pace, not the latency, sets the speed.

use std::collections::{BTreeMap, BTreeSet};

use futures_util::{StreamExt, stream};
use tokio::time::Instant;
use tracing::{info, warn};

use crate::accounts::{Outcome, never_assumed};
use crate::manifest::{Manifest, ZoneEntry, is_accounts, zone_key};
use crate::model::{Zone, ZoneKey, ZoneRecords};
use crate::names::HostName;
use crate::networks::Borders;
use crate::route53::{AccountRoute53, ScanError};
use crate::rules::{Rule, zone_routes_within};
use crate::settings::IgnoreZones;

/// Zones read at once within one account (the limiter still paces the calls).
const ZONES_IN_FLIGHT: usize = 4;

/// The most zones an event run reads of one account (docs/ARCHITECTURE.md, "Generator
/// events"): its pending zones first, then those its events name; the rest stay pending for
/// the next run. Accounts are read side by side, so one account's mass change sets the run's
/// length, and every other member's change waits behind it: at 5 calls a second, 50 zones of
/// a page or two are 10 to 20 s.
pub const EVENT_ZONES_PER_ACCOUNT: usize = 50;

/// What to read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// Every private zone of every account.
    Full,
    /// Only these zones (an event's hint); the rest comes from the manifest.
    Zones(Vec<ZoneKey>),
}

/// What the matcher needs besides the records.
#[derive(Debug, Clone, Copy)]
pub struct Matching<'a> {
    pub rules: &'a [Rule],
    pub proxies: &'a [HostName],
    /// Zones to skip (`IGNORE_ZONES`).
    pub ignore: &'a IgnoreZones,
    /// Where a back may point (see [`crate::networks`]).
    pub borders: &'a Borders,
}

impl Matching<'_> {
    fn ignores(&self, zone: &Zone) -> bool {
        self.ignore.ignores(&zone.account, &zone.name)
    }

    fn entry(&self, zone: &Zone, records: &ZoneRecords) -> ZoneEntry {
        let outcome = zone_routes_within(self.rules, records, self.proxies, self.borders);
        let warnings = crate::warnings::zone_lines(&outcome.warnings);
        ZoneEntry::new(zone, outcome.routes, warnings)
    }
}

/// The result of a sweep: the merged manifest and what happened on the way.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Swept {
    pub manifest: Manifest,
    /// Zones whose records were read in this run.
    pub zones_scanned: usize,
    /// Sources (accounts or zones) that failed and kept their last known routes.
    pub failures: Vec<String>,
    /// The sweep's own warnings; each zone's are in its manifest entry.
    pub warnings: Vec<String>,
    /// How each account swept ended (a full sweep; empty when only zones were read).
    pub outcomes: BTreeMap<String, Outcome>,
}

/// A sweep that cannot be trusted: something failed and there is no manifest to fall back on.
#[derive(Debug, thiserror::Error)]
#[error(
    "{} source(s) failed and there is no manifest to keep their routes from, so nothing is \
     published (a config missing a whole account would go live): {}",
    failures.len(),
    failures.join("; ")
)]
pub struct SweepError {
    pub failures: Vec<String>,
}

/// Reads what `scope` asks for and merges it into `previous`.
///
/// With a `deadline`, a run starts no zone read after it: the zones left are recorded as
/// `pending` in the manifest (keeping their last known routes) and are read first by the next
/// run, so an estate too large for one invocation still converges. An event run reads the
/// pending zones first, then those its events name, at most [`EVENT_ZONES_PER_ACCOUNT`] of
/// each account; the rest stay pending.
pub async fn sweep(
    accounts: &[AccountRoute53],
    previous: Option<&Manifest>,
    scope: &Scope,
    matching: Matching<'_>,
    deadline: Option<Instant>,
) -> Result<Swept, SweepError> {
    let empty = Manifest::default();
    // Zones read while their account had zones never read count as read.
    let merged = previous.map(Manifest::with_progress);
    let base = merged.as_deref().unwrap_or(&empty);
    let mut swept = Swept {
        manifest: Manifest {
            generation: base.generation,
            ..Manifest::default()
        },
        zones_scanned: 0,
        failures: Vec::new(),
        warnings: Vec::new(),
        outcomes: BTreeMap::new(),
    };
    match scope {
        Scope::Full => {
            let results = futures_util::future::join_all(
                accounts
                    .iter()
                    .map(|account| sweep_account(account, matching, &base.pending, deadline)),
            )
            .await;
            for (account, result) in accounts.iter().zip(results) {
                let outcome = merge_account(&mut swept, base, &account.account, result);
                swept.outcomes.insert(account.account.clone(), outcome);
            }
        }
        Scope::Zones(keys) => {
            swept.manifest.zones = base.zones.clone();
            swept.manifest.pending = base.pending.clone();
            swept.manifest.unread = base.unread.clone();
            read_zones(&mut swept, accounts, keys, matching, deadline).await;
        }
    }
    if !swept.failures.is_empty() && previous.is_none() {
        return Err(SweepError {
            failures: swept.failures,
        });
    }
    Ok(swept)
}

enum AccountSweep {
    Failed(ScanError),
    Listed(Vec<(Zone, ZoneRead)>),
}

/// How reading one zone of a full sweep ended.
enum ZoneRead {
    /// Read, with what it gave.
    Entry(ZoneEntry),
    /// Deleted between the listing and the read.
    Gone,
    Failed(ScanError),
    /// Not started: the time budget ran out first.
    Unread,
}

impl From<Result<Option<ZoneEntry>, ScanError>> for ZoneRead {
    fn from(result: Result<Option<ZoneEntry>, ScanError>) -> Self {
        match result {
            Ok(Some(entry)) => ZoneRead::Entry(entry),
            Ok(None) => ZoneRead::Gone,
            Err(err) => ZoneRead::Failed(err),
        }
    }
}

async fn sweep_account(
    account: &AccountRoute53,
    matching: Matching<'_>,
    pending: &BTreeSet<String>,
    deadline: Option<Instant>,
) -> AccountSweep {
    let started = std::time::Instant::now();
    let (zones, pages) = match account.list_zones().await {
        Ok(listed) => listed,
        Err(err) => return AccountSweep::Failed(err),
    };
    let mut wanted: Vec<Zone> = zones
        .into_iter()
        .filter(|zone| zone.private && !matching.ignores(zone))
        .collect();
    // Zones an earlier, unfinished sweep did not reach go first, so every zone is read
    // within a bounded number of runs however large the estate.
    wanted.sort_by_key(|zone| !pending.contains(&zone_key(&zone.key())));
    info!(account = %account.account, zones = wanted.len(), pages, "listed private zones");
    let results = stream::iter(wanted)
        .map(|zone| async move {
            if deadline.is_some_and(|deadline| Instant::now() >= deadline) {
                return (zone, ZoneRead::Unread);
            }
            let result = read_zone(account, &zone, matching).await;
            (zone, ZoneRead::from(result))
        })
        .buffer_unordered(ZONES_IN_FLIGHT)
        .collect::<Vec<_>>()
        .await;
    info!(
        account = %account.account,
        zones = results.len(),
        calls = account.calls(),
        duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        "swept account"
    );
    AccountSweep::Listed(results)
}

async fn read_zone(
    account: &AccountRoute53,
    zone: &Zone,
    matching: Matching<'_>,
) -> Result<Option<ZoneEntry>, ScanError> {
    let Some((records, pages)) = account.read_records(zone, matching.rules).await? else {
        return Ok(None);
    };
    let entry = matching.entry(zone, &records);
    info!(
        account = %zone.account,
        zone_id = %zone.id,
        pages,
        routes = entry.routes.len(),
        "read zone"
    );
    Ok(Some(entry))
}

fn merge_account(
    swept: &mut Swept,
    base: &Manifest,
    account: &str,
    result: AccountSweep,
) -> Outcome {
    match result {
        // Never onboarded (no state says it was assumed, no zone of it is known): it has no
        // routes to keep and does not fail the run.
        AccountSweep::Failed(err)
            if err.assume_denied
                && never_assumed(&base.accounts, account)
                && base.account_zones(account).next().is_none() =>
        {
            info!(account, error = %err, "member role refused and never assumed: not onboarded");
            Outcome::AssumeDenied(err.to_string())
        }
        AccountSweep::Failed(err) => {
            keep_account(swept, base, account, &err);
            Outcome::Failed(err.to_string())
        }
        AccountSweep::Listed(zones) => {
            let failures_before = swept.failures.len();
            for (zone, read) in zones {
                merge_zone(swept, base, &zone, read);
            }
            match &swept.failures[failures_before..] {
                [] => Outcome::Read,
                [first, ..] => Outcome::Failed(format!(
                    "{} zone read(s) failed, the first: {first}",
                    swept.failures.len() - failures_before
                )),
            }
        }
    }
}

/// A failed account: its zones as the last manifest knew them, its pending zones still
/// pending, and a failure naming it.
fn keep_account(swept: &mut Swept, base: &Manifest, account: &str, err: &ScanError) {
    let kept: Vec<&ZoneEntry> = base.account_zones(account).collect();
    let still_pending = base
        .pending
        .iter()
        .filter(|key| is_accounts(key, account))
        .cloned();
    swept.manifest.pending.extend(still_pending);
    let still_unread = base
        .unread
        .iter()
        .filter(|(key, _)| is_accounts(key, account));
    swept
        .manifest
        .unread
        .extend(still_unread.map(|(key, name)| (key.clone(), name.clone())));
    warn!(account, error = %err, kept = kept.len(), "account scan failed");
    swept.failures.push(format!(
        "{err}; keeping its {} zone(s) from the last manifest",
        kept.len()
    ));
    for entry in kept {
        swept
            .manifest
            .zones
            .insert(zone_key(&entry.key()), entry.clone());
    }
}

/// One zone of a listed account: its new entry, or what the last manifest knew of it.
fn merge_zone(swept: &mut Swept, base: &Manifest, zone: &Zone, read: ZoneRead) {
    let key = zone_key(&zone.key());
    match read {
        ZoneRead::Entry(entry) => {
            swept.zones_scanned += 1;
            swept.manifest.zones.insert(key, entry);
        }
        // Deleted between the listing and the read: it drops out.
        ZoneRead::Gone => {}
        ZoneRead::Unread => {
            if let Some(entry) = base.zones.get(&key) {
                swept.manifest.zones.insert(key.clone(), entry.clone());
            } else {
                swept.manifest.unread.insert(key.clone(), zone.name.clone());
            }
            swept.manifest.pending.insert(key);
        }
        ZoneRead::Failed(err) => {
            let previous = base.zones.get(&key);
            warn!(account = %zone.account, zone_id = %zone.id, error = %err, "zone read failed");
            swept.failures.push(format!(
                "zone {}: {err}; {}",
                zone.key(),
                if previous.is_some() {
                    "keeping its routes from the last manifest"
                } else {
                    "it had no routes before"
                }
            ));
            if let Some(entry) = previous {
                swept.manifest.zones.insert(key, entry.clone());
            }
        }
    }
}

/// A zone an event run reads, with what the manifest knows of it.
type ZoneToRead = (ZoneKey, Option<Zone>);

/// Reads the zones pending and those events named, pending first: each account's in turn at
/// its own pace, at most [`EVENT_ZONES_PER_ACCOUNT`] of them and none after `deadline`, the
/// accounts side by side, so one account's many changed zones do not hold another's.
async fn read_zones(
    swept: &mut Swept,
    accounts: &[AccountRoute53],
    keys: &[ZoneKey],
    matching: Matching<'_>,
    deadline: Option<Instant>,
) {
    let mut by_account: BTreeMap<&str, (&AccountRoute53, Vec<ZoneToRead>)> = BTreeMap::new();
    for (key, named) in read_order(&swept.manifest.pending, keys) {
        let Some(account) = accounts.iter().find(|a| a.account == key.account) else {
            // A pending zone of an account no longer read waits for the next full sweep.
            if named {
                swept.warnings.push(format!(
                    "event for zone {key}: that account is not configured (ACCOUNT_ROLE_ARNS, \
                     or an onboarded member of MEMBER_ACCOUNTS); ignored"
                ));
            }
            continue;
        };
        let known = swept.manifest.zones.get(&zone_key(&key)).map(|entry| Zone {
            account: entry.account.clone(),
            id: entry.id.clone(),
            name: entry.name.clone(),
            private: true,
        });
        by_account
            .entry(&account.account)
            .or_insert_with(|| (account, Vec::new()))
            .1
            .push((key, known));
    }
    let reads = by_account
        .into_values()
        .map(|(account, zones)| read_share(account, zones, matching, deadline));
    for results in futures_util::future::join_all(reads).await {
        for (key, read) in results {
            merge_one_zone(swept, &key, read);
        }
    }
}

/// The zones an event run reads, in order: the pending ones (an earlier run did not reach
/// them), then those the events name that are not pending; each with whether an event named it.
fn read_order(pending: &BTreeSet<String>, named: &[ZoneKey]) -> Vec<(ZoneKey, bool)> {
    let named_keys: BTreeSet<String> = named.iter().map(zone_key).collect();
    let first = pending.iter().filter_map(|key| {
        let (account, id) = key.split_once('/')?;
        let zone = ZoneKey {
            account: account.to_owned(),
            id: id.to_owned(),
        };
        Some((zone, named_keys.contains(key)))
    });
    let fresh = named
        .iter()
        .filter(|key| !pending.contains(&zone_key(key)))
        .map(|key| (key.clone(), true));
    first.chain(fresh).collect()
}

/// One account's share of an event run: its zones in order, one after another, until the
/// share or the time runs out; the zones left are [`ZoneRead::Unread`].
async fn read_share(
    account: &AccountRoute53,
    zones: Vec<ZoneToRead>,
    matching: Matching<'_>,
    deadline: Option<Instant>,
) -> Vec<(ZoneKey, ZoneRead)> {
    let mut results = Vec::with_capacity(zones.len());
    let mut deferred = 0;
    for (index, (key, known)) in zones.into_iter().enumerate() {
        let out_of_time = deadline.is_some_and(|deadline| Instant::now() >= deadline);
        let read = if index >= EVENT_ZONES_PER_ACCOUNT || out_of_time {
            deferred += 1;
            ZoneRead::Unread
        } else {
            ZoneRead::from(read_one_zone(account, &key, known, matching).await)
        };
        results.push((key, read));
    }
    if deferred > 0 {
        info!(
            account = %account.account,
            deferred,
            share = EVENT_ZONES_PER_ACCOUNT,
            "zones left pending for the next run: the account's share or the time ran out"
        );
    }
    results
}

/// One zone an event named: its records (one listing when the manifest knows the zone, else
/// its details first), or `None` when it is gone, not private or ignored.
async fn read_one_zone(
    account: &AccountRoute53,
    key: &ZoneKey,
    known: Option<Zone>,
    matching: Matching<'_>,
) -> Result<Option<ZoneEntry>, ScanError> {
    let zone = match known {
        Some(zone) => Ok(Some(zone)),
        None => account.get_zone(&key.id).await,
    };
    match zone {
        Ok(Some(zone)) if zone.private && !matching.ignores(&zone) => {
            read_zone(account, &zone, matching).await
        }
        Ok(_) => Ok(None),
        Err(err) => Err(err),
    }
}

/// One zone of an event run: its new entry, gone, kept as the last manifest had it (a failed
/// read), or pending (not reached: it keeps its entry, if any, and is read first next run).
fn merge_one_zone(swept: &mut Swept, key: &ZoneKey, read: ZoneRead) {
    let manifest_key = zone_key(key);
    match read {
        ZoneRead::Entry(entry) => {
            swept.zones_scanned += 1;
            swept.manifest.pending.remove(&manifest_key);
            swept.manifest.unread.remove(&manifest_key);
            swept.manifest.zones.insert(manifest_key, entry);
        }
        ZoneRead::Gone => {
            swept.manifest.pending.remove(&manifest_key);
            swept.manifest.unread.remove(&manifest_key);
            if swept.manifest.zones.remove(&manifest_key).is_some() {
                info!(zone = %key, "zone is gone, not private or ignored: its routes drop out");
            }
        }
        ZoneRead::Unread => {
            swept.manifest.pending.insert(manifest_key);
        }
        ZoneRead::Failed(err) => {
            warn!(zone = %key, error = %err, "zone read failed");
            swept.failures.push(format!(
                "zone {key}: {err}; keeping its routes from the last manifest"
            ));
        }
    }
}
