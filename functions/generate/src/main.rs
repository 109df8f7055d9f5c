//! autoproxy-generate: wiring only; the work is in `handler`.

use autoproxy_generate::handler;
use lambda_runtime::{Error, run, service_fn, tracing};

#[tokio::main]
async fn main() -> Result<(), Error> {
    tracing::init_default_subscriber();
    let settings = autoproxy::settings::GenerateSettings::from_env()?;
    let sdk = handler::sdk_config().await;
    let caller = aws_sdk_sts::Client::new(&sdk)
        .get_caller_identity()
        .send()
        .await?;
    let own_account = caller
        .account
        .ok_or("STS GetCallerIdentity returned no account")?;
    // arn:<partition>:sts::<account>:assumed-role/...: member role ARNs use the same partition.
    let partition = caller
        .arn
        .as_deref()
        .and_then(|arn| arn.split(':').nth(1))
        .filter(|partition| partition.starts_with("aws"))
        .ok_or("STS GetCallerIdentity returned no ARN with a partition")?
        .to_owned();
    let deps = handler::Deps::new_in(settings, &sdk, &own_account, &partition).await?;
    run(service_fn(|event| handler::function_handler(&deps, event))).await
}
