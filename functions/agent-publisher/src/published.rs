//! Where a binary is published and what CloudFormation is told about it: pure.
//!
//! The key is content-addressed, `autoproxy-agent/<sha256>/autoproxy-agent`: a key never holds
//! two different binaries, so publishing is idempotent, nothing is ever overwritten, and a stack
//! rolled back to an older layer finds that layer's binary still at its own key (Delete removes
//! nothing). The file name stays `autoproxy-agent` because the SSM agent's `aws:downloadContent`
//! saves an object under its key's last part.

use std::collections::HashMap;

use crate::elf::Machine;

/// The key prefix; the instances' policy reads `<bucket>/autoproxy-agent/*`.
pub const PREFIX: &str = "autoproxy-agent";
/// The file name, the key's last part.
pub const FILE_NAME: &str = "autoproxy-agent";

/// What an attribute of a stack's ARN must look like.
const STACK_ID_EXPECTED: &str =
    "arn:<partition>:cloudformation:<region>:<12-digit account>:stack/<name>/<id>";

/// The parts of the stack's id the publisher needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stack {
    pub partition: String,
    pub region: String,
    /// The bucket must belong to it (`ExpectedBucketOwner`).
    pub account: String,
}

/// A stack id or partition the publisher cannot work with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StackError {
    #[error("expected StackId {STACK_ID_EXPECTED}, got {got:?}")]
    Malformed { got: String },
    #[error("expected a stack in the aws, aws-cn or aws-us-gov partition, got {partition:?}")]
    UnknownPartition { partition: String },
}

impl Stack {
    /// Reads `arn:<partition>:cloudformation:<region>:<account>:stack/<name>/<id>`.
    pub fn from_id(stack_id: &str) -> Result<Stack, StackError> {
        let malformed = || StackError::Malformed {
            got: stack_id.to_owned(),
        };
        let parts: Vec<&str> = stack_id.splitn(6, ':').collect();
        let [arn, partition, service, region, account, resource] = parts.as_slice() else {
            return Err(malformed());
        };
        let account_ok = account.len() == 12 && account.bytes().all(|b| b.is_ascii_digit());
        let region_ok = !region.is_empty()
            && region
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
        if *arn != "arn"
            || *service != "cloudformation"
            || !account_ok
            || !region_ok
            || !resource.starts_with("stack/")
        {
            return Err(malformed());
        }
        Ok(Stack {
            partition: (*partition).to_owned(),
            region: (*region).to_owned(),
            account: (*account).to_owned(),
        })
    }

    /// S3's DNS suffix in this partition.
    fn dns_suffix(&self) -> Result<&'static str, StackError> {
        match self.partition.as_str() {
            "aws" | "aws-us-gov" => Ok("amazonaws.com"),
            "aws-cn" => Ok("amazonaws.com.cn"),
            other => Err(StackError::UnknownPartition {
                partition: other.to_owned(),
            }),
        }
    }
}

/// One binary as published: the custom resource's attributes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Published {
    pub sha256: String,
    pub key: String,
    pub architecture: Machine,
    /// The object's virtual-hosted URL in the stack's region, what `aws:downloadContent` takes
    /// as its S3 `path`.
    pub url: String,
}

impl Published {
    /// Where the binary hashing to `sha256` goes in `bucket` of `stack`.
    pub fn new(
        bucket: &str,
        stack: &Stack,
        sha256: &str,
        architecture: Machine,
    ) -> Result<Published, StackError> {
        let key = key(sha256);
        let url = format!(
            "https://{bucket}.s3.{region}.{suffix}/{key}",
            region = stack.region,
            suffix = stack.dns_suffix()?
        );
        Ok(Published {
            sha256: sha256.to_owned(),
            key,
            architecture,
            url,
        })
    }

    /// The `Data` of the answer: `!GetAtt AgentBinary.<name>`.
    pub fn attributes(&self) -> HashMap<String, String> {
        [
            ("Sha256", self.sha256.clone()),
            ("Key", self.key.clone()),
            ("Architecture", self.architecture.uname().to_owned()),
            ("Url", self.url.clone()),
        ]
        .into_iter()
        .map(|(name, value)| (name.to_owned(), value))
        .collect()
    }
}

/// The content-addressed key of the binary hashing to `sha256`.
pub fn key(sha256: &str) -> String {
    format!("{PREFIX}/{sha256}/{FILE_NAME}")
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHA: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    fn check(stack_id: &str, expected: Result<(&str, &str, &str), &str>) {
        let got = Stack::from_id(stack_id).map_err(|err| err.to_string());
        match (&got, &expected) {
            (Ok(stack), Ok((partition, region, account))) => assert_eq!(
                (
                    stack.partition.as_str(),
                    stack.region.as_str(),
                    stack.account.as_str()
                ),
                (*partition, *region, *account)
            ),
            (Err(got), Err(expected)) => assert!(got.contains(expected), "{got:?}"),
            _ => panic!("{stack_id}: {got:?} vs {expected:?}"),
        }
    }

    #[test]
    fn reads_the_stack_id_or_says_what_arrived() {
        let id = "arn:aws:cloudformation:us-east-1:123456789012:stack/autoproxy/0f1e2d3c-aaaa";
        check(id, Ok(("aws", "us-east-1", "123456789012")));
        check(
            "arn:aws-cn:cloudformation:cn-north-1:123456789012:stack/a/b",
            Ok(("aws-cn", "cn-north-1", "123456789012")),
        );
        check("", Err("got \"\""));
        check(
            "arn:aws:cloudformation:us-east-1:1234:stack/a/b",
            Err("expected StackId arn:<partition>"),
        );
        check(
            "arn:aws:s3:us-east-1:123456789012:stack/a/b",
            Err("expected StackId"),
        );
        check(
            "arn:aws:cloudformation:US-EAST-1:123456789012:stack/a/b",
            Err("expected StackId"),
        );
        check(
            "arn:aws:cloudformation:us-east-1:123456789012:changeSet/a/b",
            Err("expected StackId"),
        );
    }

    #[test]
    fn the_key_is_content_addressed_and_the_url_regional() {
        let stack = Stack::from_id("arn:aws:cloudformation:eu-west-1:123456789012:stack/a/b")
            .expect("a valid id");
        let published = Published::new(
            "autoproxy-123456789012-0f1e2d3c",
            &stack,
            SHA,
            Machine::Aarch64,
        )
        .expect("a known partition");
        assert_eq!(
            published.key,
            format!("autoproxy-agent/{SHA}/autoproxy-agent")
        );
        assert_eq!(
            published.url,
            format!(
                "https://autoproxy-123456789012-0f1e2d3c.s3.eu-west-1.amazonaws.com/autoproxy-agent/{SHA}/autoproxy-agent"
            )
        );
        let data = published.attributes();
        assert_eq!(data["Sha256"], SHA);
        assert_eq!(data["Architecture"], "aarch64");
        assert_eq!(data.len(), 4);

        let china = Stack::from_id("arn:aws-cn:cloudformation:cn-north-1:123456789012:stack/a/b")
            .expect("a valid id");
        let url = Published::new("b", &china, SHA, Machine::X86_64)
            .expect("a known partition")
            .url;
        assert!(
            url.starts_with("https://b.s3.cn-north-1.amazonaws.com.cn/"),
            "{url}"
        );

        let iso = Stack::from_id("arn:aws-iso:cloudformation:us-iso-east-1:123456789012:stack/a/b")
            .expect("a valid id");
        let err = Published::new("b", &iso, SHA, Machine::X86_64).expect_err("unknown partition");
        assert!(err.to_string().contains("got \"aws-iso\""), "{err}");
    }
}
