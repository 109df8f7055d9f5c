//! The data-plane benchmark's building blocks: a real HAProxy on loopback inside a private
//! mount namespace whose `/etc/resolv.conf` points at a counting DNS server (so every query
//! it sends, libc lookups at check and start time included, is seen), the synthetic routes,
//! the worker's CPU from `/proc`, and client loops of TLS ClientHellos.
//!
//! Two designs are compared on the same routes: the per-route template the project used
//! before (an ACL, a `use_backend` and a resolving, health-checked backend per route; kept
//! verbatim in `tests/data/per-route.cfg.j2`) and the map-based default template.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use autoproxy::artifact::MapFiles;
use autoproxy::model::{Route, SniMatch};
use autoproxy::names::HostName;
use autoproxy::render::{DEFAULT_TEMPLATE, RenderOptions};
use autoproxy::rules::merge_claims;

use crate::dns::{Query, max_per_second, per_second};
use crate::moto::free_port;
use crate::proxy::{HaproxyFiles, probe};

mod load;
mod measure;
mod proxy;

pub use load::*;
pub use measure::*;
pub use proxy::*;

/// The template before the map-based design: one ACL, `use_backend` and backend per route.
pub const PER_ROUTE_TEMPLATE: &str = include_str!("../data/per-route.cfg.j2");

/// The map-based template before the reject counters and the stats listener's exporter and
/// agent backend (rejects closed in the frontend), kept verbatim: the baseline the counters'
/// cost is measured against.
pub const MAPS_BEFORE_COUNTERS_TEMPLATE: &str = include_str!("../data/maps-before-counters.cfg.j2");

/// Which template a run measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Design {
    /// `tests/data/per-route.cfg.j2`: the template as it was.
    PerRoute,
    /// The default template: map lookups, one backend, addresses from autoproxy-resolver.
    Maps,
}

impl Design {
    pub fn label(self) -> &'static str {
        match self {
            Design::PerRoute => "before: per route",
            Design::Maps => "after: maps",
        }
    }

    pub fn template(self) -> &'static str {
        match self {
            Design::PerRoute => PER_ROUTE_TEMPLATE,
            Design::Maps => DEFAULT_TEMPLATE,
        }
    }
}

/// Synthetic routes for `count / 2` zones `z00000.bench.internal`, …: each zone has an API
/// route (SNI `proxy.api.<zone>` to `api.<zone>`) and an internal-ingress suffix route
/// (`*.int.<zone>` to `ingress-int.<zone>`), in the generator's order (exact routes first).
pub fn routes(count: usize) -> Vec<Route> {
    let zones = count.div_ceil(2);
    let mut candidates = Vec::with_capacity(2 * zones);
    for i in 0..zones {
        let zone = format!("z{i:05}.bench.internal");
        let zone_name = HostName::parse(&zone).expect("a valid zone name");
        let route = |rule: &str, sni: String, sni_match, backend: &str| Route {
            rule: rule.to_owned(),
            account: format!("{:012}", 100_000_000_000u64 + (i % 50) as u64),
            zone_id: format!("Z{i:06}"),
            zone_name: zone_name.clone(),
            sni,
            sni_match,
            back: zone_name.with_prefix(backend),
            port: 443,
            records: vec![],
        };
        candidates.push(route(
            "api",
            format!("proxy.api.{zone}"),
            SniMatch::Exact,
            "api",
        ));
        candidates.push(route(
            "ingress-int",
            format!(".int.{zone}"),
            SniMatch::Suffix,
            "ingress-int",
        ));
    }
    candidates.truncate(count);
    merge_claims(candidates).0
}

/// The SNI a client sends to reach `route`: the name itself, or a name under the suffix.
pub fn client_sni(route: &Route) -> String {
    match route.sni_match {
        SniMatch::Exact => route.sni.clone(),
        SniMatch::Suffix => format!("web{}", route.sni),
    }
}

/// One route a client exercises, and what it must read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub sni: String,
    /// The banner of the backend the route's host name resolves to.
    pub banner: String,
}

/// The first and last exact route and the first and last suffix route, in config order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ends {
    pub first_exact: Target,
    pub last_exact: Target,
    pub first_suffix: Target,
    pub last_suffix: Target,
}

impl Ends {
    pub fn find(routes: &[Route], banner: impl Fn(&Route) -> String) -> Ends {
        let target = |route: &Route| Target {
            sni: client_sni(route),
            banner: banner(route),
        };
        let of = |kind| routes.iter().filter(move |r| r.sni_match == kind);
        let pick = |kind, last: bool| {
            let route = if last {
                of(kind).next_back()
            } else {
                of(kind).next()
            };
            target(route.expect("routes of both kinds"))
        };
        Ends {
            first_exact: pick(SniMatch::Exact, false),
            last_exact: pick(SniMatch::Exact, true),
            first_suffix: pick(SniMatch::Suffix, false),
            last_suffix: pick(SniMatch::Suffix, true),
        }
    }

    pub fn all(&self) -> [&Target; 4] {
        [
            &self.first_exact,
            &self.last_exact,
            &self.first_suffix,
            &self.last_suffix,
        ]
    }
}

/// Renders `routes` with `design`'s template through the real renderer.
pub fn render(
    design: Design,
    routes: &[Route],
    resolvers: &[SocketAddr],
    options: &RenderOptions,
    generation: u64,
) -> String {
    crate::proxy::render_template(design.template(), generation, routes, options, resolvers)
}

/// Where the data-plane section of docs/BENCHMARKS.md starts and ends: `bench` rewrites the
/// rest of the file and keeps this part, and the sections for other HAProxy versions
/// ([`markers`]) after it.
pub const BEGIN: &str = "<!-- dataplane:begin -->";
pub const END: &str = "<!-- dataplane:end -->";
/// What every data-plane marker starts with: `bench` keeps the file from the first one on.
pub const MARKER: &str = "<!-- dataplane";

/// The begin and end markers of the data-plane section: the main one ([`BEGIN`], [`END`]), or
/// the one for another HAProxy branch (`3.0`).
pub fn markers(branch: Option<&str>) -> (String, String) {
    match branch {
        None => (BEGIN.to_owned(), END.to_owned()),
        Some(branch) => (
            format!("{MARKER} haproxy-{branch}:begin -->"),
            format!("{MARKER} haproxy-{branch}:end -->"),
        ),
    }
}

/// Puts `section` between the `begin` and `end` marker lines of `document`, replacing what
/// was there; without markers, a section under the same `## ` heading as `section`'s first
/// line (up to the next `## ` heading) is dropped, and the marked section is appended.
pub fn splice_section(document: &str, begin: &str, end: &str, section: &str) -> String {
    let block = format!("{begin}\n{}\n{end}\n", section.trim_end());
    if let (Some(start), Some(stop)) = (document.find(begin), document.find(end))
        && start < stop
    {
        let after = document[stop + end.len()..].trim_start_matches('\n');
        let mut out = document[..start].to_owned();
        out.push_str(&block);
        if !after.is_empty() {
            out.push('\n');
            out.push_str(after);
        }
        return out;
    }
    let mut kept = document.to_owned();
    let heading = section.lines().next().unwrap_or_default();
    if heading.starts_with("## ")
        && let Some(at) = document.lines().position(|line| line == heading)
    {
        let lines: Vec<&str> = document.lines().collect();
        let next = lines[at + 1..]
            .iter()
            .position(|line| line.starts_with("## "))
            .map_or(lines.len(), |n| at + 1 + n);
        kept = lines[..at]
            .iter()
            .chain(&lines[next..])
            .map(|line| format!("{line}\n"))
            .collect();
    }
    let mut out = kept.trim_end().to_owned();
    if !out.is_empty() {
        out.push_str("\n\n");
    }
    out.push_str(&block);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_are_half_exact_half_suffix_in_generator_order() {
        let routes = routes(6);
        assert_eq!(routes.len(), 6);
        let kinds: Vec<SniMatch> = routes.iter().map(|r| r.sni_match).collect();
        assert_eq!(kinds.iter().filter(|k| **k == SniMatch::Exact).count(), 3);
        assert_eq!(kinds[0], SniMatch::Exact);
        assert_eq!(kinds[5], SniMatch::Suffix);
        assert_eq!(routes[0].sni, "proxy.api.z00000.bench.internal");
        assert_eq!(routes[0].back.as_str(), "api.z00000.bench.internal");
        let ends = Ends::find(&routes, |r| r.back.as_str().to_owned());
        assert_eq!(ends.last_exact.sni, "proxy.api.z00002.bench.internal");
        assert!(ends.first_suffix.sni.starts_with("web.int.z0000"));
    }

    #[test]
    fn a_branch_section_follows_the_main_one_and_each_is_replaced_alone() {
        let (b30, e30) = markers(Some("3.0"));
        assert_eq!(b30, "<!-- dataplane haproxy-3.0:begin -->");
        let main = splice_section("# Title\n", BEGIN, END, "## Data plane\nv1");
        let both = splice_section(&main, &b30, &e30, "## Data plane on HAProxy 3.0\nw1");
        let both = splice_section(&both, BEGIN, END, "## Data plane\nv2");
        assert_eq!(
            both,
            format!(
                "# Title\n\n{BEGIN}\n## Data plane\nv2\n{END}\n\n\
                 {b30}\n## Data plane on HAProxy 3.0\nw1\n{e30}\n"
            )
        );
        assert_eq!(both.find(MARKER), both.find(BEGIN));
    }

    #[test]
    fn the_section_is_replaced_or_appended() {
        let (b, e) = ("<!-- b -->", "<!-- e -->");
        let appended = splice_section("# Title\n\ntext\n", b, e, "## S\nv1\n");
        assert_eq!(
            appended,
            "# Title\n\ntext\n\n<!-- b -->\n## S\nv1\n<!-- e -->\n"
        );
        let replaced = splice_section(&appended, b, e, "## S\nv2");
        assert_eq!(
            replaced,
            "# Title\n\ntext\n\n<!-- b -->\n## S\nv2\n<!-- e -->\n"
        );
        let middle = format!("{replaced}\n## Later\n");
        assert_eq!(
            splice_section(&middle, b, e, "## S\nv3"),
            "# Title\n\ntext\n\n<!-- b -->\n## S\nv3\n<!-- e -->\n\n## Later\n"
        );
        // An unmarked section of the same name is replaced, what follows it kept.
        let unmarked = "# Title\n\n## S\nold\n\n## Later\nx\n";
        assert_eq!(
            splice_section(unmarked, b, e, "## S\nnew"),
            "# Title\n\n## Later\nx\n\n<!-- b -->\n## S\nnew\n<!-- e -->\n"
        );
    }
}
