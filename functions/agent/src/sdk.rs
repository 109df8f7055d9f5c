//! The AWS SDK as the agent loads it, in one place: the region and credentials from the SDK's
//! default chain (the environment, else the instance's metadata through IMDSv2 and its
//! instance profile), and the timeouts of the calls it is loaded for.

use std::time::Duration;

use aws_config::timeout::TimeoutConfig;
use aws_config::{BehaviorVersion, SdkConfig};

/// Whose calls a configuration serves, and so how long they may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Calls {
    /// The apply's S3 calls (the config's download, the fleet record, the fleet report): a
    /// connection within 10 s, and no read of an answer waiting more than 30 s. The download
    /// as a whole has its own bound, so a large config is never cut by a per-attempt one.
    Apply,
    /// The metrics publisher's CloudWatch calls: a connection within 5 s, an attempt within
    /// 10 s, so a publish ends well before the next is due.
    Metrics,
}

impl Calls {
    fn timeouts(self) -> TimeoutConfig {
        match self {
            Calls::Apply => TimeoutConfig::builder()
                .connect_timeout(Duration::from_secs(10))
                .read_timeout(Duration::from_secs(30))
                .build(),
            Calls::Metrics => TimeoutConfig::builder()
                .connect_timeout(Duration::from_secs(5))
                .operation_attempt_timeout(Duration::from_secs(10))
                .build(),
        }
    }
}

/// The SDK's configuration for `calls`.
pub async fn load(calls: Calls) -> SdkConfig {
    aws_config::defaults(BehaviorVersion::latest())
        .timeout_config(calls.timeouts())
        .load()
        .await
}
