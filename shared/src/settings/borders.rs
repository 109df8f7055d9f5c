//! `MEMBER_NETWORKS` and `ALLOW_PUBLIC_BACKS`: what the operator says about where a member's
//! back may point (docs/ARCHITECTURE.md, "Where a back may point"). The first gives accounts
//! ranges besides the networks read from them (an on-premises range, a VPC the member role
//! cannot see); the second lets backs reach the internet, which they never do by default.

use super::{SettingsError, invalid, list};
use crate::model::is_account_id;
use crate::networks::{Borders, IpNet, Networks, PublicBacks};

/// The operator's part of the borders.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BorderSettings {
    /// Ranges each account holds besides its VPCs' (`MEMBER_NETWORKS`).
    pub networks: Networks,
    pub public: PublicBacks,
}

impl BorderSettings {
    /// The borders a run judges backs by: these ranges and the `learned` ones.
    pub fn borders(&self, learned: &Networks) -> Borders {
        let mut networks = self.networks.clone();
        networks.extend(learned);
        Borders::new(networks, self.public)
    }
}

/// Reads both variables.
pub fn parse(
    networks: Option<String>,
    public: Option<String>,
) -> Result<BorderSettings, SettingsError> {
    let expected = "account:range entries like 111111111111:10.1.0.0/16 or \
                    111111111111:2600:1f18::/56";
    let mut parsed = Networks::default();
    for raw in list(networks) {
        let (account, range) = raw
            .split_once(':')
            .ok_or_else(|| invalid("MEMBER_NETWORKS", expected, &raw))?;
        let network: IpNet = range
            .parse()
            .ok()
            .filter(|_| is_account_id(account))
            .ok_or_else(|| invalid("MEMBER_NETWORKS", expected, &raw))?;
        parsed.insert(account, network);
    }
    let public = match public {
        None => PublicBacks::Refused,
        Some(raw) if raw == "false" => PublicBacks::Refused,
        Some(raw) if raw == "true" => PublicBacks::Allowed,
        Some(other) => return Err(invalid("ALLOW_PUBLIC_BACKS", "true or false", &other)),
    };
    Ok(BorderSettings {
        networks: parsed,
        public,
    })
}
