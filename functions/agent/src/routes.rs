//! The route tables as they may serve.
//!
//! The config's route lines say where each SNI should go. A route whose host has no address
//! yet (a new cluster whose name does not resolve from here yet, a typo) is *held*: it keeps
//! the target it serves with now, when that target's host has an address (a route moved to a
//! new host goes on serving at the old one), else it goes in at its new target, whose host
//! the address map does not hold. Its SNI is then found in the route map and its host in no
//! address map, so HAProxy rejects its connections as `reject_no_address`: the reject names
//! the cause, DNS, and never sends the operator looking for a missing route
//! (docs/ARCHITECTURE.md, "The data plane"). When its host resolves, the address service pushes the
//! address and the route serves, without an apply; a route held at its old target is moved
//! then. The tables written to the map files and to the running HAProxy are these, so a
//! restart serves exactly what the runtime held.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

/// One route table (`key target` per line, as the map files hold it) as it may serve.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Serving {
    /// The table's text, in the config's order.
    pub table: String,
    /// Keys whose route is held: kept at its previous target, or in at a target with no
    /// address (its connections rejected as having no address).
    pub held: BTreeSet<String>,
}

/// Whether a route's host (as [`autoproxy::artifact::target_host`] reads it) needs an
/// address: every host but an IP literal of either family. The one judgement of which
/// targets need an address: the tables as they may serve, the fleet record's and the address
/// service's counts of routes without one, the hosts the address service keeps current and
/// the ones an apply asks it for all use it.
pub fn needs_address(host: &str) -> bool {
    host.parse::<IpAddr>().is_err()
}

/// The host of a `host:port` target as the address map keys it (the artifact's one reading
/// of a target, [`autoproxy::artifact::target_host`]); none when it needs no address
/// ([`needs_address`]). A target that is not `host:port` (no route line the generator writes)
/// never serves: the whole of it stands for a host no map holds.
pub fn host_needing_address(target: &str) -> Option<String> {
    let Some((host, _)) = autoproxy::artifact::target_host(target) else {
        return Some(target.to_owned());
    };
    needs_address(&host).then_some(host)
}

/// The hosts of a config's route lines that need an address ([`autoproxy::artifact::route_hosts`]
/// but the IP literals): once each, sorted.
pub fn hosts_needing_address(config: &str) -> Vec<String> {
    let mut hosts = autoproxy::artifact::route_hosts(config);
    hosts.retain(|host| needs_address(host));
    hosts
}

/// Whether a target can serve: its host is an IP literal or has an address.
pub fn has_address(target: &str, addresses: &BTreeMap<String, IpAddr>) -> bool {
    host_needing_address(target).is_none_or(|host| addresses.contains_key(&host))
}

/// `wanted` (a table as the config says it) as it may serve, given the hosts' `addresses`
/// and the table that serves now (`current`, the map file's text).
pub fn serving(wanted: &str, addresses: &BTreeMap<String, IpAddr>, current: &str) -> Serving {
    let current: BTreeMap<&str, &str> = entries(current).collect();
    let mut out = Serving::default();
    for (key, target) in entries(wanted) {
        let chosen = if has_address(target, addresses) {
            target
        } else {
            out.held.insert(key.to_owned());
            current
                .get(key)
                .copied()
                .filter(|old| *old != target && has_address(old, addresses))
                .unwrap_or(target)
        };
        out.table.push_str(key);
        out.table.push(' ');
        out.table.push_str(chosen);
        out.table.push('\n');
    }
    out
}

/// The `(key, target)` entries of a table's text.
pub fn entries(table: &str) -> impl Iterator<Item = (&str, &str)> {
    table.lines().filter_map(|line| {
        let mut words = line.split_whitespace();
        Some((words.next()?, words.next()?))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addresses(names: &[&str]) -> BTreeMap<String, IpAddr> {
        names
            .iter()
            .map(|n| ((*n).to_owned(), IpAddr::from([10, 0, 0, 1])))
            .collect()
    }

    #[track_caller]
    fn check(wanted: &str, known: &[&str], current: &str, table: &str, held: &[&str]) {
        let got = serving(wanted, &addresses(known), current);
        assert_eq!(got.table, table);
        assert_eq!(
            got.held.iter().map(String::as_str).collect::<Vec<_>>(),
            held
        );
    }

    #[test]
    fn a_route_serves_only_towards_an_address() {
        // Resolved, or an IP literal: as the config says.
        check("a.x h1:443\n", &["h1"], "", "a.x h1:443\n", &[]);
        check("a.x 10.1.1.1:443\n", &[], "", "a.x 10.1.1.1:443\n", &[]);
        // New and unresolved: in, at a host with no address (rejected for no address) until
        // its host resolves.
        check("a.x h1:443\n", &[], "", "a.x h1:443\n", &["a.x"]);
        // Moved to a host without an address: keeps serving where it did.
        check(
            "a.x h2:443\n",
            &["h1"],
            "a.x h1:443\n",
            "a.x h1:443\n",
            &["a.x"],
        );
        // ... unless that old host has lost its address too: then at its new target.
        check(
            "a.x h2:443\n",
            &[],
            "a.x h1:443\n",
            "a.x h2:443\n",
            &["a.x"],
        );
        // Its host resolved: the held route goes in.
        check(
            "a.x h2:443\n",
            &["h1", "h2"],
            "a.x h1:443\n",
            "a.x h2:443\n",
            &[],
        );
        // Others are untouched, in the config's order; a removed route is gone.
        check(
            "b.x h2:443\nc.x h3:443\n",
            &["h3"],
            "z.x h3:443\nb.x h3:443\n",
            "b.x h3:443\nc.x h3:443\n",
            &["b.x"],
        );
    }

    #[test]
    fn hosts_and_targets() {
        for (target, host) in [
            ("api.x:443", Some("api.x")),
            ("API.X.:6443", Some("api.x")),
            ("10.0.0.9:443", None),
            // Not `host:port`: never serves.
            ("api.x", Some("api.x")),
            ("10.0.0.9", Some("10.0.0.9")),
        ] {
            assert_eq!(host_needing_address(target).as_deref(), host, "{target}");
        }
        let config = "global\n#@route a.x API.x.:443 api 1 Z\n#@route b.x 10.0.0.9:443\n\
                      #@suffix d.x fd00::9:443\n#@route e.x b.y:8443\n#@route f.x api.x:6443\n";
        assert_eq!(hosts_needing_address(config), ["api.x", "b.y"]);
        assert!(has_address("10.0.0.1:443", &BTreeMap::new()));
        assert!(!has_address("h:443", &BTreeMap::new()));
    }
}
