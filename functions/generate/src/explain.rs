//! `{"explain": "<name>"}`: why a name is or is not routed, from the published config (and its
//! header), the manifest and the zone's records read from Route53 now. It writes nothing: no
//! S3 put, no run metrics.

use std::collections::BTreeMap;

use autoproxy::model::{RecordSet, SniMatch, Zone};
use autoproxy::names::{HostName, NameError};
use autoproxy::ownership::Grace;
use autoproxy::{QUOTED_CHARS, excerpt};
use serde::Serialize;
use serde_json::Value;
use tracing::{info, warn};

use autoproxy::s3::StoreError;

use crate::deps::{Deps, ProxyVpcsError, vpc_zones};

mod why;

pub use why::{ZoneRead, carried};

/// The answer (docs/ARCHITECTURE.md, "Generator events").
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Explanation {
    /// The name asked about, decoded as every Route53 name is.
    pub name: String,
    pub routed: bool,
    /// The steps of the reasoning, in order; the last says whether it is routed.
    pub why: Vec<String>,
    /// The published config's generation: the one that carries the route when routed.
    pub generation: Option<u64>,
    /// The config's route that carries the name.
    pub route: Option<CarriedRoute>,
    /// The account and zone the answer is about: the one routing the name, else one refused,
    /// else the deepest a rule would route it from.
    pub account: Option<String>,
    pub zone: Option<ZoneRef>,
    /// The rule whose name it is in that zone.
    pub rule: Option<String>,
    /// That rule's records as Route53 has them now.
    pub records: Vec<RecordSet>,
    /// Who may route the zone's name: `refused`, or which zone holds it.
    pub ownership: Option<String>,
    pub refusal: Option<String>,
    /// What the matcher warns about in the zones that hold the name.
    pub warnings: Vec<String>,
}

/// A route of the published config, as its `#@route` / `#@suffix` line gives it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CarriedRoute {
    /// The exact name, or the suffix with its leading dot.
    pub sni: String,
    pub sni_match: SniMatch,
    /// The back, `host:port` (`backend` in `explain`'s answer, the key it has always had).
    #[serde(rename = "backend")]
    pub back: String,
    pub rule: String,
    pub account: String,
    pub zone_id: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ZoneRef {
    pub id: String,
    pub name: String,
}

/// A payload with `explain` that is not `{"explain": "<host name>"}`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExplainError {
    #[error("expected {{\"explain\": \"<name>\"}} and no other field, got {got}")]
    Shape { got: String },
    #[error("explain: expected a name as a string, got {got}")]
    NotAString { got: String },
    #[error("explain: {0}")]
    Name(#[from] NameError),
}

/// What stopped an answer: a read that failed.
#[derive(Debug, thiserror::Error)]
pub enum ExplainFailed {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("listing the zones of the proxy VPCs failed: {0}")]
    ProxyVpcs(#[from] ProxyVpcsError),
}

/// `None` when the payload does not ask to explain; else the name asked about, decoded by the
/// one name normaliser, or why the request is not one.
pub fn request(payload: &Value) -> Option<Result<HostName, ExplainError>> {
    let object = payload.as_object()?;
    let value = object.get("explain")?;
    let quoted = |value: &Value| excerpt(&value.to_string(), QUOTED_CHARS);
    if object.len() != 1 {
        return Some(Err(ExplainError::Shape {
            got: quoted(payload),
        }));
    }
    let Some(raw) = value.as_str() else {
        return Some(Err(ExplainError::NotAString { got: quoted(value) }));
    };
    Some(HostName::parse(raw).map_err(ExplainError::from))
}

/// Reads what the answer needs (the config, the manifest, the proxy VPCs' zones, and each
/// zone that may hold the name, from its own account) and reasons over it. Writes nothing.
pub async fn explain(deps: &Deps, name: &HostName) -> Result<Explanation, ExplainFailed> {
    let config = deps.store.current_config().await?;
    let (manifest, unreadable) = match deps.store.manifest(&deps.settings.routing_rules).await {
        Ok(manifest) => (manifest, None),
        Err(err) => {
            warn!(error = %err, "manifest unreadable: explained without it");
            (
                None,
                Some(format!(
                    "the manifest could not be read ({err}): explained without it"
                )),
            )
        }
    };
    let associated = match deps.settings.proxy_vpcs.as_slice() {
        [] => None,
        vpcs => Some(vpc_zones(deps, vpcs).await?),
    };
    let mut reads = BTreeMap::new();
    for entry in why::candidates(name, manifest.as_ref()) {
        let zone = Zone {
            account: entry.account.clone(),
            id: entry.id.clone(),
            name: entry.name.clone(),
            private: true,
        };
        let account = deps.accounts.iter().find(|a| a.account == entry.account);
        let read = match account {
            None => ZoneRead::NotScanned,
            Some(account) => match account
                .read_records(&zone, &deps.settings.routing_rules)
                .await
            {
                Ok(Some((records, _))) => ZoneRead::Records(records),
                Ok(None) => ZoneRead::Gone,
                Err(err) => ZoneRead::Failed(err.to_string()),
            },
        };
        reads.insert(zone.key(), read);
    }
    // The members' networks as the last sweep read them, as a run judges with.
    let learned = manifest
        .as_ref()
        .map(|m| m.networks.clone())
        .unwrap_or_default();
    let borders = deps.borders_with(&learned);
    let mut answer = why::explain(&why::Facts {
        name,
        config: config.as_ref(),
        manifest: manifest.as_ref(),
        proxies: &deps.settings.proxy_hostnames,
        borders: &borders,
        rules: &deps.settings.routing_rules,
        associated: associated.as_ref(),
        reads: &reads,
        grace: Grace::hours(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |since| since.as_secs()),
            deps.settings.ownership_grace_hours,
        ),
    });
    if let Some(step) = unreadable {
        answer.why.insert(0, step);
    }
    info!(name = %name, routed = answer.routed, "explained");
    Ok(answer)
}

#[cfg(test)]
mod tests;
