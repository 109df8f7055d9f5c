//! Seeding a Route53 estate in moto with the Rust SDK: accounts (the own one and assumed roles),
//! private and public zones, their records, and the versioned config bucket.
//!
//! Built to be reused at scale (thousands of zones across many accounts): changes go in
//! batches of [`CHANGES_PER_BATCH`], zones are created and filled with bounded parallelism,
//! and an assumed role's credentials are fetched once and then used as static credentials.

use aws_config::SdkConfig;
use aws_sdk_route53::Client;
use aws_sdk_route53::config::{Credentials, SharedCredentialsProvider};
use aws_sdk_route53::error::{BuildError, DisplayErrorContext, SdkError};
use aws_sdk_route53::types::{
    AliasTarget, Change, ChangeAction, ChangeBatch, HostedZoneConfig, ResourceRecord,
    ResourceRecordSet, RrType, Vpc, VpcRegion,
};
use futures_util::{StreamExt, TryStreamExt, stream};

use crate::moto::OWN_ACCOUNT;

/// Changes per `ChangeResourceRecordSets` call: Route53 (and moto) refuse more than 1,000
/// records in one batch; 500 leaves room for both.
pub const CHANGES_PER_BATCH: usize = 500;
/// Zones created and filled at once by [`Account::seed`].
pub const DEFAULT_PARALLELISM: usize = 8;
/// The VPC private zones are associated with (moto accepts any id and region).
pub const VPC_ID: &str = "vpc-0a1b2c3d4e5f60718";
/// The name of the role the generator assumes in every member account.
pub const READER_ROLE: &str = "autoproxy-reader";
/// The hosted zone id of an ELB alias target (us-east-1 NLBs; moto does not check it).
const ELB_ZONE_ID: &str = "Z26RNL4JYFTOTI";
const TTL: i64 = 300;

/// A seeding call that failed: which call, on what, and what moto said.
#[derive(Debug, thiserror::Error)]
#[error("{operation} {target}: {message}")]
pub struct EstateError {
    pub operation: &'static str,
    pub target: String,
    pub message: String,
}

impl EstateError {
    pub(crate) fn sdk<E>(operation: &'static str, target: &str, err: SdkError<E>) -> Self
    where
        E: std::error::Error + 'static,
    {
        EstateError {
            operation,
            target: target.to_owned(),
            message: DisplayErrorContext(err).to_string(),
        }
    }

    fn build(operation: &'static str, target: &str, err: &BuildError) -> Self {
        EstateError {
            operation,
            target: target.to_owned(),
            message: err.to_string(),
        }
    }
}

/// The generator's settings from `vars` alone (name, value), as its environment would give
/// them; a test's settings that do not parse are a bug in the test.
pub fn generate_settings(vars: &[(&str, String)]) -> autoproxy::settings::GenerateSettings {
    autoproxy::settings::GenerateSettings::from_lookup(|name| {
        vars.iter()
            .find(|(var, _)| *var == name)
            .map(|(_, value)| value.clone())
    })
    .unwrap_or_else(|err| panic!("settings {vars:?}: {err}"))
}

/// `arn:aws:iam::<account>:role/autoproxy-reader`: the role the generator's settings name.
pub fn role_arn(account: &str) -> String {
    format!("arn:aws:iam::{account}:role/{READER_ROLE}")
}

/// What a record set holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordValue {
    /// A plain A record with one address.
    A(String),
    /// An alias A record to this DNS name (an ELB, say).
    Alias(String),
    /// A CNAME to this name.
    Cname(String),
    /// One set of a weighted CNAME: its target and its set identifier (weight 1).
    WeightedCname { target: String, set_id: String },
}

/// One record set to seed, its name spelled exactly as it is to be submitted (`*` or `\052`,
/// any case, with or without the trailing dot: moto stores what it is given).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub name: String,
    pub value: RecordValue,
}

impl Record {
    pub fn a(name: impl Into<String>, ip: impl Into<String>) -> Record {
        Record {
            name: name.into(),
            value: RecordValue::A(ip.into()),
        }
    }

    pub fn alias(name: impl Into<String>, dns_name: impl Into<String>) -> Record {
        Record {
            name: name.into(),
            value: RecordValue::Alias(dns_name.into()),
        }
    }

    pub fn cname(name: impl Into<String>, target: impl Into<String>) -> Record {
        Record {
            name: name.into(),
            value: RecordValue::Cname(target.into()),
        }
    }

    pub fn weighted_cname(
        name: impl Into<String>,
        target: impl Into<String>,
        set_id: impl Into<String>,
    ) -> Record {
        Record {
            name: name.into(),
            value: RecordValue::WeightedCname {
                target: target.into(),
                set_id: set_id.into(),
            },
        }
    }

    fn record_set(&self) -> Result<ResourceRecordSet, BuildError> {
        let builder = ResourceRecordSet::builder().name(&self.name);
        let builder = match &self.value {
            RecordValue::A(ip) => builder
                .r#type(RrType::A)
                .ttl(TTL)
                .resource_records(ResourceRecord::builder().value(ip).build()?),
            RecordValue::Cname(target) => builder
                .r#type(RrType::Cname)
                .ttl(TTL)
                .resource_records(ResourceRecord::builder().value(target).build()?),
            RecordValue::WeightedCname { target, set_id } => builder
                .r#type(RrType::Cname)
                .ttl(TTL)
                .set_identifier(set_id)
                .weight(1)
                .resource_records(ResourceRecord::builder().value(target).build()?),
            RecordValue::Alias(dns_name) => builder.r#type(RrType::A).alias_target(
                AliasTarget::builder()
                    .hosted_zone_id(ELB_ZONE_ID)
                    .dns_name(dns_name)
                    .evaluate_target_health(false)
                    .build()?,
            ),
        };
        builder.build()
    }
}

/// How the wildcard label of an ingress front record is spelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wildcard {
    /// `*`, as a caller submits it (and moto returns it).
    Literal,
    /// `\052`, as real Route53 returns it.
    Escaped,
}

/// The Kubernetes API pair of `zone`: `api` (an A record) and `proxy.api` (a CNAME to `proxy`).
pub fn api_pair(zone: &str, proxy: &str) -> Vec<Record> {
    vec![
        Record::a(format!("api.{zone}"), "10.20.0.10"),
        Record::cname(format!("proxy.api.{zone}"), proxy),
    ]
}

/// The internal-ingress pair of `zone`: `*.int` (a CNAME to `proxy`) and `ingress-int` (a
/// CNAME to an internal ELB).
pub fn ingress_pair(zone: &str, proxy: &str, wildcard: Wildcard) -> Vec<Record> {
    let star = match wildcard {
        Wildcard::Literal => "*",
        Wildcard::Escaped => "\\052",
    };
    vec![
        Record::cname(format!("{star}.int.{zone}"), proxy),
        Record::cname(
            format!("ingress-int.{zone}"),
            "internal-k8s-ingress-0123456789.us-east-1.elb.amazonaws.com",
        ),
    ]
}

/// `count` A records named `a00000.<zone>` upwards: they sort before every rule record
/// (Route53 and moto order by reversed labels), so a zone's rule records land on a later page.
pub fn filler(zone: &str, count: usize) -> Vec<Record> {
    (0..count)
        .map(|i| {
            let ip = format!("10.{}.{}.{}", (i >> 16) & 0xff, (i >> 8) & 0xff, i & 0xff);
            Record::a(format!("a{i:05}.{zone}"), ip)
        })
        .collect()
}

/// A zone to seed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZoneSpec {
    pub name: String,
    pub private: bool,
    pub records: Vec<Record>,
}

impl ZoneSpec {
    pub fn private(name: impl Into<String>, records: Vec<Record>) -> ZoneSpec {
        ZoneSpec {
            name: name.into(),
            private: true,
            records,
        }
    }

    pub fn public(name: impl Into<String>, records: Vec<Record>) -> ZoneSpec {
        ZoneSpec {
            name: name.into(),
            private: false,
            records,
        }
    }
}

/// A zone that exists: its bare id and the name it was created with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seeded {
    pub id: String,
    pub name: String,
    /// Record sets seeded (moto adds an NS and an SOA record to every zone besides).
    pub records: usize,
}

impl Seeded {
    /// Record sets a listing of this zone returns: the seeded ones plus NS and SOA.
    pub fn listed_records(&self) -> usize {
        self.records + 2
    }
}

/// One account's Route53, as a seeder.
#[derive(Debug, Clone)]
pub struct Account {
    pub id: String,
    /// The account's SDK configuration (its credentials), e.g. to build other clients.
    pub sdk: SdkConfig,
    route53: Client,
}

impl Account {
    /// The account moto answers as with the test credentials.
    pub fn own(sdk: &SdkConfig) -> Account {
        Account {
            id: OWN_ACCOUNT.to_owned(),
            sdk: sdk.clone(),
            route53: Client::new(sdk),
        }
    }

    /// Another account, through STS `AssumeRole` into its [`role_arn`] (moto needs no IAM set
    /// up and keeps each account's zones apart). The credentials are fetched once.
    pub async fn assume(sdk: &SdkConfig, account: &str) -> Result<Account, EstateError> {
        let arn = role_arn(account);
        let out = aws_sdk_sts::Client::new(sdk)
            .assume_role()
            .role_arn(&arn)
            .role_session_name("autoproxy-tests")
            .send()
            .await
            .map_err(|err| EstateError::sdk("AssumeRole", &arn, err))?;
        let Some(creds) = out.credentials() else {
            return Err(EstateError {
                operation: "AssumeRole",
                target: arn,
                message: "no credentials in the response".to_owned(),
            });
        };
        let credentials = Credentials::new(
            creds.access_key_id(),
            creds.secret_access_key(),
            Some(creds.session_token().to_owned()),
            None,
            "autoproxy-tests-assumed-role",
        );
        let sdk = sdk
            .to_builder()
            .credentials_provider(SharedCredentialsProvider::new(credentials))
            .build();
        Ok(Account {
            id: account.to_owned(),
            route53: Client::new(&sdk),
            sdk,
        })
    }

    pub fn route53(&self) -> &Client {
        &self.route53
    }

    /// Creates a zone and returns its bare id. A private zone is associated with [`VPC_ID`].
    pub async fn create_zone(&self, name: &str, private: bool) -> Result<String, EstateError> {
        let mut request = self
            .route53
            .create_hosted_zone()
            .name(name)
            .caller_reference(format!("autoproxy-tests-{}-{name}", self.id));
        if private {
            request = request
                .vpc(
                    Vpc::builder()
                        .vpc_id(VPC_ID)
                        .vpc_region(VpcRegion::UsEast1)
                        .build(),
                )
                // moto marks a zone private only through the config flag.
                .hosted_zone_config(HostedZoneConfig::builder().private_zone(true).build());
        }
        let out = request
            .send()
            .await
            .map_err(|err| EstateError::sdk("CreateHostedZone", name, err))?;
        let id = out
            .hosted_zone()
            .map(|zone| autoproxy::route53::bare_zone_id(zone.id()).to_owned())
            .ok_or_else(|| EstateError {
                operation: "CreateHostedZone",
                target: name.to_owned(),
                message: "no hosted zone in the response".to_owned(),
            })?;
        Ok(id)
    }

    /// Creates or replaces record sets, [`CHANGES_PER_BATCH`] per call.
    pub async fn upsert(&self, zone_id: &str, records: &[Record]) -> Result<(), EstateError> {
        let sets = records
            .iter()
            .map(Record::record_set)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|err| EstateError::build("ChangeResourceRecordSets", zone_id, &err))?;
        self.change(zone_id, ChangeAction::Upsert, sets).await
    }

    /// Deletes record sets (as seeded: same name, type and value).
    pub async fn delete_records(
        &self,
        zone_id: &str,
        records: &[Record],
    ) -> Result<(), EstateError> {
        let sets = records
            .iter()
            .map(Record::record_set)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|err| EstateError::build("ChangeResourceRecordSets", zone_id, &err))?;
        self.change(zone_id, ChangeAction::Delete, sets).await
    }

    async fn change(
        &self,
        zone_id: &str,
        action: ChangeAction,
        sets: Vec<ResourceRecordSet>,
    ) -> Result<(), EstateError> {
        let mut sets = sets.into_iter().peekable();
        while sets.peek().is_some() {
            let changes = sets
                .by_ref()
                .take(CHANGES_PER_BATCH)
                .map(|set| {
                    Change::builder()
                        .action(action.clone())
                        .resource_record_set(set)
                        .build()
                })
                .collect::<Result<Vec<_>, _>>()
                .map_err(|err| EstateError::build("ChangeResourceRecordSets", zone_id, &err))?;
            let batch = ChangeBatch::builder()
                .set_changes(Some(changes))
                .build()
                .map_err(|err| EstateError::build("ChangeResourceRecordSets", zone_id, &err))?;
            self.route53
                .change_resource_record_sets()
                .hosted_zone_id(zone_id)
                .change_batch(batch)
                .send()
                .await
                .map_err(|err| EstateError::sdk("ChangeResourceRecordSets", zone_id, err))?;
        }
        Ok(())
    }

    /// Every record set of a zone except its NS and SOA, as Route53 returns them.
    pub async fn record_sets(&self, zone_id: &str) -> Result<Vec<ResourceRecordSet>, EstateError> {
        let mut sets = Vec::new();
        let mut next: (Option<String>, Option<RrType>) = (None, None);
        loop {
            let page = self
                .route53
                .list_resource_record_sets()
                .hosted_zone_id(zone_id)
                .set_start_record_name(next.0.take())
                .set_start_record_type(next.1.take())
                .send()
                .await
                .map_err(|err| EstateError::sdk("ListResourceRecordSets", zone_id, err))?;
            sets.extend(
                page.resource_record_sets()
                    .iter()
                    .filter(|set| !matches!(set.r#type(), RrType::Ns | RrType::Soa))
                    .cloned(),
            );
            if !page.is_truncated() {
                return Ok(sets);
            }
            next = (
                page.next_record_name().map(str::to_owned),
                page.next_record_type().cloned(),
            );
        }
    }

    /// Deletes every record set of a zone (but NS and SOA), then the zone.
    pub async fn delete_zone(&self, zone_id: &str) -> Result<(), EstateError> {
        let sets = self.record_sets(zone_id).await?;
        self.change(zone_id, ChangeAction::Delete, sets).await?;
        self.route53
            .delete_hosted_zone()
            .id(zone_id)
            .send()
            .await
            .map_err(|err| EstateError::sdk("DeleteHostedZone", zone_id, err))?;
        Ok(())
    }

    /// Creates the zones and their records, `parallelism` zones at once; the result is in
    /// the order of `zones`.
    pub async fn seed(
        &self,
        zones: Vec<ZoneSpec>,
        parallelism: usize,
    ) -> Result<Vec<Seeded>, EstateError> {
        stream::iter(zones)
            .map(|spec| async move {
                let id = self.create_zone(&spec.name, spec.private).await?;
                self.upsert(&id, &spec.records).await?;
                Ok::<_, EstateError>(Seeded {
                    id,
                    name: spec.name,
                    records: spec.records.len(),
                })
            })
            .buffered(parallelism.max(1))
            .try_collect()
            .await
    }

    /// Seeds one zone.
    pub async fn seed_zone(&self, spec: ZoneSpec) -> Result<Seeded, EstateError> {
        let mut seeded = self.seed(vec![spec], 1).await?;
        seeded.pop().ok_or_else(|| EstateError {
            operation: "seed",
            target: self.id.clone(),
            message: "no zone seeded".to_owned(),
        })
    }
}

/// The text of `key` in `bucket` (a test's read-back: panics when it is not there).
pub async fn object_text(s3: &aws_sdk_s3::Client, bucket: &str, key: &str) -> String {
    let out = s3
        .get_object()
        .bucket(bucket)
        .key(key)
        .send()
        .await
        .unwrap_or_else(|err| panic!("GetObject {bucket}/{key}: {err:?}"));
    let bytes = out
        .body
        .collect()
        .await
        .expect("the object's body")
        .into_bytes();
    String::from_utf8(bytes.to_vec()).expect("UTF-8 text")
}

/// Creates a bucket with versioning enabled (the config bucket's shape).
pub async fn versioned_bucket(sdk: &SdkConfig, bucket: &str) -> Result<(), EstateError> {
    use aws_sdk_s3::types::{BucketVersioningStatus, VersioningConfiguration};
    let s3 = aws_sdk_s3::Client::new(sdk);
    s3.create_bucket()
        .bucket(bucket)
        .send()
        .await
        .map_err(|err| EstateError::sdk("CreateBucket", bucket, err))?;
    s3.put_bucket_versioning()
        .bucket(bucket)
        .versioning_configuration(
            VersioningConfiguration::builder()
                .status(BucketVersioningStatus::Enabled)
                .build(),
        )
        .send()
        .await
        .map_err(|err| EstateError::sdk("PutBucketVersioning", bucket, err))?;
    Ok(())
}

/// Stores `body` at `key` as an operator would (a custom template, say): no metadata.
pub async fn put_object(
    sdk: &SdkConfig,
    bucket: &str,
    key: &str,
    body: &str,
) -> Result<(), EstateError> {
    aws_sdk_s3::Client::new(sdk)
        .put_object()
        .bucket(bucket)
        .key(key)
        .body(body.as_bytes().to_vec().into())
        .send()
        .await
        .map_err(|err| EstateError::sdk("PutObject", key, err))?;
    Ok(())
}

/// Uploads a rendered config as the generator does (its header values as object metadata);
/// the new version's id.
pub async fn upload_config(
    sdk: &SdkConfig,
    bucket: &str,
    key: &str,
    text: &str,
) -> Result<String, EstateError> {
    use autoproxy::artifact;
    let header = &text[..artifact::body_offset(text)];
    let mut put = aws_sdk_s3::Client::new(sdk)
        .put_object()
        .bucket(bucket)
        .key(key)
        .body(text.as_bytes().to_vec().into());
    for (name, value) in header
        .lines()
        .filter_map(|line| line.strip_prefix("# ")?.split_once(": "))
    {
        if [
            artifact::META_GENERATION,
            artifact::META_SHA256,
            artifact::META_GENERATED_AT,
            artifact::META_TRIGGER,
            artifact::META_RULES,
        ]
        .contains(&name)
        {
            put = put.metadata(name, value.trim());
        }
    }
    let output = put
        .send()
        .await
        .map_err(|err| EstateError::sdk("PutObject", key, err))?;
    output.version_id().map(str::to_owned).ok_or(EstateError {
        operation: "PutObject",
        target: key.to_owned(),
        message: format!("bucket {bucket} is not versioned: no version id"),
    })
}
