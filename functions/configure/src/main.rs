//! autoproxy-configure: wiring only; the work is in `handler`.

use std::time::Duration;

use autoproxy_configure::handler;
use aws_config::BehaviorVersion;
use lambda_runtime::{Error, run, service_fn, tracing};

#[tokio::main]
async fn main() -> Result<(), Error> {
    tracing::init_default_subscriber();
    let settings = autoproxy::settings::ConfigureSettings::from_env()?;
    let sdk = aws_config::load_defaults(BehaviorVersion::latest()).await;
    let deps = handler::Deps {
        settings,
        s3: aws_sdk_s3::Client::new(&sdk),
        ssm: aws_sdk_ssm::Client::new(&sdk),
        poll_every: Duration::from_secs(5),
    };
    run(service_fn(|event| handler::function_handler(&deps, event))).await
}
