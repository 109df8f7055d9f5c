//! Renders haproxy.cfg from the routes with minijinja (strict undefined behaviour), and stamps
//! the provenance header (see [`crate::artifact`]).

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;

use minijinja::value::Serde;
use minijinja::{Environment, UndefinedBehavior, Value, syntax::SyntaxConfig};
use serde::{Deserialize, Serialize};

use crate::artifact::{self, Header, HeaderError, MapFiles};
use crate::model::{Route, SniMatch};
use crate::names::HostName;
use crate::networks::Borders;

/// The default template, embedded: a Lambda ships only its `bootstrap`.
pub const DEFAULT_TEMPLATE: &str = include_str!("../../templates/haproxy.cfg.j2");

/// Listen addresses, paths and tunables the template reads. The defaults are production
/// values; tests and the demo override them to run HAProxy unprivileged on loopback.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RenderOptions {
    /// `bind` of the TLS passthrough frontend.
    pub https_bind: String,
    /// `bind` of the frontend that redirects plain HTTP to HTTPS.
    pub http_bind: String,
    /// `bind` of the stats listener: the stats page, `/metrics` (HAProxy's Prometheus
    /// exporter), `/ready` and `/agent/metrics`. Loopback unless something off the instance
    /// scrapes it (a VPC's Prometheus, a load balancer's health check).
    pub stats_bind: String,
    /// Path of the runtime API socket (`show info` reads the running generation there).
    pub stats_socket: String,
    /// Path of the address service's HTTP socket, where the stats listener forwards `/ready`
    /// and `/agent/metrics` (`server agent unix@<path>` of `backend autoproxy_agent`).
    pub agent_socket: String,
    /// User and group HAProxy drops to; empty keeps the current ones.
    pub user: String,
    pub group: String,
    /// Directory HAProxy chroots into; empty for none.
    pub chroot: String,
    /// Arguments of the global `log` line.
    pub log: String,
    /// Global connection limit.
    pub maxconn: u32,
    /// How many connections one route may hold at once (counted by route in a stick
    /// table); the connection past it is refused as `reject_route_full`. `None`: a tenth of
    /// `maxconn` ([`RenderOptions::route_share`]).
    pub route_maxconn: Option<u32>,
    /// How long an old worker may keep serving after a reload (Kubernetes watches last
    /// hours; old workers must not pile up).
    pub hard_stop_after: String,
    /// Overrides the rules' port (`RENDER_OPTIONS.backend_port`: the demo's backs listen
    /// unprivileged).
    pub backend_port: Option<u16>,
    /// Serve HAProxy's Prometheus exporter at `/metrics` of the stats listener. Off for a
    /// HAProxy built without it (`haproxy -vv` lacks "Prometheus exporter"), whose `haproxy
    /// -c` refuses the `use-service prometheus-exporter` line.
    pub prometheus_exporter: bool,
}

impl Default for RenderOptions {
    fn default() -> Self {
        RenderOptions {
            https_bind: ":443".to_owned(),
            http_bind: ":80".to_owned(),
            stats_bind: "127.0.0.1:8404".to_owned(),
            stats_socket: "/run/haproxy/admin.sock".to_owned(),
            agent_socket: "/run/haproxy/autoproxy-agent.sock".to_owned(),
            user: "haproxy".to_owned(),
            group: "haproxy".to_owned(),
            chroot: "/var/lib/haproxy".to_owned(),
            log: "stdout format raw local0".to_owned(),
            maxconn: 20_000,
            route_maxconn: None,
            hard_stop_after: "30m".to_owned(),
            backend_port: None,
            prometheus_exporter: true,
        }
    }
}

/// A route's default share of `maxconn`, as a divisor: ten routes past their share (ten
/// loops, ten runaway clients) are needed to fill the proxy, while one busy route still has
/// thousands of connections (2,000 of the production 20,000).
const ROUTE_SHARE_DIVISOR: u32 = 10;

impl RenderOptions {
    /// The connections one route may hold: `route_maxconn`, else a tenth of `maxconn`; at
    /// least 1.
    pub fn route_share(&self) -> u32 {
        self.route_maxconn
            .unwrap_or(self.maxconn / ROUTE_SHARE_DIVISOR)
            .max(1)
    }
}

/// What the template is given besides the routes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenderInput<'a> {
    pub routes: &'a [Route],
    pub resolvers: &'a [SocketAddr],
    /// The peering proxy's own host names (`PEERING_PROXY_HOSTNAME`): written as `#@proxy`
    /// lines, so the agent never routes a host that resolves to the proxy itself.
    pub proxies: &'a [HostName],
    pub options: &'a RenderOptions,
    pub generation: u64,
    pub generated_at: &'a str,
    pub trigger: &'a str,
}

/// A rendered config and its header values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rendered {
    pub text: String,
    pub header: Header,
}

/// Why a config could not be rendered. Nothing is published then.
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    #[error("the template does not compile: {0:#}")]
    Template(#[source] minijinja::Error),
    #[error("the template failed to render: {0:#}")]
    Render(#[source] minijinja::Error),
    #[error("the template must start with the provenance header and use sha256 only there: {0}")]
    Header(#[source] HeaderError),
    #[error("expected at least one DNS resolver for the resolvers section, got none")]
    NoResolvers,
}

/// A compiled template, reusable across renders.
#[derive(Debug)]
pub struct Renderer {
    env: Environment<'static>,
}

const TEMPLATE_NAME: &str = "haproxy.cfg";

/// Characters no value may carry into haproxy.cfg, whatever template prints it: they end a
/// statement, start a comment, quote, or expand variables.
const FORBIDDEN: &[char] = &['\n', '\r', '#', '"', '\'', '$', '\\', '\0'];

impl Renderer {
    /// Compiles a template. `source` is the embedded default or an operator's own.
    pub fn new(source: &str) -> Result<Self, RenderError> {
        let mut env = Environment::new();
        env.set_undefined_behavior(UndefinedBehavior::Strict);
        let syntax = SyntaxConfig::builder()
            .trim_blocks(true)
            .lstrip_blocks(true)
            .keep_trailing_newline(true)
            .build()
            .map_err(RenderError::Template)?;
        env.set_syntax(syntax);
        env.set_formatter(|out, state, value| {
            if let Some(text) = value.as_str()
                && let Some(bad) = forbidden_char(text)
            {
                return Err(minijinja::Error::new(
                    minijinja::ErrorKind::InvalidOperation,
                    format!("refusing to write {text:?} into haproxy.cfg: it contains {bad:?}"),
                ));
            }
            minijinja::escape_formatter(out, state, value)
        });
        env.add_template_owned(TEMPLATE_NAME, source.to_owned())
            .map_err(RenderError::Template)?;
        Ok(Renderer { env })
    }

    /// Renders the config and stamps the sha256 of its body into the header.
    ///
    /// The body does not depend on the sha256, so the template is rendered once with a
    /// placeholder hash, the body hashed, and the placeholder (which may appear only in the
    /// header) replaced: one render, not two (10,000 routes take tens of ms each). The
    /// header is parsed back and must carry exactly the values given.
    pub fn render(&self, input: &RenderInput<'_>) -> Result<Rendered, RenderError> {
        self.render_bordered(input, None)
    }

    /// [`Renderer::render`], with the borders the routes were judged by written as
    /// `#@network` and `#@public-backs` lines, which the agent judges the addresses it resolves
    /// by ([`artifact::borders`]). What the generator publishes.
    pub fn render_within(
        &self,
        input: &RenderInput<'_>,
        borders: &Borders,
    ) -> Result<Rendered, RenderError> {
        self.render_bordered(input, Some(borders))
    }

    fn render_bordered(
        &self,
        input: &RenderInput<'_>,
        borders: Option<&Borders>,
    ) -> Result<Rendered, RenderError> {
        if input.resolvers.is_empty() {
            return Err(RenderError::NoResolvers);
        }
        let template = self
            .env
            .get_template(TEMPLATE_NAME)
            .map_err(RenderError::Template)?;
        let routes = route_views(input.routes, input.options.backend_port);
        let resolvers: Vec<String> = input.resolvers.iter().map(ToString::to_string).collect();
        let proxies: Vec<&str> = input.proxies.iter().map(HostName::as_str).collect();
        let maps = MapFiles::stable();
        let networks = borders.map(network_views).unwrap_or_default();
        let public_backs = borders.map(|b| artifact::public_backs_word(b.public()));
        // The template reads the share as a number, whether set or defaulted.
        let options = RenderOptions {
            route_maxconn: Some(input.options.route_share()),
            ..input.options.clone()
        };
        let mut header = Header {
            generation: input.generation,
            sha256: "0".repeat(64),
            generated_at: input.generated_at.to_owned(),
            trigger: input.trigger.to_owned(),
            rules: input.routes.len(),
        };
        let context = |header: &Header| {
            minijinja::context! {
                header => Value::from(Serde(header)),
                routes => Value::from(Serde(&routes)),
                resolvers => Value::from(Serde(&resolvers)),
                proxies => Value::from(Serde(&proxies)),
                options => Value::from(Serde(&options)),
                maps => Value::from(Serde(&maps)),
                networks => Value::from(Serde(&networks)),
                public_backs => Value::from(public_backs),
                generation_key => artifact::GENERATION_KEY,
                suffix_depth => artifact::SUFFIX_DEPTH,
            }
        };
        let draft = template
            .render(context(&header))
            .map_err(RenderError::Render)?;
        let placeholder = std::mem::replace(
            &mut header.sha256,
            artifact::sha256_hex(artifact::body(&draft).as_bytes()),
        );
        let text = draft.replacen(&placeholder, &header.sha256, 1);
        let parsed = artifact::parse_header(&text).map_err(RenderError::Header)?;
        if parsed != header {
            return Err(RenderError::Header(HeaderError::Invalid {
                field: "generation",
                expected: "the values passed to the template",
                got: format!("{parsed:?}"),
            }));
        }
        Ok(Rendered { text, header })
    }
}

/// The first character of `text` that must not reach haproxy.cfg, if any.
///
/// Every printed value passes here (5 MB of them for 10,000 routes), so the common case,
/// printable ASCII without a forbidden character, is decided on bytes; anything else takes
/// the exact check on characters (which also catches non-ASCII control characters).
fn forbidden_char(text: &str) -> Option<char> {
    let plain = text
        .bytes()
        .all(|b| (0x20..0x7f).contains(&b) && !matches!(b, b'#' | b'"' | b'\'' | b'$' | b'\\'));
    if plain {
        return None;
    }
    text.chars()
        .find(|c| FORBIDDEN.contains(c) || c.is_control())
}

/// A member's network as the template sees it (`#@network <account> <range>`).
#[derive(Debug, Serialize)]
struct NetworkView {
    account: String,
    range: String,
}

/// Every member's networks, by account then range.
fn network_views(borders: &Borders) -> Vec<NetworkView> {
    borders
        .networks()
        .ranges()
        .iter()
        .flat_map(|(account, ranges)| {
            ranges.iter().map(move |range| NetworkView {
                account: account.clone(),
                range: range.to_string(),
            })
        })
        .collect()
}

/// A route as the template sees it, with its HAProxy identifiers.
#[derive(Debug, Serialize)]
struct RouteView<'a> {
    /// HAProxy backend name (a per-route template's): rule, zone name and a short hash of
    /// account and zone id.
    backend: String,
    /// ACL name, same derivation.
    acl: String,
    rule: &'a str,
    sni: &'a str,
    /// The key of the route's map entry: the exact SNI, or the suffix without its dot.
    map_key: &'a str,
    #[serde(rename = "match")]
    sni_match: SniMatch,
    /// The route's back (`route.server` in templates, a name custom templates rely on).
    server: &'a str,
    port: u16,
    zone: &'a str,
    zone_id: &'a str,
    account: &'a str,
}

fn route_views(routes: &[Route], port_override: Option<u16>) -> Vec<RouteView<'_>> {
    let mut seen = HashSet::with_capacity(routes.len());
    // Both rules of a zone share its tag: hash each zone once.
    let mut tags: HashMap<(&str, &str), String> = HashMap::with_capacity(routes.len());
    routes
        .iter()
        .map(|route| {
            let tag = tags
                .entry((&route.account, &route.zone_id))
                .or_insert_with(|| short_hash(&route.account, &route.zone_id, 8));
            let mut id = format!("{}_{}_{tag}", route.rule, route.zone_name);
            // Resolved routes never share rule and zone name, so this only guards against a
            // caller that skipped `rules::merge_claims`: names stay unique whatever arrives.
            if seen.contains(&id) {
                let long = short_hash(&route.account, &route.zone_id, 64);
                id = format!("{}_{}_{long}_{}", route.rule, route.zone_name, seen.len());
            }
            let view = RouteView {
                backend: format!("be_{id}"),
                acl: format!("sni_{id}"),
                rule: &route.rule,
                sni: &route.sni,
                map_key: route.sni.strip_prefix('.').unwrap_or(&route.sni),
                sni_match: route.sni_match,
                server: route.back.as_str(),
                port: port_override.unwrap_or(route.port),
                zone: route.zone_name.as_str(),
                zone_id: &route.zone_id,
                account: &route.account,
            };
            seen.insert(id);
            view
        })
        .collect()
}

fn short_hash(account: &str, zone_id: &str, len: usize) -> String {
    let mut hex = artifact::sha256_hex(format!("{account}/{zone_id}").as_bytes());
    hex.truncate(len);
    hex
}

#[cfg(test)]
mod tests;
