//! Who holds a zone name in first-holder mode, and how its account keeps it through a gap
//! (docs/ARCHITECTURE.md, "Who may route a zone name").
//!
//! A name is held by its account, not by one zone id: an owner that deletes its zone and
//! creates it again (a new id) keeps the name, and another account's zone of the same name,
//! made beforehand, does not take it in the gap. The holder's account keeps it for
//! `OWNERSHIP_GRACE_HOURS` from the first run that saw none of its zones hold the name
//! (`holders_absent_since` in the manifest); after that the name is settled as if never held.

use std::collections::BTreeMap;

use super::{Grace, Holders, key};
use crate::manifest::ZoneEntry;
use crate::model::ZoneKey;
use crate::names::HostName;

/// Who holds one zone name this run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Hold {
    pub holder: Option<ZoneKey>,
    /// When the holder's account stopped holding the name with any zone, while in the grace.
    pub absent_since: Option<u64>,
    /// When that grace ends (Unix seconds).
    pub until: Option<u64>,
}

/// The holder of `name` among `group` (sorted by zone), from what `previous` remembers: the
/// remembered zone while it exists; else another zone of its account (recreated); else, in the
/// grace, the remembered zone although gone; else a sole zone, or the lowest when every zone
/// opted in; else nobody.
pub(super) fn settle(group: &[&ZoneEntry], name: &str, previous: &Holders, grace: Grace) -> Hold {
    let held = |holder: ZoneKey| Hold {
        holder: Some(holder),
        ..Hold::default()
    };
    if let Some(remembered) = previous.zones.get(name) {
        if group.iter().any(|entry| key(entry) == *remembered) {
            return held(remembered.clone());
        }
        if let Some(recreated) = group.iter().find(|e| e.account == remembered.account) {
            return held(key(recreated));
        }
        if let Some((since, until)) = in_grace(previous.zones_absent.get(name), grace) {
            return Hold {
                holder: Some(remembered.clone()),
                absent_since: Some(since),
                until: Some(until),
            };
        }
    }
    if let [only] = group {
        return held(key(only));
    }
    if group.iter().all(|entry| !entry.routes.is_empty()) {
        return group
            .first()
            .map(|entry| held(key(entry)))
            .unwrap_or_default();
    }
    Hold::default()
}

/// Since when and until when a holder absent since `since` (this run, if not before) keeps its
/// name, while it does.
fn in_grace(since: Option<&u64>, grace: Grace) -> Option<(u64, u64)> {
    let since = since.copied().unwrap_or(grace.now);
    let until = since.saturating_add(grace.seconds);
    (grace.now < until).then_some((since, until))
}

/// The names `previous` held that no zone holds this run (none in `by_name`): each kept by its
/// holder through the grace, with since when.
pub(super) fn gone<T>(
    previous: &Holders,
    by_name: &BTreeMap<HostName, T>,
    grace: Grace,
) -> Vec<(String, ZoneKey, u64)> {
    previous
        .zones
        .iter()
        .filter(|(name, _)| HostName::parse(name).map_or(true, |name| !by_name.contains_key(&name)))
        .filter_map(|(name, holder)| {
            let (since, _) = in_grace(previous.zones_absent.get(name), grace)?;
            Some((name.clone(), holder.clone(), since))
        })
        .collect()
}
