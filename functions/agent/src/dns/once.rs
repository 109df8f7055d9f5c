//! One-shot resolution: the engine driven until the names asked have their answers, without
//! the service around it. An apply uses it when no address service answers
//! ([`crate::addresses::ensure`]), so what it sends holds the service's pacing and rules.

use std::net::{IpAddr, SocketAddr};
use std::time::Instant;

use super::engine::{Engine, Transport};
use super::knobs::Knobs;

/// Resolves `names` once through `nameservers`, paced as the service paces (the knobs from
/// the environment), until each has an answer or `deadline`: the fallback of
/// [`crate::addresses::ensure`] when no service answers. Each name with its address, or why
/// it has none.
pub async fn resolve_once(
    names: &[String],
    nameservers: &[SocketAddr],
    deadline: Instant,
) -> Vec<(String, Result<IpAddr, String>)> {
    let knobs = Knobs::from_env().unwrap_or_default();
    let missing = |why: &str| -> Vec<(String, Result<IpAddr, String>)> {
        names
            .iter()
            .map(|name| (name.clone(), Err(why.to_owned())))
            .collect()
    };
    if nameservers.is_empty() {
        return missing("no #@nameserver in the config");
    }
    let mut transport = Transport::new();
    let failed = transport.set_nameservers(nameservers);
    if failed.len() == nameservers.len()
        && let Some((server, why)) = failed.first()
    {
        return missing(&format!(
            "cannot open a socket to nameserver {server}: {why}"
        ));
    }
    let mut engine = Engine::new(knobs);
    engine.verbose = false;
    engine.set_nameservers(nameservers.to_vec());
    engine.want(names, &Default::default(), Instant::now());
    loop {
        let now = Instant::now();
        engine.step(now, &mut transport);
        if names.iter().all(|n| engine.settled(n)) || now >= deadline {
            break;
        }
        let wake = engine.next_wake(now).unwrap_or(deadline).min(deadline);
        tokio::select! {
            () = tokio::time::sleep_until(wake.into()) => {}
            Some(done) = transport.tcp_rx.recv() => engine.on_tcp(done, Instant::now()),
        }
    }
    names
        .iter()
        .map(|name| (name.clone(), engine.answer(name)))
        .collect()
}
