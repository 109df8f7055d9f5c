//! `/agent/metrics`: the address service's figures in Prometheus' text format (0.0.4), beside
//! HAProxy's own exporter on the stats listener. A pure function of the figures, of what
//! HAProxy said and of the last apply's record, so the text has its table test (and the
//! integration tests run `promtool check metrics` on it).

use std::fmt::Write as _;
use std::time::Instant;

use super::figures::Figures;
use super::probe::Seen;
use crate::record::Record;

/// Everything `/agent/metrics` shows.
#[derive(Debug)]
pub struct Exposition<'a> {
    pub figures: &'a Figures,
    pub haproxy: &'a Seen,
    pub last_apply: Option<&'a Record>,
    /// Whether `/ready` would answer 200.
    pub ready: bool,
    pub now: Instant,
}

/// The content type of the text format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// One metric family: its name, type, help and samples (labels, value).
struct Family {
    name: &'static str,
    kind: &'static str,
    help: &'static str,
    samples: Vec<(String, String)>,
}

/// A family of one unlabelled sample, or none when `value` is absent.
fn gauge(name: &'static str, help: &'static str, value: Option<String>) -> Family {
    Family {
        name,
        kind: "gauge",
        help,
        samples: value.map(|v| (String::new(), v)).into_iter().collect(),
    }
}

fn counter(name: &'static str, help: &'static str, value: u64) -> Family {
    Family {
        kind: "counter",
        ..gauge(name, help, Some(value.to_string()))
    }
}

/// The exposition text.
pub fn render(what: &Exposition<'_>) -> String {
    let mut text = String::new();
    for family in resolver_families(what.figures, what.now)
        .into_iter()
        .chain(instance_families(what))
    {
        let (name, kind, help) = (family.name, family.kind, family.help);
        let _ = writeln!(text, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for (labels, value) in &family.samples {
            let _ = writeln!(text, "{name}{labels} {value}");
        }
    }
    text
}

fn resolver_families(figures: &Figures, now: Instant) -> Vec<Family> {
    let age = figures
        .last_answer
        .map(|at| now.saturating_duration_since(at).as_secs_f64().to_string());
    vec![
        gauge(
            "autoproxy_routes",
            "Routes in the installed config.",
            Some(figures.routes.to_string()),
        ),
        gauge(
            "autoproxy_unresolved_routes",
            "Routes whose host has no address yet: they do not serve.",
            Some(figures.unresolved_routes.to_string()),
        ),
        gauge(
            "autoproxy_resolver_names",
            "Host names the resolver keeps current.",
            Some(figures.names.to_string()),
        ),
        counter(
            "autoproxy_resolver_queries_total",
            "DNS queries the resolver sent since it started.",
            figures.queries_total,
        ),
        Family {
            samples: figures
                .queries_by_account
                .iter()
                .map(|(account, sent)| {
                    let account = if account.is_empty() {
                        "platform"
                    } else {
                        account
                    };
                    (
                        format!("{{account=\"{}\"}}", escape(account)),
                        sent.to_string(),
                    )
                })
                .collect(),
            ..counter(
                "autoproxy_resolver_account_queries_total",
                "DNS queries the resolver sent since it started, by the account of the routes the name is for (platform: the proxy's own names, an apply's new names, a held route's previous host).",
                0,
            )
        },
        counter(
            "autoproxy_resolver_failures_total",
            "Lookups that got no usable answer (three tries each) since the resolver started.",
            figures.failures_total,
        ),
        counter(
            "autoproxy_resolver_timeouts_total",
            "DNS queries no answer came to in time (dropped, not negative) since the resolver started.",
            figures.timeouts_total,
        ),
        counter(
            "autoproxy_resolver_fill_backoffs_total",
            "Times the fill's pace was halved because time-outs climbed (the resolver dropping).",
            figures.fill_backoffs_total,
        ),
        gauge(
            "autoproxy_resolver_pace_qps",
            "The query cap in force: the fill's while names are new to the map, else the steady one.",
            Some(figures.pace_qps.to_string()),
        ),
        gauge(
            "autoproxy_resolver_lag_seconds",
            "How late the resolver asks the name due first.",
            Some(figures.lag.as_secs_f64().to_string()),
        ),
        gauge(
            "autoproxy_resolver_last_answer_age_seconds",
            "Seconds since a lookup last ended with an answer (absent before the first).",
            age,
        ),
    ]
}

fn instance_families(what: &Exposition<'_>) -> Vec<Family> {
    let running = what.haproxy.as_ref().ok().map(|w| w.generation.to_string());
    let apply = what.last_apply.map(|record| {
        let labels = format!(
            "{{result=\"{}\",path=\"{}\",generation=\"{}\"}}",
            escape(record.result.as_str()),
            escape(&record.path),
            record.generation
        );
        (labels, "1".to_owned())
    });
    vec![
        gauge(
            "autoproxy_installed_generation",
            "The generation of the installed config (absent when none is installed).",
            what.figures.installed_generation.map(|g| g.to_string()),
        ),
        gauge(
            "autoproxy_running_generation",
            "The generation HAProxy runs (absent when it does not answer; 0: none of autoproxy's).",
            running,
        ),
        gauge(
            "autoproxy_haproxy_up",
            "1 when HAProxy answers on the installed config's stats socket.",
            Some(u8::from(what.haproxy.is_ok()).to_string()),
        ),
        gauge(
            "autoproxy_ready",
            "1 when /ready answers 200.",
            Some(u8::from(what.ready).to_string()),
        ),
        Family {
            samples: apply.into_iter().collect(),
            ..gauge(
                "autoproxy_last_apply_info",
                "The last apply on this instance: its result, how it brought its generation (runtime or reload; empty when it brought none) and the generation HAProxy ran after it.",
                None,
            )
        },
    ]
}

/// A label value as the text format writes it: `\`, `"` and newlines escaped.
fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;
    use std::time::Duration;

    use super::super::probe::Worker;
    use super::*;
    use crate::record::Outcome;

    fn record(path: &str) -> Record {
        Record {
            instance_id: "i-0abc".to_owned(),
            generation: 7,
            sha256: String::new(),
            result: Outcome::Applied,
            reason: String::new(),
            version_id: String::new(),
            at: String::new(),
            agent: String::new(),
            apply_id: String::new(),
            path: path.to_owned(),
            path_reason: String::new(),
            unconfirmed: String::new(),
            unresolved_routes: 0,
            addresses: Vec::new(),
        }
    }

    /// The sample lines (not the comments) of a text.
    fn samples(text: &str) -> Vec<&str> {
        text.lines().filter(|l| !l.starts_with('#')).collect()
    }

    #[test]
    fn the_figures_render_as_samples_and_absent_ones_have_none() {
        let start = Instant::now();
        let now = start + Duration::from_secs(100);
        let figures = Figures {
            installed_generation: Some(7),
            routes: 3,
            unresolved_routes: 1,
            names: 2,
            queries_total: 40,
            queries_by_account: vec![(String::new(), 4), ("111111111111".to_owned(), 36)],
            failures_total: 2,
            timeouts_total: 5,
            fill_backoffs_total: 1,
            pace_qps: 400,
            lag: Duration::from_millis(1500),
            last_answer: Some(now - Duration::from_secs(4)),
            ..Figures::new(PathBuf::from("/c"), Duration::from_secs(50), start)
        };
        let worker: Seen = Ok(Worker {
            pid: 9,
            generation: 7,
            current_connections: None,
            connection_rate: None,
            backend_sessions: Vec::new(),
        });
        let applied = record("run\"time\\\n");
        let text = render(&Exposition {
            figures: &figures,
            haproxy: &worker,
            last_apply: Some(&applied),
            ready: false,
            now,
        });
        assert_eq!(
            samples(&text),
            [
                "autoproxy_routes 3",
                "autoproxy_unresolved_routes 1",
                "autoproxy_resolver_names 2",
                "autoproxy_resolver_queries_total 40",
                "autoproxy_resolver_account_queries_total{account=\"platform\"} 4",
                "autoproxy_resolver_account_queries_total{account=\"111111111111\"} 36",
                "autoproxy_resolver_failures_total 2",
                "autoproxy_resolver_timeouts_total 5",
                "autoproxy_resolver_fill_backoffs_total 1",
                "autoproxy_resolver_pace_qps 400",
                "autoproxy_resolver_lag_seconds 1.5",
                "autoproxy_resolver_last_answer_age_seconds 4",
                "autoproxy_installed_generation 7",
                "autoproxy_running_generation 7",
                "autoproxy_haproxy_up 1",
                "autoproxy_ready 0",
                "autoproxy_last_apply_info{result=\"applied\",path=\"run\\\"time\\\\\\n\",generation=\"7\"} 1",
            ]
        );
        assert!(text.contains("# TYPE autoproxy_resolver_queries_total counter\n"));
        let down: Seen = Err("gone".to_owned());
        let bare = Figures::new(PathBuf::from("/c"), Duration::from_secs(50), start);
        let text = render(&Exposition {
            figures: &bare,
            haproxy: &down,
            last_apply: None,
            ready: false,
            now,
        });
        let names: Vec<&str> = samples(&text)
            .iter()
            .filter_map(|l| l.split(' ').next())
            .collect();
        assert!(!names.contains(&"autoproxy_running_generation"), "{text}");
        assert!(!names.contains(&"autoproxy_last_apply_info"), "{text}");
        assert!(samples(&text).contains(&"autoproxy_haproxy_up 0"));
    }
}
