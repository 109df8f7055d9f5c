//! The same estate swept with the operator's own rule table (`ROUTING_RULES`, four rules: the
//! built-in three and the EKS recipe's `back-target` rule) beside the built-in rules: a rule
//! table is data the matcher walks per zone, so Route53 calls must not grow and the time
//! must grow by at most 5 %. A custom sweep that comes out faster is within. The built-in
//! sweep compared is the one after the custom sweep (both on a warm moto), not the first.

use super::Row;
use super::sweep::Swept;

/// Four rules: the built-in ones as an operator would write them, and an EKS rule.
pub(super) const RULES: &str = r#"[
  {"id": "api", "front": "proxy.api", "back": "api", "back_types": ["A"], "sni": "front"},
  {"id": "api-k8s", "front": "proxy.api.k8s", "back": "api.k8s", "back_types": ["A"], "sni": "front"},
  {"id": "ingress-int", "front": "*.int", "back": "ingress-int", "back_types": ["A", "CNAME"], "sni": "front-suffix"},
  {"id": "eks", "front": "proxy.eks", "back": "eks", "back_types": ["CNAME"], "sni": "back-target", "port": 443}
]"#;

const WITHIN_PERCENT: f64 = 5.0;

/// Route53 calls (counted at the proxies) and wall time of both sweeps, side by side.
pub(super) fn rows(builtin: &Swept, custom: &Swept) -> Vec<Row> {
    let calls = |swept: &Swept| swept.sweep_wire.values().map(Vec::len).sum::<usize>();
    let seconds = |swept: &Swept| swept.sweep["run"]["wall_ms"].as_f64().unwrap_or(0.0) / 1000.0;
    let routes = |swept: &Swept| swept.sweep["run"]["rules"].as_u64().unwrap_or(0);
    let delta = |a: f64, b: f64| if a > 0.0 { (b - a) / a * 100.0 } else { 0.0 };
    let (calls_b, calls_c) = (calls(builtin), calls(custom));
    let (time_b, time_c) = (seconds(builtin), seconds(custom));
    let calls_delta = delta(calls_b as f64, calls_c as f64);
    let time_delta = delta(time_b, time_c);
    // What the custom rules cost: only more is outside the target.
    let verdict = |d: f64| {
        if d <= WITHIN_PERCENT {
            "within"
        } else {
            "OUTSIDE"
        }
    };
    vec![
        Row(
            "Full sweep, built-in rules (swept again) vs custom (4 rules, ROUTING_RULES): Route53 calls".into(),
            format!(
                "{calls_b} vs {calls_c} ({calls_delta:+.1} %, {} +5 %); routes {} vs {}",
                verdict(calls_delta),
                routes(builtin),
                routes(custom)
            ),
            format!("at most +{WITHIN_PERCENT} %"),
        ),
        Row(
            "Full sweep, built-in rules (swept again) vs custom (4 rules, ROUTING_RULES): wall time".into(),
            format!(
                "{time_b:.1} s vs {time_c:.1} s ({time_delta:+.1} %, {} +5 %); event run {} vs {} calls",
                verdict(time_delta),
                builtin.event_wire,
                custom.event_wire
            ),
            format!("at most +{WITHIN_PERCENT} %"),
        ),
    ]
}
