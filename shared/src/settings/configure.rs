//! The configure function's settings (docs/ARCHITECTURE.md, "Configure settings and
//! payloads").

use super::{SettingsError, invalid, number, object_key};

/// The configure function's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigureSettings {
    pub config_key: String,
    pub apply_document: String,
    pub target_tag_key: String,
    pub target_tag_value: String,
    pub max_concurrency: String,
    pub max_errors: String,
    /// CloudWatch Logs group for the command's output; empty lets SSM pick its default.
    pub command_log_group: Option<String>,
    /// The config bucket, for the fleet report (`{"fleet": true}`); a rollout takes its
    /// bucket from the S3 event and does not need it.
    pub config_bucket: Option<String>,
    /// A record older than this is silent in the fleet report: its instance stopped applying
    /// (terminated, or its SSM agent is down). Longer than twice the association's interval.
    pub fleet_silent_after_seconds: u64,
    /// SSM's `TimeoutSeconds` for a push: how long SSM tries to deliver it to an instance
    /// before giving that instance up (Delivery Timed Out, not counted against `MAX_ERRORS`),
    /// so an instance whose agent is gone does not hold a rolling push's slot for SSM's
    /// default hour.
    pub delivery_timeout_seconds: i32,
}

/// Three runs of the default 30-minute association.
pub const DEFAULT_FLEET_SILENT_AFTER_MINUTES: u64 = 90;

/// Two minutes: an online SSM agent takes a command within seconds, so this leaves room for
/// one reconnecting, and a gone instance holds a rolling push two minutes, not SSM's hour.
pub const DEFAULT_DELIVERY_TIMEOUT_SECONDS: i32 = 120;

impl ConfigureSettings {
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, SettingsError> {
        let get = |name: &str| {
            lookup(name)
                .map(|v| v.trim().to_owned())
                .filter(|v| !v.is_empty())
        };
        let apply_document = get("APPLY_DOCUMENT")
            .ok_or_else(|| invalid("APPLY_DOCUMENT", "the name of the SSM apply document", ""))?;
        let rate = |variable: &'static str, default: &str| -> Result<String, SettingsError> {
            let raw = get(variable).unwrap_or_else(|| default.to_owned());
            let digits = raw.strip_suffix('%').unwrap_or(&raw);
            let valid = !digits.is_empty()
                && digits.len() <= 7
                && digits.bytes().all(|b| b.is_ascii_digit());
            if valid {
                Ok(raw)
            } else {
                Err(invalid(
                    variable,
                    "a count like 1 or a percentage like 10%",
                    &raw,
                ))
            }
        };
        let max_concurrency = rate("MAX_CONCURRENCY", "1")?;
        if max_concurrency == "0" || max_concurrency == "0%" {
            return Err(invalid("MAX_CONCURRENCY", "at least 1", &max_concurrency));
        }
        Ok(ConfigureSettings {
            config_key: object_key("CONFIG_KEY", get("CONFIG_KEY"))?,
            apply_document,
            target_tag_key: get("TARGET_TAG_KEY").unwrap_or_else(|| "Role".to_owned()),
            target_tag_value: get("TARGET_TAG_VALUE").unwrap_or_else(|| "peering-proxy".to_owned()),
            max_concurrency,
            max_errors: rate("MAX_ERRORS", "0")?,
            command_log_group: get("COMMAND_LOG_GROUP"),
            config_bucket: get("CONFIG_BUCKET"),
            fleet_silent_after_seconds: 60
                * number(
                    "FLEET_SILENT_AFTER_MINUTES",
                    get("FLEET_SILENT_AFTER_MINUTES"),
                    DEFAULT_FLEET_SILENT_AFTER_MINUTES,
                    "whole minutes from 1 to 525600",
                    |m: &u64| (1..=525_600).contains(m),
                )?,
            delivery_timeout_seconds: number(
                "DELIVERY_TIMEOUT_SECONDS",
                get("DELIVERY_TIMEOUT_SECONDS"),
                DEFAULT_DELIVERY_TIMEOUT_SECONDS,
                "whole seconds from 30 to 2592000 (SSM's range for TimeoutSeconds)",
                |s: &i32| (30..=2_592_000).contains(s),
            )?,
        })
    }

    pub fn from_env() -> Result<Self, SettingsError> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }
}
