//! The config artifact's provenance header: the comment lines haproxy.cfg starts with, which
//! the apply document on every instance reads back (docs/ARCHITECTURE.md, "The config artifact").
//!
//! ```text
//! # autoproxy: generated haproxy.cfg; do not edit, every change is overwritten
//! # generation: 42
//! # sha256: <hex sha256 of the body>
//! # generated-at: 2026-11-23T03:14:02Z
//! # trigger: schedule
//! # rules: 12
//! global
//! ```
//! The header is every leading line that starts with `#`; the *body* is everything from the
//! first line that does not, to the end of the file, byte for byte (on an instance:
//! `tail -n +N`). The same values are stored as S3 object metadata under [`META_GENERATION`]
//! and its siblings.
//!
//! The body also carries the route tables, as comment lines HAProxy skips, at its end:
//!
//! ```text
//! #@route proxy.api.prod.example.internal api.prod.example.internal:443 api 111111111111 Z0AAA
//! #@suffix int.prod.example.internal ingress-int.prod.example.internal:443 ingress-int 111111111111 Z0AAA
//! #@nameserver 169.254.169.253:53
//! #@proxy peering-proxy.tools.example.internal
//! #@network 111111111111 10.1.0.0/16
//! #@public-backs refuse
//! ```
//! `autoproxy-agent apply` writes the first two fields (key, `host:port`) of the `#@route`
//! and `#@suffix` lines to the map files of [`MapFiles`] beside the config, and the header's
//! generation to its generation map, so the one S3 object (one version, one sha256) holds
//! everything HAProxy reads but the addresses. Those come from `autoproxy-agent resolve` on
//! the instance, which reads the host names and `#@nameserver` lines from the installed
//! config. The `#@network <account> <range>` lines and the `#@public-backs allow|refuse` line
//! are the borders the generator judged the routes' literal addresses by ([`borders`]): the
//! agent judges the addresses it resolves by the same ones, each against the route's account
//! (the route line's fourth field). The `#@proxy <name>` lines name the peering proxy itself
//! ([`proxy_names`]): a back that resolves to it is a loop the agent never routes.

use sha2::{Digest, Sha256};

use crate::networks::{Borders, IpNet, Networks, PublicBacks};

/// S3 metadata keys (`x-amz-meta-…`) carrying the header's values.
pub const META_GENERATION: &str = "generation";
/// The largest generation: 18 digits, as many as the apply document reads (and far above any
/// clock in seconds), so arithmetic on it cannot overflow.
pub const MAX_GENERATION: u64 = 999_999_999_999_999_999;
/// What a generation must be, for error messages.
pub const GENERATION_EXPECTED: &str = "a whole number of at most 18 digits";

/// A generation as written in a header or in object metadata; `None` for anything but a whole
/// number up to [`MAX_GENERATION`].
pub fn parse_generation(text: &str) -> Option<u64> {
    let text = text.trim();
    if text.is_empty() || text.len() > 18 || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok().filter(|g| *g <= MAX_GENERATION)
}
pub const META_SHA256: &str = "sha256";
pub const META_GENERATED_AT: &str = "generated-at";
pub const META_TRIGGER: &str = "trigger";
pub const META_RULES: &str = "rules";

/// The values of the provenance header.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Header {
    pub generation: u64,
    /// Hex sha256 of the body.
    pub sha256: String,
    pub generated_at: String,
    pub trigger: String,
    pub rules: usize,
}

/// Why a text is not a well-formed autoproxy config.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HeaderError {
    #[error("expected a header line '# {field}: …', found none")]
    Missing { field: &'static str },
    #[error("expected '# {field}:' to hold {expected}, got {got:?}")]
    Invalid {
        field: &'static str,
        expected: &'static str,
        got: String,
    },
    #[error("expected the body's sha256 to be {header}, the body hashes to {body}")]
    Mismatch { header: String, body: String },
}

/// The byte offset where the body starts: the first line not starting with `#`.
pub fn body_offset(text: &str) -> usize {
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        if !line.starts_with('#') {
            return offset;
        }
        offset += line.len();
    }
    offset
}

/// The body: everything after the header.
pub fn body(text: &str) -> &str {
    &text[body_offset(text)..]
}

/// Hex sha256 of some bytes.
pub fn sha256_hex(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    let mut hex = String::with_capacity(64);
    for byte in digest {
        hex.push(char::from(HEX[usize::from(byte >> 4)]));
        hex.push(char::from(HEX[usize::from(byte & 0xf)]));
    }
    hex
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// Where a config's map files live, relative to the config's directory (the template says
/// `default-path config`). The paths are the same for every generation, so a change of routes
/// alone leaves the config's structure as it was, and the agent can apply it to the running
/// HAProxy over its runtime API instead of reloading (docs/ARCHITECTURE.md, "When a proxy
/// reloads").
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct MapFiles {
    /// Exact SNI → `host:port`.
    pub routes: String,
    /// SNI suffix (without its leading dot) → `host:port`.
    pub suffixes: String,
    /// Host name → IPv4 address; kept by autoproxy-resolver, shared by every generation.
    pub addresses: String,
    /// One entry, [`GENERATION_KEY`] → the generation whose routes HAProxy holds: the
    /// running generation, which `description` (fixed when a worker starts) cannot say once
    /// routes changed at run time. `None` in the per-generation layout, which has none.
    pub generation: Option<String>,
}

/// How many labels HAProxy strips from an SNI to find its suffix route (the template's loop
/// over `suffix_depth`): a name more labels below a suffix than this matches none.
pub const SUFFIX_DEPTH: usize = 8;

/// The directory of every map file, relative to the config's directory.
pub const MAPS_DIR: &str = "autoproxy";
/// The address map, relative to the config's directory: one for every generation.
pub const ADDRESS_MAP: &str = "autoproxy/addresses.map";

/// The prefix of a route-table line in the body: exact routes, suffix routes, nameservers.
pub const ROUTE_LINE: &str = "#@route ";
pub const SUFFIX_LINE: &str = "#@suffix ";
pub const NAMESERVER_LINE: &str = "#@nameserver ";
/// The prefix of a member's network line: `#@network <account> <range>`.
pub const NETWORK_LINE: &str = "#@network ";
/// The prefix of the public-backs line: `#@public-backs allow` or `#@public-backs refuse`.
pub const PUBLIC_BACKS_LINE: &str = "#@public-backs ";
/// The prefix of a line naming the peering proxy itself: `#@proxy <name>`, one for each of
/// its host names (`PEERING_PROXY_HOSTNAME`, the load balancer's among them).
pub const PROXY_LINE: &str = "#@proxy ";
/// The key of the generation map's one entry.
pub const GENERATION_KEY: &str = "running";

impl MapFiles {
    /// The layout every config is rendered with.
    pub fn stable() -> MapFiles {
        MapFiles {
            routes: "autoproxy/routes.map".to_owned(),
            suffixes: "autoproxy/suffixes.map".to_owned(),
            addresses: ADDRESS_MAP.to_owned(),
            generation: Some("autoproxy/generation.map".to_owned()),
        }
    }

    /// The layout of configs rendered by earlier versions: route maps in a directory of
    /// their generation. The agent still installs such a config, so a fleet moves from one
    /// layout to the other with one ordinary reload.
    pub fn per_generation(generation: u64) -> MapFiles {
        MapFiles {
            routes: format!("autoproxy/gen-{generation}/routes.map"),
            suffixes: format!("autoproxy/gen-{generation}/suffixes.map"),
            addresses: ADDRESS_MAP.to_owned(),
            generation: None,
        }
    }

    /// The layout a config of `generation` names: the per-generation one when its body
    /// reads that generation's route map, else the stable one.
    pub fn named_by(text: &str, generation: u64) -> MapFiles {
        let legacy = MapFiles::per_generation(generation);
        if body(text).contains(&legacy.routes) {
            legacy
        } else {
            MapFiles::stable()
        }
    }

    /// The generation map's text for `generation`.
    pub fn generation_table(generation: u64) -> String {
        format!("{GENERATION_KEY} {generation}\n")
    }

    /// The contents of the two route maps of a config, as the apply document writes them:
    /// the key and `host:port` of each `#@route` / `#@suffix` line, in order.
    pub fn route_tables(text: &str) -> (String, String) {
        let (mut routes, mut suffixes) = (String::new(), String::new());
        for line in body(text).lines() {
            let (table, entry) = if let Some(entry) = line.strip_prefix(ROUTE_LINE) {
                (&mut routes, entry)
            } else if let Some(entry) = line.strip_prefix(SUFFIX_LINE) {
                (&mut suffixes, entry)
            } else {
                continue;
            };
            let mut fields = entry.split_whitespace();
            if let (Some(key), Some(target)) = (fields.next(), fields.next()) {
                table.push_str(key);
                table.push(' ');
                match target_host(target) {
                    Some((host, port)) => {
                        table.push_str(&host);
                        table.push(':');
                        table.push_str(port);
                    }
                    None => table.push_str(target),
                }
                table.push('\n');
            }
        }
        (routes, suffixes)
    }
}

/// A route line's `host:port`, its host normalised the one way every reader of the tables
/// uses (the map files, the address service, the agent's judgement of which targets need an
/// address): lower-cased, without a trailing dot. `None` without a port or a host.
pub fn target_host(target: &str) -> Option<(String, &str)> {
    let (host, port) = target.rsplit_once(':')?;
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    (!host.is_empty()).then_some((host, port))
}

/// The back hosts of a config's `#@route` and `#@suffix` lines: the host of each
/// `host:port`, lower-cased and without a trailing dot, once each, sorted. IP literals and
/// names that are not plain host names are returned too: what to do with them is the
/// reader's choice (the resolver skips literals and logs the rest).
pub fn route_hosts(text: &str) -> Vec<String> {
    let mut hosts: Vec<String> = route_targets(text)
        .filter_map(|target| target_host(target).map(|(host, _)| host))
        .collect();
    hosts.sort();
    hosts.dedup();
    hosts
}

/// The target (`host:port`, the second field) of each `#@route` and `#@suffix` line of a
/// config's body, in order.
pub fn route_targets(text: &str) -> impl Iterator<Item = &str> {
    body(text)
        .lines()
        .filter_map(|line| {
            line.strip_prefix(ROUTE_LINE)
                .or_else(|| line.strip_prefix(SUFFIX_LINE))
        })
        .filter_map(|entry| entry.split_whitespace().nth(1))
}

/// The peering proxy's own names, from a config's `#@proxy` lines: each that is a plain host
/// name, lower-cased and without a trailing dot, once each, sorted; the others are skipped.
pub fn proxy_names(text: &str) -> std::collections::BTreeSet<String> {
    body(text)
        .lines()
        .filter_map(|line| line.strip_prefix(PROXY_LINE))
        .filter_map(|name| crate::names::HostName::parse(name.trim()).ok())
        .map(|name| name.as_str().to_owned())
        .collect()
}

/// The nameservers of a config's `#@nameserver ip:port` lines, in order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Nameservers {
    /// Every line that holds an `ip:port` (IPv6 as `[ip]:port`), once each.
    pub valid: Vec<std::net::SocketAddr>,
    /// The text of every line that does not.
    pub ignored: Vec<String>,
}

/// Reads the `#@nameserver` lines of a config.
pub fn nameservers(text: &str) -> Nameservers {
    let mut found = Nameservers::default();
    for entry in body(text)
        .lines()
        .filter_map(|line| line.strip_prefix(NAMESERVER_LINE))
    {
        match entry
            .split_whitespace()
            .next()
            .and_then(|word| word.parse().ok())
        {
            Some(addr) if !found.valid.contains(&addr) => found.valid.push(addr),
            Some(_) => {}
            None => found.ignored.push(entry.trim().to_owned()),
        }
    }
    found
}

/// The borders of a config's `#@network` and `#@public-backs` lines: where its routes' backs
/// may point ([`crate::networks`]). An artifact without a `#@public-backs` line (an earlier
/// generator, a template of one's own without the lines) is [`Borders::unjudged`]: only what
/// is never a backend is refused. A public-backs value other than `allow` refuses; a network
/// line that is not `<account> <range>` is skipped (the generator writes none such, and the
/// sha256 covers the body).
pub fn borders(text: &str) -> Borders {
    let mut networks = Networks::default();
    let mut public = None;
    for line in body(text).lines() {
        if let Some(entry) = line.strip_prefix(NETWORK_LINE) {
            let mut words = entry.split_whitespace();
            if let (Some(account), Some(Ok(range)), None) = (
                words.next(),
                words.next().map(str::parse::<IpNet>),
                words.next(),
            ) {
                networks.insert(account, range);
            }
        } else if let Some(value) = line.strip_prefix(PUBLIC_BACKS_LINE) {
            public = Some(match value.trim() {
                PUBLIC_BACKS_ALLOW => PublicBacks::Allowed,
                _ => PublicBacks::Refused,
            });
        }
    }
    match public {
        Some(public) => Borders::new(networks, public),
        None => Borders::unjudged(),
    }
}

/// The values of the `#@public-backs` line.
pub const PUBLIC_BACKS_ALLOW: &str = "allow";
pub const PUBLIC_BACKS_REFUSE: &str = "refuse";

/// The word of the `#@public-backs` line for `public`.
pub fn public_backs_word(public: PublicBacks) -> &'static str {
    match public {
        PublicBacks::Allowed => PUBLIC_BACKS_ALLOW,
        PublicBacks::Refused => PUBLIC_BACKS_REFUSE,
    }
}

/// Reads the header back and checks the body against its sha256.
pub fn parse_header(text: &str) -> Result<Header, HeaderError> {
    let head = &text[..body_offset(text)];
    let field = |name: &'static str| -> Result<&str, HeaderError> {
        let prefix = format!("# {name}: ");
        head.lines()
            .find_map(|line| line.strip_prefix(prefix.as_str()))
            .map(str::trim)
            .ok_or(HeaderError::Missing { field: name })
    };
    let generation = field("generation")?;
    let generation = parse_generation(generation).ok_or_else(|| HeaderError::Invalid {
        field: "generation",
        expected: GENERATION_EXPECTED,
        got: generation.to_owned(),
    })?;
    let sha256 = field("sha256")?;
    if sha256.len() != 64 || !sha256.bytes().all(|b| HEX.contains(&b)) {
        return Err(HeaderError::Invalid {
            field: "sha256",
            expected: "64 lower-case hex digits",
            got: sha256.to_owned(),
        });
    }
    let rules = field("rules")?;
    let rules = rules.parse().map_err(|_| HeaderError::Invalid {
        field: "rules",
        expected: "a whole number",
        got: rules.to_owned(),
    })?;
    let header = Header {
        generation,
        sha256: sha256.to_owned(),
        generated_at: field("generated-at")?.to_owned(),
        trigger: field("trigger")?.to_owned(),
        rules,
    };
    let actual = sha256_hex(body(text).as_bytes());
    if actual != header.sha256 {
        return Err(HeaderError::Mismatch {
            header: header.sha256,
            body: actual,
        });
    }
    Ok(header)
}

#[cfg(test)]
mod tests;
