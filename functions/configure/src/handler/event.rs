//! What an invocation asks for: the S3 records that concern the config key, or the fleet report.

use super::*;

/// `{"fleet": true}` and nothing else: a payload that also carries S3 records is neither.
pub fn is_fleet_request(payload: &Value) -> bool {
    payload
        .as_object()
        .is_some_and(|object| object.len() == 1 && object.get("fleet") == Some(&Value::Bool(true)))
}

/// Picks the records that concern the config key; the others are returned as ignored keys.
pub fn dispatches(
    payload: &Value,
    config_key: &str,
) -> Result<(Vec<Dispatch>, Vec<String>), ConfigureError> {
    let malformed = || ConfigureError::Malformed {
        got: autoproxy::excerpt(&payload.to_string(), QUOTED_PAYLOAD_CHARS),
    };
    let event: S3Event = serde_json::from_value(payload.clone()).map_err(|_| malformed())?;
    if event.records.is_empty() {
        return Err(malformed());
    }
    let mut wanted = Vec::new();
    let mut ignored = Vec::new();
    for record in event.records {
        let created = record
            .event_name
            .as_deref()
            .is_some_and(|name| name.starts_with("ObjectCreated:"));
        let (Some(bucket), Some(raw_key)) = (record.s3.bucket.name, record.s3.object.key) else {
            return Err(malformed());
        };
        let key = decode_key(&raw_key);
        if !created || key != config_key {
            info!(bucket, key, event = ?record.event_name, "not the config key or not a put: ignored");
            ignored.push(key);
            continue;
        }
        // The bucket is versioned: without a version the fleet could fetch a newer object
        // than the one this event announced.
        let Some(version_id) = record.s3.object.version_id.filter(|v| !v.is_empty()) else {
            return Err(malformed());
        };
        let dispatch = Dispatch {
            bucket,
            key,
            version_id,
        };
        // S3 may deliver the same event twice: one command per version is enough (a second
        // would be harmless anyway: the document skips a generation already installed).
        if !wanted.contains(&dispatch) {
            wanted.push(dispatch);
        }
    }
    Ok((wanted, ignored))
}

/// S3 event keys are form-URL-encoded.
fn decode_key(raw: &str) -> String {
    let spaced = raw.replace('+', " ");
    percent_encoding::percent_decode_str(&spaced)
        .decode_utf8_lossy()
        .into_owned()
}

/// How much of a refused payload an error quotes.
const QUOTED_PAYLOAD_CHARS: usize = 300;
