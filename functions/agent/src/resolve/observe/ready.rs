//! Whether this instance is ready for traffic, and if not why: the answer of `/ready`, a pure
//! function of the figures and of what HAProxy said, so that every reason has its table test.
//!
//! Ready means: the installed generation runs (HAProxy answers on the installed config's
//! stats socket with that generation), every route's host has an address, and the resolver
//! is current (its loop runs, the name due first is less than one refresh period late, and a
//! DNS answer came within the last two refresh periods whenever there are names to keep).

use std::time::{Duration, Instant};

use super::figures::Figures;
use super::probe::Seen;

/// The loop stores its figures at least once a second: longer than this means it is stuck.
pub const LOOP_SILENCE: Duration = Duration::from_secs(5);

/// Why the instance is not ready; empty when it is.
pub fn reasons(figures: &Figures, haproxy: &Seen, now: Instant) -> Vec<String> {
    let mut reasons = Vec::new();
    match (figures.installed_generation, haproxy) {
        (None, _) => reasons.push(format!(
            "no autoproxy config is installed at {}",
            figures.config.display()
        )),
        (Some(_), Err(why)) => reasons.push(format!("HAProxy does not answer: {why}")),
        (Some(installed), Ok(worker)) if worker.generation != installed => reasons.push(format!(
            "HAProxy runs generation {}, the installed config is generation {installed}",
            worker.generation
        )),
        (Some(_), Ok(_)) => {}
    }
    if figures.unresolved_routes > 0 {
        reasons.push(format!(
            "{} of {} routes have no address yet (their host is not resolved)",
            figures.unresolved_routes, figures.routes
        ));
    }
    reasons.extend(resolver_reasons(figures, now));
    reasons
}

/// Why the resolver is not current.
fn resolver_reasons(figures: &Figures, now: Instant) -> Vec<String> {
    let mut reasons = Vec::new();
    let silent = now.saturating_duration_since(figures.updated);
    if silent > LOOP_SILENCE {
        reasons.push(format!(
            "the address service's loop has not run for {} s",
            silent.as_secs()
        ));
    }
    if figures.lag > figures.refresh {
        reasons.push(format!(
            "the resolver is {} s behind its schedule",
            figures.lag.as_secs()
        ));
    }
    if figures.names > 0 {
        match figures.last_answer {
            None => reasons.push("the resolver has had no DNS answer yet".to_owned()),
            Some(at) if now.saturating_duration_since(at) > figures.refresh * 2 => {
                reasons.push(format!(
                    "the resolver has had no DNS answer for {} s",
                    now.saturating_duration_since(at).as_secs()
                ));
            }
            Some(_) => {}
        }
    }
    reasons
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::super::probe::Worker;
    use super::*;

    fn worker(generation: u64) -> Seen {
        Ok(Worker {
            pid: 1,
            generation,
            current_connections: Some(0),
            connection_rate: Some(0),
            backend_sessions: Vec::new(),
        })
    }

    #[test]
    fn each_reason_shows_alone_and_a_ready_instance_has_none() {
        let start = Instant::now();
        let now = start + Duration::from_secs(1000);
        let ready = Figures {
            installed_generation: Some(7),
            routes: 3,
            names: 2,
            last_answer: Some(now - Duration::from_secs(10)),
            updated: now - Duration::from_secs(1),
            ..Figures::new(
                PathBuf::from("/etc/haproxy/haproxy.cfg"),
                Duration::from_secs(50),
                start,
            )
        };
        let check = |change: &dyn Fn(&mut Figures), haproxy: Seen, want: &[&str]| {
            let mut figures = ready.clone();
            change(&mut figures);
            assert_eq!(reasons(&figures, &haproxy, now), want);
        };
        let same = |_: &mut Figures| {};
        check(&same, worker(7), &[]);
        check(
            &|f| f.installed_generation = None,
            worker(7),
            &["no autoproxy config is installed at /etc/haproxy/haproxy.cfg"],
        );
        check(
            &same,
            Err("nothing listens".to_owned()),
            &["HAProxy does not answer: nothing listens"],
        );
        check(
            &same,
            worker(6),
            &["HAProxy runs generation 6, the installed config is generation 7"],
        );
        check(
            &|f| f.unresolved_routes = 2,
            worker(7),
            &["2 of 3 routes have no address yet (their host is not resolved)"],
        );
        check(
            &|f| f.updated = now - Duration::from_secs(6),
            worker(7),
            &["the address service's loop has not run for 6 s"],
        );
        check(
            &|f| f.lag = Duration::from_secs(51),
            worker(7),
            &["the resolver is 51 s behind its schedule"],
        );
        check(&|f| f.lag = Duration::from_secs(50), worker(7), &[]);
        check(
            &|f| f.last_answer = None,
            worker(7),
            &["the resolver has had no DNS answer yet"],
        );
        check(
            &|f| f.last_answer = Some(now - Duration::from_secs(101)),
            worker(7),
            &["the resolver has had no DNS answer for 101 s"],
        );
        check(
            &|f| {
                f.last_answer = None;
                f.names = 0;
            },
            worker(7),
            &[],
        );
    }
}
