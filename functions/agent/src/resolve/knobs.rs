//! The address service's knobs, read from the environment once at start (and by the
//! one-shot resolution of an apply, which paces as the service does).

use std::time::Duration;

/// The service's knobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Knobs {
    /// Every name is asked at least once per this period (`AUTOPROXY_REFRESH_SECONDS`).
    pub refresh: Duration,
    /// The most queries in any second (`AUTOPROXY_MAX_QPS`).
    pub max_qps: u32,
    /// A query unanswered this long failed (`AUTOPROXY_QUERY_TIMEOUT`).
    pub timeout: Duration,
    /// An address no answer confirmed for this long is dropped
    /// (`AUTOPROXY_MAX_STALE_SECONDS`).
    pub max_stale: Duration,
}

impl Default for Knobs {
    fn default() -> Knobs {
        Knobs {
            refresh: Duration::from_secs(50),
            max_qps: 200,
            timeout: Duration::from_secs(1),
            max_stale: Duration::from_secs(900),
        }
    }
}

/// A knob that is not a positive number.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{variable}: expected a positive number, got {got:?}")]
pub struct KnobError {
    pub variable: &'static str,
    pub got: String,
}

impl Knobs {
    /// Reads the knobs through `get` (the environment in `main`).
    pub fn read(get: impl Fn(&str) -> Option<String>) -> Result<Knobs, KnobError> {
        let defaults = Knobs::default();
        let seconds = |variable: &'static str, default: Duration| -> Result<Duration, KnobError> {
            match get(variable) {
                None => Ok(default),
                Some(text) => text
                    .trim()
                    .parse::<f64>()
                    .ok()
                    .filter(|v| *v > 0.0 && *v < 1e9)
                    .map(Duration::from_secs_f64)
                    .ok_or(KnobError {
                        variable,
                        got: text,
                    }),
            }
        };
        let max_qps = match get("AUTOPROXY_MAX_QPS") {
            None => defaults.max_qps,
            Some(text) => text
                .trim()
                .parse::<f64>()
                .ok()
                .filter(|v| *v >= 1.0 && *v < 1e6)
                .map(|v| v as u32)
                .ok_or(KnobError {
                    variable: "AUTOPROXY_MAX_QPS",
                    got: text,
                })?,
        };
        Ok(Knobs {
            refresh: seconds("AUTOPROXY_REFRESH_SECONDS", defaults.refresh)?,
            max_qps,
            timeout: seconds("AUTOPROXY_QUERY_TIMEOUT", defaults.timeout)?,
            max_stale: seconds("AUTOPROXY_MAX_STALE_SECONDS", defaults.max_stale)?,
        })
    }

    pub fn from_env() -> Result<Knobs, KnobError> {
        Knobs::read(|name| std::env::var(name).ok())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn knobs_come_from_the_environment_or_their_defaults() {
        let read = |pairs: &[(&str, &str)]| {
            let pairs: Vec<(String, String)> = pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect();
            Knobs::read(|name| {
                pairs
                    .iter()
                    .find(|(k, _)| k == name)
                    .map(|(_, v)| v.clone())
            })
        };
        assert_eq!(read(&[]), Ok(Knobs::default()));
        let quick = read(&[
            ("AUTOPROXY_REFRESH_SECONDS", "2"),
            ("AUTOPROXY_MAX_QPS", "50"),
            ("AUTOPROXY_QUERY_TIMEOUT", "0.3"),
            ("AUTOPROXY_MAX_STALE_SECONDS", "4"),
        ])
        .expect("valid");
        assert_eq!(quick.refresh, Duration::from_secs(2));
        assert_eq!(quick.max_qps, 50);
        assert_eq!(quick.timeout, Duration::from_millis(300));
        assert_eq!(quick.max_stale, Duration::from_secs(4));
        for (variable, bad) in [
            ("AUTOPROXY_REFRESH_SECONDS", "0"),
            ("AUTOPROXY_MAX_QPS", "0.5"),
            ("AUTOPROXY_QUERY_TIMEOUT", "soon"),
            ("AUTOPROXY_MAX_STALE_SECONDS", "-1"),
        ] {
            assert_eq!(
                read(&[(variable, bad)]),
                Err(KnobError {
                    variable,
                    got: bad.to_owned()
                })
            );
        }
    }
}
