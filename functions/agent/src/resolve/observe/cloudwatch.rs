//! The per-instance CloudWatch metrics: what one publish sends, as a pure function of a
//! sample (names and units are a contract: docs/ARCHITECTURE.md), and the one call that sends
//! it. The publisher (`publisher.rs`) takes the samples and calls it on its own schedule.

use std::time::SystemTime;

use aws_sdk_cloudwatch::types::{Dimension, MetricDatum, StandardUnit};

/// The namespace every metric goes to.
pub const NAMESPACE: &str = "autoproxy";
/// The one dimension of every metric.
pub const DIMENSION: &str = "InstanceId";
/// The backends the template sends rejected connections to, by reason.
pub const REJECT_NO_ROUTE: &str = "reject_no_route";
pub const REJECT_NO_ADDRESS: &str = "reject_no_address";

/// One publish's figures; `None` is a figure HAProxy did not give (it is not sent).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Sample {
    pub haproxy_up: bool,
    pub current_connections: Option<u64>,
    pub connection_rate: Option<u64>,
    /// Connections rejected since the previous publish, by reason.
    pub rejected_no_route: Option<u64>,
    pub rejected_no_address: Option<u64>,
    pub unresolved_routes: u64,
    /// Lookups that failed since the previous publish.
    pub resolver_failures: u64,
    /// HAProxy worker processes, old ones still draining included.
    pub workers: u64,
}

/// The metrics of `sample`: name, value, unit.
pub fn metrics(sample: &Sample) -> Vec<(&'static str, f64, StandardUnit)> {
    let count = StandardUnit::Count;
    let figures = [
        (
            "HAProxyUp",
            Some(u64::from(sample.haproxy_up)),
            count.clone(),
        ),
        (
            "CurrentConnections",
            sample.current_connections,
            count.clone(),
        ),
        (
            "ConnectionRate",
            sample.connection_rate,
            StandardUnit::CountSecond,
        ),
        ("RejectedNoRoute", sample.rejected_no_route, count.clone()),
        (
            "RejectedNoAddress",
            sample.rejected_no_address,
            count.clone(),
        ),
        (
            "UnresolvedRoutes",
            Some(sample.unresolved_routes),
            count.clone(),
        ),
        (
            "ResolverFailures",
            Some(sample.resolver_failures),
            count.clone(),
        ),
        ("Workers", Some(sample.workers), count),
    ];
    figures
        .into_iter()
        .filter_map(|(name, value, unit)| value.map(|v| (name, v as f64, unit)))
        .collect()
}

/// A cumulative counter of HAProxy's read as increases between publishes. A new worker
/// (another pid) starts its counters at zero, and a value lower than the last is read the
/// same way: a reset, whose whole value is the increase.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Increase {
    last: Option<(u32, u64)>,
}

impl Increase {
    /// The increase since the last reading; the first reading sets the base (0).
    pub fn advance(&mut self, pid: u32, total: u64) -> u64 {
        let increase = match self.last {
            None => 0,
            Some((last_pid, last)) if last_pid == pid && total >= last => total - last,
            Some(_) => total,
        };
        self.last = Some((pid, total));
        increase
    }
}

/// Why a publish failed: what the SDK said.
#[derive(Debug, thiserror::Error)]
#[error("PutMetricData: {0}")]
pub struct PublishError(String);

/// Sends `sample` for `instance_id`, stamped `at`, in one PutMetricData call.
pub async fn put(
    client: &aws_sdk_cloudwatch::Client,
    instance_id: &str,
    sample: &Sample,
    at: SystemTime,
) -> Result<(), PublishError> {
    let dimension = Dimension::builder()
        .name(DIMENSION)
        .value(instance_id)
        .build();
    let data = metrics(sample)
        .into_iter()
        .map(|(name, value, unit)| {
            MetricDatum::builder()
                .metric_name(name)
                .dimensions(dimension.clone())
                .value(value)
                .unit(unit)
                .timestamp(at.into())
                .build()
        })
        .collect::<Vec<_>>();
    client
        .put_metric_data()
        .namespace(NAMESPACE)
        .set_metric_data(Some(data))
        .send()
        .await
        .map(drop)
        .map_err(|err| {
            PublishError(aws_sdk_cloudwatch::error::DisplayErrorContext(err).to_string())
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sample_gives_the_contracts_names_and_skips_what_haproxy_did_not_say() {
        let sample = Sample {
            haproxy_up: true,
            current_connections: Some(12),
            connection_rate: Some(3),
            rejected_no_route: Some(5),
            rejected_no_address: Some(0),
            unresolved_routes: 2,
            resolver_failures: 1,
            workers: 2,
        };
        let sent: Vec<(&str, f64)> = metrics(&sample)
            .into_iter()
            .map(|(name, value, _)| (name, value))
            .collect();
        assert_eq!(
            sent,
            [
                ("HAProxyUp", 1.0),
                ("CurrentConnections", 12.0),
                ("ConnectionRate", 3.0),
                ("RejectedNoRoute", 5.0),
                ("RejectedNoAddress", 0.0),
                ("UnresolvedRoutes", 2.0),
                ("ResolverFailures", 1.0),
                ("Workers", 2.0),
            ]
        );
        let down = Sample::default();
        let names: Vec<&str> = metrics(&down).into_iter().map(|(n, _, _)| n).collect();
        assert_eq!(
            names,
            [
                "HAProxyUp",
                "UnresolvedRoutes",
                "ResolverFailures",
                "Workers"
            ]
        );
    }

    #[test]
    fn counters_are_read_as_increases_and_a_fall_or_a_new_worker_as_a_reset() {
        let mut increase = Increase::default();
        for (pid, total, want) in [
            (10, 40, 0),
            (10, 45, 5),
            (10, 45, 0),
            (10, 3, 3),
            (11, 2, 2),
            (11, 9, 7),
            (12, 50, 50),
        ] {
            assert_eq!(increase.advance(pid, total), want, "{pid} {total}");
        }
    }
}
