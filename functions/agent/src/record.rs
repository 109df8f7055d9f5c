//! The fleet record: what this instance runs now and how this apply ended, written to
//! `<ConfigKey without .cfg>.fleet/<instance ARN>.json` in the config bucket after every apply,
//! pushed or the association's (docs/ARCHITECTURE.md, "Fleet records"). Its `generation` is
//! what HAProxy itself reported at the end of the run, never what the run meant to install.
//! The same record stays on the instance ([`LOCAL`], beside the maps), where the address
//! service reads the last apply's result and path for its figures.

pub use autoproxy::fleet::{ApplyResult as Outcome, Record, record_key as key};

/// How long the fleet record's upload may take.
pub const RECORD_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(20);

/// The instance id the SSM agent passes (`AWS_SSM_INSTANCE_ID`), else the host name, kept
/// only if it is a plain id.
pub fn instance_id() -> String {
    let id = std::env::var("AWS_SSM_INSTANCE_ID")
        .ok()
        .or_else(crate::proc::hostname)
        .unwrap_or_default();
    let plain = (1..=64).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
    if plain { id } else { "unknown".to_owned() }
}

/// Where the last apply's record stays on the instance, relative to the config's directory.
pub const LOCAL: &str = "autoproxy/last-apply.json";

/// Leaves `record` in `config_dir`'s [`LOCAL`] (complete or not at all: written aside and
/// renamed into place, the rename on disk before it returns, as every file the apply
/// installs); a failure is logged by the caller and never fails the apply.
pub fn write_local(config_dir: &std::path::Path, record: &Record) -> std::io::Result<()> {
    let path = config_dir.join(LOCAL);
    let dir = path.parent().unwrap_or(config_dir);
    std::fs::create_dir_all(dir)?;
    let body = serde_json::to_vec(record).map_err(std::io::Error::other)?;
    crate::files::replace(&path, &body, 0o644)
}

/// The last apply's record left in `config_dir`, if there is one that parses.
pub fn read_local(config_dir: &std::path::Path) -> Option<Record> {
    let text = std::fs::read(config_dir.join(LOCAL)).ok()?;
    serde_json::from_slice(&text).ok()
}

/// UTC now as `2026-11-24T03:14:02Z` (RFC 3339, to the second).
pub fn now_utc() -> String {
    autoproxy::time::rfc3339(autoproxy::time::now_unix())
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
    match tokio::time::timeout(RECORD_TIMEOUT, put).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(err)) => Err(aws_sdk_s3::error::DisplayErrorContext(err).to_string()),
        Err(_) => Err(format!("no answer within {} s", RECORD_TIMEOUT.as_secs())),
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
    let known = crate::address_map::parse(addresses).addresses;
    let (routes, suffixes) = autoproxy::artifact::MapFiles::route_tables(config);
    let unresolved = routes
        .lines()
        .chain(suffixes.lines())
        .filter_map(|line| line.split_once(' '))
        .filter(|(_, target)| !crate::routes::has_address(target, &known))
        .count();
    u64::try_from(unresolved).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_rfc3339_utc_to_the_second() {
        let now = now_utc();
        assert_eq!(now.len(), 20, "{now}");
        assert!(autoproxy::time::unix_seconds(&now).is_some(), "{now}");
    }

    #[test]
    fn the_record_left_on_the_instance_reads_back() {
        let dir = tempfile::tempdir().expect("temp dir");
        assert!(read_local(dir.path()).is_none());
        let record = Record {
            instance_id: "i-0abc".to_owned(),
            generation: 7,
            sha256: String::new(),
            result: Outcome::Applied,
            reason: String::new(),
            version_id: "v7".to_owned(),
            at: now_utc(),
            agent: String::new(),
            apply_id: apply_id(),
            path: "runtime".to_owned(),
            path_reason: String::new(),
            unconfirmed: String::new(),
            unresolved_routes: 0,
            addresses: Vec::new(),
        };
        write_local(dir.path(), &record).expect("written");
        assert_eq!(read_local(dir.path()), Some(record));
        std::fs::write(dir.path().join(LOCAL), "{").expect("write");
        assert!(read_local(dir.path()).is_none());
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
