//! What the two records of a rule are, as `explain` describes them.

use std::collections::BTreeSet;

use autoproxy::model::RecordSet;
use autoproxy::names::{HostName, normalize};
use autoproxy::near_miss::near_proxy;
use autoproxy::networks::{Borders, PublicBacks};
use autoproxy::rules::{BackType, FRONT_TYPE, Rule, TargetError};

/// What a back record of an accepted type is, and the SNI its mode reads from it, if any;
/// an A record's addresses judged for the zone's account (`within`).
pub(super) fn describe_back(
    rule: &Rule,
    back: &HostName,
    set: &RecordSet,
    within: (&Borders, &str),
) -> String {
    let (borders, account) = within;
    let never = (set.rtype == BackType::A.as_str())
        .then(|| {
            set.values.iter().find_map(|value| {
                let why = borders.judge(value.parse().ok()?, account).err()?;
                Some(format!(
                    "{back} is an A record at {value}, {why}, so no route"
                ))
            })
        })
        .flatten();
    if let Some(never) = never {
        return never;
    }
    let raw = set.target().unwrap_or_default();
    let target = normalize(raw);
    let found = match rule.sni_mode.back_target([&target]) {
        Ok(None) => format!("{back} is a {} record: the backend exists", set.rtype),
        Ok(Some(sni)) => format!(
            "{back} is a {} to {raw}: the backend exists, and clients send {sni} as SNI",
            set.rtype
        ),
        Err(TargetError::NotAHost(error)) => format!(
            "{back} is a {} to {raw}: the backend exists, but clients can send no SNI for it \
             ({error})",
            set.rtype
        ),
        Err(TargetError::NotOne) => format!("{back} is a {} to {raw}", set.rtype),
    };
    if set.rtype == BackType::A.as_str() {
        return found;
    }
    format!("{found}; {}", resolved_judgment(borders, account))
}

/// What the proxies do with the address a name back resolves to, which `explain` never sees:
/// the agent judges it as the generator judges an A back's value.
fn resolved_judgment(borders: &Borders, account: &str) -> String {
    let own = borders
        .networks()
        .ranges()
        .get(account)
        .map_or(0, BTreeSet::len);
    let public = match borders.public() {
        PublicBacks::Refused => ", globally routable (ALLOW_PUBLIC_BACKS is off)",
        PublicBacks::Allowed => "",
    };
    format!(
        "each proxy judges the address it resolves: one inside another member's network (not \
         in account {account}'s own {own} network(s)), link-local{public} holds the route (the \
         agent logs \"… never routed\" and counts it among the held routes)"
    )
}

/// What the front record is, and whether it points at the proxy.
pub(super) fn describe_front(front: &HostName, sets: &[RecordSet], proxies: &[HostName]) -> String {
    let Some(set) = sets.first() else {
        return format!("Route53 has no record {front}: the zone has not opted in to this rule");
    };
    if set.rtype != FRONT_TYPE {
        return format!(
            "{front} is a {} record, not a CNAME to the peering proxy",
            set.rtype
        );
    }
    let raw = set.values.first().map_or("", String::as_str);
    let Ok(target) = HostName::parse(raw) else {
        return format!("{front} is a CNAME to {raw:?}, which is not a host name");
    };
    if proxies.contains(&target) {
        return format!("{front} is a CNAME to the peering proxy {target}");
    }
    match near_proxy(&target, proxies) {
        Some(near) => format!("{front} {near}"),
        None => format!(
            "{front} is a CNAME to {target}, not to the peering proxy ({})",
            proxies
                .iter()
                .map(HostName::as_str)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}
