//! What a rule's SNI mode means, in one place (docs/ARCHITECTURE.md, "The rules"): how
//! `ROUTING_RULES` must write the front and the back types, which record value the mode reads,
//! the SNI it yields and how HAProxy matches it, how `explain` says it, and how a stored
//! route of it is checked when the manifest is read back. A new mode is a new variant here;
//! nothing outside this file matches on the variants.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::model::SniMatch;
use crate::names::{DomainName, HostName, NameError};

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

/// Why a mode that reads the back record's value found no SNI in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TargetError {
    /// Several sets at the back name (a routing policy) whose values name different hosts.
    NotOne,
    /// The value is not a plain host name without a wildcard.
    NotAHost(NameError),
}

/// What a stored route's SNI says of the back target its mode reads (see
/// [`SniMode::stored_target`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoredTarget {
    /// The mode reads no back target.
    NotRead,
    /// A `back-target` route's SNI: the target it was made from.
    Target(HostName),
    /// Not a plain host name in its canonical spelling without a wildcard: no run made it.
    Malformed,
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

    /// How HAProxy matches the route's SNI: only `front-suffix` matches a suffix.
    pub fn sni_match(self) -> SniMatch {
        match self {
            SniMode::FrontSuffix => SniMatch::Suffix,
            SniMode::Front | SniMode::Back | SniMode::BackTarget => SniMatch::Exact,
        }
    }

    /// Whether the front is a `*.` wildcard: exactly when the SNI is every name under it.
    pub fn wildcard_front(self) -> bool {
        self == SniMode::FrontSuffix
    }

    /// The back types the mode requires, when it requires these exactly: `back-target`
    /// reads a CNAME's target, so nothing else will do.
    pub fn required_back_types(self) -> Option<&'static [BackType]> {
        match self {
            SniMode::BackTarget => Some(&[BackType::Cname]),
            SniMode::Front | SniMode::FrontSuffix | SniMode::Back => None,
        }
    }

    /// What `ROUTING_RULES`' field `back_types` must hold for this mode, as a refusal says it.
    pub fn back_types_expected(self) -> &'static str {
        match self {
            SniMode::BackTarget => {
                "[\"CNAME\"] (sni back-target reads the back record's CNAME target)"
            }
            SniMode::Front | SniMode::FrontSuffix | SniMode::Back => {
                "a non-empty list of distinct \"A\" and \"CNAME\""
            }
        }
    }

    /// Whether the SNI is read from the back record's value rather than built from the
    /// zone's name: the one kind of SNI that may lie outside the zone.
    fn reads_back_target(self) -> bool {
        self == SniMode::BackTarget
    }

    /// The back target this mode reads from the back record sets' values (each set's CNAME
    /// or alias target, decoded): `Ok(None)` for a mode that reads none. Several sets (a
    /// routing policy) must agree on one target.
    pub fn back_target<'a>(
        self,
        targets: impl IntoIterator<Item = &'a DomainName>,
    ) -> Result<Option<HostName>, TargetError> {
        if !self.reads_back_target() {
            return Ok(None);
        }
        let mut targets = targets.into_iter();
        let first = targets
            .next()
            .ok_or(TargetError::NotAHost(NameError::Empty))?;
        if targets.any(|other| other != first) {
            return Err(TargetError::NotOne);
        }
        let host = first.to_host().map_err(TargetError::NotAHost)?;
        if host.as_str().starts_with('*') {
            return Err(TargetError::NotAHost(NameError::MisplacedWildcard {
                name: host.as_str().to_owned(),
            }));
        }
        Ok(Some(host))
    }

    /// The SNI of a route of this mode in a zone whose front and back are these names;
    /// `target` is what [`SniMode::back_target`] read, which the mode may need (without it,
    /// `None`).
    pub fn sni(
        self,
        front: &HostName,
        back: &HostName,
        target: Option<&HostName>,
    ) -> Option<String> {
        let sni = match self {
            SniMode::Front => front.as_str(),
            SniMode::FrontSuffix => front.as_str().strip_prefix('*').unwrap_or(front.as_str()),
            SniMode::Back => back.as_str(),
            SniMode::BackTarget => target?.as_str(),
        };
        Some(sni.to_owned())
    }

    /// The SNI as a person reads it, for a zone whose front and back are these names.
    pub fn sni_text(self, front: &HostName, back: &HostName) -> String {
        match self {
            SniMode::Front => format!("the SNI {front}"),
            SniMode::FrontSuffix => format!("every SNI under {front}"),
            SniMode::Back => format!("the SNI {back}"),
            SniMode::BackTarget => format!("the SNI that {back}'s CNAME points to"),
        }
    }

    /// The back target a stored route's SNI stands for (see [`StoredTarget`]): the manifest
    /// makes the route again from it to check it.
    pub fn stored_target(self, sni: &str) -> StoredTarget {
        if !self.reads_back_target() {
            return StoredTarget::NotRead;
        }
        match HostName::parse(sni) {
            Ok(host) if host.as_str() == sni && !host.as_str().starts_with('*') => {
                StoredTarget::Target(host)
            }
            _ => StoredTarget::Malformed,
        }
    }
}

impl fmt::Display for SniMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::names::normalize;

    fn read(mode: SniMode, targets: &[&str]) -> Result<Option<String>, TargetError> {
        let targets: Vec<DomainName> = targets.iter().map(|t| normalize(t)).collect();
        mode.back_target(&targets)
            .map(|host| host.map(|h| h.as_str().to_owned()))
    }

    #[test]
    fn only_back_target_reads_the_back_value() {
        for mode in SniMode::ALL {
            let reads = mode.back_target(&[]).is_err();
            assert_eq!(reads, mode.required_back_types().is_some(), "{mode}");
            assert_eq!(
                mode.stored_target("x.example") == StoredTarget::NotRead,
                !reads,
                "{mode}"
            );
        }
        let eks = SniMode::BackTarget;
        assert_eq!(
            read(eks, &["ABC.eks.amazonaws.com."]),
            Ok(Some("abc.eks.amazonaws.com".into()))
        );
        assert_eq!(read(eks, &["a.x", "A.X."]), Ok(Some("a.x".into())));
        assert_eq!(read(eks, &["a.x", "b.x"]), Err(TargetError::NotOne));
        assert!(matches!(
            read(eks, &["\\052.x"]),
            Err(TargetError::NotAHost(_))
        ));
        assert!(matches!(
            read(eks, &[]),
            Err(TargetError::NotAHost(NameError::Empty))
        ));
        assert_eq!(read(SniMode::Front, &["a.x", "b.x"]), Ok(None));
    }

    #[test]
    fn a_stored_target_is_read_back_only_in_its_canonical_spelling() {
        let eks = SniMode::BackTarget;
        let host = HostName::parse("a.x").unwrap();
        assert_eq!(eks.stored_target("a.x"), StoredTarget::Target(host));
        for bad in ["A.x", "a.x.", "*.x", "", "a b"] {
            assert_eq!(eks.stored_target(bad), StoredTarget::Malformed, "{bad:?}");
        }
    }
}
