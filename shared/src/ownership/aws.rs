//! Zones named under a domain AWS owns (docs/ARCHITECTURE.md, "Who may route a zone name").
//!
//! In first-holder mode nobody knows which zones the proxies resolve, so every zone counts as
//! one that may shadow the names inside it. A member's empty private zone `eks.amazonaws.com`
//! would then hold every EKS endpoint's name: every new `back-target` route to one refused,
//! a recreated cluster's too. A name under an AWS-owned domain is AWS's, never a member's: such
//! a zone holds nothing, blocks nothing inside it, and routes nothing itself. It is refused with
//! a warning when that matters: it opted in, or a route's SNI lies inside it. An idle one (a
//! centralised interface endpoint's zone, say) is left alone, so it does not warn every run.
//! With `PROXY_VPCS` the association says which zones shadow the proxies' view: this rule
//! does not apply there.

use super::{Refusal, key, sni_name};
use crate::manifest::ZoneEntry;
use crate::model::Route;
use crate::names::HostName;

/// The domains AWS owns that its services' endpoint names lie under (the commercial, China and
/// European Sovereign partitions; `.aws` holds `api.aws` and `on.aws`).
pub const AWS_DOMAINS: &[&str] = &[
    "amazonaws.com",
    "amazonaws.com.cn",
    "amazonaws.eu",
    "aws",
    "awsglobalaccelerator.com",
    "cloudfront.net",
];

/// The AWS-owned domain `name` is or lies under, if any.
pub fn aws_domain(name: &HostName) -> Option<&'static str> {
    AWS_DOMAINS
        .iter()
        .copied()
        .find(|domain| HostName::parse(domain).is_ok_and(|domain| name.is_within(&domain)))
}

/// A zone set aside because of its name, with the domain it lies under.
pub(super) struct AwsZone<'a> {
    pub name: HostName,
    pub entry: &'a ZoneEntry,
    pub domain: &'static str,
}

/// The refusals of the zones set aside: those that opted in, or that a route's SNI (of the
/// routes let through) lies inside.
pub(super) fn refusals(zones: &[AwsZone<'_>], routed: &[Route]) -> Vec<Refusal> {
    zones
        .iter()
        .filter(|zone| {
            !zone.entry.routes.is_empty()
                || routed
                    .iter()
                    .filter_map(sni_name)
                    .any(|sni| sni.is_within(&zone.name))
        })
        .map(|zone| Refusal::AwsDomain {
            name: zone.name.as_str().to_owned(),
            zone: key(zone.entry),
            domain: zone.domain,
        })
        .collect()
}
