//! The generator takes a forwarded event as it takes a local one. A member's Route53 event
//! reaches the stack's region as EventBridge delivers it there (`events/
//! forwarded-change-resource-record-sets.json`): its own `account` (the member's), its own
//! `region` (us-east-1), `resources` and the CloudTrail record unchanged. A generator running
//! in eu-west-1 must make of it the run a generator in us-east-1 makes.

use autoproxy_generate::handler::{Deps, Summary};
use autoproxy_tests::estate::{
    self, Account, Wildcard, ZoneSpec, api_pair, ingress_pair, role_arn, versioned_bucket,
};
use autoproxy_tests::generator::run_at;
use autoproxy_tests::moto::Moto;
use aws_sdk_s3::config::Region;

use super::*;

const BUCKET: &str = "autoproxy-config";
const PROXY: &str = "peering-proxy.tools.example.com";
const ZONE: &str = "prod.example.internal";
const AT: &str = "2026-11-23T03:14:02Z";
const LATER: &str = "2026-11-23T03:20:00Z";

/// What a run did, with the zone's id (moto's, different in every estate) as `<zone>`.
#[derive(Debug, PartialEq)]
struct Run {
    summary: Json,
    /// Route53 calls by account: which zones the run read.
    calls: Vec<(String, u64)>,
}

/// The member's zone, a first full run, then a record change in it and its event (the
/// sample, pointed at the zone), to a generator whose AWS region is `region`.
async fn event_run(region: &str) -> (Run, Summary) {
    let moto = Moto::start();
    let sdk = moto.sdk_config().await;
    versioned_bucket(&sdk, BUCKET).await.unwrap();
    let member = Account::assume(&sdk, MEMBER).await.unwrap();
    let zone = member
        .seed_zone(ZoneSpec::private(ZONE, api_pair(ZONE, PROXY)))
        .await
        .unwrap();
    let vars = [
        ("CONFIG_BUCKET", BUCKET.to_owned()),
        ("PEERING_PROXY_HOSTNAME", PROXY.to_owned()),
        ("ACCOUNT_ROLE_ARNS", role_arn(MEMBER)),
        ("ROUTE53_REQUESTS_PER_SECOND", "1000".to_owned()),
        ("MEMBER_REGIONS", autoproxy_tests::moto::REGION.to_owned()),
    ];
    let settings = estate::generate_settings(&vars);
    // The function's region; the moto endpoint serves every region.
    let in_region = sdk
        .to_builder()
        .region(Region::new(region.to_owned()))
        .build();
    let deps = Deps::new(settings, &in_region, CENTRAL).await.unwrap();
    let first = run_at(&deps, &sample("schedule.json"), AT, None)
        .await
        .unwrap();
    assert!(first.published, "{first:#?}");

    member
        .upsert(&zone.id, &ingress_pair(ZONE, PROXY, Wildcard::Escaped))
        .await
        .unwrap();
    let before: Vec<u64> = deps.accounts.iter().map(|a| a.calls()).collect();
    let mut event = sample("forwarded-change-resource-record-sets.json");
    event["detail"]["requestParameters"]["hostedZoneId"] = json!(zone.id);
    let summary = run_at(&deps, &event, LATER, None)
        .await
        .unwrap_or_else(|err| panic!("in {region}: {err}"));
    let calls = deps
        .accounts
        .iter()
        .zip(before)
        .map(|(account, before)| (account.account.clone(), account.calls() - before))
        .collect();
    let mut json = serde_json::to_value(&summary).unwrap();
    // Each estate's own: the object version, and the body's digest (the body names the zone
    // id), in the summary and in the diff's header lines.
    for field in ["version_id", "sha256"] {
        json.as_object_mut().unwrap().remove(field);
    }
    let diff: Vec<&str> = summary
        .diff
        .lines()
        .filter(|line| !line[1.min(line.len())..].starts_with("# sha256:"))
        .collect();
    json["diff"] = json!(diff);
    let json = serde_json::from_str(&json.to_string().replace(&zone.id, "<zone>")).unwrap();
    (
        Run {
            summary: json,
            calls,
        },
        summary,
    )
}

#[tokio::test]
async fn a_forwarded_event_starts_the_run_a_local_one_does() {
    let event = sample("forwarded-change-resource-record-sets.json");
    // As delivered in the stack's region: the member's account, the region it was made in.
    assert_eq!(event["account"], MEMBER);
    assert_eq!(event["detail"]["recipientAccountId"], MEMBER);
    assert_eq!(event["region"], EVENTS_REGION);

    let (local, _) = event_run(EVENTS_REGION).await;
    let (forwarded, summary) = event_run(STACK_REGION).await;
    assert_eq!(forwarded, local);
    // And that run is the event's: the one zone re-read (one call, in the member account),
    // its new route published.
    assert_eq!(summary.trigger, "route53:ChangeResourceRecordSets");
    assert_eq!(summary.zones_scanned, 1, "{summary:#?}");
    assert_eq!(
        forwarded.calls,
        [(CENTRAL.to_owned(), 0), (MEMBER.to_owned(), 1)]
    );
    assert!(summary.published, "{summary:#?}");
    assert!(
        summary.diff.contains(&format!("int.{ZONE}")),
        "{}",
        summary.diff
    );
}
