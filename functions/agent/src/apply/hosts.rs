//! The routes' hosts before the swap: the address map seeded from a running per-route
//! config, and the hosts new to this generation resolved within the apply's budget, unless
//! HAProxy runs no generation of ours yet (a first install waits for no address).

use autoproxy::artifact;

use super::{ADDRESS_BUDGET, Before, Run, log};

impl Run {
    /// `name address` lines from `show servers state` of the running HAProxy (a per-route
    /// config names one server per host), so the first switch to the map layout drops no route.
    pub(super) async fn seed_addresses(&self) -> String {
        let Some(api) = self.socket() else {
            return String::new();
        };
        let Ok(answer) = api.command("show servers state").await else {
            return String::new();
        };
        let mut seen = std::collections::BTreeSet::new();
        let mut lines = String::new();
        for line in answer.lines() {
            let words: Vec<&str> = line.split_whitespace().collect();
            if words.len() < 18 || !words[0].bytes().all(|b| b.is_ascii_digit()) {
                continue;
            }
            let (address, host) = (words[4], words[17]);
            let plain_host = host
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"_.-".contains(&b));
            if plain_host
                && address != "0.0.0.0"
                && address.parse::<std::net::Ipv4Addr>().is_ok()
                && seen.insert(host.to_owned())
            {
                lines.push_str(&format!("{host} {address}\n"));
            }
        }
        lines
    }

    pub(super) async fn ensure_addresses(&mut self, text: &str) {
        let (new, installed) = self.unknown_hosts(text);
        if new.is_empty() && installed.is_empty() {
            return;
        }
        if self.state.running_gen == 0 {
            // A first install: no HAProxy runs, or it runs no generation of ours (the
            // distribution's default config, a hand-written one). No route of ours serves yet,
            // so waiting gains nothing: the address service fills the map at its fill pace once
            // this apply returns, and `/ready` gates the traffic until the worker holds what
            // its first pass found.
            let n = new.len() + installed.len();
            let runs = if self.state.before == Before::Stopped {
                "HAProxy serves nothing yet"
            } else {
                "HAProxy serves no route of ours yet"
            };
            log(
                "addresses",
                &format!(
                    "{n} new host(s), none waited for: {runs} (the address service resolves them; /ready waits for its first pass)"
                ),
            );
            return;
        }
        let nameservers = artifact::nameservers(text).valid;
        let own = crate::own::Own::of(text, &self.paths.dir);
        // Judged by the borders of the config about to be installed, with its routes' accounts.
        let fences = crate::borders::Fences::of(text);
        // The installed config's hosts are the address service's: it reads them from that
        // file, fills or retries them at its own pace, and puts their held routes in as they
        // resolve. So it is asked only for the hosts new to this generation, if any. A new
        // instance's second apply, during the fill, asked for the 9,300 names the fill had not
        // reached, and took 0.57 s for answers that could only be "still resolving". With no
        // service running, nobody else resolves the installed ones: the apply does, as before.
        let ensured = crate::addresses::ensure(
            &self.paths.dir,
            &new,
            &installed,
            &nameservers,
            crate::addresses::Judges {
                own: &own,
                fences: &fences,
            },
            ADDRESS_BUDGET,
        )
        .await;
        if ensured.by == crate::addresses::By::Resolver {
            // The service writes the file before it pushes: a name it says is missing may be
            // in the file and not in the worker.
            self.state.unpushed = ensured.missing.iter().map(|(n, _)| n.clone()).collect();
        }
        let n = ensured.resolved + ensured.missing.len();
        if n == 0 {
            log(
                "addresses",
                &format!(
                    "no new host; {} of the installed config's without an address are the address service's",
                    installed.len()
                ),
            );
            return;
        }
        log(
            "addresses",
            &format!(
                "{n} new host(s): {} resolved, {} without an address yet{}",
                ensured.resolved,
                ensured.missing.len(),
                ensured
                    .missing
                    .first()
                    .map(|(name, why)| format!(" (first: {name}: {why})"))
                    .unwrap_or_default()
            ),
        );
    }

    /// The route hosts of `text` that need an address ([`crate::routes::needs_address`]) and
    /// have none in the address map: those new to this generation, and those the installed
    /// config routes already.
    fn unknown_hosts(&self, text: &str) -> (Vec<String>, Vec<String>) {
        let known = crate::address_map::MapFile::in_dir(&self.paths.dir)
            .read()
            .unwrap_or_default()
            .addresses;
        let installed = std::fs::read_to_string(self.config()).unwrap_or_default();
        // One parser of the artifact: the same route hosts and nameservers the resolver reads.
        let installed: std::collections::BTreeSet<String> =
            crate::routes::hosts_needing_address(&installed)
                .into_iter()
                .collect();
        crate::routes::hosts_needing_address(text)
            .into_iter()
            .filter(|host| !known.contains_key(host))
            .partition(|host| !installed.contains(host))
    }
}
