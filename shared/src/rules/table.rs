//! The rule table's rows: what a rule is, the built-in table, and the route a rule makes of a
//! zone whose records qualify (docs/ARCHITECTURE.md, "The rules").

use std::sync::LazyLock;

use super::mode::{BackType, SniMode};
use crate::model::{Route, ZoneKey};
use crate::names::HostName;

/// One row of the rule table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// Short id (`[a-z0-9-]`, 1–32), used in HAProxy backend names, the manifest, metrics,
    /// `explain`.
    pub id: String,
    /// The front record's name relative to the zone: a CNAME to the peering proxy. Starts
    /// with `*.` exactly when the mode's front is a wildcard ([`SniMode::wildcard_front`]).
    pub front: String,
    /// The back record's name relative to the zone: the host the route forwards to.
    pub back: String,
    /// Record types the back record may have.
    pub back_types: Vec<BackType>,
    /// Which name a client sends (`ROUTING_RULES`' field `sni`).
    pub sni_mode: SniMode,
    /// The back's port.
    pub port: u16,
}

/// The record type the front record must have.
pub const FRONT_TYPE: &str = "CNAME";

/// The built-in rules (docs/ARCHITECTURE.md, "The rules"): the table when `ROUTING_RULES` is
/// empty.
pub static DEFAULT_RULES: LazyLock<Vec<Rule>> = LazyLock::new(|| {
    let rule = |id: &str, front: &str, back: &str, back_types: &[BackType], sni_mode| Rule {
        id: id.to_owned(),
        front: front.to_owned(),
        back: back.to_owned(),
        back_types: back_types.to_vec(),
        sni_mode,
        port: 443,
    };
    vec![
        rule("api", "proxy.api", "api", &[BackType::A], SniMode::Front),
        rule(
            "api-k8s",
            "proxy.api.k8s",
            "api.k8s",
            &[BackType::A],
            SniMode::Front,
        ),
        // external-dns writes `ingress-int` as an alias A record to the load balancer.
        rule(
            "ingress-int",
            "*.int",
            "ingress-int",
            &[BackType::A, BackType::Cname],
            SniMode::FrontSuffix,
        ),
    ]
});

impl Rule {
    /// Whether a back record of Route53 type `rtype` qualifies.
    pub fn accepts_back(&self, rtype: &str) -> bool {
        self.back_types.iter().any(|t| t.as_str() == rtype)
    }

    /// The back types as a person reads them: `A/CNAME`.
    pub fn back_types_text(&self) -> String {
        self.back_types
            .iter()
            .map(|t| t.as_str())
            .collect::<Vec<_>>()
            .join("/")
    }

    /// The route this rule makes for a zone whose records qualify; `back_target` is what the
    /// rule's mode read from the back record ([`SniMode::back_target`]), which a mode that
    /// reads one needs (without it, `None`). The manifest checks stored routes against it too.
    pub fn route(
        &self,
        zone: &ZoneKey,
        zone_name: &HostName,
        back_target: Option<&HostName>,
    ) -> Option<Route> {
        let front = zone_name.with_prefix(&self.front);
        let back = zone_name.with_prefix(&self.back);
        let sni = self.sni_mode.sni(&front, &back, back_target)?;
        Some(Route {
            rule: self.id.clone(),
            account: zone.account.clone(),
            zone_id: zone.id.clone(),
            zone_name: zone_name.clone(),
            sni,
            sni_match: self.sni_mode.sni_match(),
            back: back.clone(),
            port: self.port,
            records: vec![front, back],
        })
    }
}
