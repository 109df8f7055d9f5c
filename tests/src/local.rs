//! The local stand-in for invoking the functions by hand (README, "Invoking by hand"): moto
//! on a fixed loopback port, seeded as the demo seeds it (the sample clusters in two accounts,
//! the versioned config bucket, the apply document, two instances tagged as peering proxies),
//! and the env file `cargo lambda watch --env-file` reads: the endpoint, test credentials and
//! both functions' settings.

use std::path::Path;

use crate::estate::{self, Account, role_arn};
use crate::moto::{Moto, REGION};
use crate::pipeline::{
    BUCKET, CONFIG_KEY, DOCUMENT, INITIAL, MEMBER_ACCOUNT, PROXY_HOSTNAME, PipelineError, TAG_KEY,
    TAG_VALUE, create_document, run_instances, seed_clusters,
};
use crate::ssm_agent::Document;

/// The port README's commands assume.
pub const DEFAULT_PORT: u16 = 5000;
/// Where `make local` writes the env file, relative to the checkout.
pub const ENV_FILE: &str = ".local/env";

/// A seeded moto; stopped when dropped.
#[derive(Debug)]
pub struct StandIn {
    pub moto: Moto,
    /// What both functions need under `cargo lambda watch`, in env-file order.
    pub env: Vec<(String, String)>,
}

impl StandIn {
    /// Starts moto on `port` and seeds it.
    pub async fn start(port: u16) -> Result<StandIn, PipelineError> {
        let moto = Moto::start_on(port);
        let sdk = moto.sdk_config().await;
        estate::versioned_bucket(&sdk, BUCKET).await?;
        let own = Account::own(&sdk);
        let member = Account::assume(&sdk, MEMBER_ACCOUNT).await?;
        seed_clusters(&own, &member, &INITIAL).await?;
        // The document as a default deployment has it; moto only records the commands sent.
        create_document(&sdk, &Document::from_workspace(&[])?).await?;
        run_instances(&moto)?;
        let settings = [
            ("AWS_ENDPOINT_URL", moto.endpoint()),
            ("AWS_ACCESS_KEY_ID", "testing".to_owned()),
            ("AWS_SECRET_ACCESS_KEY", "testing".to_owned()),
            ("AWS_REGION", REGION.to_owned()),
            ("CONFIG_BUCKET", BUCKET.to_owned()),
            ("CONFIG_KEY", CONFIG_KEY.to_owned()),
            ("PEERING_PROXY_HOSTNAME", PROXY_HOSTNAME.to_owned()),
            ("ACCOUNT_ROLE_ARNS", role_arn(MEMBER_ACCOUNT)),
            // The member's VPCs in moto's one region: moto lists 38 as enabled in every
            // account, and reading them all (the default) adds seconds to each full run.
            ("MEMBER_REGIONS", REGION.to_owned()),
            ("APPLY_DOCUMENT", DOCUMENT.to_owned()),
            ("TARGET_TAG_KEY", TAG_KEY.to_owned()),
            ("TARGET_TAG_VALUE", TAG_VALUE.to_owned()),
        ];
        let env = settings
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect();
        Ok(StandIn { moto, env })
    }

    /// Writes the env file (`KEY=VALUE` lines), creating its directory; whole or not at all
    /// (a temporary file renamed), since its appearance is what says the stand-in is ready.
    pub fn write_env_file(&self, path: &Path) -> std::io::Result<()> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let text: String = self.env.iter().map(|(k, v)| format!("{k}={v}\n")).collect();
        let temp = path.with_extension("partial");
        std::fs::write(&temp, text)?;
        std::fs::rename(&temp, path)
    }
}
