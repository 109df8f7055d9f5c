//! autoproxy-generate end to end against a real moto server: three accounts (the own one and
//! two assumed roles), Route53 pagination, every spelling Route53 and its callers use, the
//! events, the safety rules, and the S3 artifact contract. Every config a run produces passes
//! the real `haproxy -c -dW`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use autoproxy::artifact::{
    self, Header, META_GENERATED_AT, META_GENERATION, META_RULES, META_SHA256, META_TRIGGER,
};
use autoproxy::route53::AccountRoute53;
use autoproxy::settings::GenerateSettings;
use autoproxy_generate::handler::{Deps, GenerateError, Summary};
use autoproxy_tests::check::assert_valid;
use autoproxy_tests::estate::{
    Account, DEFAULT_PARALLELISM, Record, Seeded, Wildcard, ZoneSpec, api_pair, filler,
    ingress_pair, role_arn, versioned_bucket,
};
use autoproxy_tests::generator::run_at;
use autoproxy_tests::moto::{Moto, OWN_ACCOUNT, free_port};
use autoproxy_tests::root;
use aws_config::SdkConfig;
use aws_config::sts::AssumeRoleProvider;
use aws_sdk_route53::types::{HostedZoneConfig, Vpc, VpcRegion};
use aws_sdk_s3::operation::list_object_versions::ListObjectVersionsOutput;
use serde_json::{Value, json};

mod backlog;
mod borders;
mod costs;
mod ec2;
mod explain;
mod generations;
mod queue;
mod rules;
mod safety;
mod shares;
mod spelling;
mod warnings;

const BUCKET: &str = "autoproxy-config";
const KEY: &str = "haproxy/haproxy.cfg";
const MANIFEST_KEY: &str = "haproxy/haproxy.manifest.json";
pub(super) const PROXY: &str = "peering-proxy.tools.example.com";
pub(super) const MEMBER_A: &str = "111111111111";
pub(super) const MEMBER_B: &str = "222222222222";
pub(super) const AT: &str = "2026-11-23T03:14:02Z";
pub(super) const LATER: &str = "2026-11-23T03:20:00Z";
/// [`AT`] and [`LATER`] in Unix seconds: a generation is the publish time in Unix seconds, or
/// one more than the last generation when that is larger.
const AT_SECS: u64 = 1_795_403_642;
const LATER_SECS: u64 = 1_795_404_000;

/// One moto with the config bucket and the three accounts.
pub(super) struct Estate {
    pub(super) sdk: SdkConfig,
    s3: aws_sdk_s3::Client,
    pub(super) own: Account,
    pub(super) a: Account,
    pub(super) b: Account,
    // Last: stopped after the clients are gone.
    _moto: Moto,
}

impl Estate {
    pub(super) async fn start() -> Estate {
        let moto = Moto::start();
        let sdk = moto.sdk_config().await;
        versioned_bucket(&sdk, BUCKET).await.unwrap();
        Estate {
            s3: aws_sdk_s3::Client::new(&sdk),
            own: Account::own(&sdk),
            a: Account::assume(&sdk, MEMBER_A).await.unwrap(),
            b: Account::assume(&sdk, MEMBER_B).await.unwrap(),
            sdk,
            _moto: moto,
        }
    }

    /// The generator as `main` builds it, with these settings on top of the defaults.
    /// A fresh estate whose own account holds one zone with the API pair.
    pub(super) async fn with_api_zone(zone: &str) -> (Estate, Seeded) {
        let estate = Estate::start().await;
        let seeded = estate
            .own
            .seed_zone(ZoneSpec::private(zone, api_pair(zone, PROXY)))
            .await
            .unwrap();
        (estate, seeded)
    }

    /// A private zone `name` in the own account on `vpc` (us-east-1) holding the API pair: its
    /// bare id. `ZoneSpec` seeds zones on the default VPC; these tests need others.
    pub(super) async fn own_api_zone_on_vpc(&self, name: &str, vpc: &str) -> String {
        let zone = self
            .own
            .route53()
            .create_hosted_zone()
            .name(name)
            .caller_reference(format!("{name}-{vpc}"))
            .vpc(
                Vpc::builder()
                    .vpc_id(vpc)
                    .vpc_region(VpcRegion::UsEast1)
                    .build(),
            )
            .hosted_zone_config(HostedZoneConfig::builder().private_zone(true).build())
            .send()
            .await
            .unwrap();
        let id = autoproxy::route53::bare_zone_id(zone.hosted_zone().unwrap().id()).to_owned();
        self.own.upsert(&id, &api_pair(name, PROXY)).await.unwrap();
        id
    }

    pub(super) async fn deps(&self, extra: &[(&str, &str)]) -> Deps {
        Deps::new(settings(extra), &self.sdk, OWN_ACCOUNT)
            .await
            .unwrap()
    }

    /// The generator, with `broken`'s role assumed through an STS endpoint nobody listens on:
    /// that account's credentials, and so every Route53 call in it, fail.
    async fn deps_with_failing_account(&self, extra: &[(&str, &str)], broken: &str) -> Deps {
        let mut deps = self.deps(extra).await;
        let dead_sts = self
            .sdk
            .to_builder()
            .endpoint_url(format!("http://127.0.0.1:{}", free_port()))
            .build();
        let provider = AssumeRoleProvider::builder(role_arn(broken))
            .session_name("autoproxy-generate")
            .configure(&dead_sts)
            .build()
            .await;
        let config = aws_sdk_route53::config::Builder::from(&self.sdk)
            .credentials_provider(provider)
            .build();
        let slot = deps
            .accounts
            .iter()
            .position(|a| a.account == broken)
            .unwrap();
        deps.accounts[slot] =
            AccountRoute53::new(broken, &config, deps.settings.route53_requests_per_second);
        deps
    }

    /// The published config, checked against the artifact contract and `haproxy -c`.
    pub(super) async fn artifact(&self) -> Artifact {
        self.artifact_at(KEY).await
    }

    async fn artifact_at(&self, key: &str) -> Artifact {
        let out = self
            .s3
            .get_object()
            .bucket(BUCKET)
            .key(key)
            .send()
            .await
            .unwrap();
        let metadata = out.metadata().cloned().unwrap_or_default();
        let version_id = out.version_id().unwrap().to_owned();
        let bytes = out.body.collect().await.unwrap().into_bytes();
        let text = String::from_utf8(bytes.to_vec()).unwrap();
        // The header's sha256 is checked against the body here.
        let header = artifact::parse_header(&text).unwrap();
        assert!(
            text.starts_with("# autoproxy: generated haproxy.cfg"),
            "{text}"
        );
        let meta = |key: &str| metadata.get(key).cloned().unwrap_or_default();
        assert_eq!(meta(META_GENERATION), header.generation.to_string());
        assert_eq!(meta(META_SHA256), header.sha256);
        assert_eq!(meta(META_GENERATED_AT), header.generated_at);
        assert_eq!(meta(META_TRIGGER), header.trigger);
        assert_eq!(meta(META_RULES), header.rules.to_string());
        assert_valid(&text);
        Artifact {
            text,
            header,
            version_id,
        }
    }

    /// The versions and delete markers of the keys that start with `key`.
    async fn version_list(&self, key: &str) -> ListObjectVersionsOutput {
        self.s3
            .list_object_versions()
            .bucket(BUCKET)
            .prefix(key)
            .send()
            .await
            .unwrap()
    }

    /// How many versions of `key` the bucket holds.
    async fn versions(&self, key: &str) -> usize {
        self.version_list(key)
            .await
            .versions()
            .iter()
            .filter(|v| v.key() == Some(key))
            .count()
    }

    /// Every key in the bucket.
    async fn keys(&self) -> Vec<String> {
        let out = self
            .s3
            .list_objects_v2()
            .bucket(BUCKET)
            .send()
            .await
            .unwrap();
        out.contents()
            .iter()
            .filter_map(|o| o.key().map(str::to_owned))
            .collect()
    }

    /// Deletes every version and delete marker of `key`, as emptying the bucket would.
    async fn delete_every_version(&self, key: &str) {
        let out = self.version_list(key).await;
        let versions = out
            .versions()
            .iter()
            .map(|v| (v.key(), v.version_id()))
            .chain(
                out.delete_markers()
                    .iter()
                    .map(|m| (m.key(), m.version_id())),
            );
        for (found, version_id) in versions {
            if found != Some(key) {
                continue;
            }
            self.s3
                .delete_object()
                .bucket(BUCKET)
                .key(key)
                .set_version_id(version_id.map(str::to_owned))
                .send()
                .await
                .unwrap();
        }
        assert_eq!(self.versions(key).await, 0);
    }

    /// Copies an old version of `key` over it (metadata included), as a hand-made rollback
    /// would.
    async fn copy_version_over(&self, key: &str, version_id: &str) {
        self.s3
            .copy_object()
            .bucket(BUCKET)
            .key(key)
            .copy_source(format!("{BUCKET}/{key}?versionId={version_id}"))
            .send()
            .await
            .unwrap();
    }

    /// The generation the manifest records.
    async fn manifest_generation(&self) -> u64 {
        let out = self
            .s3
            .get_object()
            .bucket(BUCKET)
            .key(MANIFEST_KEY)
            .send()
            .await
            .unwrap();
        let bytes = out.body.collect().await.unwrap().into_bytes();
        let manifest: Value = serde_json::from_slice(&bytes).unwrap();
        manifest["generation"].as_u64().unwrap()
    }

    async fn put_object(&self, key: &str, body: &str) {
        autoproxy_tests::estate::put_object(&self.sdk, BUCKET, key, body)
            .await
            .unwrap();
    }
}

/// The config in S3 as read back.
pub(super) struct Artifact {
    pub(super) text: String,
    header: Header,
    version_id: String,
}

/// Settings as the deployment sets them; Route53 pacing raised so tests do not wait on it.
fn settings(extra: &[(&str, &str)]) -> GenerateSettings {
    let roles = format!("{},{}", role_arn(MEMBER_A), role_arn(MEMBER_B));
    let mut vars: BTreeMap<&str, String> = BTreeMap::from([
        ("CONFIG_BUCKET", BUCKET.to_owned()),
        ("PEERING_PROXY_HOSTNAME", PROXY.to_owned()),
        ("ACCOUNT_ROLE_ARNS", roles),
        ("ROUTE53_REQUESTS_PER_SECOND", "1000".to_owned()),
        // The members' VPCs in moto's one region: by default every region enabled in a member
        // is read, which moto answers with all of its 38, seconds a member on every sweep.
        // `generate::borders` reads them all.
        ("MEMBER_REGIONS", autoproxy_tests::moto::REGION.to_owned()),
    ]);
    for (name, value) in extra {
        vars.insert(name, (*value).to_owned());
    }
    GenerateSettings::from_lookup(|name| vars.get(name).cloned()).unwrap()
}

/// One invocation that must succeed; a dry run's config must pass `haproxy -c`.
pub(super) async fn run(deps: &Deps, payload: &Value, at: &str) -> Summary {
    let summary = run_at(deps, payload, at, None)
        .await
        .unwrap_or_else(|err| panic!("{payload}: {err}"));
    if let Some(config) = &summary.config {
        assert_valid(config);
    }
    summary
}

/// Route53 calls of every account so far.
fn calls(deps: &Deps) -> u64 {
    deps.accounts.iter().map(AccountRoute53::calls).sum()
}

fn calls_in(deps: &Deps, account: &str) -> u64 {
    deps.accounts
        .iter()
        .find(|a| a.account == account)
        .map_or(0, AccountRoute53::calls)
}

/// A sample event from `events/`, pointed at a zone of an account.
fn event(file: &str, account: &str, zone_id: &str) -> Value {
    let path = root().join("events").join(file);
    let mut event: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    event["account"] = json!(account);
    let detail = &mut event["detail"];
    detail["recipientAccountId"] = json!(account);
    for field in ["hostedZoneId", "id"] {
        if detail["requestParameters"].get(field).is_some() {
            detail["requestParameters"][field] = json!(zone_id);
        }
    }
    if detail["responseElements"].get("hostedZone").is_some() {
        detail["responseElements"]["hostedZone"]["id"] = json!(format!("/hostedzone/{zone_id}"));
    }
    event
}

/// The route keys of a config, in order: `proxy.api.x` (exact) or `*.int.x` (suffix).
pub(super) fn snis(config: &str) -> Vec<String> {
    config
        .lines()
        .filter_map(|line| {
            let (kind, rest) = line.split_once(' ')?;
            let key = rest.split_whitespace().next()?;
            match kind {
                "#@route" => Some(key.to_owned()),
                "#@suffix" => Some(format!("*.{key}")),
                _ => None,
            }
        })
        .collect()
}

pub(super) fn api_sni(zone: &str) -> String {
    format!("proxy.api.{zone}")
}

fn ingress_sni(zone: &str) -> String {
    format!("*.int.{zone}")
}

/// Pages a listing of `items` takes at `per_page` (an empty listing is one page too).
fn pages(items: usize, per_page: usize) -> u64 {
    items.div_ceil(per_page).max(1) as u64
}

/// The fewest Route53 calls a full sweep of an account can make: its zone pages plus the
/// record pages of each private zone.
fn minimum_calls(all_zones: usize, private: &[Seeded]) -> u64 {
    pages(all_zones, 100)
        + private
            .iter()
            .map(|zone| pages(zone.listed_records(), 300))
            .sum::<u64>()
}

pub(super) fn assert_warning(summary: &Summary, fragments: &[&str]) {
    assert!(
        summary
            .warnings
            .iter()
            .any(|w| fragments.iter().all(|f| w.contains(f))),
        "no warning mentions all of {fragments:?}: {:#?}",
        summary.warnings
    );
}
