//! Settings of both functions, read once from the environment in `main` and passed down
//! (docs/ARCHITECTURE.md, "Generator settings" and "Configure settings and payloads").
//!
//! Parsing takes a lookup function rather than reading `std::env` itself, so tests feed it a
//! table and the functions feed it the process environment.

use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr};

use crate::model::is_account_id;
use crate::names::{HostName, normalize};
use crate::render::RenderOptions;
use crate::rules::{DEFAULT_RULES, Rule, RulesError, parse_rules};

mod borders;
mod configure;
mod members;
pub use borders::{BorderSettings, MemberRegions};
pub use configure::{
    ConfigureSettings, DEFAULT_DELIVERY_TIMEOUT_SECONDS, DEFAULT_FLEET_SILENT_AFTER_MINUTES,
};
pub use members::{MemberAccounts, MemberSource, is_unit_id};

/// Every variable the generator reads. `template.yaml` must set exactly these (a test checks).
pub const GENERATE_VARIABLES: &[&str] = &[
    "CONFIG_BUCKET",
    "CONFIG_KEY",
    "PEERING_PROXY_HOSTNAME",
    "ACCOUNT_ROLE_ARNS",
    "IGNORE_ZONES",
    "DNS_RESOLVERS",
    "MAX_RULE_DROP_PERCENT",
    "TEMPLATE_KEY",
    "RENDER_OPTIONS",
    "ROUTE53_REQUESTS_PER_SECOND",
    "SCAN_OWN_ACCOUNT",
    "PROXY_VPCS",
    "MEMBER_ACCOUNTS",
    "MEMBER_ROLE_NAME",
    "ROUTING_RULES",
    "OWNERSHIP_GRACE_HOURS",
    "EVENT_QUEUE_URL",
    "MEMBER_NETWORKS",
    "ALLOW_PUBLIC_BACKS",
    "MEMBER_REGIONS",
];

/// Every variable the configure function reads.
pub const CONFIGURE_VARIABLES: &[&str] = &[
    "CONFIG_KEY",
    "APPLY_DOCUMENT",
    "TARGET_TAG_KEY",
    "TARGET_TAG_VALUE",
    "MAX_CONCURRENCY",
    "MAX_ERRORS",
    "COMMAND_LOG_GROUP",
    "CONFIG_BUCKET",
    "FLEET_SILENT_AFTER_MINUTES",
    "DELIVERY_TIMEOUT_SECONDS",
];

pub const DEFAULT_CONFIG_KEY: &str = "haproxy/haproxy.cfg";
pub const DEFAULT_RESOLVER: &str = "169.254.169.253:53";

/// A setting that is missing or malformed: names the variable, what was expected and what
/// arrived.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{variable}: {expected}, got {got}")]
pub struct SettingsError {
    pub variable: &'static str,
    /// What was expected, as the message says it (`expected …`, or for `ROUTING_RULES` which
    /// rule and field, then `expected …`).
    pub expected: String,
    /// What arrived, quoted.
    pub got: String,
}

fn invalid(variable: &'static str, expected: impl Into<String>, got: &str) -> SettingsError {
    SettingsError {
        variable,
        expected: format!("expected {}", expected.into()),
        got: format!("{got:?}"),
    }
}

/// `ROUTING_RULES`: empty for the built-in rules, else the operator's table.
fn routing_rules(raw: Option<String>) -> Result<Vec<Rule>, SettingsError> {
    let Some(raw) = raw else {
        return Ok(DEFAULT_RULES.clone());
    };
    parse_rules(&raw).map_err(|err| match err {
        RulesError::Field {
            rule,
            field,
            expected,
            got,
        } => SettingsError {
            variable: "ROUTING_RULES",
            expected: format!("{rule}, field {field:?}: expected {expected}"),
            got,
        },
        other => SettingsError {
            variable: "ROUTING_RULES",
            expected: other.to_string(),
            got: format!("{:?}", crate::excerpt(&raw, 120)),
        },
    })
}

/// An IAM role to assume, one per member account.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct RoleArn {
    pub arn: String,
    pub account: String,
}

impl RoleArn {
    pub fn parse(raw: &str) -> Result<Self, SettingsError> {
        let expected = "role ARNs like arn:aws:iam::111111111111:role/name";
        let parts: Vec<&str> = raw.splitn(6, ':').collect();
        let valid = parts.len() == 6
            && parts[0] == "arn"
            && parts[1].starts_with("aws")
            && parts[2] == "iam"
            && is_account_id(parts[4])
            && parts[5].starts_with("role/")
            && parts[5].len() > 5;
        if !valid {
            return Err(invalid("ACCOUNT_ROLE_ARNS", expected, raw));
        }
        Ok(RoleArn {
            arn: raw.to_owned(),
            account: parts[4].to_owned(),
        })
    }
}

/// `IGNORE_ZONES`: zone names to skip in every account, or (`account:name`) in one account
/// only, so one of two same-named zones can be dropped.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IgnoreZones {
    everywhere: BTreeSet<String>,
    in_account: BTreeSet<(String, String)>,
}

impl IgnoreZones {
    /// Parses the comma-separated entries: `name` or `account:name` (12-digit account).
    pub fn parse(items: impl Iterator<Item = String>) -> Result<Self, SettingsError> {
        let expected = "zone names, each alone (every account) or as 111111111111:zone.name (one \
                        account)";
        let mut ignore = IgnoreZones::default();
        for raw in items {
            let (account, name) = match raw.split_once(':') {
                Some((account, name)) => (Some(account), name),
                None => (None, raw.as_str()),
            };
            let name = HostName::parse(name)
                .map_err(|err| invalid("IGNORE_ZONES", format!("{expected} ({err})"), &raw))?;
            match account {
                None => {
                    ignore.everywhere.insert(name.as_str().to_owned());
                }
                Some(account) if is_account_id(account) => {
                    ignore
                        .in_account
                        .insert((account.to_owned(), name.as_str().to_owned()));
                }
                Some(_) => return Err(invalid("IGNORE_ZONES", expected, &raw)),
            }
        }
        Ok(ignore)
    }

    /// True when the zone (any spelling of its name) is to be skipped in this account.
    pub fn ignores(&self, account: &str, zone_name: &str) -> bool {
        normalize(zone_name).to_host().is_ok_and(|name| {
            self.everywhere.contains(name.as_str())
                || self
                    .in_account
                    .contains(&(account.to_owned(), name.as_str().to_owned()))
        })
    }
}

/// A VPC the peering proxies resolve in: only zones associated with one of these may route
/// (`PROXY_VPCS`, `region:vpc-id`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct ProxyVpc {
    pub region: String,
    pub vpc_id: String,
}

impl ProxyVpc {
    pub fn parse(raw: &str) -> Result<Self, SettingsError> {
        let expected = "region:vpc-id entries like eu-west-1:vpc-0123456789abcdef0";
        let (region, vpc_id) = raw
            .split_once(':')
            .ok_or_else(|| invalid("PROXY_VPCS", expected, raw))?;
        let region_ok = is_region(region);
        let vpc_ok = vpc_id.strip_prefix("vpc-").is_some_and(|hex| {
            (8..=17).contains(&hex.len())
                && hex
                    .bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        });
        if !(region_ok && vpc_ok) {
            return Err(invalid("PROXY_VPCS", expected, raw));
        }
        Ok(ProxyVpc {
            region: region.to_owned(),
            vpc_id: vpc_id.to_owned(),
        })
    }
}

/// Whether `region` has the shape of an AWS region's name (`eu-west-1`, `us-gov-east-1`).
fn is_region(region: &str) -> bool {
    (6..=25).contains(&region.len())
        && region.split('-').count() >= 3
        && region
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && region.bytes().last().is_some_and(|b| b.is_ascii_digit())
}

/// The generator's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct GenerateSettings {
    pub config_bucket: String,
    pub config_key: String,
    pub proxy_hostnames: Vec<HostName>,
    pub account_roles: Vec<RoleArn>,
    /// Accounts listed at run time (`MEMBER_ACCOUNTS`, `MEMBER_ROLE_NAME`), besides
    /// `account_roles`.
    pub member_accounts: Option<MemberAccounts>,
    pub ignore_zones: IgnoreZones,
    /// Whether the function's own account is scanned (on unless `SCAN_OWN_ACCOUNT=false`).
    pub scan_own_account: bool,
    /// With VPCs, a zone routes only when associated with one of them; empty = the ownership
    /// rules of docs/ARCHITECTURE.md, "Who may route a zone name".
    pub proxy_vpcs: Vec<ProxyVpc>,
    pub dns_resolvers: Vec<SocketAddr>,
    pub max_rule_drop_percent: u8,
    /// An object in the config bucket holding a template that replaces the embedded one.
    pub template_key: Option<String>,
    pub render_options: RenderOptions,
    /// Route53 calls per second per account (Route53 allows 5, shared with every other tool).
    pub route53_requests_per_second: f64,
    /// The rule table: `ROUTING_RULES`, or the built-in rules when it is empty.
    pub routing_rules: Vec<Rule>,
    /// How long a zone keeps an SNI outside every zone after its record for it disappeared
    /// (docs/ARCHITECTURE.md, "Who may route a name outside every zone").
    pub ownership_grace_hours: u64,
    /// The queue the Route53 events wait in (`EVENT_QUEUE_URL`, set by the stack): a run
    /// started by a batch of it also takes what else waits there. `None`: only the batch.
    pub event_queue_url: Option<String>,
    /// `MEMBER_NETWORKS` and `ALLOW_PUBLIC_BACKS`: where a member's back may point.
    pub borders: BorderSettings,
    /// `MEMBER_REGIONS`: the regions the members' VPCs are read in, besides the proxies'.
    pub member_regions: MemberRegions,
}

impl GenerateSettings {
    /// Whether the generator reads `own_account` with its own credentials: with
    /// `SCAN_OWN_ACCOUNT`, or when `ACCOUNT_ROLE_ARNS` names a role there (never assumed: the
    /// function's own role already reads that account).
    pub fn scans_own_account(&self, own_account: &str) -> bool {
        self.scan_own_account || self.account_roles.iter().any(|r| r.account == own_account)
    }

    /// Reads the settings through `lookup` (the process environment in production).
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, SettingsError> {
        let get = |name: &str| {
            lookup(name)
                .map(|v| v.trim().to_owned())
                .filter(|v| !v.is_empty())
        };
        let config_bucket = get("CONFIG_BUCKET")
            .ok_or_else(|| invalid("CONFIG_BUCKET", "the name of the config bucket", ""))?;
        let account_roles = sorted(
            list(get("ACCOUNT_ROLE_ARNS"))
                .map(|raw| RoleArn::parse(&raw))
                .collect::<Result<Vec<_>, _>>()?,
        );
        let member_accounts = members::parse(get("MEMBER_ACCOUNTS"), get("MEMBER_ROLE_NAME"))?;
        let scan_own_account = scan_own_account(
            get("SCAN_OWN_ACCOUNT").as_deref(),
            !account_roles.is_empty() || member_accounts.is_some(),
        )?;
        let template_key = match get("TEMPLATE_KEY") {
            None => None,
            Some(raw) => Some(object_key("TEMPLATE_KEY", Some(raw))?),
        };
        Ok(GenerateSettings {
            config_bucket,
            config_key: object_key("CONFIG_KEY", get("CONFIG_KEY"))?,
            proxy_hostnames: proxy_hostnames(get("PEERING_PROXY_HOSTNAME"))?,
            account_roles,
            member_accounts,
            ignore_zones: IgnoreZones::parse(list(get("IGNORE_ZONES")))?,
            scan_own_account,
            proxy_vpcs: sorted(
                list(get("PROXY_VPCS"))
                    .map(|raw| ProxyVpc::parse(&raw))
                    .collect::<Result<Vec<_>, _>>()?,
            ),
            dns_resolvers: dns_resolvers(get("DNS_RESOLVERS"))?,
            max_rule_drop_percent: number(
                "MAX_RULE_DROP_PERCENT",
                get("MAX_RULE_DROP_PERCENT"),
                50,
                "a whole number from 0 to 100",
                |p: &u8| *p <= 100,
            )?,
            template_key,
            event_queue_url: queue_url(get("EVENT_QUEUE_URL"))?,
            borders: borders::parse(get("MEMBER_NETWORKS"), get("ALLOW_PUBLIC_BACKS"))?,
            member_regions: borders::member_regions(get("MEMBER_REGIONS"))?,
            render_options: render_options(get("RENDER_OPTIONS"), get("ROUTING_RULES").is_some())?,
            route53_requests_per_second: number(
                "ROUTE53_REQUESTS_PER_SECOND",
                get("ROUTE53_REQUESTS_PER_SECOND"),
                5.0,
                "a number of requests per second above 0 and at most 1000",
                |r: &f64| r.is_finite() && *r > 0.0 && *r <= 1000.0,
            )?,
            routing_rules: routing_rules(get("ROUTING_RULES"))?,
            ownership_grace_hours: number(
                "OWNERSHIP_GRACE_HOURS",
                get("OWNERSHIP_GRACE_HOURS"),
                DEFAULT_GRACE_HOURS,
                "a whole number of hours from 0 to 8760",
                |h: &u64| *h <= 8760,
            )?,
        })
    }

    /// Reads the process environment.
    pub fn from_env() -> Result<Self, SettingsError> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// The manifest sits beside the config under a name that does not share the config
    /// key's prefix, so an S3 notification filtered on the config key never fires for it.
    pub fn manifest_key(&self) -> String {
        manifest_key(&self.config_key)
    }
}

/// `haproxy/haproxy.cfg` → `haproxy/haproxy.manifest.json`.
pub fn manifest_key(config_key: &str) -> String {
    format!("{}.manifest.json", config_stem(config_key))
}

/// The config key without `.cfg`, which every key beside the config starts with, as the
/// template derives them too (`haproxy/haproxy.cfg` → `haproxy/haproxy`).
pub fn config_stem(config_key: &str) -> &str {
    config_key.strip_suffix(".cfg").unwrap_or(config_key)
}

fn sorted<T: Ord>(mut items: Vec<T>) -> Vec<T> {
    items.sort();
    items.dedup();
    items
}

/// A number within what `valid` accepts, or `default` when unset.
fn number<T: std::str::FromStr>(
    variable: &'static str,
    raw: Option<String>,
    default: T,
    expected: &str,
    valid: impl Fn(&T) -> bool,
) -> Result<T, SettingsError> {
    let Some(raw) = raw else { return Ok(default) };
    raw.parse::<T>()
        .ok()
        .filter(|value| valid(value))
        .ok_or_else(|| invalid(variable, expected, &raw))
}

fn proxy_hostnames(raw: Option<String>) -> Result<Vec<HostName>, SettingsError> {
    let names = list(raw)
        .map(|raw| {
            HostName::parse(&raw).map_err(|err| {
                invalid(
                    "PEERING_PROXY_HOSTNAME",
                    format!("host names ({err})"),
                    &raw,
                )
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    if names.is_empty() {
        return Err(invalid(
            "PEERING_PROXY_HOSTNAME",
            "the peering proxy's host name (comma-separated list allowed)",
            "",
        ));
    }
    Ok(names)
}

/// `SCAN_OWN_ACCOUNT`: on unless `false`, and off only with member accounts to scan instead.
fn scan_own_account(raw: Option<&str>, has_members: bool) -> Result<bool, SettingsError> {
    let scan = match raw {
        None | Some("true") => true,
        Some("false") => false,
        Some(other) => return Err(invalid("SCAN_OWN_ACCOUNT", "true or false", other)),
    };
    if !scan && !has_members {
        return Err(invalid(
            "SCAN_OWN_ACCOUNT",
            "true, or ACCOUNT_ROLE_ARNS or MEMBER_ACCOUNTS naming the accounts to scan (with \
             false and neither there is nothing to scan)",
            "false",
        ));
    }
    Ok(scan)
}

fn dns_resolvers(raw: Option<String>) -> Result<Vec<SocketAddr>, SettingsError> {
    let raw = raw.unwrap_or_else(|| DEFAULT_RESOLVER.to_owned());
    let resolvers = list(Some(raw))
        .map(|raw| parse_resolver(&raw))
        .collect::<Result<Vec<_>, _>>()?;
    if resolvers.is_empty() {
        return Err(invalid("DNS_RESOLVERS", "ip[:port] entries", ""));
    }
    Ok(resolvers)
}

/// `OWNERSHIP_GRACE_HOURS` when unset: a cluster recreated, a record rewritten, a zone moved
/// between accounts take hours, not minutes.
pub const DEFAULT_GRACE_HOURS: u64 = 24;

/// `RENDER_OPTIONS`. Its `backend_port` overrides the built-in rules' port (tests and demos
/// point every route at one local backend); beside `ROUTING_RULES`, whose rules each set
/// their own port, it is refused rather than silently overriding them. A `route_maxconn` of
/// 0 is refused.
fn render_options(raw: Option<String>, own_rules: bool) -> Result<RenderOptions, SettingsError> {
    let Some(raw) = raw else {
        return Ok(RenderOptions::default());
    };
    let options: RenderOptions = serde_json::from_str(&raw).map_err(|err| {
        invalid(
            "RENDER_OPTIONS",
            format!("a JSON object of template options ({err})"),
            &raw,
        )
    })?;
    if options.route_maxconn == Some(0) {
        return Err(invalid(
            "RENDER_OPTIONS",
            "a route_maxconn of at least 1 (0 would refuse every connection)",
            &raw,
        ));
    }
    match options.backend_port {
        Some(port) if own_rules => Err(invalid(
            "RENDER_OPTIONS",
            "no backend_port beside ROUTING_RULES (each rule's port is the port)",
            &format!("backend_port {port}"),
        )),
        _ => Ok(options),
    }
}

fn list(raw: Option<String>) -> std::vec::IntoIter<String> {
    raw.unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|item| !item.is_empty())
        .map(str::to_owned)
        .collect::<Vec<_>>()
        .into_iter()
}

/// `EVENT_QUEUE_URL`: an SQS queue URL, as CloudFormation's `Ref` of a queue gives it.
fn queue_url(raw: Option<String>) -> Result<Option<String>, SettingsError> {
    let Some(url) = raw else {
        return Ok(None);
    };
    let valid = (url.starts_with("https://") || url.starts_with("http://"))
        && url.len() <= 1024
        && !url
            .bytes()
            .any(|b| b.is_ascii_whitespace() || b.is_ascii_control());
    if valid {
        Ok(Some(url))
    } else {
        Err(invalid(
            "EVENT_QUEUE_URL",
            "an SQS queue URL (https://sqs.<region>.amazonaws.com/<account>/<name>)",
            &url,
        ))
    }
}

fn object_key(variable: &'static str, raw: Option<String>) -> Result<String, SettingsError> {
    let key = raw.unwrap_or_else(|| DEFAULT_CONFIG_KEY.to_owned());
    let valid = !key.starts_with('/')
        && key.len() <= 1024
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"/._-".contains(&b));
    if valid {
        Ok(key)
    } else {
        Err(invalid(
            variable,
            "an S3 key of letters, digits and / . _ - (no leading /)",
            &key,
        ))
    }
}

fn parse_resolver(raw: &str) -> Result<SocketAddr, SettingsError> {
    let expected = "ip[:port] entries, like 169.254.169.253:53 or [fd00::2]:53";
    if let Ok(addr) = raw.parse::<SocketAddr>() {
        return Ok(addr);
    }
    raw.parse::<IpAddr>()
        .map(|ip| SocketAddr::new(ip, 53))
        .map_err(|_| invalid("DNS_RESOLVERS", expected, raw))
}

#[cfg(test)]
mod tests;
