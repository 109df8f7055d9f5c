//! moto with the stack's config bucket in it, versioned as template.yaml creates it: where the
//! generator publishes, and (with the agent published beside the configs) where an instance
//! applies from.

use aws_config::SdkConfig;

use crate::agent::Published;
use crate::estate::versioned_bucket;
use crate::moto::Moto;

/// A moto server of its own and the config bucket in it.
#[derive(Debug)]
pub struct ConfigBucket {
    pub sdk: SdkConfig,
    pub moto: Moto,
}

impl ConfigBucket {
    /// A new moto with `bucket` created, versioned.
    pub async fn start(bucket: &str) -> ConfigBucket {
        let moto = Moto::start();
        let sdk = moto.sdk_config().await;
        versioned_bucket(&sdk, bucket).await.unwrap();
        ConfigBucket { sdk, moto }
    }
}

/// The config bucket as a new instance finds it, for tests that run without async: the agent
/// published in it as the stack publishes it, and the runtime the test drives the SDK with.
#[derive(Debug)]
pub struct InstanceBucket {
    pub sdk: SdkConfig,
    pub rt: tokio::runtime::Runtime,
    pub moto: Moto,
}

impl InstanceBucket {
    /// A new moto with `bucket` created, versioned, and the workspace's agent published in it.
    pub fn start(bucket: &str) -> InstanceBucket {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let ConfigBucket { sdk, moto } = rt.block_on(async {
            let config = ConfigBucket::start(bucket).await;
            Published::publish(&config.sdk, bucket).await;
            config
        });
        InstanceBucket { sdk, rt, moto }
    }
}
