//! The rule table's rows: what a rule is, the built-in table, and the route a rule makes of a
//! zone whose records qualify (docs/ARCHITECTURE.md, "The rules").

use std::fmt;
use std::sync::LazyLock;

use serde::{Deserialize, Serialize};

use crate::model::{Route, SniMatch, ZoneKey};
use crate::names::HostName;

/// Which name a client sends, and so which name the route matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SniMode {
    /// The front record's own name (`proxy.api.Z`).
    Front,
    /// Any name under the front's `*.` wildcard (`….int.Z`).
    FrontSuffix,
    /// The back record's own name (`api.Z`): a certificate that carries it, reached with
    /// kubeconfig's `tls-server-name`.
    Back,
    /// The name the back record's CNAME points to, usually outside every zone (an EKS
    /// endpoint); see docs/ARCHITECTURE.md, "Who may route a name outside every zone".
    BackTarget,
}

impl SniMode {
    /// Every mode, in the spelling `ROUTING_RULES` uses.
    pub const ALL: [SniMode; 4] = [
        SniMode::Front,
        SniMode::FrontSuffix,
        SniMode::Back,
        SniMode::BackTarget,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            SniMode::Front => "front",
            SniMode::FrontSuffix => "front-suffix",
            SniMode::Back => "back",
            SniMode::BackTarget => "back-target",
        }
    }

    /// Whether the SNI is the back record's CNAME target: the one mode whose SNI is read from
    /// a record's value rather than built from the zone's name, so the only one whose SNI may
    /// lie outside the zone, whose back must be a CNAME, and whose route needs the target.
    pub fn reads_back_target(self) -> bool {
        self == SniMode::BackTarget
    }

    /// How HAProxy matches the route's SNI: only `front-suffix` matches a suffix.
    pub fn sni_match(self) -> SniMatch {
        match self {
            SniMode::FrontSuffix => SniMatch::Suffix,
            SniMode::Front | SniMode::Back | SniMode::BackTarget => SniMatch::Exact,
        }
    }
}

impl fmt::Display for SniMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A record type a back record may have. `A` covers plain and alias A records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum BackType {
    A,
    #[serde(rename = "CNAME")]
    Cname,
}

impl BackType {
    pub const ALL: [BackType; 2] = [BackType::A, BackType::Cname];

    /// As Route53 spells the type.
    pub fn as_str(self) -> &'static str {
        match self {
            BackType::A => "A",
            BackType::Cname => "CNAME",
        }
    }
}

/// What a stored route's SNI says of the back target [`Rule::route`] takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoredTarget {
    /// The rule reads no back target.
    NotRead,
    /// A `back-target` rule's SNI: the target it was made from.
    Target(HostName),
    /// Not a plain host name in its canonical spelling without a wildcard: no run made it.
    Malformed,
}

/// One row of the rule table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// Short id (`[a-z0-9-]`, 1–32), used in backend names, the manifest, metrics, `explain`.
    pub id: String,
    /// The front record's name relative to the zone: a CNAME to the peering proxy. Starts
    /// with `*.` exactly when `sni` is [`SniMode::FrontSuffix`].
    pub front: String,
    /// The back record's name relative to the zone: HAProxy's backend server.
    pub back: String,
    /// Record types the back record may have.
    pub back_types: Vec<BackType>,
    /// Which name a client sends (`ROUTING_RULES`' field `sni`).
    pub sni_mode: SniMode,
    /// The backend server's port.
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
    /// The SNI a person reads for this rule in a zone whose front and back are these names.
    pub fn sni_text(&self, front: &HostName, back: &HostName) -> String {
        match self.sni_mode {
            SniMode::Front => format!("the SNI {front}"),
            SniMode::FrontSuffix => format!("every SNI under {front}"),
            SniMode::Back => format!("the SNI {back}"),
            SniMode::BackTarget => format!("the SNI that {back}'s CNAME points to"),
        }
    }

    /// The back target a stored route's SNI stands for (see [`StoredTarget`]).
    pub fn stored_back_target(&self, sni: &str) -> StoredTarget {
        if !self.sni_mode.reads_back_target() {
            return StoredTarget::NotRead;
        }
        match HostName::parse(sni) {
            Ok(host) if host.as_str() == sni && !host.as_str().starts_with('*') => {
                StoredTarget::Target(host)
            }
            _ => StoredTarget::Malformed,
        }
    }

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

    /// The route this rule makes for a zone whose records qualify; `back_target` is the back
    /// record's CNAME target, which only [`SniMode::BackTarget`] reads (and needs: without it,
    /// `None`). The manifest checks stored routes against it too.
    pub fn route(
        &self,
        zone: &ZoneKey,
        zone_name: &HostName,
        back_target: Option<&HostName>,
    ) -> Option<Route> {
        let front = zone_name.with_prefix(&self.front);
        let back = zone_name.with_prefix(&self.back);
        let sni = match self.sni_mode {
            SniMode::Front => front.as_str().to_owned(),
            SniMode::FrontSuffix => front
                .as_str()
                .strip_prefix('*')
                .unwrap_or(front.as_str())
                .to_owned(),
            SniMode::Back => back.as_str().to_owned(),
            SniMode::BackTarget => back_target?.as_str().to_owned(),
        };
        Some(Route {
            rule: self.id.clone(),
            account: zone.account.clone(),
            zone_id: zone.id.clone(),
            zone_name: zone_name.clone(),
            sni,
            sni_match: self.sni_mode.sni_match(),
            backend: back.clone(),
            port: self.port,
            records: vec![front, back],
        })
    }
}
