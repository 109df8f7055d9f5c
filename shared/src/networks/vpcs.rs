//! Each member's networks as its VPCs give them, read on a full sweep (`ec2:DescribeVpcs`
//! through the member role), and what a run keeps when a read fails (docs/ARCHITECTURE.md,
//! "Where a back may point"). The reads are the generator's; what they make of the last
//! manifest's networks is decided here.

use std::collections::{BTreeMap, BTreeSet};

use super::{IpNet, Networks};

/// How reading one account's VPCs, in every region read, ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VpcRead {
    /// Every region answered: the ranges of the VPCs the account owns or that are shared
    /// with it.
    Read(BTreeSet<IpNet>),
    /// The account's role was refused (not onboarded, or its role broke): the sweep reports
    /// the account; nothing more is said here.
    RoleRefused,
    /// EC2 refused `DescribeVpcs`: the member role lacks the grant (a member stack not yet
    /// updated).
    NotGranted { region: String, reason: String },
    /// Anything else (throttled past the retries, a region not enabled, no answer).
    Failed { region: String, reason: String },
    /// Not every region had answered when the run's time for the VPC reads ran out
    /// (`seconds`): EC2 slow or silent for this account.
    NotInTime { seconds: u64 },
}

/// What a full sweep judges backs with: each account's fresh read or, when its read failed,
/// the networks the last manifest knew of it; an account not read (no longer a member) drops
/// out. One warning per account whose read failed.
pub fn refreshed(
    previous: &Networks,
    reads: &BTreeMap<String, VpcRead>,
) -> (Networks, Vec<String>) {
    let mut networks = Networks::default();
    let mut warnings = Vec::new();
    for (account, read) in reads {
        let kept = previous.ranges().get(account);
        let ranges = match read {
            VpcRead::Read(ranges) => Some(ranges),
            failed => {
                warnings.extend(warning(account, failed, kept.map_or(0, BTreeSet::len)));
                kept
            }
        };
        for network in ranges.into_iter().flatten() {
            networks.insert(account, *network);
        }
    }
    (networks, warnings)
}

/// The warning for an account whose read failed, naming the missing grant when that is why.
fn warning(account: &str, read: &VpcRead, kept: usize) -> Option<String> {
    let keeping = format!(
        "its backs are judged with the {kept} network(s) last read, and the other members' \
         backs against them"
    );
    match read {
        VpcRead::Read(_) | VpcRead::RoleRefused => None,
        VpcRead::NotGranted { region, reason } => Some(format!(
            "account {account}: DescribeVpcs in {region} was refused ({reason}): the member \
             role lacks the ec2:DescribeVpcs grant of docs/member-account.yaml; update the \
             member StackSet (docs/DEPLOY.md, \"Member networks\"); {keeping}"
        )),
        VpcRead::Failed { region, reason } => Some(format!(
            "account {account}: DescribeVpcs in {region} failed ({reason}); {keeping}"
        )),
        VpcRead::NotInTime { seconds } => Some(format!(
            "account {account}: its VPCs were not all read within the {seconds} s this run \
             gives the VPC reads (EC2 answered it slowly or not at all); {keeping}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "111111111111";
    const B: &str = "222222222222";
    const C: &str = "333333333333";

    fn nets(list: &[&str]) -> BTreeSet<IpNet> {
        list.iter().map(|n| n.parse().unwrap()).collect()
    }

    fn networks(of: &[(&str, &[&str])]) -> Networks {
        let mut networks = Networks::default();
        for (account, ranges) in of {
            for range in nets(ranges) {
                networks.insert(account, range);
            }
        }
        networks
    }

    #[test]
    fn a_read_replaces_a_failure_keeps_and_an_account_not_read_drops_out() {
        let previous = networks(&[
            (A, &["10.1.0.0/16"]),
            (B, &["10.2.0.0/16"]),
            (C, &["10.3.0.0/16"]),
        ]);
        let reads = BTreeMap::from([
            (
                A.to_owned(),
                VpcRead::Read(nets(&["10.9.0.0/16", "2600:1f18::/56"])),
            ),
            (
                B.to_owned(),
                VpcRead::NotGranted {
                    region: "eu-west-1".to_owned(),
                    reason: "UnauthorizedOperation: not authorized".to_owned(),
                },
            ),
        ]);
        let (got, warnings) = refreshed(&previous, &reads);
        assert_eq!(
            got,
            networks(&[
                (A, &["10.9.0.0/16", "2600:1f18::/56"]),
                (B, &["10.2.0.0/16"])
            ])
        );
        assert_eq!(warnings.len(), 1, "{warnings:#?}");
        for expected in [
            "account 222222222222: DescribeVpcs in eu-west-1 was refused (UnauthorizedOperation",
            "lacks the ec2:DescribeVpcs grant",
            "with the 1 network(s) last read",
        ] {
            assert!(
                warnings[0].contains(expected),
                "{expected}: {}",
                warnings[0]
            );
        }
    }

    #[test]
    fn a_refused_role_is_the_sweeps_to_report_and_other_failures_warn() {
        let previous = networks(&[(A, &["10.1.0.0/16"])]);
        let reads = BTreeMap::from([
            (A.to_owned(), VpcRead::RoleRefused),
            (
                B.to_owned(),
                VpcRead::Failed {
                    region: "us-east-1".to_owned(),
                    reason: "no answer: connection refused".to_owned(),
                },
            ),
        ]);
        let (got, warnings) = refreshed(&previous, &reads);
        assert_eq!(got, previous);
        assert_eq!(
            warnings,
            [
                "account 222222222222: DescribeVpcs in us-east-1 failed (no answer: connection \
              refused); its backs are judged with the 0 network(s) last read, and the other \
              members' backs against them"
            ]
        );
    }
}
