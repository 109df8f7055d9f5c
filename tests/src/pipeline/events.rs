//! The events the pipeline feeds the functions, from the sample files in `events/`.

use super::*;

pub(super) fn event_file(name: &str) -> Value {
    let path = crate::root().join("events").join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

pub(super) fn stamp(event: &mut Value, account: &str) {
    let now = autoproxy::time::Stamp::now().to_string();
    event["account"] = json!(account);
    event["time"] = json!(now);
    event["detail"]["eventTime"] = json!(now);
    event["detail"]["recipientAccountId"] = json!(account);
    event["detail"]["userIdentity"]["accountId"] = json!(account);
    event["detail"]["userIdentity"]["arn"] = json!(format!(
        "arn:aws:sts::{account}:assumed-role/PlatformAdmin/platform-engineer"
    ));
}

/// `events/schedule.json`.
pub fn schedule_event() -> Value {
    event_file("schedule.json")
}

/// `events/change-resource-record-sets.json` for this zone of this account.
pub fn record_change_event(account: &str, zone_id: &str, zone: &str) -> Value {
    let text = event_file("change-resource-record-sets.json")
        .to_string()
        .replace("prod.example.internal", zone);
    let mut event: Value = serde_json::from_str(&text).unwrap_or_default();
    stamp(&mut event, account);
    event["detail"]["requestParameters"]["hostedZoneId"] = json!(zone_id);
    event
}

/// `events/delete-hosted-zone.json` for this zone of this account.
pub fn zone_deleted_event(account: &str, zone_id: &str) -> Value {
    let mut event = event_file("delete-hosted-zone.json");
    stamp(&mut event, account);
    event["detail"]["requestParameters"]["id"] = json!(zone_id);
    event
}

/// An event as the generator receives it: a Route53 CloudTrail event arrives through the
/// event queue, as a batch of one record of the event source mapping (`events/sqs-batch.json`);
/// any other event as it is.
pub fn delivered(event: &Value) -> Value {
    if event["source"] != "aws.route53" {
        return event.clone();
    }
    let mut batch = event_file("sqs-batch.json");
    let mut record = batch["Records"][0].take();
    record["body"] = json!(event.to_string());
    record["md5OfBody"] = json!("");
    batch["Records"] = json!([record]);
    batch
}

/// `events/s3-put.json` for one new version of the config.
pub fn s3_put_event(bucket: &str, key: &str, version_id: &str) -> Value {
    let mut event = event_file("s3-put.json");
    let record = &mut event["Records"][0];
    record["awsRegion"] = json!(crate::moto::REGION);
    record["eventTime"] = json!(autoproxy::time::Stamp::now().to_string());
    record["s3"]["bucket"] = json!({"name": bucket, "arn": format!("arn:aws:s3:::{bucket}")});
    record["s3"]["object"]["key"] = json!(key);
    record["s3"]["object"]["versionId"] = json!(version_id);
    event
}

/// The names of the clusters HAProxy should route now.
pub fn routed(zones: &BTreeMap<&'static str, String>) -> BTreeSet<&'static str> {
    ALL.iter()
        .filter(|c| c.proxy == PROXY_HOSTNAME && zones.contains_key(c.name))
        .map(|c| c.name)
        .collect()
}
