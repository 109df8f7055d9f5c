//! What every run of the benchmark shares.

use std::time::Duration;

use autoproxy_tests::dns::DnsServer;
use autoproxy_tests::moto::Moto;
use autoproxy_tests::proxy::Backends;

/// Everything shared by the runs: the DNS servers, the backends, the clock.
pub(super) struct Env {
    /// Where HAProxy's resolv.conf (and the per-route template's `resolvers`) point.
    pub(super) dns: DnsServer,
    /// The map-based design's resolver agent asks this one: its queries are told apart.
    pub(super) agent_dns: DnsServer,
    pub(super) backends: Backends,
    pub(super) ticks: u64,
    pub(super) window: Duration,
    pub(super) agent: bool,
    /// Where the resolver publishes its CloudWatch metrics while it is measured.
    pub(super) moto: Option<Moto>,
}

/// The resolver's publish period while it is measured: twelve times the production rate
/// (60 s), so that every steady-state window holds publishes and its CPU is an upper bound.
pub(super) const METRICS_SECONDS: u64 = 5;
