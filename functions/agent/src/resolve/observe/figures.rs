//! The address service's own figures, written by its loop and read by the tasks that show
//! them (the HTTP answerer, the CloudWatch publisher). The loop only stores into them, under
//! a lock held for a few stores and never across a wait, so no reader can slow it down.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// What the loop knows, as of `updated`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Figures {
    /// The installed config.
    pub config: PathBuf,
    /// Every name is asked at least this often (`AUTOPROXY_REFRESH_SECONDS`).
    pub refresh: Duration,
    /// When the loop last stored its figures.
    pub updated: Instant,
    /// The generation in the installed config's header; none without a readable one.
    pub installed_generation: Option<u64>,
    /// The stats socket the installed config declares.
    pub stats_socket: Option<PathBuf>,
    /// Route lines (`#@route`, `#@suffix`) of the installed config.
    pub routes: u64,
    /// Those whose host has no address in the map the worker is brought to.
    pub unresolved_routes: u64,
    /// Names the resolver keeps current.
    pub names: u64,
    /// DNS queries sent since the service started.
    pub queries_total: u64,
    /// The same by the account of the names they were for, by account (empty: the names no
    /// route line names).
    pub queries_by_account: Vec<(String, u64)>,
    /// Turns that ended without an answer (three tries each) since the service started.
    pub failures_total: u64,
    /// Queries no answer came to in time since the service started.
    pub timeouts_total: u64,
    /// Times the fill's pace was halved for climbing time-outs since the service started.
    pub fill_backoffs_total: u64,
    /// The cap in force, in queries per second: the fill's while names are new to the map.
    pub pace_qps: u32,
    /// How late the name due first is.
    pub lag: Duration,
    /// When a turn last ended with an answer.
    pub last_answer: Option<Instant>,
    /// The first pass over the hosts.
    pub first_pass: FirstPass,
}

/// The first pass over the hosts: every name the service knows without an address has had
/// one turn (an answer, or its tries spent), and the running worker holds what they found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FirstPass {
    /// No installed config read yet.
    NotStarted,
    /// Under way since `since` (when the service first read an installed config): `pending`
    /// names have not ended a turn yet; `pushed`: the running worker holds every address the
    /// service has (written, pushed, and the held routes put in).
    Running {
        since: Instant,
        pending: u64,
        pushed: bool,
    },
    /// Over, for as long as the service runs: names a later config adds never make a serving
    /// instance unready.
    Over,
}

impl Figures {
    /// Nothing known yet about `config`, as of `now`.
    pub fn new(config: PathBuf, refresh: Duration, now: Instant) -> Figures {
        Figures {
            config,
            refresh,
            updated: now,
            installed_generation: None,
            stats_socket: None,
            routes: 0,
            unresolved_routes: 0,
            names: 0,
            queries_total: 0,
            queries_by_account: Vec::new(),
            failures_total: 0,
            timeouts_total: 0,
            fill_backoffs_total: 0,
            pace_qps: 0,
            lag: Duration::ZERO,
            last_answer: None,
            first_pass: FirstPass::NotStarted,
        }
    }
}

/// The figures, shared between the loop and its readers.
#[derive(Debug, Clone)]
pub struct Shared(Arc<Mutex<Figures>>);

impl Shared {
    pub fn new(figures: Figures) -> Shared {
        Shared(Arc::new(Mutex::new(figures)))
    }

    /// A copy of the figures as they are now.
    pub fn get(&self) -> Figures {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Changes the figures in place (a few stores: the lock is held for nothing else).
    pub fn update(&self, change: impl FnOnce(&mut Figures)) {
        change(&mut self.0.lock().unwrap_or_else(PoisonError::into_inner));
    }
}

/// The installed config's routes by the host they send to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RouteHosts {
    /// Every route line.
    pub routes: u64,
    /// Route lines per host name, lower-cased without a trailing dot (IP literals are not
    /// here: they need no address).
    pub by_name: BTreeMap<String, u64>,
}

impl RouteHosts {
    /// The route lines of a config's text.
    pub fn of(config: &str) -> RouteHosts {
        let mut hosts = RouteHosts::default();
        let (routes, suffixes) = autoproxy::artifact::MapFiles::route_tables(config);
        for (_, target) in crate::routes::entries(&routes).chain(crate::routes::entries(&suffixes))
        {
            hosts.routes += 1;
            if let Some(name) = crate::routes::host_needing_address(target) {
                *hosts.by_name.entry(name).or_default() += 1;
            }
        }
        hosts
    }

    /// The routes whose host has no address in `addresses`.
    pub fn unresolved(&self, addresses: &BTreeMap<Arc<str>, IpAddr>) -> u64 {
        self.without_address(addresses)
            .map(|(_, routes)| routes)
            .sum()
    }

    /// The hosts without an address in `addresses`, with how many routes each.
    pub fn without_address<'a>(
        &'a self,
        addresses: &'a BTreeMap<Arc<str>, IpAddr>,
    ) -> impl Iterator<Item = (&'a str, u64)> + 'a {
        self.by_name
            .iter()
            .filter(|(name, _)| !addresses.contains_key(name.as_str()))
            .map(|(name, routes)| (name.as_str(), *routes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_are_counted_by_host_and_literals_need_no_address() {
        let config = "# generation: 3\nglobal\n\
                      #@route a.example API.A.example.:443 api 1 Z1\n\
                      #@route b.example api.b.example:443 api 1 Z1\n\
                      #@suffix int.c.example 10.0.0.9:443 ingress 1 Z2\n\
                      #@route d.example api.a.example:6443 api 1 Z1\n";
        let hosts = RouteHosts::of(config);
        assert_eq!(hosts.routes, 4);
        let check = |known: &[&str], unresolved: u64| {
            let addresses: BTreeMap<Arc<str>, IpAddr> = known
                .iter()
                .map(|name| (Arc::from(*name), IpAddr::from([10, 0, 0, 1])))
                .collect();
            assert_eq!(hosts.unresolved(&addresses), unresolved, "{known:?}");
        };
        check(&[], 3);
        check(&["api.a.example"], 1);
        check(&["api.b.example"], 2);
        check(&["api.a.example", "api.b.example"], 0);
        assert_eq!(RouteHosts::of("global\n"), RouteHosts::default());
    }
}
