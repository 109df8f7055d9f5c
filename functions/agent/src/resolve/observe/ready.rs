//! Whether this instance is ready for traffic, and if not why: the answer of `/ready`, a pure
//! function of the figures and of what HAProxy said, so that every reason has its table test.
//!
//! Ready is this proxy's own health, never its members': the installed generation runs
//! (HAProxy answers on the installed config's stats socket with that generation), the
//! resolver is current (its loop runs, the name due first is less than one refresh period
//! late, and a DNS answer came within the last two refresh periods whenever there are names
//! to keep), and the first pass over the hosts is over: every host has had its first answer,
//! or its first turn's tries are spent, and the running worker holds the addresses found (a
//! first install waits for none: its routes serve once the service has pushed them); or
//! [`WARM_UP`] has passed since the service read the installed config.
//!
//! A route whose host does not resolve (a deleted cluster, a zone the proxies cannot see, a
//! typo, a host that resolves to this proxy) is one member's problem: it is held, counted
//! (`autoproxy_unresolved_routes`, `UnresolvedRoutes`) and logged, never a reason here. With
//! the load balancer's health check on `/ready`, one member's broken record would otherwise
//! take every proxy out of service at once, and the Auto Scaling group would replace them all.

use std::time::{Duration, Instant};

use super::figures::{Figures, FirstPass};
use super::probe::Seen;

/// The loop stores its figures at least once a second: longer than this means it is stuck.
pub const LOOP_SILENCE: Duration = Duration::from_secs(5);

/// How long the first pass over the hosts may hold readiness back (Envoy's
/// `initial_fetch_timeout` is 15 s too): hosts still without a first answer then are held
/// routes like any other, and the instance serves the rest.
pub const WARM_UP: Duration = Duration::from_secs(15);

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
    if figures.installed_generation.is_some() {
        reasons.extend(first_pass_reason(figures.first_pass, now));
    }
    reasons.extend(resolver_reasons(figures, now));
    reasons
}

/// Whether the first pass over the hosts is over at `now`: every name ended a turn and the
/// worker holds what they found, or the warm-up is over.
pub fn first_pass_over(first_pass: FirstPass, now: Instant) -> bool {
    match first_pass {
        FirstPass::NotStarted => false,
        FirstPass::Running {
            since,
            pending,
            pushed,
        } => (pending == 0 && pushed) || now >= since + WARM_UP,
        FirstPass::Over => true,
    }
}

/// Why the first pass holds readiness back.
fn first_pass_reason(first_pass: FirstPass, now: Instant) -> Option<String> {
    if first_pass_over(first_pass, now) {
        return None;
    }
    let FirstPass::Running { since, pending, .. } = first_pass else {
        return Some("the address service has not read the installed config yet".to_owned());
    };
    let ends = (since + WARM_UP)
        .saturating_duration_since(now)
        .as_secs()
        .max(1);
    Some(if pending > 0 {
        format!(
            "the first pass over the hosts is not over: {pending} names have had no answer yet \
             (the warm-up ends in {ends} s)"
        )
    } else {
        format!(
            "the first pass over the hosts is not over: HAProxy does not hold the addresses it \
             found yet (the warm-up ends in {ends} s)"
        )
    })
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

    /// A ready instance's figures as of the instant returned.
    fn ready() -> (Figures, Instant) {
        let start = Instant::now();
        let now = start + Duration::from_secs(1000);
        let ready = Figures {
            installed_generation: Some(7),
            routes: 3,
            names: 2,
            last_answer: Some(now - Duration::from_secs(10)),
            updated: now - Duration::from_secs(1),
            first_pass: FirstPass::Over,
            ..Figures::new(
                PathBuf::from("/etc/haproxy/haproxy.cfg"),
                Duration::from_secs(50),
                start,
            )
        };
        (ready, now)
    }

    /// The reasons of a ready instance's figures changed by `change`, `haproxy` as seen.
    #[track_caller]
    fn check(change: &dyn Fn(&mut Figures, Instant), haproxy: &Seen, want: &[&str]) {
        let (mut figures, now) = ready();
        change(&mut figures, now);
        assert_eq!(reasons(&figures, haproxy, now), want);
    }

    #[test]
    fn each_reason_shows_alone_and_a_ready_instance_has_none() {
        let same = |_: &mut Figures, _| {};
        check(&same, &worker(7), &[]);
        check(
            &|f, _| f.installed_generation = None,
            &worker(7),
            &["no autoproxy config is installed at /etc/haproxy/haproxy.cfg"],
        );
        check(
            &same,
            &Err("nothing listens".to_owned()),
            &["HAProxy does not answer: nothing listens"],
        );
        check(
            &same,
            &worker(6),
            &["HAProxy runs generation 6, the installed config is generation 7"],
        );
        check(
            &|f, now| f.updated = now - Duration::from_secs(6),
            &worker(7),
            &["the address service's loop has not run for 6 s"],
        );
        check(
            &|f, _| f.lag = Duration::from_secs(51),
            &worker(7),
            &["the resolver is 51 s behind its schedule"],
        );
        check(&|f, _| f.lag = Duration::from_secs(50), &worker(7), &[]);
        check(
            &|f, _| f.last_answer = None,
            &worker(7),
            &["the resolver has had no DNS answer yet"],
        );
        check(
            &|f, now| f.last_answer = Some(now - Duration::from_secs(101)),
            &worker(7),
            &["the resolver has had no DNS answer for 101 s"],
        );
        check(
            &|f, _| {
                f.last_answer = None;
                f.names = 0;
            },
            &worker(7),
            &[],
        );
    }

    #[test]
    fn the_first_pass_holds_readiness_back_until_it_is_over_or_the_warm_up_is() {
        // A member's host that does not resolve is held and counted, never a reason.
        check(&|f, _| f.unresolved_routes = 3, &worker(7), &[]);
        let running = |since: u64, pending: u64, pushed: bool| {
            move |f: &mut Figures, now: Instant| {
                f.first_pass = FirstPass::Running {
                    since: now - Duration::from_secs(since),
                    pending,
                    pushed,
                };
            }
        };
        check(
            &running(10, 2, true),
            &worker(7),
            &[
                "the first pass over the hosts is not over: 2 names have had no answer yet \
               (the warm-up ends in 5 s)",
            ],
        );
        check(&running(10, 0, true), &worker(7), &[]);
        // Every name answered, but the worker does not hold the answers yet: their routes
        // would not serve (a first install waits for no address).
        check(
            &running(10, 0, false),
            &worker(7),
            &[
                "the first pass over the hosts is not over: HAProxy does not hold the addresses \
               it found yet (the warm-up ends in 5 s)",
            ],
        );
        // The warm-up bounds it.
        check(&running(15, 2, false), &worker(7), &[]);
        check(&running(15, 0, false), &worker(7), &[]);
        check(
            &|f, _| f.first_pass = FirstPass::NotStarted,
            &worker(7),
            &["the address service has not read the installed config yet"],
        );
        check(
            &|f, _| {
                f.first_pass = FirstPass::NotStarted;
                f.installed_generation = None;
            },
            &worker(7),
            &["no autoproxy config is installed at /etc/haproxy/haproxy.cfg"],
        );
    }
}
