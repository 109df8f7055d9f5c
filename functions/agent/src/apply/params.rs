//! The apply document's parameters, as the SSM agent passes them.

use std::path::PathBuf;

/// The document's parameters, as the SSM agent passes them (`SSM_<Name>`).
#[derive(Debug, Clone)]
pub struct Params {
    pub bucket: String,
    pub key: String,
    /// Empty: the latest version.
    pub version: String,
    pub config: PathBuf,
    pub reload: Vec<String>,
    /// `arn:<partition>:ec2:<region>:<account>:instance/`: the fleet record's key is this
    /// instance's ARN, the one key its role may write.
    pub instance_arn_prefix: String,
}

impl Params {
    pub fn from_env() -> Result<Params, String> {
        let var = |name: &str| {
            std::env::var(format!("SSM_{name}")).map_err(|_| {
                format!(
                    "parameter {name} did not arrive as $SSM_{name} (interpolationType ENV_VAR needs SSM Agent 3.3.2746.0 or later); nothing changed"
                )
            })
        };
        let params = Params {
            bucket: var("ConfigBucket")?,
            key: var("ConfigKey")?,
            version: var("ConfigVersion")?,
            config: PathBuf::from(var("ConfigPath")?),
            reload: var("ReloadCommand")?
                .split(' ')
                .filter(|w| !w.is_empty())
                .map(str::to_owned)
                .collect(),
            instance_arn_prefix: var("InstanceArnPrefix")?,
        };
        if !autoproxy::fleet::is_instance_arn_prefix(&params.instance_arn_prefix) {
            return Err(format!(
                "parameter InstanceArnPrefix {:?} is not arn:<partition>:ec2:<region>:<account>:instance/; nothing changed",
                params.instance_arn_prefix
            ));
        }
        Ok(params)
    }
}
