//! The address service's knobs, read from the environment once at start (and by the
//! one-shot resolution of an apply, which paces as the service does).

use std::time::Duration;

/// The service's knobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Knobs {
    /// Every name is asked at least once per this period (`AUTOPROXY_REFRESH_SECONDS`).
    pub refresh: Duration,
    /// The most queries in any second (`AUTOPROXY_MAX_QPS`): the steady cap.
    pub max_qps: u32,
    /// The most queries in any second while names are new to the address map: a cold start,
    /// or a generation that adds many hosts (`AUTOPROXY_FILL_QPS`; never below `max_qps`).
    pub fill_qps: u32,
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
            // 80 % of the 1,024 packets a second the VPC resolver takes per network
            // interface: room is left for the instance's other DNS.
            fill_qps: 800,
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
        // The variable as a number above 0, at least `min` and below `max`; `None` when unset.
        let number =
            |variable: &'static str, min: f64, max: f64| -> Result<Option<f64>, KnobError> {
                let Some(text) = get(variable) else {
                    return Ok(None);
                };
                match text.trim().parse::<f64>() {
                    Ok(v) if v >= min && v < max && v > 0.0 => Ok(Some(v)),
                    _ => Err(KnobError {
                        variable,
                        got: text,
                    }),
                }
            };
        let seconds = |variable: &'static str, default: Duration| -> Result<Duration, KnobError> {
            Ok(number(variable, f64::MIN_POSITIVE, 1e9)?.map_or(default, Duration::from_secs_f64))
        };
        let rate = |variable: &'static str, default: u32| -> Result<u32, KnobError> {
            Ok(number(variable, 1.0, 1e6)?.map_or(default, |v| v as u32))
        };
        let max_qps = rate("AUTOPROXY_MAX_QPS", defaults.max_qps)?;
        Ok(Knobs {
            refresh: seconds("AUTOPROXY_REFRESH_SECONDS", defaults.refresh)?,
            max_qps,
            fill_qps: rate("AUTOPROXY_FILL_QPS", defaults.fill_qps)?.max(max_qps),
            timeout: seconds("AUTOPROXY_QUERY_TIMEOUT", defaults.timeout)?,
            max_stale: seconds("AUTOPROXY_MAX_STALE_SECONDS", defaults.max_stale)?,
        })
    }

    pub fn from_env() -> Result<Knobs, KnobError> {
        Knobs::read(|name| std::env::var(name).ok())
    }
}

/// The CloudWatch publish period, read through `get` (`AUTOPROXY_METRICS_SECONDS`, 60 by
/// default); `None` when it is 0: publishing off.
pub fn metrics_period(get: impl Fn(&str) -> Option<String>) -> Result<Option<Duration>, KnobError> {
    const VARIABLE: &str = "AUTOPROXY_METRICS_SECONDS";
    let Some(text) = get(VARIABLE) else {
        return Ok(Some(Duration::from_secs(60)));
    };
    match text.trim().parse::<f64>() {
        Ok(seconds) if seconds.abs() < f64::EPSILON => Ok(None),
        Ok(seconds) if (0.1..1e7).contains(&seconds) => Ok(Some(Duration::from_secs_f64(seconds))),
        _ => Err(KnobError {
            variable: VARIABLE,
            got: text,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_metrics_period_defaults_to_a_minute_and_0_turns_publishing_off() {
        let read = |value: Option<&str>| metrics_period(|_| value.map(str::to_owned));
        assert_eq!(read(None), Ok(Some(Duration::from_secs(60))));
        assert_eq!(read(Some("1.5")), Ok(Some(Duration::from_millis(1500))));
        assert_eq!(read(Some("0")), Ok(None));
        for bad in ["-1", "soon", "0.01", ""] {
            assert!(read(Some(bad)).is_err(), "{bad}");
        }
    }

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
            ("AUTOPROXY_FILL_QPS", "120"),
            ("AUTOPROXY_QUERY_TIMEOUT", "0.3"),
            ("AUTOPROXY_MAX_STALE_SECONDS", "4"),
        ])
        .expect("valid");
        assert_eq!(quick.refresh, Duration::from_secs(2));
        assert_eq!(quick.max_qps, 50);
        assert_eq!(quick.fill_qps, 120);
        // The fill cap is never below the steady one.
        let slow_fill = read(&[("AUTOPROXY_MAX_QPS", "300"), ("AUTOPROXY_FILL_QPS", "100")]);
        assert_eq!(slow_fill.map(|k| k.fill_qps), Ok(300));
        assert_eq!(quick.timeout, Duration::from_millis(300));
        assert_eq!(quick.max_stale, Duration::from_secs(4));
        for (variable, bad) in [
            ("AUTOPROXY_REFRESH_SECONDS", "0"),
            ("AUTOPROXY_MAX_QPS", "0.5"),
            ("AUTOPROXY_FILL_QPS", "fast"),
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
