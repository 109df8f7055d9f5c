//! Golden configs: a set of Route53 states under `tests/golden/<case>/input.json`, each
//! rendered with fixed provenance to `haproxy.cfg` (and its warnings to `warnings.txt`).
//! `UPDATE_GOLDEN=1` rewrites the files instead of comparing.

use std::path::PathBuf;

use autoproxy::model::ZoneRecords;
use autoproxy::names::HostName;
use autoproxy::render::{DEFAULT_TEMPLATE, RenderInput, RenderOptions, Rendered, Renderer};
use autoproxy::rules::{DEFAULT_RULES, merge_claims, parse_rules, zone_routes};
use serde::Deserialize;

/// A case's input: the rule table (`ROUTING_RULES`' JSON; the built-in rules when absent),
/// the proxy names and the zones with their records.
#[derive(Debug, Deserialize)]
pub struct Input {
    #[serde(default)]
    pub rules: Option<serde_json::Value>,
    pub proxies: Vec<HostName>,
    pub zones: Vec<ZoneRecords>,
}

/// The rendered config and the warnings, as the generator would produce them.
pub fn render_case(input: &Input) -> (Rendered, Vec<String>) {
    let mut candidates = Vec::new();
    let mut warnings = Vec::new();
    let rules = match &input.rules {
        Some(rules) => parse_rules(&rules.to_string()).expect("the case's rules validate"),
        None => DEFAULT_RULES.clone(),
    };
    for zone in &input.zones {
        let outcome = zone_routes(&rules, zone, &input.proxies);
        candidates.extend(outcome.routes);
        warnings.extend(outcome.warnings.iter().map(ToString::to_string));
    }
    let (routes, conflicts) = merge_claims(candidates);
    warnings.extend(conflicts.iter().map(ToString::to_string));
    let resolvers = ["169.254.169.253:53".parse().expect("resolver address")];
    let rendered = Renderer::new(DEFAULT_TEMPLATE)
        .expect("default template compiles")
        .render(&RenderInput {
            routes: &routes,
            resolvers: &resolvers,
            proxies: &input.proxies,
            options: &RenderOptions::default(),
            generation: 1,
            generated_at: "2026-01-01T00:00:00Z",
            trigger: "golden",
        })
        .expect("render");
    (rendered, warnings)
}

pub fn dir(case: &str) -> PathBuf {
    crate::root().join("tests/golden").join(case)
}

/// Compares `actual` with the golden file, or rewrites it under `UPDATE_GOLDEN=1`.
pub fn compare(path: &std::path::Path, actual: &str) {
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(path, actual).expect("write golden file");
        return;
    }
    let expected = std::fs::read_to_string(path).unwrap_or_else(|err| {
        panic!(
            "{}: {err} (run with UPDATE_GOLDEN=1 to create it)",
            path.display()
        )
    });
    if expected != actual {
        let diff = autoproxy::diff::unified(&expected, actual, "golden", "rendered");
        panic!(
            "{} differs from the rendered output:\n{diff}",
            path.display()
        );
    }
}
