//! autoproxy-generate: wiring only; the work is in `handler`.

use autoproxy_generate::handler;
use lambda_runtime::{Error, run, service_fn, tracing};

#[tokio::main]
async fn main() -> Result<(), Error> {
    tracing::init_default_subscriber();
    let settings = autoproxy::settings::GenerateSettings::from_env()?;
    let sdk = handler::sdk_config().await;
    let own_account = aws_sdk_sts::Client::new(&sdk)
        .get_caller_identity()
        .send()
        .await?
        .account
        .ok_or("STS GetCallerIdentity returned no account")?;
    let deps = handler::Deps::new(settings, &sdk, &own_account).await?;
    run(service_fn(|event| handler::function_handler(&deps, event))).await
}
