//! Every statement each function's role has, by Sid, and what its removal shows under moto's
//! IAM enforcement.

use super::Check;

const ROUTE53: &str = "moto denies every Route53 call under IAM enforcement; the statement is \
                       checked statically (template::grants::what_moto_cannot_check_is_exactly_this)";

const SSM_RESOURCES: &str = "moto authorises SSM calls against the resource * and evaluates no \
                             ssm:resourceTag condition: both ssm:SendCommand statements are kept \
                             with Resource * (removing one alone leaves the other), and their \
                             document and instance resources are checked statically";

/// Every statement the generator's role has in this deployment, by Sid.
pub(super) const GENERATE: &[(&str, Check)] = &[
    ("ListHostedZones", Check::Static(ROUTE53)),
    ("ReadHostedZones", Check::Static(ROUTE53)),
    ("ListConfigBucket", Check::Static(LIST_BUCKET)),
    ("ReadWriteConfigAndManifest", Check::Needed),
    ("ReadTemplate", Check::Needed),
];

const MEMBER_ROLES: &str = "moto lets any role be assumed and the listing here finds no member \
                            (their Route53 would be denied under enforcement); the statement is \
                            checked statically (template::grants::what_moto_cannot_check_is_exactly_this)";

/// The generator's statements with `MemberAccounts` naming units (`units`) or the whole
/// organization: the deployment's, then each Organizations call, proven against IAM like the
/// rest, then the member roles.
pub(super) fn generate_with_members(units: bool) -> Vec<(&'static str, Check)> {
    let listing: &[&str] = if units {
        &["ListUnitAccounts", "ListUnitChildren"]
    } else {
        &["ListOrganizationAccounts"]
    };
    GENERATE
        .iter()
        .cloned()
        .chain(listing.iter().map(|sid| (*sid, Check::Needed)))
        .chain([("AssumeMemberRoles", Check::Static(MEMBER_ROLES))])
        .collect()
}

const LIST_BUCKET: &str = "moto answers GetObject of a missing key 404 with or without \
                           s3:ListBucket (AWS answers 403 without it)";

pub(super) const CONFIGURE: &[(&str, Check)] = &[
    ("SendApplyDocument", Check::ActionOnly(SSM_RESOURCES)),
    ("FollowCommands", Check::Needed),
    ("ReadConfigMetadata", Check::Needed),
    ("ListFleetRecords", Check::Needed),
    ("ReadFleetRecords", Check::Needed),
    ("WriteFleetReport", Check::Needed),
    // Without it the report goes without the member accounts, with a warning naming the denial.
    ("ReadManifestAccounts", Check::Needed),
    ("ListFleetInstances", Check::Needed),
    // The standalone policy attached to the role, listed after the inline ones.
    ("SendToTaggedInstances", Check::ActionOnly(SSM_RESOURCES)),
];

pub(super) const PUBLISHER: &[(&str, Check)] = &[
    (
        "ListConfigBucket",
        Check::Static(
            "moto answers HeadObject of a missing key 404 with or without s3:ListBucket (AWS \
             answers 403 without it)",
        ),
    ),
    ("FindPublishedAgent", Check::Needed),
    ("PublishAgent", Check::Needed),
];
