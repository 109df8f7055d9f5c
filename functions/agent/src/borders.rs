//! Where a route's back may point, judged for the address the agent resolves
//! (docs/ARCHITECTURE.md, "Where a back may point"). The generator judges an A back's literal
//! values; a CNAME or alias back is known only here, by its address: one member's CNAME to
//! another member's internal load balancer, or an alias to a record at 169.254.x.x, resolves
//! to an address the generator never saw. The artifact carries the borders the generator
//! judged by (`#@network`, `#@public-backs`: [`autoproxy::artifact::borders`]) and each
//! route's account (the route line's fourth field), and [`Fences::refused`] judges an address
//! by [`Borders::judge`], the generator's own judgment, against every account whose routes
//! send to the host.
//!
//! A host whose address is refused for any of its routes gets no address in the address map,
//! so all its routes are held as a loop is ([`crate::own`]): counted, explained, their
//! connections rejected as `reject_no_address`, never forwarded. The map is one address per
//! host, so one route's refusal holds the host for every route that shares it.
//!
//! Loopback and unspecified addresses are left to the loop judgment ([`crate::own`]): with
//! the production bind they are this proxy, and with a specific bind (tests, the demo) another
//! loopback address is another host. A host no installed route names (an apply asked for it
//! without saying whose it is, an address kept from the map file) is judged by the ranges that
//! are never a backend alone: no route sends to it until a config names it, and then its
//! accounts are known.
//!
//! The judgment is per resolved address, a handful of hash lookups per account of the host:
//! nothing per connection.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use autoproxy::artifact::{ROUTE_LINE, SUFFIX_LINE};
use autoproxy::networks::{Border, Borders, destination};
use autoproxy::rules::{NeverBackend, never_backend};

/// The most accounts an apply names for one host over the control socket: a host routed by
/// more is asked for without them, and judged once the service reads the config that routes
/// it ([`crate::control`]).
pub const MAX_ACCOUNTS: usize = 16;

/// The borders of a config and the routes that send to each host.
#[derive(Debug, Clone, Default)]
pub struct Fences {
    borders: Borders,
    /// Host (as the address map keys it) → the routes that send to it: (key, account).
    routes: BTreeMap<String, Vec<(String, String)>>,
}

impl PartialEq for Fences {
    fn eq(&self, other: &Fences) -> bool {
        self.borders.networks() == other.borders.networks()
            && self.borders.public() == other.borders.public()
            && self.routes == other.routes
    }
}

impl Eq for Fences {}

impl Fences {
    /// What the config's text says: its borders, and the account of each route line.
    pub fn of(config: &str) -> Fences {
        let mut routes: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
        for line in autoproxy::artifact::body(config).lines() {
            let Some(entry) = line
                .strip_prefix(ROUTE_LINE)
                .or_else(|| line.strip_prefix(SUFFIX_LINE))
            else {
                continue;
            };
            let mut words = entry.split_whitespace();
            let (Some(key), Some(target)) = (words.next(), words.next()) else {
                continue;
            };
            let Some(host) = crate::routes::host_needing_address(target) else {
                continue;
            };
            // The fourth field; a line without one (an earlier template) names no account,
            // and its host is judged by the ranges that are never a backend alone.
            if let Some(account) = words.nth(1) {
                routes
                    .entry(host)
                    .or_default()
                    .push((key.to_owned(), account.to_owned()));
            }
        }
        Fences {
            borders: autoproxy::artifact::borders(config),
            routes,
        }
    }

    /// Whether `host` is a host the config routes.
    pub fn routes(&self, host: &str) -> bool {
        self.routes.contains_key(host)
    }

    /// The accounts whose routes send to `host`, once each, sorted.
    pub fn accounts(&self, host: &str) -> BTreeSet<&str> {
        self.routes
            .get(host)
            .into_iter()
            .flatten()
            .map(|(_, account)| account.as_str())
            .collect()
    }

    /// Why `name` may not be given `address`: a route to it may not forward there. `wanted`:
    /// accounts an apply named for a host the config does not route yet. None when it may.
    pub fn refused(
        &self,
        name: &str,
        address: IpAddr,
        wanted: Option<&BTreeSet<String>>,
    ) -> Option<String> {
        let routes = self.routes.get(name).map_or(&[][..], Vec::as_slice);
        let mut refusals = routes
            .iter()
            .map(|(key, account)| (Some(key.as_str()), account.as_str()))
            .chain(wanted.into_iter().flatten().map(|a| (None, a.as_str())))
            .filter_map(|(key, account)| Some((key, account, self.judge(address, account)?)));
        let Some((key, account, why)) = refusals.next() else {
            if routes.is_empty() && wanted.is_none_or(BTreeSet::is_empty) {
                let why = never(address)?;
                return Some(format!("{name} resolves to {address}: {why}: never routed"));
            }
            return None;
        };
        let more = refusals.count();
        let route = key.map_or_else(
            || format!("a route of account {account}"),
            |key| format!("route {key} of account {account}"),
        );
        let others = match more {
            0 => String::new(),
            n => format!(" and {n} more"),
        };
        Some(format!(
            "{name} resolves to {address}: {why} ({route}{others}): never routed"
        ))
    }

    /// Why a route of `account` may not forward to `address`, as the generator judges a
    /// literal value, but loopback and unspecified addresses ([`crate::own`]'s).
    fn judge(&self, address: IpAddr, account: &str) -> Option<Border> {
        match self.borders.judge(address, account) {
            Ok(()) | Err(Border::Never(NeverBackend::Loopback | NeverBackend::Unspecified)) => None,
            Err(why) => Some(why),
        }
    }
}

/// Why `address` is never a backend, whoever's route it is, but loopback and unspecified.
fn never(address: IpAddr) -> Option<NeverBackend> {
    never_backend(destination(address))
        .filter(|why| !matches!(why, NeverBackend::Loopback | NeverBackend::Unspecified))
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "111111111111";
    const B: &str = "222222222222";

    /// A's routes to `api.a.test` and `ingress.shared.test`, B's to `api.b.test` and
    /// `ingress.shared.test`; A's network 10.1.0.0/16, B's 10.2.0.0/16; public backs refused.
    const CONFIG: &str = "# generation: 2\nglobal\n\
        #@route proxy.api.a.test api.a.test:443 api 111111111111 Z1\n\
        #@route proxy.api.b.test API.B.test.:443 api 222222222222 Z2\n\
        #@suffix int.a.test ingress.shared.test:443 ingress-int 111111111111 Z1\n\
        #@suffix int.b.test ingress.shared.test:443 ingress-int 222222222222 Z2\n\
        #@route proxy.api.c.test 10.2.0.9:443 api 111111111111 Z1\n\
        #@route proxy.api.d.test api.d.test:443\n\
        #@network 111111111111 10.1.0.0/16\n#@network 222222222222 10.2.0.0/16\n\
        #@public-backs refuse\n";

    fn ip(text: &str) -> IpAddr {
        text.parse().expect("an address")
    }

    /// One line per case: the host, the address, what the refusal says (none: allowed).
    fn check(fences: &Fences, name: &str, address: &str, wanted: &[&str], want: Option<&str>) {
        let wanted: BTreeSet<String> = wanted.iter().map(|a| (*a).to_owned()).collect();
        let got = fences.refused(name, ip(address), Some(&wanted));
        match (want, &got) {
            (None, None) => {}
            (Some(fragment), Some(why)) if why.contains(fragment) => {}
            _ => panic!("{name} at {address} (wanted {wanted:?}): {got:?}, expected {want:?}"),
        }
    }

    #[test]
    fn a_resolved_address_is_judged_against_every_account_routing_to_its_host() {
        let fences = Fences::of(CONFIG);
        assert_eq!(fences.accounts("ingress.shared.test"), [A, B].into());
        assert_eq!(fences.accounts("api.b.test"), [B].into());
        assert!(!fences.routes("10.2.0.9"), "literals need no address");
        let f = &fences;
        // Its own network, a private one of no member's, loopback (the loop judgment's).
        check(f, "api.a.test", "10.1.4.4", &[], None);
        check(f, "api.a.test", "172.31.0.9", &[], None);
        check(f, "api.a.test", "127.0.0.2", &[], None);
        check(f, "api.a.test", "0.0.0.0", &[], None);
        // Another member's network: named, with the route and its account.
        check(
            f,
            "api.a.test",
            "10.2.0.10",
            &[],
            Some(
                "api.a.test resolves to 10.2.0.10: inside account 222222222222's network \
                 10.2.0.0/16, another member's: a route may only reach its own account's \
                 networks (route proxy.api.a.test of account 111111111111): never routed",
            ),
        );
        check(f, "api.b.test", "10.2.0.10", &[], None);
        check(
            f,
            "api.b.test",
            "::ffff:10.1.0.1",
            &[],
            Some("account 111111111111's network"),
        );
        // A host two accounts route to: refused when either may not go there.
        check(
            f,
            "ingress.shared.test",
            "10.1.0.7",
            &[],
            Some("(route int.b.test of account 222222222222)"),
        );
        // Link-local, multicast, broadcast: never, whoever's route, named or not.
        check(
            f,
            "api.a.test",
            "169.254.169.254",
            &[],
            Some("a link-local address"),
        );
        check(f, "api.a.test", "fe80::1", &[], Some("link-local"));
        check(f, "api.b.test", "239.1.1.1", &[], Some("multicast"));
        check(f, "api.b.test", "255.255.255.255", &[], Some("broadcast"));
        check(f, "api.d.test", "169.254.10.1", &[], Some("link-local"));
        check(f, "unrouted.test", "169.254.10.1", &[], Some("link-local"));
        check(f, "unrouted.test", "10.2.0.1", &[], None);
        // Public: refused (judged here only: nothing connects to a public address in a test).
        check(
            f,
            "api.a.test",
            "8.8.8.8",
            &[],
            Some("a globally routable address"),
        );
        // The accounts an apply named for a host the config does not route yet.
        check(
            f,
            "api.new.test",
            "10.2.0.3",
            &[A],
            Some("(a route of account 111111111111): never routed"),
        );
        check(f, "api.new.test", "10.2.0.3", &[B], None);
    }

    #[test]
    fn public_backs_allowed_and_an_earlier_artifact_refuse_only_what_is_never_a_backend() {
        let allowed = CONFIG.replace("#@public-backs refuse", "#@public-backs allow");
        let allowed = Fences::of(&allowed);
        check(&allowed, "api.a.test", "8.8.8.8", &[], None);
        check(
            &allowed,
            "api.a.test",
            "10.2.0.1",
            &[],
            Some("another member's"),
        );
        let earlier = Fences::of(
            "# generation: 1\nglobal\n#@route proxy.api.a.test api.a.test:443 api 1 Z1\n",
        );
        check(&earlier, "api.a.test", "8.8.8.8", &[], None);
        check(&earlier, "api.a.test", "10.2.0.1", &[], None);
        check(
            &earlier,
            "api.a.test",
            "169.254.169.254",
            &[],
            Some("link-local"),
        );
        assert_ne!(earlier, Fences::of(CONFIG));
        assert_eq!(Fences::of(CONFIG), Fences::of(CONFIG));
    }
}
