//! The fleet record: what this instance runs now and how this apply ended, written to
//! `<ConfigKey without .cfg>.fleet/<instance id>.json` in the config bucket after every apply,
//! pushed or the association's (docs/ARCHITECTURE.md, "Fleet records"). Its `generation` is
//! what HAProxy itself reported at the end of the run, never what the run meant to install.

pub use autoproxy::fleet::{ApplyResult as Outcome, Record, record_key as key};

/// The instance id the SSM agent passes (`AWS_SSM_INSTANCE_ID`), else the host name, kept
/// only if it is a plain id.
pub fn instance_id() -> String {
    let id = std::env::var("AWS_SSM_INSTANCE_ID")
        .ok()
        .or_else(|| {
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .map(|s| s.trim().to_owned())
        })
        .unwrap_or_default();
    let plain = (1..=64).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
    if plain { id } else { "unknown".to_owned() }
}

/// UTC now as `2026-11-24T03:14:02Z`.
pub fn now_utc() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (days, rest) = (secs / 86_400, secs % 86_400);
    let (year, month, day) = civil_from_days(i64::try_from(days).unwrap_or(0));
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian (Howard Hinnant's
/// algorithm).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = u32::try_from(doy - (153 * mp + 2) / 5 + 1).unwrap_or(1);
    let month = u32::try_from(if mp < 10 { mp + 3 } else { mp - 9 }).unwrap_or(1);
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// Puts the record; a failure is logged by the caller and never fails the apply.
pub async fn put(
    s3: &aws_sdk_s3::Client,
    bucket: &str,
    key: &str,
    record: &Record,
) -> Result<(), String> {
    let body = serde_json::to_vec(record).map_err(|err| err.to_string())?;
    let put = s3
        .put_object()
        .bucket(bucket)
        .key(key)
        .content_type("application/json")
        .body(body.into())
        .send();
    match tokio::time::timeout(super::RECORD_TIMEOUT, put).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(err)) => Err(aws_sdk_s3::error::DisplayErrorContext(err).to_string()),
        Err(_) => Err(format!(
            "no answer within {} s",
            super::RECORD_TIMEOUT.as_secs()
        )),
    }
}

/// A name for this apply, unique on the instance and sortable by time: its start in
/// milliseconds since the epoch and the process id, in hex.
pub fn apply_id() -> String {
    let millis = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    format!("{millis:x}-{:x}", std::process::id())
}

/// How many route lines of `config` name a host that is neither an IP literal nor in the
/// address map's text `addresses`: routes that cannot serve yet.
pub fn unresolved_routes(config: &str, addresses: &str) -> u64 {
    let known = crate::addresses::parse(addresses).addresses;
    let (routes, suffixes) = autoproxy::artifact::MapFiles::route_tables(config);
    let unresolved = routes
        .lines()
        .chain(suffixes.lines())
        .filter_map(|line| line.split_once(' '))
        .filter(|(_, target)| {
            let host = target.rsplit_once(':').map_or(*target, |(host, _)| host);
            host.parse::<std::net::IpAddr>().is_err() && !known.contains_key(host)
        })
        .count();
    u64::try_from(unresolved).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_and_keys() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(20_781), (2026, 11, 24));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
        assert_eq!(now_utc().len(), 20);
    }

    #[test]
    fn routes_without_an_address_are_counted() {
        let config = "# generation: 3\nglobal\n#@route a.example api.a.example:443 api 1 Z1\n#@route b.example api.b.example:443 api 1 Z1\n#@suffix int.c.example 10.0.0.9:443 ingress 1 Z2\n#@route d.example api.a.example:443 api 1 Z1\n";
        assert_eq!(unresolved_routes(config, ""), 3);
        assert_eq!(unresolved_routes(config, "api.a.example 10.0.0.1\n"), 1);
        assert_eq!(
            unresolved_routes(config, "api.a.example 10.0.0.1\napi.b.example 10.0.0.2\n"),
            0
        );
        assert_eq!(unresolved_routes("global\n", ""), 0);
    }
}
