//! Zones never read yet hold only what they could touch (docs/ARCHITECTURE.md, "Zones not
//! read yet"): their own account's routes, and the names inside them. Every other account
//! publishes in that run.

use std::collections::BTreeMap;

use autoproxy::manifest::{Manifest, is_accounts, key_account};

/// Accounts with zones listed but never read yet (pending, with no entry), and how many.
pub fn never_read(manifest: &Manifest) -> BTreeMap<String, usize> {
    let mut accounts: BTreeMap<String, usize> = BTreeMap::new();
    for key in &manifest.pending {
        if manifest.zones.contains_key(key) {
            continue;
        }
        if let Some(account) = key_account(key) {
            *accounts.entry(account.to_owned()).or_default() += 1;
        }
    }
    accounts
}

/// Holds each account of `accounts` at its published routes: what this run read of it is
/// saved as `progress` (not read first again, not rendered), and its `zones` are what the
/// last manifest had for it, the config's (nothing for an account new to the manifest).
pub fn hold(
    manifest: &mut Manifest,
    previous: Option<&Manifest>,
    accounts: &BTreeMap<String, usize>,
) {
    for account in accounts.keys() {
        let read: Vec<String> = manifest
            .zones
            .keys()
            .filter(|key| is_accounts(key, account))
            .cloned()
            .collect();
        for key in read {
            if let Some(entry) = manifest.zones.remove(&key) {
                manifest.progress.insert(key, entry);
            }
        }
        let published = previous
            .into_iter()
            .flat_map(|previous| &previous.zones)
            .filter(|(key, _)| is_accounts(key, account));
        for (key, entry) in published {
            manifest.zones.insert(key.clone(), entry.clone());
        }
    }
}

/// The warning of an unfinished sweep: how many zones wait, and each account whose zones were
/// never read, with how many.
pub fn warning(manifest: &Manifest, accounts: &BTreeMap<String, usize>) -> Option<String> {
    let pending = manifest.pending.len();
    if pending == 0 {
        return None;
    }
    let mut warning = format!(
        "sweep unfinished: {pending} zone(s) not read before the time budget (or, in an event \
         run, an account's share of it) ran out; they are read first by the next run"
    );
    if accounts.is_empty() {
        warning.push_str(", and keep their last known routes meanwhile");
        return Some(warning);
    }
    let named: Vec<String> = accounts
        .iter()
        .map(|(account, count)| format!("account {account}: {count}"))
        .collect();
    warning.push_str(&format!(
        ". Zones never read ({}): each of these accounts keeps the routes last published for \
         it (none for an account new here) and nothing inside those zones goes to anybody new \
         until they are read; every other account publishes",
        named.join(", ")
    ));
    Some(warning)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use autoproxy::accounts::{Outcome, State};
    use autoproxy::discovery::Swept;
    use autoproxy::manifest::{Manifest, ZoneEntry, zone_key};
    use autoproxy::model::{RecordSet, Zone};
    use autoproxy::names::HostName;
    use autoproxy::rules::DEFAULT_RULES;

    use super::super::tests::{NOW, PROXY, published, run};
    use super::super::{Plan, Write};
    use crate::trigger::Trigger;

    /// A zone of `account` named `name`, with the api pair when `routed`.
    fn entry(account: &str, id: &str, name: &str, routed: bool) -> ZoneEntry {
        let zone = Zone {
            account: account.into(),
            id: id.into(),
            name: format!("{name}."),
            private: true,
        };
        let mut records = vec![RecordSet::new(&format!("api.{name}"), "A", &["10.0.0.1"])];
        if routed {
            records.push(RecordSet::new(
                &format!("proxy.api.{name}"),
                "CNAME",
                &[PROXY],
            ));
        }
        let proxies = [HostName::parse(PROXY).unwrap()];
        ZoneEntry::matched(&zone, records, &DEFAULT_RULES, &proxies)
    }

    /// The account with zones never read, and the other.
    const A: &str = "111111111111";
    const B: &str = "222222222222";

    /// A full sweep that read `read` and listed `never` without reading them.
    fn swept(read: Vec<ZoneEntry>, never: &[(&str, &str, &str)]) -> Swept {
        let mut manifest = Manifest::default();
        let mut outcomes = BTreeMap::new();
        for entry in read {
            outcomes.insert(entry.account.clone(), Outcome::Read);
            let key = zone_key(&entry.key());
            manifest.zones.insert(key, entry);
        }
        for (account, id, name) in never {
            outcomes.insert((*account).to_owned(), Outcome::Read);
            let key = zone_key(&autoproxy::model::ZoneKey {
                account: (*account).to_owned(),
                id: (*id).to_owned(),
            });
            manifest.pending.insert(key.clone());
            manifest.unread.insert(key, format!("{name}."));
        }
        Swept {
            zones_scanned: manifest.zones.len(),
            manifest,
            failures: Vec::new(),
            warnings: Vec::new(),
            outcomes,
        }
    }

    /// The config's route lines' SNIs.
    fn snis(plan: &Plan) -> Vec<String> {
        let lines = plan.rendered.text.lines();
        let routes = lines.filter_map(|line| line.strip_prefix("#@route "));
        routes
            .filter_map(|route| route.split(' ').next())
            .map(str::to_owned)
            .collect()
    }

    /// A's two zones never read.
    const NEVER: [(&str, &str, &str); 2] = [(A, "ZU1", "u1.internal"), (A, "ZU2", "u2.internal")];

    /// A's zone and B's, both routed.
    fn both() -> Vec<ZoneEntry> {
        vec![
            entry(A, "ZA", "a.internal", true),
            entry(B, "ZB", "b.internal", true),
        ]
    }

    /// A new install's run: A read one zone and not two others; B read its zone.
    fn new_install() -> Plan {
        run(&Trigger::Schedule, swept(both(), &NEVER), None, None, NOW)
    }

    #[test]
    fn a_new_install_publishes_the_accounts_it_finished_and_names_the_others() {
        let first = new_install();
        assert_eq!(first.write, Write::Publish);
        assert_eq!(snis(&first), ["proxy.api.b.internal"]);
        assert_eq!(first.unread, BTreeMap::from([(A.to_owned(), 2)]));
        assert!(first.manifest.progress.contains_key(&format!("{A}/ZA")));
        let states = &first.manifest.accounts;
        let a = states.iter().find(|s| s.account == A).unwrap();
        assert_eq!(a.state, State::Pending);
        let warning = first.warnings.iter().find(|w| w.contains("never read"));
        let warning = warning.unwrap();
        assert!(warning.contains(&format!("account {A}: 2")), "{warning}");
        // A finishes: its routes publish.
        let current = published(&first);
        let done = run(
            &Trigger::Schedule,
            swept(both(), &[]),
            Some(&first.manifest),
            Some(&current),
            NOW + 60,
        );
        let snis_done = snis(&done);
        assert_eq!(snis_done, ["proxy.api.a.internal", "proxy.api.b.internal"]);
        assert!(done.manifest.progress.is_empty() && done.unread.is_empty());
    }

    #[test]
    fn zones_never_read_hold_their_own_account_and_the_names_inside_them_only() {
        let done = run(&Trigger::Schedule, swept(both(), &[]), None, None, NOW);
        let current = published(&done);
        // A has new zones never read, and its published zone lost its route; B adds a zone,
        // and another whose name is one of A's unread zones'.
        let mut quiet = entry(A, "ZA", "a.internal", false);
        quiet.routes.clear();
        let zones = vec![
            quiet,
            entry(B, "ZB", "b.internal", true),
            entry(B, "ZC", "c.internal", true),
            entry(B, "ZD", "u1.internal", true),
        ];
        // An event run inherits the pending set: not held either.
        let zone = autoproxy::model::ZoneKey {
            account: B.into(),
            id: "ZC".into(),
        };
        let changes = crate::trigger::Changes::one("ChangeResourceRecordSets", zone);
        let event = Trigger::Route53(changes);
        for trigger in [&Trigger::Schedule, &event] {
            let previous = Some(&done.manifest);
            let swept = swept(zones.clone(), &NEVER);
            let held = run(trigger, swept, previous, Some(&current), NOW + 120);
            assert_eq!(held.write, Write::Publish, "{trigger:?}");
            // A keeps its published route; B's new zone publishes; the name of A's unread
            // zone goes to nobody new.
            let expected = [
                "proxy.api.a.internal",
                "proxy.api.b.internal",
                "proxy.api.c.internal",
            ];
            assert_eq!(snis(&held), expected, "{trigger:?} {:?}", held.warnings);
            assert!(held.holds.is_empty(), "{:?}", held.holds);
            let warned = |w: &String| w.contains("not read yet") && w.contains("ZU1");
            assert!(held.warnings.iter().any(warned), "{:?}", held.warnings);
            let key = format!("{A}/ZA");
            assert_eq!(held.manifest.zones[&key], done.manifest.zones[&key]);
            assert!(held.manifest.progress[&key].routes.is_empty());
        }
    }
}
