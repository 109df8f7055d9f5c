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
use autoproxy_generate::handler::{Deps, GenerateError, Summary, handle};
use autoproxy_tests::check::assert_valid;
use autoproxy_tests::estate::{
    Account, DEFAULT_PARALLELISM, Record, Seeded, Wildcard, ZoneSpec, api_pair, filler,
    ingress_pair, role_arn, versioned_bucket,
};
use autoproxy_tests::moto::{Moto, OWN_ACCOUNT, free_port};
use autoproxy_tests::root;
use aws_config::SdkConfig;
use aws_config::sts::AssumeRoleProvider;
use serde_json::{Value, json};

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

    /// How many versions of `key` the bucket holds.
    async fn versions(&self, key: &str) -> usize {
        let out = self
            .s3
            .list_object_versions()
            .bucket(BUCKET)
            .prefix(key)
            .send()
            .await
            .unwrap();
        out.versions()
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
        let out = self
            .s3
            .list_object_versions()
            .bucket(BUCKET)
            .prefix(key)
            .send()
            .await
            .unwrap();
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
        self.s3
            .put_object()
            .bucket(BUCKET)
            .key(key)
            .body(body.as_bytes().to_vec().into())
            .send()
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
    ]);
    for (name, value) in extra {
        vars.insert(name, (*value).to_owned());
    }
    GenerateSettings::from_lookup(|name| vars.get(name).cloned()).unwrap()
}

/// One invocation that must succeed; a dry run's config must pass `haproxy -c`.
pub(super) async fn run(deps: &Deps, payload: &Value, at: &str) -> Summary {
    let summary = handle(deps, payload, at)
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

#[tokio::test]
async fn full_run_and_event_costs() {
    let estate = Estate::start().await;
    // The own account: 103 small private zones (ListHostedZones pages at 100), the first five
    // with an API pair; one zone of 656 record sets whose rule records sort onto the third
    // page; one public zone whose rule records must not count.
    let mut specs: Vec<ZoneSpec> = (0..103)
        .map(|i| {
            let name = format!("z{i:03}.own.example.internal");
            let records = if i < 5 {
                api_pair(&name, PROXY)
            } else {
                vec![]
            };
            ZoneSpec::private(name, records)
        })
        .collect();
    let big = "big.own.example.internal";
    let mut big_records = filler(big, 650);
    big_records.extend(api_pair(big, PROXY));
    big_records.extend(ingress_pair(big, PROXY, Wildcard::Escaped));
    specs.push(ZoneSpec::private(big, big_records));
    let public = ZoneSpec::public(
        "public.own.example.com",
        api_pair("public.own.example.com", PROXY),
    );
    let own_private = estate.own.seed(specs, DEFAULT_PARALLELISM).await.unwrap();
    estate.own.seed_zone(public).await.unwrap();
    let big_zone = own_private.last().unwrap().clone();
    assert_eq!(big_zone.listed_records(), 656);

    // Two member accounts; the same private zone name in both.
    let shared = "shared.example.internal";
    let a_private = estate
        .a
        .seed(
            vec![
                ZoneSpec::private(shared, api_pair(shared, PROXY)),
                ZoneSpec::private(
                    "a.example.internal",
                    ingress_pair("a.example.internal", PROXY, Wildcard::Literal),
                ),
            ],
            DEFAULT_PARALLELISM,
        )
        .await
        .unwrap();
    let b_private = estate
        .b
        .seed(
            vec![
                ZoneSpec::private(shared, api_pair(shared, PROXY)),
                ZoneSpec::private(
                    "b.example.internal",
                    ingress_pair(
                        "b.example.internal",
                        "PEERING-PROXY.Tools.Example.COM.",
                        Wildcard::Escaped,
                    ),
                ),
            ],
            DEFAULT_PARALLELISM,
        )
        .await
        .unwrap();

    let deps = estate.deps(&[]).await;
    let started = Instant::now();
    let full = run(&deps, &json!({}), AT).await;
    let full_ms = started.elapsed().as_millis();
    let full_calls = calls(&deps);

    // Cost: exactly the pages, nothing more.
    let own_min = minimum_calls(own_private.len() + 1, &own_private);
    assert_eq!(own_min, 2 + 103 + 3);
    assert_eq!(calls_in(&deps, OWN_ACCOUNT), own_min);
    assert_eq!(calls_in(&deps, MEMBER_A), minimum_calls(2, &a_private));
    assert_eq!(calls_in(&deps, MEMBER_B), minimum_calls(2, &b_private));
    assert_eq!(full.zones_scanned, 104 + 2 + 2);

    // Routes: five small zones and the big one (both rules) in the own account, the shared
    // zone once (the lower account wins), and both ingress spellings.
    let artifact = estate.artifact().await;
    assert!(full.published && full.changed, "{full:#?}");
    assert_eq!(full.rules, 10);
    assert_eq!(full.sha256, artifact.header.sha256);
    assert_eq!(
        full.version_id.as_deref(),
        Some(artifact.version_id.as_str())
    );
    assert_eq!(artifact.header.generation, AT_SECS);
    assert_eq!(artifact.header.rules, 10);
    assert_eq!(artifact.header.trigger, "manual");
    let routes = snis(&artifact.text);
    for zone in (0..5).map(|i| format!("z{i:03}.own.example.internal")) {
        assert!(routes.contains(&api_sni(&zone)), "{routes:#?}");
    }
    for expected in [
        api_sni(big),
        ingress_sni(big),
        api_sni(shared),
        ingress_sni("a.example.internal"),
        ingress_sni("b.example.internal"),
    ] {
        assert!(
            routes.contains(&expected),
            "{expected} missing: {routes:#?}"
        );
    }
    assert!(!artifact.text.contains("public.own.example.com"));
    assert!(
        artifact
            .text
            .contains(&format!(" {MEMBER_A} {}\n", a_private[0].id))
    );
    // Both opted in on a first sweep: the lower account holds the name from now on, and
    // the other is told so, naming both.
    assert_warning(
        &full,
        &[
            "zone shared.example.internal",
            &format!("{} in account {MEMBER_B}", b_private[0].id),
            &format!("account {MEMBER_A} held the name first"),
            &a_private[0].id,
        ],
    );

    // An event for one small zone: only that zone is re-read, in one call.
    let z010 = &own_private[10];
    estate
        .own
        .upsert(
            &z010.id,
            &ingress_pair(&z010.name, PROXY, Wildcard::Literal),
        )
        .await
        .unwrap();
    let before = calls(&deps);
    let started = Instant::now();
    let one = run(
        &deps,
        &event("change-resource-record-sets.json", OWN_ACCOUNT, &z010.id),
        LATER,
    )
    .await;
    let event_ms = started.elapsed().as_millis();
    let event_calls = calls(&deps) - before;
    assert_eq!(event_calls, 1);
    assert!(event_calls <= 3);
    assert_eq!(one.zones_scanned, 1);
    assert_eq!(one.trigger, "route53:ChangeResourceRecordSets");
    assert!(one.published, "{one:#?}");
    let after_event = estate.artifact().await;
    assert_eq!(after_event.header.generation, LATER_SECS);
    assert_eq!(after_event.header.rules, 11);
    assert!(snis(&after_event.text).contains(&ingress_sni(&z010.name)));
    // The rest came from the manifest: the other accounts' routes are all still there.
    assert_eq!(
        snis(&after_event.text)
            .iter()
            .filter(|s| routes.contains(s))
            .count(),
        10
    );
    assert_eq!(estate.versions(KEY).await, 2);

    // An event for the big zone costs its three record pages.
    estate
        .own
        .delete_records(&big_zone.id, &api_pair(big, PROXY))
        .await
        .unwrap();
    let before = calls(&deps);
    let big_event = run(
        &deps,
        &event(
            "change-resource-record-sets.json",
            OWN_ACCOUNT,
            &big_zone.id,
        ),
        LATER,
    )
    .await;
    let big_event_calls = calls(&deps) - before;
    assert_eq!(big_event_calls, 3);
    assert_eq!(big_event.rules, 10);
    let after_big = estate.artifact().await;
    // Published in the same second as the last: one more.
    assert_eq!(after_big.header.generation, LATER_SECS + 1);
    assert!(!snis(&after_big.text).contains(&api_sni(big)));
    assert!(snis(&after_big.text).contains(&ingress_sni(big)));

    println!(
        "route53 calls: full run {full_calls} in {full_ms} ms, one event {event_calls} in \
         {event_ms} ms (estate: 3 accounts, {} private zones + 1 public, one zone of {} record \
         sets; an event on that zone: {big_event_calls} calls; rate limit raised to 1000/s)",
        own_private.len() + a_private.len() + b_private.len(),
        big_zone.listed_records(),
    );
}

#[tokio::test]
async fn names_and_targets_as_route53_spells_them() {
    let estate = Estate::start().await;
    let zones = vec![
        ZoneSpec::private(
            "esc.example.internal",
            ingress_pair("esc.example.internal", PROXY, Wildcard::Escaped),
        ),
        ZoneSpec::private(
            "lit.example.internal",
            ingress_pair("lit.example.internal", PROXY, Wildcard::Literal),
        ),
        // Upper case everywhere, trailing dots on names and on the target.
        ZoneSpec::private(
            "Case.Example.Internal.",
            vec![
                Record::a("API.Case.Example.Internal.", "10.0.0.1"),
                Record::cname(
                    "Proxy.API.Case.Example.Internal",
                    "PEERING-PROXY.TOOLS.EXAMPLE.COM.",
                ),
            ],
        ),
        ZoneSpec::private(
            "alias.example.internal",
            vec![
                Record::alias("api.alias.example.internal", "nlb-0123.elb.amazonaws.com."),
                Record::cname("proxy.api.alias.example.internal.", PROXY),
            ],
        ),
        ZoneSpec::private(
            "variant.example.internal",
            vec![
                Record::a("api.k8s.variant.example.internal", "10.0.0.2"),
                Record::cname("proxy.api.k8s.variant.example.internal", PROXY),
            ],
        ),
        // CNAMEs to something that is not the proxy (one a suffix of its name).
        ZoneSpec::private(
            "wrong.example.internal",
            vec![
                Record::a("api.wrong.example.internal", "10.0.0.3"),
                Record::cname("proxy.api.wrong.example.internal", "other.example.com"),
                Record::cname("*.int.wrong.example.internal", "tools.example.com"),
                Record::cname("ingress-int.wrong.example.internal", "elb.example.com"),
            ],
        ),
        // Points at the proxy but the backend record is missing.
        ZoneSpec::private(
            "missing.example.internal",
            vec![Record::cname("proxy.api.missing.example.internal", PROXY)],
        ),
        ZoneSpec::private(
            "ignored.example.internal",
            api_pair("ignored.example.internal", PROXY),
        ),
        ZoneSpec::public("public.example.com", api_pair("public.example.com", PROXY)),
    ];
    let own = estate.own.seed(zones, DEFAULT_PARALLELISM).await.unwrap();
    let shared = "shared.example.internal";
    // B first, so B's zone is the older one: the winner must not depend on creation order.
    let in_b = estate
        .b
        .seed_zone(ZoneSpec::private(shared, api_pair(shared, PROXY)))
        .await
        .unwrap();
    let in_a = estate
        .a
        .seed_zone(ZoneSpec::private(shared, api_pair(shared, PROXY)))
        .await
        .unwrap();

    let deps = estate
        .deps(&[("IGNORE_ZONES", "Ignored.Example.Internal.")])
        .await;
    let summary = run(&deps, &json!({}), AT).await;
    let artifact = estate.artifact().await;
    assert_eq!(
        snis(&artifact.text),
        [
            api_sni("alias.example.internal"),
            api_sni("case.example.internal"),
            "proxy.api.k8s.variant.example.internal".to_owned(),
            api_sni(shared),
            ingress_sni("esc.example.internal"),
            ingress_sni("lit.example.internal"),
        ]
    );
    assert_eq!(summary.rules, 6);
    // Public and ignored zones are never read: in the own account one listing and seven
    // zones (eight private, one of them ignored); one listing and one zone in each member.
    assert_eq!(calls_in(&deps, OWN_ACCOUNT), 1 + 7);
    assert_eq!(calls_in(&deps, MEMBER_A), 2);
    assert_eq!(calls_in(&deps, MEMBER_B), 2);
    assert!(!artifact.text.contains("wrong.example.internal"));
    assert!(!artifact.text.contains("ignored.example.internal"));
    assert!(!artifact.text.contains("public.example.com"));
    // The shared name routes to member A's zone, whatever the order of creation, and says so.
    assert!(
        artifact
            .text
            .contains(&format!(" {MEMBER_A} {}\n", in_a.id)),
    );
    assert!(!artifact.text.contains(&in_b.id));
    assert_warning(
        &summary,
        &[
            "zone shared.example.internal",
            &format!("{} in account {MEMBER_A}", in_a.id),
            &format!("{} in account {MEMBER_B}", in_b.id),
            "held the name first",
        ],
    );
    let missing = &own[6];
    assert_warning(
        &summary,
        &[
            &missing.id,
            "proxy.api.missing.example.internal points at the peering proxy",
        ],
    );
    assert_eq!(summary.warnings.len(), 2, "{:#?}", summary.warnings);

    // The same state read again decides the same way.
    let again = run(&deps, &json!({"dry_run": true}), LATER).await;
    assert!(!again.changed);
    assert_eq!(again.warnings, summary.warnings);
}

#[tokio::test]
async fn hostile_names_never_reach_the_config() {
    let estate = Estate::start().await;
    // moto takes any zone name, but record names must end with the zone's name as spelt and
    // may not hold a raw space or control character: those zones stay empty (the zone's
    // name alone must keep it out).
    let hostile_zones = [
        "evil\\040zone.example.internal",
        "evil zone.example.internal",
        "evil#zone.example.internal",
        "evil\\043hash.example.internal",
        "evil\\012global.example.internal",
        "nl\nglobal.example.internal",
        "evil\\056dot.example.internal",
        "caf\\303\\251.example.internal",
        "${HOME}.example.internal",
        "quote\".example.internal",
    ];
    let mut specs: Vec<ZoneSpec> = hostile_zones
        .iter()
        .map(|zone| {
            let records = if zone.contains([' ', '\n']) {
                vec![]
            } else {
                api_pair(zone, PROXY)
            };
            ZoneSpec::private(*zone, records)
        })
        .collect();
    let ok = "ok.example.internal";
    let mut ok_records = api_pair(ok, PROXY);
    ok_records.extend([
        Record::cname("x\"y.ok.example.internal", PROXY),
        Record::a("\\044{HOME}.ok.example.internal", "10.0.0.1"),
        Record::cname("semi;colon\\040space.ok.example.internal", PROXY),
        // A hostile name in a rule position: `*.int` with a backend whose name is hostile.
        Record::cname("proxy.api.x\\043y.ok.example.internal", PROXY),
        Record::a("api.x\\043y.ok.example.internal", "10.0.0.2"),
    ]);
    specs.push(ZoneSpec::private(ok, ok_records));
    let seeded = estate.own.seed(specs, DEFAULT_PARALLELISM).await.unwrap();

    let deps = estate.deps(&[]).await;
    let summary = run(&deps, &json!({}), AT).await;
    let artifact = estate.artifact().await;
    assert_eq!(snis(&artifact.text), [api_sni(ok)]);
    assert_eq!(summary.rules, 1);
    for zone in &seeded[..hostile_zones.len()] {
        assert_warning(&summary, &[&zone.id, "skipped: expected a host name"]);
    }
    assert_eq!(
        summary
            .warnings
            .iter()
            .filter(|w| w.starts_with("record in zone ok.example.internal"))
            .count(),
        5,
        "{:#?}",
        summary.warnings
    );
    for fragment in [
        "evil",
        "HOME",
        "caf",
        "global.example",
        "semi",
        "x\"y",
        "\\0",
    ] {
        let body = artifact::body(&artifact.text);
        assert!(!body.contains(fragment), "{fragment:?} reached the config");
    }
}

#[tokio::test]
async fn an_unchanged_estate_writes_nothing() {
    let zone = "quiet.example.internal";
    let (estate, _) = Estate::with_api_zone(zone).await;
    let deps = estate.deps(&[]).await;
    let first = run(&deps, &json!({}), AT).await;
    assert!(first.published);
    let published = estate.artifact().await;

    // Another trigger, another time: the body is the same, so nothing is written.
    let schedule: Value = serde_json::from_str(
        &std::fs::read_to_string(root().join("events/schedule.json")).unwrap(),
    )
    .unwrap();
    let second = run(&deps, &schedule, LATER).await;
    assert_eq!(second.trigger, "schedule");
    assert!(!second.changed && !second.published, "{second:#?}");
    assert_eq!(second.sha256, first.sha256);
    assert_eq!(second.version_id, first.version_id);
    assert!(second.diff.is_empty(), "{}", second.diff);
    assert_eq!(estate.versions(KEY).await, 1);
    assert_eq!(estate.versions(MANIFEST_KEY).await, 1);
    let still = estate.artifact().await;
    assert_eq!(still.version_id, published.version_id);
    assert_eq!(still.header, published.header);
}

#[tokio::test]
async fn a_failing_account_keeps_its_routes() {
    let estate = Estate::start().await;
    let own = "own.example.internal";
    let in_a = "a.example.internal";
    let in_b = "b.example.internal";
    estate
        .own
        .seed_zone(ZoneSpec::private(own, api_pair(own, PROXY)))
        .await
        .unwrap();
    let a_zone = estate
        .a
        .seed_zone(ZoneSpec::private(in_a, api_pair(in_a, PROXY)))
        .await
        .unwrap();
    estate
        .b
        .seed_zone(ZoneSpec::private(
            in_b,
            ingress_pair(in_b, PROXY, Wildcard::Escaped),
        ))
        .await
        .unwrap();

    // With no manifest yet, a failed account fails the run and nothing is written: a config
    // without that account's routes would go live.
    let broken = estate.deps_with_failing_account(&[], MEMBER_B).await;
    let err = handle(&broken, &json!({}), AT).await.unwrap_err();
    assert!(matches!(err, GenerateError::Sweep(_)), "{err}");
    let message = err.to_string();
    assert!(
        message.contains(&format!("account {MEMBER_B}")),
        "{message}"
    );
    assert!(message.contains("nothing is published"), "{message}");
    assert!(estate.keys().await.is_empty());

    let deps = estate.deps(&[]).await;
    let first = run(&deps, &json!({}), AT).await;
    assert_eq!(first.rules, 3);
    assert!(first.published);

    // Now B fails while A changes: A's change goes out, B keeps its route, and a warning
    // names B.
    estate
        .a
        .upsert(&a_zone.id, &ingress_pair(in_a, PROXY, Wildcard::Literal))
        .await
        .unwrap();
    let second = run(&broken, &json!({}), LATER).await;
    assert!(second.published, "{second:#?}");
    assert_eq!(second.rules, 4);
    assert_warning(
        &second,
        &[
            &format!("account {MEMBER_B}: ListHostedZones failed"),
            "keeping its 1 zone(s) from the last manifest",
        ],
    );
    let artifact = estate.artifact().await;
    assert_eq!(artifact.header.generation, LATER_SECS);
    assert_eq!(
        snis(&artifact.text),
        [
            api_sni(in_a),
            api_sni(own),
            ingress_sni(in_a),
            ingress_sni(in_b)
        ]
    );
    // The manifest still holds B's zone, so the next failure keeps it again.
    let third = run(&broken, &json!({}), LATER).await;
    assert!(!third.changed && !third.published, "{third:#?}");
    assert_eq!(third.rules, 4);
}

#[tokio::test]
async fn mass_deletion_is_refused_unless_forced() {
    let estate = Estate::start().await;
    let specs = (0..4)
        .map(|i| {
            let zone = format!("m{i}.example.internal");
            ZoneSpec::private(zone.clone(), api_pair(&zone, PROXY))
        })
        .collect();
    let zones = estate.own.seed(specs, DEFAULT_PARALLELISM).await.unwrap();
    let deps = estate.deps(&[]).await;
    let first = run(&deps, &json!({}), AT).await;
    assert_eq!(first.rules, 4);
    let published = estate.artifact().await;

    for zone in &zones[1..] {
        estate.own.delete_zone(&zone.id).await.unwrap();
    }
    let blocked = run(&deps, &json!({}), LATER).await;
    assert!(blocked.changed && !blocked.published, "{blocked:#?}");
    assert_eq!(blocked.rules, 1);
    assert_warning(
        &blocked,
        &[
            "refusing to publish",
            "from 4 to 1 (75%)",
            "MAX_RULE_DROP_PERCENT=50%",
            "\"force\": true",
        ],
    );
    assert_eq!(
        blocked.version_id.as_deref(),
        Some(published.version_id.as_str())
    );
    assert_eq!(estate.versions(KEY).await, 1);
    assert_eq!(estate.versions(MANIFEST_KEY).await, 1);
    assert_eq!(estate.artifact().await.header, published.header);

    let forced = run(&deps, &json!({"force": true}), LATER).await;
    assert!(forced.published, "{forced:#?}");
    let artifact = estate.artifact().await;
    assert_eq!(artifact.header.generation, LATER_SECS);
    assert_eq!(artifact.header.rules, 1);
    assert_eq!(snis(&artifact.text), [api_sni("m0.example.internal")]);
    assert_eq!(estate.versions(KEY).await, 2);
}

#[tokio::test]
async fn a_dry_run_writes_nothing() {
    let zone = "dry.example.internal";
    let (estate, seeded) = Estate::with_api_zone(zone).await;
    let deps = estate.deps(&[]).await;

    let before_any = run(&deps, &json!({"dry_run": true}), AT).await;
    assert_eq!(before_any.trigger, "manual-dry-run");
    assert!(before_any.changed && !before_any.published);
    assert!(
        before_any.diff.starts_with("--- /dev/null"),
        "{}",
        before_any.diff
    );
    assert!(
        before_any
            .config
            .as_deref()
            .unwrap()
            .contains(&api_sni(zone))
    );
    assert!(estate.keys().await.is_empty());

    run(&deps, &json!({}), AT).await;
    let published = estate.artifact().await;
    estate
        .own
        .upsert(&seeded.id, &ingress_pair(zone, PROXY, Wildcard::Escaped))
        .await
        .unwrap();
    let dry = run(&deps, &json!({"dry_run": true}), LATER).await;
    assert!(dry.changed && !dry.published, "{dry:#?}");
    let config = dry.config.as_deref().unwrap();
    assert!(snis(config).contains(&ingress_sni(zone)));
    assert!(
        dry.diff.contains(&format!("--- s3://{BUCKET}/{KEY}")),
        "{}",
        dry.diff
    );
    assert!(
        dry.diff
            .lines()
            .any(|l| l.starts_with(&format!("+#@suffix int.{zone} "))),
        "{}",
        dry.diff
    );
    assert_eq!(
        artifact::parse_header(config).unwrap().generation,
        LATER_SECS
    );
    assert_eq!(estate.versions(KEY).await, 1);
    assert_eq!(estate.versions(MANIFEST_KEY).await, 1);
    assert_eq!(estate.artifact().await.header, published.header);
}

#[tokio::test]
async fn an_invalid_payload_fails_and_writes_nothing() {
    let estate = Estate::start().await;
    let deps = estate.deps(&[]).await;
    let s3_event = json!({"Records": [{
        "eventSource": "aws:s3",
        "eventName": "ObjectCreated:Put",
        "s3": {"bucket": {"name": BUCKET}, "object": {"key": KEY}}
    }]});
    for payload in [s3_event, json!({"dry_run": "yes"}), json!("schedule")] {
        let err = handle(&deps, &payload, AT).await.unwrap_err();
        assert!(matches!(err, GenerateError::Trigger(_)), "{err}");
        let message = err.to_string();
        assert!(message.contains("Scheduled Event"), "{message}");
        assert!(message.contains("\"dry_run\""), "{message}");
    }
    // The time stamp is the floor of the generation: a run without one cannot number its
    // config, and does not fall back to 0.
    for stamp in ["", "t1", "2026-11-23"] {
        let err = handle(&deps, &json!({}), stamp).await.unwrap_err();
        assert!(matches!(err, GenerateError::GeneratedAt(_)), "{err}");
        assert!(err.to_string().contains("RFC 3339"), "{err}");
    }
    assert_eq!(calls(&deps), 0);
    assert!(estate.keys().await.is_empty());
}

#[tokio::test]
async fn a_custom_template_is_used_and_a_broken_one_publishes_nothing() {
    let zone = "tpl.example.internal";
    let (estate, seeded) = Estate::with_api_zone(zone).await;
    let template_key = "templates/haproxy.cfg.j2";
    let custom = autoproxy::render::DEFAULT_TEMPLATE.replacen(
        "defaults\n",
        "defaults\n    # from the operator's template (TEMPLATE_KEY)\n    option log-health-checks\n",
        1,
    );
    assert_ne!(custom, autoproxy::render::DEFAULT_TEMPLATE);
    estate.put_object(template_key, &custom).await;
    let deps = estate.deps(&[("TEMPLATE_KEY", template_key)]).await;
    let first = run(&deps, &json!({}), AT).await;
    assert!(first.published);
    let published = estate.artifact().await;
    assert!(published.text.contains("# from the operator's template"));
    assert_eq!(snis(&published.text), [api_sni(zone)]);

    // A change is pending, but the template does not compile, then does not render: the run
    // fails and the config stays as it was.
    estate
        .own
        .upsert(&seeded.id, &ingress_pair(zone, PROXY, Wildcard::Literal))
        .await
        .unwrap();
    for broken in [
        "{% for route in routes %}\nno endfor\n",
        "# generation: {{ header.generation }}\n{{ no_such_variable }}\n",
    ] {
        estate.put_object(template_key, broken).await;
        let err = handle(&deps, &json!({}), LATER).await.unwrap_err();
        assert!(matches!(err, GenerateError::Render(_)), "{err}");
        assert!(err.to_string().contains("nothing published"), "{err}");
        assert_eq!(estate.versions(KEY).await, 1);
        assert_eq!(estate.artifact().await.header, published.header);
    }
    // The same, from the default template, goes out.
    let deps = estate.deps(&[]).await;
    let fixed = run(&deps, &json!({}), LATER).await;
    assert!(fixed.published);
    let artifact = estate.artifact().await;
    assert!(!artifact.text.contains("operator's template"));
    assert_eq!(artifact.header.generation, LATER_SECS);
}

#[tokio::test]
async fn zone_events_add_and_drop_routes() {
    let estate = Estate::start().await;
    let specs = (0..3)
        .map(|i| {
            let zone = format!("e{i}.example.internal");
            ZoneSpec::private(zone.clone(), api_pair(&zone, PROXY))
        })
        .collect();
    let zones = estate.own.seed(specs, DEFAULT_PARALLELISM).await.unwrap();
    let deps = estate.deps(&[]).await;
    assert_eq!(run(&deps, &json!({}), AT).await.rules, 3);

    // DeleteHostedZone: the zone's routes drop out, for one call (its listing answers
    // NoSuchHostedZone).
    estate.own.delete_zone(&zones[1].id).await.unwrap();
    let before = calls(&deps);
    let deleted = run(
        &deps,
        &event("delete-hosted-zone.json", OWN_ACCOUNT, &zones[1].id),
        LATER,
    )
    .await;
    assert_eq!(calls(&deps) - before, 1);
    assert!(deleted.published, "{deleted:#?}");
    assert_eq!(deleted.trigger, "route53:DeleteHostedZone");
    let artifact = estate.artifact().await;
    assert_eq!(
        snis(&artifact.text),
        [
            api_sni("e0.example.internal"),
            api_sni("e2.example.internal")
        ]
    );
    assert_eq!(artifact.header.generation, LATER_SECS);

    // CreateHostedZone in a member account: GetHostedZone, then its records.
    let new = "new.example.internal";
    let created = estate
        .b
        .seed_zone(ZoneSpec::private(new, api_pair(new, PROXY)))
        .await
        .unwrap();
    let before = calls(&deps);
    let added = run(
        &deps,
        &event("create-hosted-zone.json", MEMBER_B, &created.id),
        LATER,
    )
    .await;
    assert_eq!(calls(&deps) - before, 2);
    assert_eq!(calls_in(&deps, OWN_ACCOUNT), 1 + 3 + 1);
    assert!(added.published);
    let artifact = estate.artifact().await;
    // Published in the same second as the last: one more.
    assert_eq!(artifact.header.generation, LATER_SECS + 1);
    assert!(snis(&artifact.text).contains(&api_sni(new)));
    assert_eq!(artifact.header.trigger, "route53:CreateHostedZone");

    // An event for an account that is not configured changes nothing and says why.
    let stray = run(
        &deps,
        &event(
            "change-resource-record-sets.json",
            "999999999999",
            &created.id,
        ),
        LATER,
    )
    .await;
    assert!(!stray.changed);
    assert_warning(&stray, &["999999999999", "not configured"]);
}

#[tokio::test]
async fn route53_calls_are_paced() {
    let estate = Estate::start().await;
    let specs = (0..5)
        .map(|i| ZoneSpec::private(format!("p{i}.example.internal"), vec![]))
        .collect();
    estate.own.seed(specs, DEFAULT_PARALLELISM).await.unwrap();
    // Only the own account: the default 5 requests per second.
    let settings = GenerateSettings {
        account_roles: vec![],
        route53_requests_per_second: 5.0,
        ..settings(&[])
    };
    let deps = Deps::new(settings, &estate.sdk, OWN_ACCOUNT).await.unwrap();
    let started = Instant::now();
    run(&deps, &json!({}), AT).await;
    let elapsed = started.elapsed();
    // Six calls (one listing, five zones) spaced 200 ms apart: at least a second.
    assert_eq!(calls(&deps), 6);
    assert!(elapsed >= Duration::from_millis(1000), "{elapsed:?}");
    assert!(elapsed < Duration::from_secs(5), "{elapsed:?}");
}

#[tokio::test]
async fn generations_keep_growing_across_resets() {
    let zone = "reset.example.internal";
    let (estate, _) = Estate::with_api_zone(zone).await;
    let deps = estate.deps(&[]).await;
    assert!(run(&deps, &json!({}), AT).await.published);
    let first = estate.artifact().await.header.generation;
    assert_eq!(first, AT_SECS);

    // Another CONFIG_KEY (as a new stack with a new bucket): no config and no manifest to
    // count from, while the fleet still runs `first`.
    let moved_key = "haproxy/moved.cfg";
    let moved = estate.deps(&[("CONFIG_KEY", moved_key)]).await;
    assert!(run(&moved, &json!({}), LATER).await.published);
    let after_move = estate.artifact_at(moved_key).await.header.generation;
    assert!(
        after_move > first,
        "a new key started at generation {after_move}, not above the {first} the fleet runs"
    );

    // The bucket emptied: every version of the config and of the manifest gone.
    estate.delete_every_version(KEY).await;
    estate.delete_every_version(MANIFEST_KEY).await;
    assert!(run(&deps, &json!({}), LATER).await.published);
    let after_emptying = estate.artifact().await.header.generation;
    assert!(
        after_emptying > first,
        "an emptied bucket started at generation {after_emptying}, not above the {first} the \
         fleet runs"
    );
}

#[tokio::test]
async fn an_old_version_copied_over_the_config_never_lowers_the_generation() {
    let zone = "copied.example.internal";
    let (estate, seeded) = Estate::with_api_zone(zone).await;
    let ingress = ingress_pair(zone, PROXY, Wildcard::Literal);
    let deps = estate.deps(&[]).await;
    run(&deps, &json!({}), AT).await;
    let old = estate.artifact().await;
    estate.own.upsert(&seeded.id, &ingress).await.unwrap();
    assert!(run(&deps, &json!({}), LATER).await.published);
    let highest = estate.artifact().await.header.generation;
    assert!(highest > old.header.generation);

    // A hand-made rollback: the old version copied over the key and Route53 put back to
    // match it. Nothing to publish, but the manifest's zones changed, so it is written.
    estate.copy_version_over(KEY, &old.version_id).await;
    assert_eq!(estate.artifact().await.header, old.header);
    estate
        .own
        .delete_records(&seeded.id, &ingress)
        .await
        .unwrap();
    let manifests = estate.versions(MANIFEST_KEY).await;
    let unchanged = run(&deps, &json!({}), LATER).await;
    assert!(!unchanged.changed && !unchanged.published, "{unchanged:#?}");
    assert_eq!(estate.versions(MANIFEST_KEY).await, manifests + 1);
    assert_eq!(estate.manifest_generation().await, highest);

    // The next change goes out above everything published, the copy included. All in the
    // same second as `highest`, so the clock alone would not lift it.
    estate.own.upsert(&seeded.id, &ingress).await.unwrap();
    assert!(run(&deps, &json!({}), LATER).await.published);
    let next = estate.artifact().await.header.generation;
    assert!(
        next > highest,
        "published generation {next} after the fleet ran {highest}: the fleet skips it"
    );
}

#[tokio::test]
async fn a_generation_no_proxy_could_read_is_refused_and_nothing_is_written() {
    let zone = "huge.example.internal";
    let (estate, _) = Estate::with_api_zone(zone).await;
    let deps = estate.deps(&[]).await;
    assert!(run(&deps, &json!({}), AT).await.published);
    // Someone with write access to the bucket puts a config whose metadata generation would
    // wrap (u64::MAX) or that the apply document cannot read (19 digits).
    let published = estate.artifact().await;
    for huge in ["18446744073709551615", "1000000000000000000"] {
        estate
            .s3
            .put_object()
            .bucket(BUCKET)
            .key(KEY)
            .metadata("generation", huge)
            .body(published.text.as_bytes().to_vec().into())
            .send()
            .await
            .unwrap();
        let before = estate.versions(KEY).await;
        let err = handle(&deps, &json!({"force": true}), LATER)
            .await
            .expect_err("a huge generation must be refused");
        let message = err.to_string();
        assert!(
            message.contains("metadata generation to be a whole number of at most 18 digits")
                && message.contains(huge),
            "{message}"
        );
        assert_eq!(estate.versions(KEY).await, before, "nothing written");
    }
}
