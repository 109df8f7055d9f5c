//! The CloudWatch publisher: a task of its own that sends the instance's metrics every
//! `AUTOPROXY_METRICS_SECONDS` ([`super::cloudwatch`]).
//!
//! It never touches the resolving or the pushing: it reads the loop's figures, asks HAProxy
//! through the shared [`Probe`], and counts workers on a blocking thread. A publish that
//! fails or does not end within its time is logged and the next one goes at the next tick;
//! nothing is queued. It turns itself off, with one log line, where no region or no
//! credentials can be found (the SDK's default chain: the environment, then the instance
//! profile through IMDS), or no instance id (`AUTOPROXY_INSTANCE_ID`, else IMDS).

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use aws_sdk_cloudwatch::config::ProvideCredentials;
use tokio::task::JoinHandle;
use tokio::time::MissedTickBehavior;

use super::cloudwatch::{self, Increase, REJECT_NO_ADDRESS, REJECT_NO_ROUTE, Sample};
use super::figures::Shared;
use super::probe::Probe;
use crate::resolve::log;

/// The variable that names the instance instead of IMDS (tests, hosts off EC2).
pub const INSTANCE_ID_VARIABLE: &str = "AUTOPROXY_INSTANCE_ID";
/// How long finding credentials and the instance id may take at start.
const SETUP_TIMEOUT: Duration = Duration::from_secs(30);

/// Starts publishing every `period`.
pub fn spawn(period: Duration, figures: Shared, probe: Arc<Probe>) -> JoinHandle<()> {
    tokio::spawn(async move {
        let Some((client, instance_id)) = setup().await else {
            return;
        };
        log(format_args!(
            "CloudWatch metrics every {}s to namespace {}, {} {instance_id}",
            period.as_secs_f64(),
            cloudwatch::NAMESPACE,
            cloudwatch::DIMENSION
        ));
        let mut counters = Counters::default();
        let mut ticker = tokio::time::interval(period);
        ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
        // A publish must end before the next is due, and never waits long.
        let limit = period.clamp(Duration::from_secs(1), Duration::from_secs(10));
        let mut failing = false;
        loop {
            ticker.tick().await;
            let sample = counters.sample(&figures, &probe).await;
            let put = cloudwatch::put(&client, &instance_id, &sample, SystemTime::now());
            match tokio::time::timeout(limit, put).await {
                Ok(Ok(())) if failing => {
                    failing = false;
                    log(format_args!("CloudWatch metrics published again"));
                }
                Ok(Ok(())) => {}
                Ok(Err(err)) => {
                    failing = true;
                    log(format_args!(
                        "CloudWatch metrics not published (next try in {}s): {err}",
                        period.as_secs_f64()
                    ));
                }
                Err(_) => {
                    failing = true;
                    log(format_args!(
                        "CloudWatch metrics not published: no answer within {}s (next try in {}s)",
                        limit.as_secs_f64(),
                        period.as_secs_f64()
                    ));
                }
            }
        }
    })
}

/// The client and the instance id; none (logged) when publishing cannot work here.
async fn setup() -> Option<(aws_sdk_cloudwatch::Client, String)> {
    let sdk = crate::sdk::load(crate::sdk::Calls::Metrics).await;
    if sdk.region().is_none() {
        log(format_args!(
            "CloudWatch metrics off: no AWS region found (AWS_REGION, or the instance's metadata)"
        ));
        return None;
    }
    let found = match sdk.credentials_provider() {
        Some(provider) => {
            match tokio::time::timeout(SETUP_TIMEOUT, provider.provide_credentials()).await {
                Ok(Ok(_)) => Ok(()),
                Ok(Err(err)) => Err(err.to_string()),
                Err(_) => Err(format!("none within {}s", SETUP_TIMEOUT.as_secs())),
            }
        }
        None => Err("no credentials provider".to_owned()),
    };
    if let Err(why) = found {
        log(format_args!(
            "CloudWatch metrics off: no AWS credentials found ({why})"
        ));
        return None;
    }
    let instance_id = match instance_id().await {
        Ok(id) => id,
        Err(why) => {
            log(format_args!("CloudWatch metrics off: {why}"));
            return None;
        }
    };
    Some((aws_sdk_cloudwatch::Client::new(&sdk), instance_id))
}

/// `AUTOPROXY_INSTANCE_ID`, else the instance's id from IMDS (through aws-config's client).
async fn instance_id() -> Result<String, String> {
    let id = match std::env::var(INSTANCE_ID_VARIABLE) {
        Ok(id) => id,
        Err(_) => {
            let imds = aws_config::imds::Client::builder().build();
            let asked = imds.get("/latest/meta-data/instance-id");
            match tokio::time::timeout(SETUP_TIMEOUT, asked).await {
                Ok(Ok(id)) => id.as_ref().to_owned(),
                Ok(Err(err)) => {
                    return Err(format!(
                        "no instance id from the instance's metadata ({err}); set {INSTANCE_ID_VARIABLE}"
                    ));
                }
                Err(_) => {
                    return Err(format!(
                        "no instance id from the instance's metadata within {}s; set {INSTANCE_ID_VARIABLE}",
                        SETUP_TIMEOUT.as_secs()
                    ));
                }
            }
        }
    };
    let plain = (1..=64).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
    if plain {
        Ok(id)
    } else {
        Err(format!("the instance id {id:?} is not a plain id"))
    }
}

/// What turns cumulative counts into per-publish increases.
#[derive(Debug, Default)]
struct Counters {
    no_route: Increase,
    no_address: Increase,
    failures: u64,
}

impl Counters {
    /// The figures of one publish.
    async fn sample(&mut self, figures: &Shared, probe: &Probe) -> Sample {
        let now = figures.get();
        let seen = probe.look(now.stats_socket.as_deref()).await;
        let config = now.config.clone();
        let workers = tokio::task::spawn_blocking(move || workers(&config))
            .await
            .unwrap_or(0);
        let failures = now.failures_total.saturating_sub(self.failures);
        self.failures = now.failures_total;
        let mut sample = Sample {
            haproxy_up: seen.is_ok(),
            unresolved_routes: now.unresolved_routes,
            resolver_failures: failures,
            workers,
            ..Sample::default()
        };
        if let Ok(worker) = seen.as_ref() {
            sample.current_connections = worker.current_connections;
            sample.connection_rate = worker.connection_rate;
            sample.rejected_no_route = worker
                .sessions_of(REJECT_NO_ROUTE)
                .map(|total| self.no_route.advance(worker.pid, total));
            sample.rejected_no_address = worker
                .sessions_of(REJECT_NO_ADDRESS)
                .map(|total| self.no_address.advance(worker.pid, total));
        }
        sample
    }
}

/// HAProxy's worker processes for `config`, old ones still draining included: the processes
/// that read it whose parent reads it too (the master's children; the master is not one).
fn workers(config: &Path) -> u64 {
    let pids = crate::running::processes_reading(config);
    let parents: Vec<(u32, u32)> = pids
        .iter()
        .filter_map(|pid| Some((*pid, crate::proc::stat(*pid)?.parent)))
        .collect();
    children_among(&parents)
}

/// How many of `(pid, parent)` have their parent among them.
fn children_among(processes: &[(u32, u32)]) -> u64 {
    let count = processes
        .iter()
        .filter(|(_, parent)| processes.iter().any(|(pid, _)| pid == parent))
        .count();
    u64::try_from(count).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workers_are_the_processes_whose_parent_reads_the_config_too() {
        assert_eq!(children_among(&[]), 0);
        assert_eq!(children_among(&[(10, 1)]), 0, "a master alone");
        assert_eq!(children_among(&[(10, 1), (11, 10)]), 1);
        assert_eq!(children_among(&[(10, 1), (11, 10), (12, 10), (13, 10)]), 3);
        assert_eq!(children_among(&[(11, 10), (12, 1)]), 0, "an orphan");
    }
}
