//! autoproxy-agent-publisher: wiring only; the work is in `handler`.

use std::path::PathBuf;

use autoproxy_agent_publisher::handler;
use autoproxy_agent_publisher::response::Responder;
use aws_config::BehaviorVersion;
use lambda_runtime::{Error, run, service_fn, tracing};

#[tokio::main]
async fn main() -> Result<(), Error> {
    tracing::init_default_subscriber();
    let sdk = aws_config::load_defaults(BehaviorVersion::latest()).await;
    let deps = handler::Deps {
        s3: aws_sdk_s3::Client::new(&sdk),
        agent: PathBuf::from(handler::LAYER_FILE),
        responder: Responder::new()?,
    };
    run(service_fn(|event| handler::function_handler(&deps, event))).await
}
