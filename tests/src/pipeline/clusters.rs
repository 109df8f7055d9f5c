//! The sample clusters: each a private zone in one account with its API server and internal ingress.

use super::*;

/// A Kubernetes cluster of the sample estate: its private zone carries both rules' records,
/// its API server and its internal ingress are TLS backends on their own loopback addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cluster {
    pub name: &'static str,
    pub account: &'static str,
    /// Where its `proxy.api` and `*.int` CNAMEs point.
    pub proxy: &'static str,
    /// Distinct per cluster: the backends' last address bytes derive from it.
    pub index: u8,
}

impl Cluster {
    /// A cluster whose CNAMEs point at the proxy.
    pub const fn proxied(name: &'static str, account: &'static str, index: u8) -> Cluster {
        Cluster {
            name,
            account,
            proxy: PROXY_HOSTNAME,
            index,
        }
    }

    pub fn zone(&self) -> String {
        format!("{}.example.internal", self.name)
    }

    /// The SNI of the Kubernetes API rule.
    pub fn api_sni(&self) -> String {
        format!("proxy.api.{}", self.zone())
    }

    /// An SNI the internal-ingress rule covers (an app under `*.int`).
    pub fn ingress_sni(&self) -> String {
        format!("demo.int.{}", self.zone())
    }

    /// The API server's name, which is also its certificate's CN.
    pub fn api_backend(&self) -> String {
        format!("api.{}", self.zone())
    }

    /// The internal ingress' name, which is also its certificate's CN.
    pub fn ingress_backend(&self) -> String {
        format!("ingress-int.{}", self.zone())
    }

    pub fn api_ip(&self) -> Ipv4Addr {
        Ipv4Addr::new(127, 0, 0, 10 + 2 * self.index)
    }

    pub fn ingress_ip(&self) -> Ipv4Addr {
        Ipv4Addr::new(127, 0, 0, 11 + 2 * self.index)
    }

    /// The internal NLB in front of the API server (answered by the VPC resolver). The API
    /// record is an alias to it: an A record at the backend's loopback address is one the
    /// generator refuses (nothing but the proxy itself listens there on an instance).
    pub fn api_lb(&self) -> String {
        format!("internal-k8s-{}-api.elb.us-east-1.amazonaws.com", self.name)
    }

    /// The internal ELB in front of the ingress controller (answered by the VPC resolver).
    pub fn elb(&self) -> String {
        format!(
            "internal-k8s-{}-ingress.us-east-1.elb.amazonaws.com",
            self.name
        )
    }

    /// The zone's records: both rules, pointing at `self.proxy`.
    pub fn records(&self) -> Vec<Record> {
        let zone = self.zone();
        vec![
            Record::alias(format!("api.{zone}"), self.api_lb()),
            Record::cname(format!("proxy.api.{zone}"), self.proxy),
            Record::cname(format!("*.int.{zone}"), self.proxy),
            Record::cname(format!("ingress-int.{zone}"), self.elb()),
        ]
    }
}

/// Two clusters in the own account, one in the member account.
pub const PROD: Cluster = Cluster::proxied("prod", OWN_ACCOUNT, 0);
pub const STAGING: Cluster = Cluster::proxied("staging", OWN_ACCOUNT, 1);
pub const PAYMENTS: Cluster = Cluster::proxied("payments", MEMBER_ACCOUNT, 2);
/// A zone whose CNAMEs point at another proxy: it must never be routed.
pub const LEGACY: Cluster = Cluster {
    proxy: OTHER_PROXY,
    ..Cluster::proxied("legacy", OWN_ACCOUNT, 3)
};
/// Added while the pipeline runs, in the member account.
pub const ANALYTICS: Cluster = Cluster::proxied("analytics", MEMBER_ACCOUNT, 4);
/// Every cluster that has backends (all of them from the start: the services exist, only
/// their DNS comes and goes).
pub const ALL: [Cluster; 5] = [PROD, STAGING, PAYMENTS, LEGACY, ANALYTICS];
/// The clusters seeded at the start.
pub const INITIAL: [Cluster; 4] = [PROD, STAGING, PAYMENTS, LEGACY];

/// Creates each cluster's zone and records in its account (`own` or `member`); the zone ids by
/// cluster name.
pub async fn seed_clusters(
    own: &Account,
    member: &Account,
    clusters: &[Cluster],
) -> Result<BTreeMap<&'static str, String>, PipelineError> {
    let mut zones = BTreeMap::new();
    for cluster in clusters {
        let account = if cluster.account == OWN_ACCOUNT {
            own
        } else {
            member
        };
        let seeded = account
            .seed_zone(ZoneSpec::private(cluster.zone(), cluster.records()))
            .await?;
        zones.insert(cluster.name, seeded.id);
    }
    Ok(zones)
}
