//! The fleet report: every instance's record, joined with the instances SSM manages under the target tag, against the latest config; written beside it and emitted as metrics.

use autoproxy::fleet::{Join, Listing, Managed};
use aws_sdk_ssm::types::InstanceInformationStringFilter;

use super::*;

/// Reads the latest config's generation, every instance's record and the instances SSM
/// manages under the target tag, writes the report beside the config, emits the fleet metrics
/// and returns the report. A record that cannot be read or parsed is a warning naming its key:
/// one bad record must not hide the rest of the fleet. A failed instance listing is reported
/// as the join missing, never as the report failing.
pub async fn fleet_report(deps: &Deps) -> Result<FleetReport, ConfigureError> {
    let bucket = deps
        .settings
        .config_bucket
        .as_deref()
        .ok_or(ConfigureError::MissingSetting {
            variable: "CONFIG_BUCKET",
            what: "the config bucket's name",
        })?;
    let config_key = deps.settings.config_key.as_str();
    let now_unix = unix_now();
    let (latest_generation, published_at) = latest_config(deps, bucket, config_key).await?;
    let keys = record_keys(deps, bucket, &fleet::prefix(config_key)).await?;
    let (records, warnings) = read_records(deps, bucket, config_key, keys).await;
    let listing = managed_instances(deps).await;
    let against = fleet::Against {
        latest_generation,
        // S3 always sends LastModified; without it nobody counts as behind for long.
        latest_published_at_unix: published_at.unwrap_or(now_unix),
        now_unix,
        silent_after_seconds: deps.settings.fleet_silent_after_seconds,
    };
    let mut report = fleet::report(against, records, listing);
    report.warnings = warnings;
    match member_accounts(deps, bucket, config_key).await {
        Ok(accounts) => report.accounts = accounts,
        Err(reason) => report.warnings.push(reason),
    }
    let report_key = fleet::report_key(config_key);
    put_report(deps, bucket, &report_key, &report).await?;
    emit_metrics(&report);
    info!(
        latest_generation,
        instances = report.instances,
        behind = report.behind,
        max_behind_seconds = report.max_behind_seconds,
        silent = report.silent,
        never_reported = report.never_reported,
        stale = report.stale,
        unreachable = report.unreachable,
        unhealthy_past_limit = report.unhealthy_past_limit,
        warnings = report.warnings.len(),
        key = report_key,
        "fleet report written\n{}",
        report.table()
    );
    Ok(report)
}

fn emit_metrics(report: &FleetReport) {
    let listing_failed = matches!(report.join, Join::Missing { .. });
    Metrics::new("configure")
        .count("InstancesReporting", report.instances)
        .count("InstancesBehind", report.behind)
        .seconds("MaxBehindSeconds", report.max_behind_seconds)
        .count("InstancesSilent", report.silent)
        .count("FleetRecordsUnreadable", report.warnings.len() as u64)
        .count("InstancesNeverReported", report.never_reported)
        .count("InstancesStale", report.stale)
        .count("InstancesUnreachable", report.unreachable)
        .count("InstancesUnhealthyPastLimit", report.unhealthy_past_limit)
        .count("FleetInstanceListFailed", u64::from(listing_failed))
        .emit();
}

/// The instances SSM manages under the target tag (`DescribeInstanceInformation`, every
/// page), or why they could not be listed: permissions, throttling past the SDK's retries.
/// A list cut short would report the rest as terminated, so any failed page fails it all.
pub(super) async fn managed_instances(deps: &Deps) -> Listing {
    let settings = &deps.settings;
    let filter = match InstanceInformationStringFilter::builder()
        .key(format!("tag:{}", settings.target_tag_key))
        .values(&settings.target_tag_value)
        .build()
    {
        Ok(filter) => filter,
        Err(err) => return Listing::Failed(format!("the instance list's tag filter: {err}")),
    };
    let mut pages = deps
        .ssm
        .describe_instance_information()
        .filters(filter)
        .max_results(50)
        .into_paginator()
        .send();
    let mut managed = Vec::new();
    while let Some(page) = pages.next().await {
        let page = match page {
            Ok(page) => page,
            Err(err) => {
                let reason = format!(
                    "DescribeInstanceInformation failed: {}",
                    aws_error::reason(&err)
                );
                warn!(reason, "the fleet report goes without the instance list");
                return Listing::Failed(reason);
            }
        };
        managed.extend(page.instance_information_list().iter().filter_map(|info| {
            let unix = |t: Option<&aws_sdk_ssm::primitives::DateTime>| {
                t.and_then(|t| u64::try_from(t.secs()).ok())
            };
            Some(Managed {
                instance_id: info.instance_id()?.to_owned(),
                ping_status: info.ping_status().cloned(),
                last_ping_unix: unix(info.last_ping_date_time()),
                registered_unix: unix(info.registration_date()),
                last_association_unix: unix(info.last_association_execution_date()),
            })
        }));
    }
    Listing::Listed(managed)
}

pub(super) fn store_error(
    operation: &'static str,
    bucket: &str,
    key: &str,
    message: String,
) -> ConfigureError {
    ConfigureError::Store {
        operation,
        bucket: bucket.to_owned(),
        key: key.to_owned(),
        message,
    }
}

/// The latest config's generation (its metadata) and when it was published.
pub(super) async fn latest_config(
    deps: &Deps,
    bucket: &str,
    key: &str,
) -> Result<(u64, Option<u64>), ConfigureError> {
    let head = deps
        .s3
        .head_object()
        .bucket(bucket)
        .key(key)
        .send()
        .await
        .map_err(|err| store_error("HeadObject", bucket, key, aws_error::reason(&err)))?;
    let raw = head
        .metadata()
        .and_then(|m| m.get(META_GENERATION))
        .cloned();
    let generation = raw
        .as_deref()
        .and_then(autoproxy::artifact::parse_generation)
        .ok_or_else(|| ConfigureError::NoGeneration {
            bucket: bucket.to_owned(),
            key: key.to_owned(),
            got: raw.clone(),
        })?;
    let published_at = head
        .last_modified()
        .and_then(|t| u64::try_from(t.secs()).ok());
    Ok((generation, published_at))
}

/// Every object under the records' prefix.
pub(super) async fn record_keys(
    deps: &Deps,
    bucket: &str,
    prefix: &str,
) -> Result<Vec<String>, ConfigureError> {
    let mut keys = Vec::new();
    let mut pages = deps
        .s3
        .list_objects_v2()
        .bucket(bucket)
        .prefix(prefix)
        .into_paginator()
        .send();
    while let Some(page) = pages.next().await {
        let page = page
            .map_err(|err| store_error("ListObjectsV2", bucket, prefix, aws_error::reason(&err)))?;
        keys.extend(
            page.contents()
                .iter()
                .filter_map(|object| object.key())
                .filter(|key| !key.ends_with('/'))
                .map(str::to_owned),
        );
    }
    Ok(keys)
}

/// The records that read and parse, each at its own instance's key (the instance ARN the
/// instances' policy lets only that instance write); a warning per other record.
pub(super) async fn read_records(
    deps: &Deps,
    bucket: &str,
    config_key: &str,
    keys: Vec<String>,
) -> (Vec<Record>, Vec<String>) {
    let mut records = Vec::new();
    let mut warnings = Vec::new();
    for key in keys {
        // An id-only key is an older agent's, which no instance may write any more: it stays
        // unread until the bucket's lifecycle rule expires it.
        let Some(owner) = fleet::key_instance(config_key, &key) else {
            info!(
                key,
                "not an instance's record key (an older agent's?): not read"
            );
            continue;
        };
        match read_record(deps, bucket, &key).await {
            Ok(record) if record.instance_id == owner => records.push(record),
            Ok(record) => warnings.push(format!(
                "{key}: holds the record of {}, written under {owner}'s key",
                record.instance_id
            )),
            Err(reason) => warnings.push(format!("{key}: {reason}")),
        }
    }
    for warning in &warnings {
        warn!(warning, "fleet record skipped");
    }
    (records, warnings)
}

/// Every member account's state as the generator's last manifest has them: empty when there
/// is no manifest yet; else why it could not be read.
async fn member_accounts(
    deps: &Deps,
    bucket: &str,
    config_key: &str,
) -> Result<Vec<autoproxy::accounts::AccountState>, String> {
    /// The one field of the manifest read here (the rest, per zone, can be megabytes).
    #[derive(serde::Deserialize)]
    struct Accounts {
        #[serde(default)]
        accounts: Vec<autoproxy::accounts::AccountState>,
    }
    let key = autoproxy::settings::manifest_key(config_key);
    let object = match deps.s3.get_object().bucket(bucket).key(&key).send().await {
        Ok(object) => object,
        Err(err) if err.as_service_error().is_some_and(|e| e.is_no_such_key()) => {
            return Ok(Vec::new());
        }
        Err(err) => {
            return Err(format!(
                "{key}: GetObject failed: {}; the member accounts are not shown",
                aws_error::reason(&err)
            ));
        }
    };
    let body = object
        .body
        .collect()
        .await
        .map_err(|err| format!("{key}: reading the body failed: {err}"))?
        .into_bytes();
    serde_json::from_slice::<Accounts>(&body)
        .map(|manifest| manifest.accounts)
        .map_err(|err| format!("{key}: not a manifest ({err}); the member accounts are not shown"))
}

/// Writes the report as JSON beside the config.
pub(super) async fn put_report(
    deps: &Deps,
    bucket: &str,
    key: &str,
    report: &FleetReport,
) -> Result<(), ConfigureError> {
    let body = serde_json::to_vec_pretty(report)
        .map_err(|err| store_error("PutObject", bucket, key, err.to_string()))?;
    deps.s3
        .put_object()
        .bucket(bucket)
        .key(key)
        .content_type("application/json")
        .body(body.into())
        .send()
        .await
        .map_err(|err| store_error("PutObject", bucket, key, aws_error::reason(&err)))?;
    Ok(())
}

/// One record, or why it could not be had.
pub(super) async fn read_record(deps: &Deps, bucket: &str, key: &str) -> Result<Record, String> {
    let object = deps
        .s3
        .get_object()
        .bucket(bucket)
        .key(key)
        .send()
        .await
        .map_err(|err| format!("GetObject failed: {}", aws_error::reason(&err)))?;
    let body = object
        .body
        .collect()
        .await
        .map_err(|err| format!("reading the body failed: {err}"))?
        .into_bytes();
    serde_json::from_slice(&body).map_err(|err| format!("not a fleet record ({err})"))
}

pub(super) fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
