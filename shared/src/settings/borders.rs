//! `MEMBER_NETWORKS` and `ALLOW_PUBLIC_BACKS`: what the operator says about where a member's
//! back may point (docs/ARCHITECTURE.md, "Where a back may point"). The first gives accounts
//! ranges besides the networks read from them (an on-premises range, a VPC the member role
//! cannot see); the second lets backs reach the internet, which they never do by default.
//! `MEMBER_REGIONS` says where the members' networks are read: every region enabled in each
//! member by default.

use super::{SettingsError, invalid, is_region, list};
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

/// The regions each member's VPCs are read in, besides the proxies' own (`MEMBER_REGIONS`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum MemberRegions {
    /// Every region enabled in the member account, as `ec2:DescribeRegions` lists them through
    /// its role: a VPC anywhere the proxies might reach through peering or a transit gateway.
    #[default]
    Enabled,
    /// These regions alone (an organization that allows only a few, by SCP, say so here).
    Listed(Vec<String>),
}

/// Reads `MEMBER_REGIONS`: empty or `enabled`, or a comma-separated list of region names.
pub fn member_regions(raw: Option<String>) -> Result<MemberRegions, SettingsError> {
    if raw.as_deref().is_none_or(|raw| raw.trim() == "enabled") {
        return Ok(MemberRegions::Enabled);
    }
    let mut regions = Vec::new();
    for region in list(raw) {
        if !is_region(&region) {
            return Err(invalid(
                "MEMBER_REGIONS",
                "enabled, or region names like eu-west-1,us-east-1",
                &region,
            ));
        }
        regions.push(region);
    }
    regions.sort();
    regions.dedup();
    Ok(MemberRegions::Listed(regions))
}
