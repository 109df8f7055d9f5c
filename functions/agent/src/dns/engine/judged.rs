//! What a name's address is judged by before it goes into the map: this proxy's own addresses
//! and names ([`crate::own`]: a loop) and the borders of the routes that send to the name
//! ([`crate::borders`]: another member's network, the link-local range, the internet). The
//! engine asks per name and address, when it answers and when it writes the map: never per
//! connection.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use crate::borders::Fences;
use crate::own::Own;

/// The engine's judges, and what they learned.
#[derive(Debug, Default)]
pub struct Judged {
    /// This proxy's own addresses and names.
    own: Own,
    /// What the own names resolved to last: every address of each.
    own_resolved: BTreeMap<String, Vec<IpAddr>>,
    /// Where the installed config's routes may point.
    fences: Fences,
    /// The accounts an apply named for names the installed config does not route yet.
    wanted_accounts: BTreeMap<String, BTreeSet<String>>,
}

impl Judged {
    /// This proxy's own addresses and names from now on; whether they changed.
    pub fn set_own(&mut self, own: Own) -> bool {
        if own == self.own {
            return false;
        }
        self.own_resolved
            .retain(|name, _| own.names.contains(name.as_str()));
        self.own = own;
        true
    }

    /// Where the installed config's routes may point from now on; whether that changed. The
    /// accounts an apply named are kept only for the names the config does not route: for
    /// the others, the config says whose they are.
    pub fn set_fences(&mut self, fences: Fences) -> bool {
        if fences == self.fences {
            return false;
        }
        self.wanted_accounts.retain(|name, _| !fences.routes(name));
        self.fences = fences;
        true
    }

    /// Takes in whose routes will send to names an apply wants; whether that added any.
    pub fn want_accounts(&mut self, accounts: &BTreeMap<String, BTreeSet<String>>) -> bool {
        let mut added = false;
        for (name, accounts) in accounts {
            if accounts.is_empty() || self.fences.routes(name) {
                continue;
            }
            let known = self.wanted_accounts.entry(name.clone()).or_default();
            let before = known.len();
            known.extend(accounts.iter().cloned());
            added |= known.len() != before;
        }
        added
    }

    /// Forgets what an apply said of `name`.
    pub fn forget(&mut self, name: &str) {
        self.wanted_accounts.remove(name);
    }

    /// `name` resolved to `addrs`: whether it is an own name that moved (the hosts that
    /// resolve to it are judged again then).
    pub fn own_resolved(&mut self, name: &str, addrs: &[IpAddr]) -> bool {
        if !self.own.names.contains(name)
            || self.own_resolved.get(name).map(Vec::as_slice) == Some(addrs)
        {
            return false;
        }
        self.own_resolved.insert(name.to_owned(), addrs.to_vec());
        true
    }

    /// Why `name` at `address` may not be routed: it is this proxy, or a route to it may not
    /// go there. None when it may.
    pub fn refused(&self, name: &str, address: IpAddr) -> Option<String> {
        self.own
            .looped(name, address, &self.own_resolved)
            .or_else(|| {
                self.fences
                    .refused(name, address, self.wanted_accounts.get(name))
            })
    }
}
