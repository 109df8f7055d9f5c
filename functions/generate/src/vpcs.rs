//! Each member's networks, read from its VPCs (docs/ARCHITECTURE.md, "Where a back may
//! point"): `ec2:DescribeVpcs` through the member's own role, on a full sweep, in each region
//! enabled in the member (`ec2:DescribeRegions`, one call) or those of `MEMBER_REGIONS`, and
//! always the proxies' regions: one call per account and region (more only past 1,000 VPCs).
//! An event run reads none: it judges with the networks the manifest keeps. A read that fails
//! keeps the account's last networks and warns ([`autoproxy::networks::refreshed`]); a listing
//! of regions that fails reads the proxies' regions alone and warns; neither stops the run.
//! The reads get a quarter of the time left before the run's reads' deadline: an account
//! whose EC2 is slow or silent keeps its last networks then, and the zones get the rest.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use autoproxy::discovery::Scope;
use autoproxy::manifest::Manifest;
use autoproxy::networks::{IpNet, Networks, VpcRead, refreshed};
use autoproxy::route53::{AccountRoute53, CallCounter};
use autoproxy::settings::MemberRegions;
use aws_config::SdkConfig;
use aws_smithy_types::error::display::DisplayErrorContext;
use aws_smithy_types::error::metadata::ProvideErrorMetadata;
use futures_util::{StreamExt, stream};
use tokio::time::Instant;
use tracing::{info, warn};

use crate::ec2::{Ec2, Ec2Failure, VpcBlock};

/// Accounts read at once: each is one call per region, and EC2 paces each account apart.
const ACCOUNTS_IN_FLIGHT: usize = 16;
/// Regions of one account read at once: its calls share the account's EC2 request rate.
const REGIONS_IN_FLIGHT: usize = 4;
/// The VPC reads get the time left before the reads' deadline divided by this: the zone reads
/// that follow them get the rest.
pub const VPC_SHARE: u32 = 4;
/// The most VPCs a `DescribeVpcs` page holds.
const VPCS_PER_PAGE: u16 = 1000;
/// Block states of a range a VPC no longer has, or never got.
const GONE: [&str; 4] = ["disassociated", "disassociating", "failed", "failing"];
/// EC2's answers for a caller whose policy does not grant the call.
const NOT_GRANTED: [&str; 3] = [
    "UnauthorizedOperation",
    "AccessDenied",
    "AccessDeniedException",
];

/// Reads the members' VPCs, counting every attempt.
#[derive(Debug)]
pub struct VpcReader {
    sdk: SdkConfig,
    /// Where the proxies are: `PROXY_VPCS`' regions, else the function's own. Always read;
    /// the first is where each member's regions are listed.
    regions: Vec<String>,
    /// Which other regions: each member's enabled ones, or those listed.
    members: MemberRegions,
    /// The function's own account: read with the function's credentials, which hold no EC2
    /// grant, so never read (its networks come from `MEMBER_NETWORKS` alone).
    skip: Option<String>,
    counter: Arc<CallCounter>,
}

/// What a run judges backs with, and what reading it cost.
#[derive(Debug, Default)]
pub struct Learned {
    pub networks: Networks,
    pub warnings: Vec<String>,
    /// `DescribeVpcs` attempts (retries included).
    pub calls: u64,
}

impl VpcReader {
    pub fn new(
        sdk: &SdkConfig,
        regions: Vec<String>,
        members: MemberRegions,
        skip: Option<String>,
    ) -> Self {
        VpcReader {
            sdk: sdk.clone(),
            regions,
            members,
            skip,
            counter: Arc::new(CallCounter::default()),
        }
    }

    /// `DescribeRegions` and `DescribeVpcs` attempts so far, every account and region.
    pub fn calls(&self) -> u64 {
        self.counter.attempts()
    }

    pub fn regions(&self) -> &[String] {
        &self.regions
    }

    /// The members' networks for a run: read afresh on a full sweep, else the manifest's. With
    /// a `deadline` (the reads'), an account not read within [`VPC_SHARE`] of the time left
    /// keeps its last networks.
    pub async fn learn(
        &self,
        scope: &Scope,
        previous: Option<&Manifest>,
        accounts: &[AccountRoute53],
        deadline: Option<Instant>,
    ) -> Learned {
        let kept = previous.map(|manifest| &manifest.networks);
        if matches!(scope, Scope::Zones(_)) {
            return Learned {
                networks: kept.cloned().unwrap_or_default(),
                ..Learned::default()
            };
        }
        let before = self.calls();
        let limit = deadline.map(|deadline| {
            let now = Instant::now();
            let share = deadline.saturating_duration_since(now) / VPC_SHARE;
            (now + share, share.as_secs())
        });
        // The futures are made before they go into the stream: a stream of closures over
        // borrowed accounts is not `Send` for every lifetime, which the runtime's spawn needs.
        let reading: Vec<_> = accounts
            .iter()
            .filter(|account| self.skip.as_deref() != Some(account.account.as_str()))
            .map(|account| self.read_by(account, limit))
            .collect();
        let outcomes: Vec<(String, VpcRead, Option<String>)> = stream::iter(reading)
            .buffer_unordered(ACCOUNTS_IN_FLIGHT)
            .collect()
            .await;
        let mut listing_warnings = Vec::new();
        let mut unlisted = Vec::new();
        let mut reads = BTreeMap::new();
        for (account, read, warning) in outcomes {
            if let Some(warning) = warning {
                listing_warnings.push(warning);
                unlisted.push(account.clone());
            }
            reads.insert(account, read);
        }
        let empty = Networks::default();
        let kept = kept.unwrap_or(&empty);
        let (mut networks, mut warnings) = refreshed(kept, &reads);
        // Read in the proxies' regions alone, an account keeps what was last read of it
        // elsewhere: a failed listing never opens its other regions' networks to the others.
        for account in &unlisted {
            for network in kept.ranges().get(account).into_iter().flatten() {
                networks.insert(account, *network);
            }
        }
        warnings.extend(listing_warnings);
        for warning in &warnings {
            warn!(%warning, "member networks kept from the last read, or read in fewer regions");
        }
        let calls = self.calls().saturating_sub(before);
        info!(
            accounts = reads.len(),
            proxy_regions = self.regions.len(),
            ec2_calls = calls,
            "member networks read"
        );
        Learned {
            networks,
            warnings,
            calls,
        }
    }

    /// [`VpcReader::read`], given up at `limit` (an instant, and the seconds it allowed): the
    /// same instant for every account, so the accounts still waiting for a slot when it comes
    /// are given up too.
    async fn read_by(
        &self,
        account: &AccountRoute53,
        limit: Option<(Instant, u64)>,
    ) -> (String, VpcRead, Option<String>) {
        let Some((limit, seconds)) = limit else {
            return self.read(account).await;
        };
        match tokio::time::timeout_at(limit, self.read(account)).await {
            Ok(read) => read,
            Err(_) => {
                warn!(account = %account.account, seconds, "VPCs not read in time");
                let late = VpcRead::NotInTime { seconds };
                (account.account.clone(), late, None)
            }
        }
    }

    /// One account's ranges in every region it is read in; the first region that fails
    /// decides. The warning says when the regions could not be listed.
    async fn read(&self, account: &AccountRoute53) -> (String, VpcRead, Option<String>) {
        let name = account.account.clone();
        let (regions, warning) = match self.regions_of(account).await {
            Ok(listed) => listed,
            Err(refused) => return (name, refused, None),
        };
        let reading: Vec<_> = regions
            .iter()
            .map(|region| self.read_region(account, region))
            .collect();
        let reads: Vec<Result<BTreeSet<IpNet>, VpcRead>> = stream::iter(reading)
            .buffered(REGIONS_IN_FLIGHT)
            .collect()
            .await;
        let mut ranges = BTreeSet::new();
        for read in reads {
            match read {
                Ok(found) => ranges.extend(found),
                Err(failed) => return (name, failed, warning),
            }
        }
        info!(account = %name, regions = regions.len(), networks = ranges.len(), "read VPCs");
        (name, VpcRead::Read(ranges), warning)
    }

    /// The regions to read `account` in: the proxies' and the member's (`MEMBER_REGIONS`, or
    /// those `DescribeRegions` lists as enabled in it, asked in the proxies' first region).
    /// A listing that fails falls back to the proxies' regions, with a warning; a refused role
    /// ends the account's read as refused.
    async fn regions_of(
        &self,
        account: &AccountRoute53,
    ) -> Result<(Vec<String>, Option<String>), VpcRead> {
        let mut regions = BTreeSet::new();
        let (Some(home), MemberRegions::Enabled) = (self.regions.first(), &self.members) else {
            if let MemberRegions::Listed(listed) = &self.members {
                regions.extend(listed.iter().cloned());
            }
            return Ok((self.with_proxies_first(regions), None));
        };
        let answer = self.client(account, home).regions().await;
        let warning = match answer {
            Ok(listed) => {
                regions.extend(listed);
                None
            }
            Err(err) => {
                let failed = failure(home, &err);
                let (reason, advice) = match &failed {
                    VpcRead::RoleRefused | VpcRead::Read(_) | VpcRead::NotInTime { .. } => {
                        return Err(failed.clone());
                    }
                    VpcRead::NotGranted { reason, .. } => (
                        reason,
                        "; the member role lacks the ec2:DescribeRegions grant of \
                         docs/member-account.yaml: update the member StackSet (docs/DEPLOY.md, \
                         \"Member networks\"), or list its regions in MEMBER_REGIONS",
                    ),
                    VpcRead::Failed { reason, .. } => (reason, ""),
                };
                Some(format!(
                    "account {}: DescribeRegions failed ({reason}): its VPCs were read in the \
                     proxies' regions alone ({}), and the networks last read of it elsewhere \
                     are kept{advice}",
                    account.account,
                    self.regions.join(", ")
                ))
            }
        };
        Ok((self.with_proxies_first(regions), warning))
    }

    /// The proxies' regions in their order, then the member's others by name.
    fn with_proxies_first(&self, member: BTreeSet<String>) -> Vec<String> {
        let others = member.into_iter().filter(|r| !self.regions.contains(r));
        self.regions.iter().cloned().chain(others).collect()
    }

    /// EC2 for `account` in `region`, through its credentials, counting attempts.
    fn client(&self, account: &AccountRoute53, region: &str) -> Ec2 {
        Ec2::new(&self.sdk, region, account.credentials().cloned()).counting(self.counter.clone())
    }

    async fn read_region(
        &self,
        account: &AccountRoute53,
        region: &str,
    ) -> Result<BTreeSet<IpNet>, VpcRead> {
        let client = self.client(account, region);
        let mut ranges = BTreeSet::new();
        let mut token = None;
        loop {
            let page = client
                .vpc_page(VPCS_PER_PAGE, token.as_deref())
                .await
                .map_err(|err| failure(region, &err))?;
            ranges.extend(vpc_ranges(&page.blocks));
            // A token repeated would page forever: the SDK's paginators stop there too.
            if page.next_token.is_none() || page.next_token == token {
                return Ok(ranges);
            }
            token = page.next_token;
        }
    }
}

/// The ranges of a page's VPC blocks: each IPv4 block (the primary among them) and IPv6
/// block, but those leaving or that failed to join.
fn vpc_ranges(blocks: &[VpcBlock]) -> Vec<IpNet> {
    blocks
        .iter()
        .filter(|block| !block.state.as_deref().is_some_and(|s| GONE.contains(&s)))
        .filter_map(|block| block.cidr.parse::<IpNet>().ok())
        .map(|range| range.trunc())
        .collect()
}

/// What a failed call says of the account: its role refused (no answer from EC2, STS said
/// AccessDenied), the grant missing, or another failure.
fn failure(region: &str, err: &Ec2Failure) -> VpcRead {
    let no_answer = err.raw_response().is_none();
    if no_answer
        && DisplayErrorContext(err)
            .to_string()
            .contains("AccessDenied")
    {
        return VpcRead::RoleRefused;
    }
    let reason = autoproxy::aws_error::reason(err);
    let region = region.to_owned();
    if err.code().is_some_and(|code| NOT_GRANTED.contains(&code)) {
        VpcRead::NotGranted { region, reason }
    } else {
        VpcRead::Failed { region, reason }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(cidr: &str, state: Option<&str>) -> VpcBlock {
        VpcBlock {
            cidr: cidr.to_owned(),
            state: state.map(str::to_owned),
        }
    }

    #[test]
    fn a_vpcs_ranges_are_its_live_blocks_of_both_families() {
        let blocks = [
            block("10.1.0.0/16", None),
            block("10.1.0.0/16", Some("associated")),
            block("100.64.0.0/20", Some("associating")),
            block("10.7.0.0/16", Some("disassociated")),
            block("10.8.0.0/16", Some("failing")),
            block("2600:1f18:ab:cd00::/56", Some("associated")),
            block("not a range", None),
        ];
        let got: BTreeSet<String> = vpc_ranges(&blocks)
            .iter()
            .map(ToString::to_string)
            .collect();
        let expected: BTreeSet<String> = ["10.1.0.0/16", "100.64.0.0/20", "2600:1f18:ab:cd00::/56"]
            .into_iter()
            .map(str::to_owned)
            .collect();
        assert_eq!(got, expected);
    }
}
