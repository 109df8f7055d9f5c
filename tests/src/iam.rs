//! A moto server that enforces IAM, and one principal in it whose only policy a test sets.
//!
//! moto checks nothing for its first `INITIAL_NO_AUTH_ACTION_COUNT` calls: they create an
//! administrator user and its key, which then seeds the stand-in. Every later call is checked
//! against the caller's identity policies (actions and resources; moto evaluates no
//! conditions and no bucket policies). IAM itself is driven with the AWS CLI.

use std::process::Command;

use aws_config::{BehaviorVersion, SdkConfig, retry::RetryConfig};
use aws_sdk_s3::config::{Credentials, Region};
use serde_json::{Value, json};

use crate::moto::{Moto, REGION};

/// Calls moto lets through unchecked: the harness's warm-up, then create the admin user, its
/// policy, its key.
const UNCHECKED_CALLS: usize = crate::moto::WARM_UP_CALLS + 3;
const ADMIN: &str = "autoproxy-test-admin";
const PRINCIPAL: &str = "autoproxy-test-function";

/// An IAM call that failed.
#[derive(Debug, thiserror::Error)]
#[error("aws {args}: {message}")]
pub struct IamError {
    pub args: String,
    pub message: String,
}

/// Access keys of an IAM user.
#[derive(Debug, Clone)]
pub struct Keys {
    pub id: String,
    pub secret: String,
}

/// The enforcing server, its administrator, and the principal under test.
#[derive(Debug)]
pub struct Enforcing {
    pub moto: Moto,
    pub admin: Keys,
    pub principal: Keys,
}

impl Enforcing {
    /// Starts the server, creates the administrator (allowed everything) and the principal
    /// (allowed nothing until [`Enforcing::allow_only`]).
    pub fn start() -> Result<Enforcing, IamError> {
        let moto =
            Moto::start_with(&[("INITIAL_NO_AUTH_ACTION_COUNT", &UNCHECKED_CALLS.to_string())]);
        let anyone = Keys {
            id: "testing".to_owned(),
            secret: "testing".to_owned(),
        };
        aws(
            &moto,
            &anyone,
            &["iam", "create-user", "--user-name", ADMIN],
        )?;
        let everything = json!({"Version": "2012-10-17", "Statement": [
            {"Effect": "Allow", "Action": "*", "Resource": "*"}]});
        put_user_policy(&moto, &anyone, ADMIN, &everything)?;
        let admin = create_keys(&moto, &anyone, ADMIN)?;
        aws(
            &moto,
            &admin,
            &["iam", "create-user", "--user-name", PRINCIPAL],
        )?;
        let principal = create_keys(&moto, &admin, PRINCIPAL)?;
        Ok(Enforcing {
            moto,
            admin,
            principal,
        })
    }

    /// Makes `statements` the principal's only policy (replacing the previous one).
    pub fn allow_only(&self, statements: &[Value]) -> Result<(), IamError> {
        let policy = json!({"Version": "2012-10-17", "Statement": statements});
        put_user_policy(&self.moto, &self.admin, PRINCIPAL, &policy)
    }

    /// SDK configuration acting as `keys` against this server, without retries.
    pub async fn sdk_config(&self, keys: &Keys) -> SdkConfig {
        aws_config::defaults(BehaviorVersion::latest())
            .endpoint_url(self.moto.endpoint())
            .region(Region::new(REGION))
            .credentials_provider(Credentials::new(&keys.id, &keys.secret, None, None, "iam"))
            .retry_config(RetryConfig::disabled())
            .load()
            .await
    }

    /// Runs the AWS CLI as the administrator (seeding what the SDKs here do not cover).
    pub fn admin_cli(&self, args: &[&str]) -> Result<String, IamError> {
        aws(&self.moto, &self.admin, args)
    }
}

fn put_user_policy(moto: &Moto, keys: &Keys, user: &str, policy: &Value) -> Result<(), IamError> {
    let document = policy.to_string();
    aws(
        moto,
        keys,
        &[
            "iam",
            "put-user-policy",
            "--user-name",
            user,
            "--policy-name",
            "only",
            "--policy-document",
            &document,
        ],
    )
    .map(drop)
}

fn create_keys(moto: &Moto, keys: &Keys, user: &str) -> Result<Keys, IamError> {
    let out = aws(
        moto,
        keys,
        &["iam", "create-access-key", "--user-name", user],
    )?;
    let parsed: Value = serde_json::from_str(&out).map_err(|err| IamError {
        args: format!("iam create-access-key --user-name {user}"),
        message: format!("not JSON ({err}): {out}"),
    })?;
    let field = |name: &str| parsed["AccessKey"][name].as_str().map(str::to_owned);
    match (field("AccessKeyId"), field("SecretAccessKey")) {
        (Some(id), Some(secret)) => Ok(Keys { id, secret }),
        _ => Err(IamError {
            args: format!("iam create-access-key --user-name {user}"),
            message: format!("no key in {out}"),
        }),
    }
}

fn aws(moto: &Moto, keys: &Keys, args: &[&str]) -> Result<String, IamError> {
    let out = Command::new(crate::tool("aws"))
        .envs(moto.env())
        .env("AWS_ACCESS_KEY_ID", &keys.id)
        .env("AWS_SECRET_ACCESS_KEY", &keys.secret)
        .args(["--output", "json"])
        .args(args)
        .output()
        .map_err(|err| IamError {
            args: args.join(" "),
            message: format!("cannot run the AWS CLI ({err}); run .ci/tools.sh"),
        })?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(IamError {
            args: args.join(" "),
            message: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        })
    }
}
