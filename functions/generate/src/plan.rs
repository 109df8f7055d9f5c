//! The run as a plan: every decision of the generator, without I/O. From what a run read (the
//! trigger, the config and manifest in S3, the sweep, the zones of the proxy VPCs) to what it
//! writes and what it reports. The handler reads, calls [`plan`], then writes what it says.

use std::collections::{BTreeMap, BTreeSet};

use autoproxy::discovery::{Scope, Swept};
use autoproxy::manifest::Manifest;
use autoproxy::model::{Route, ZoneKey};
use autoproxy::ownership::{self, Grace, Holders, Mode, Refusal};
use autoproxy::publish::{self, Current, Decision, Hold};
use autoproxy::render::{RenderError, Rendered};
use autoproxy::rules::merge_claims;
use autoproxy::s3::CurrentConfig;
use autoproxy::time::Stamp;

use crate::trigger::Trigger;

mod accounts;
mod reported;
mod unread;
use accounts::{AccountGuard, guard_accounts};
use reported::reported;

/// Events name zones: with a manifest to merge into, only those zones are read again. A
/// manifest whose routes the rule table no longer makes all (a `ROUTING_RULES` change) is no
/// base to merge into: every zone is read again.
pub fn scope(trigger: &Trigger, previous: Option<&Manifest>) -> Scope {
    match (trigger, previous) {
        (Trigger::Route53(changes), Some(previous)) if previous.stale_routes == 0 => {
            Scope::Zones(changes.zones.iter().cloned().collect())
        }
        _ => Scope::Full,
    }
}

/// What a run read.
#[derive(Debug)]
pub struct Inputs<'a> {
    pub trigger: &'a Trigger,
    pub current: Option<&'a CurrentConfig>,
    pub previous: Option<&'a Manifest>,
    pub swept: Swept,
    /// The zones of the proxy VPCs when `PROXY_VPCS` is set; `None` for first-holder mode.
    pub associated: Option<&'a BTreeSet<ZoneKey>>,
    /// The run's time: the floor of the next generation, and when account states change.
    pub now: Stamp,
    pub max_rule_drop_percent: u8,
    /// How long an absent holder keeps an SNI outside every zone (`OWNERSHIP_GRACE_HOURS`).
    pub grace_hours: u64,
    /// Where the current config lives, for the diff's header.
    pub config_location: &'a str,
}

/// What to write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Write {
    /// Nothing, and why.
    Nothing(&'static str),
    /// Only the manifest, and why.
    Manifest(&'static str),
    /// The manifest, then the config.
    Publish,
}

/// What the run does and reports.
#[derive(Debug)]
pub struct Plan {
    pub write: Write,
    /// The manifest to write, its generation set.
    pub manifest: Manifest,
    /// The config: the one to publish, or the current one re-rendered when nothing changed.
    pub rendered: Rendered,
    pub routes: usize,
    pub decision: Decision,
    pub refusals: Vec<Refusal>,
    pub warnings: Vec<String>,
    pub diff: String,
    /// The accounts the per-account guard holds.
    pub holds: Vec<Hold>,
    /// Accounts with zones never read yet, and how many: held at their published routes.
    pub unread: BTreeMap<String, usize>,
}

impl Plan {
    /// Whether the config differs from the current one (published or not).
    pub fn changed(&self) -> bool {
        self.decision != Decision::Unchanged
    }

    pub fn publishes(&self) -> bool {
        self.write == Write::Publish
    }
}

/// Renders the routes with a generation (the template, the settings and the time are the
/// caller's).
pub type Render<'a> = dyn Fn(&[Route], u64) -> Result<Rendered, RenderError> + 'a;

/// Decides what the run writes: the routes each zone may give, the generation, whether the
/// config changed, the mass-deletion guard, and the hold of accounts with zones never read.
pub fn plan(inputs: Inputs<'_>, render: &Render<'_>) -> Result<Plan, RenderError> {
    let Inputs {
        trigger,
        current,
        previous,
        swept,
        associated,
        now,
        max_rule_drop_percent,
        grace_hours,
        config_location,
    } = inputs;
    let mut warnings = swept.failures.clone();
    warnings.extend(stale_routes(previous));
    warnings.extend(swept.warnings.iter().cloned());
    let mut manifest = swept.manifest;
    let unread = unread::never_read(&manifest);
    warnings.extend(unread::warning(&manifest, &unread));
    unread::hold(&mut manifest, previous, &unread);
    let guard = AccountGuard::of(trigger, previous, max_rule_drop_percent, now);
    let holds = guard_accounts(&mut manifest, previous, &swept.outcomes, &unread, &guard);
    warnings.extend(holds.iter().map(ToString::to_string));
    let remembered = previous.map(Holders::of).unwrap_or_default();
    let mode = associated.map_or(Mode::FirstHolder, Mode::Vpc);
    let grace = Grace::hours(now.unix(), grace_hours);
    let unread_zones = manifest.unread_entries();
    let owned =
        ownership::owned_routes_beside(&manifest.zones, &unread_zones, &remembered, mode, grace);
    owned.holders.store(&mut manifest);
    warnings.extend(owned.refusals.iter().map(ToString::to_string));
    let (routes, conflicts) = merge_claims(owned.candidates);
    warnings.extend(conflicts.iter().map(ToString::to_string));

    let current_generation = current.map_or(0, CurrentConfig::generation);
    // Never number below what was last published: someone may have copied an old version
    // over the current object, and the fleet skips generations it has already passed. The
    // manifest remembers the highest, and is never written with less.
    let recorded = current_generation.max(previous.map_or(0, |m| m.generation));
    // Rendered with the current generation, an unchanged state gives the current body.
    let same_generation = render(&routes, current_generation)?;
    let decision = decision(current, &same_generation, routes.len(), guard.estate());
    let changed = decision != Decision::Unchanged;
    let rendered = if changed {
        render(&routes, publish::next_generation(recorded, now.unix()))?
    } else {
        same_generation
    };
    let diff = diff(current, &rendered, changed, config_location);
    let manifest_changed = previous.is_none_or(|p| !p.same_content(&manifest));
    let write = choose_write(&decision, trigger.dry_run(), manifest_changed);
    if let Decision::Blocked(reason) = &decision {
        warnings.push(reason.clone());
    }
    manifest.generation = match write {
        Write::Publish => rendered.header.generation,
        _ => recorded,
    };
    let warnings = reported(warnings, &manifest, config_location);
    Ok(Plan {
        write,
        manifest,
        rendered,
        routes: routes.len(),
        decision,
        refusals: owned.refusals,
        warnings,
        diff,
        holds,
        unread,
    })
}

/// Whether to publish `candidate` (rendered with the current generation) over `current`:
/// the estate's mass-deletion guard.
fn decision(
    current: Option<&CurrentConfig>,
    candidate: &Rendered,
    routes: usize,
    guard: publish::Guard,
) -> Decision {
    let current_header = current.and_then(|c| c.header.as_ref()).map(|h| Current {
        sha256: &h.sha256,
        rules: h.rules,
    });
    publish::decide(current_header, &candidate.header.sha256, routes, guard)
}

/// The warning that the last manifest's routes were not all what the rule table makes now.
fn stale_routes(previous: Option<&Manifest>) -> Option<String> {
    let stale = previous.map(|p| p.stale_routes).filter(|n| *n > 0)?;
    Some(format!(
        "{stale} route(s) of the last manifest are not what the rule table (ROUTING_RULES) \
         makes now: dropped, every zone read again; who holds each name is kept"
    ))
}

/// What the run would change in the config: against the current one, or against nothing.
fn diff(current: Option<&CurrentConfig>, rendered: &Rendered, changed: bool, at: &str) -> String {
    match current {
        Some(current) if changed => {
            autoproxy::diff::unified(&current.text, &rendered.text, at, "rendered")
        }
        None => autoproxy::diff::unified("", &rendered.text, "/dev/null", "rendered"),
        Some(_) => String::new(),
    }
}

/// The writes for a decision. A dry run writes nothing; an unchanged config still saves a
/// manifest whose content moved (a zone without routes, a holder, the progress of a sweep).
fn choose_write(decision: &Decision, dry_run: bool, manifest_changed: bool) -> Write {
    match decision {
        _ if dry_run => Write::Nothing("dry run: nothing written"),
        Decision::Blocked(_) => Write::Nothing("mass-deletion guard: nothing written"),
        Decision::Unchanged if manifest_changed => {
            Write::Manifest("config unchanged; manifest updated")
        }
        Decision::Unchanged => Write::Nothing("config unchanged: nothing written"),
        Decision::Publish => Write::Publish,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use autoproxy::publish::Force;

    #[test]
    fn every_decision_writes_what_it_should() {
        let blocked = Decision::Blocked("guard".into());
        let nothing = |why: &'static str| Write::Nothing(why);
        for (decision, dry_run, manifest_changed, expected) in [
            (&Decision::Publish, false, false, Write::Publish),
            (
                &Decision::Publish,
                true,
                true,
                nothing("dry run: nothing written"),
            ),
            (
                &blocked,
                false,
                true,
                nothing("mass-deletion guard: nothing written"),
            ),
            (&blocked, true, true, nothing("dry run: nothing written")),
            (
                &Decision::Unchanged,
                false,
                true,
                Write::Manifest("config unchanged; manifest updated"),
            ),
            (
                &Decision::Unchanged,
                false,
                false,
                nothing("config unchanged: nothing written"),
            ),
        ] {
            assert_eq!(
                choose_write(decision, dry_run, manifest_changed),
                expected,
                "{decision:?} dry_run={dry_run} manifest_changed={manifest_changed}"
            );
        }
    }

    use autoproxy::manifest::{ZoneEntry, zone_key};
    use autoproxy::model::{RecordSet, Zone, ZoneRecords};
    use autoproxy::names::HostName;
    use autoproxy::render::{DEFAULT_TEMPLATE, RenderInput, RenderOptions, Renderer};
    use autoproxy::rules::{DEFAULT_RULES, zone_routes};

    pub(super) const PROXY: &str = "peering-proxy.tools.example.com";
    pub(super) const NOW: u64 = 1_795_403_642;

    /// A sweep that found these zones (by name), each with the api pair, in one account.
    fn swept(names: &[&str]) -> Swept {
        let mut manifest = Manifest::default();
        let proxies = [HostName::parse(PROXY).unwrap()];
        for (i, name) in names.iter().enumerate() {
            let zone = Zone {
                account: "111111111111".into(),
                id: format!("Z{i}"),
                name: format!("{name}."),
                private: true,
            };
            let records = vec![
                RecordSet::new(&format!("api.{name}"), "A", &["10.0.0.1"]),
                RecordSet::new(&format!("proxy.api.{name}"), "CNAME", &[PROXY]),
            ];
            let zone_records = ZoneRecords {
                unnamed_left: 0,
                zone: zone.clone(),
                records,
            };
            let routes = zone_routes(&DEFAULT_RULES, &zone_records, &proxies).routes;
            manifest
                .zones
                .insert(zone_key(&zone.key()), ZoneEntry::new(&zone, routes, vec![]));
        }
        Swept {
            manifest,
            zones_scanned: names.len(),
            failures: Vec::new(),
            warnings: Vec::new(),
            outcomes: BTreeMap::new(),
        }
    }

    /// Plans one run with the embedded template; `current` as the previous run left it.
    pub(super) fn run(
        trigger: &Trigger,
        swept: Swept,
        previous: Option<&Manifest>,
        current: Option<&CurrentConfig>,
        now: u64,
    ) -> Plan {
        let renderer = Renderer::new(DEFAULT_TEMPLATE).unwrap();
        let resolvers = ["10.0.0.2:53".parse().unwrap()];
        let options = RenderOptions::default();
        let render = |routes: &[Route], generation: u64| {
            renderer.render(&RenderInput {
                routes,
                resolvers: &resolvers,
                proxies: &[],
                options: &options,
                generation,
                generated_at: "2026-11-23T03:14:02Z",
                trigger: "test",
            })
        };
        let inputs = Inputs {
            trigger,
            current,
            previous,
            swept,
            associated: None,
            now: Stamp::from_unix(now),
            max_rule_drop_percent: 50,
            grace_hours: 24,
            config_location: "s3://bucket/haproxy/haproxy.cfg",
        };
        plan(inputs, &render).unwrap()
    }

    /// The config in S3 after `plan` was published.
    pub(super) fn published(plan: &Plan) -> CurrentConfig {
        CurrentConfig {
            text: plan.rendered.text.clone(),
            header: Some(plan.rendered.header.clone()),
            etag: None,
            version_id: Some("v1".into()),
        }
    }

    #[test]
    fn a_run_plans_its_writes_from_what_it_read() {
        let schedule = Trigger::Schedule;
        let two = ["a.internal", "b.internal"];
        // A first run publishes, numbered with its time, the diff against nothing.
        let first = run(&schedule, swept(&two), None, None, NOW);
        assert_eq!((first.write.clone(), first.routes), (Write::Publish, 2));
        assert_eq!(first.rendered.header.generation, NOW);
        assert_eq!(first.manifest.generation, NOW);
        assert!(first.diff.contains("/dev/null"), "{}", first.diff);
        let current = published(&first);

        // The same state again writes nothing.
        let again = run(
            &schedule,
            swept(&two),
            Some(&first.manifest),
            Some(&current),
            NOW + 60,
        );
        assert_eq!(
            again.write,
            Write::Nothing("config unchanged: nothing written")
        );
        assert!(!again.changed() && again.diff.is_empty());

        // A change is numbered above whatever the manifest remembers, even when the current
        // object carries less (an old version copied over it).
        let mut remembered = first.manifest.clone();
        remembered.generation = NOW + 1_000;
        let three = ["a.internal", "b.internal", "c.internal"];
        let grown = run(
            &schedule,
            swept(&three),
            Some(&remembered),
            Some(&current),
            NOW + 60,
        );
        assert_eq!(grown.write, Write::Publish);
        assert_eq!(grown.rendered.header.generation, NOW + 1_001);

        // A dry run decides the same and writes nothing.
        let dry = Trigger::Manual {
            dry_run: true,
            force: Force::None,
        };
        let planned = run(
            &dry,
            swept(&three),
            Some(&first.manifest),
            Some(&current),
            NOW,
        );
        assert_eq!(planned.write, Write::Nothing("dry run: nothing written"));
        assert!(planned.changed() && planned.diff.contains("c.internal"));
    }

    #[test]
    fn an_account_losing_its_routes_is_held_until_forced() {
        let schedule = Trigger::Schedule;
        let first = run(
            &schedule,
            swept(&["a.internal", "b.internal"]),
            None,
            None,
            NOW,
        );
        let current = published(&first);
        // Losing every route of an account holds that account unless forced: the config
        // stays, the manifest records the hold.
        let gone = run(
            &schedule,
            swept(&[]),
            Some(&first.manifest),
            Some(&current),
            NOW,
        );
        assert_eq!(
            gone.write,
            Write::Manifest("config unchanged; manifest updated")
        );
        assert_eq!((gone.routes, gone.holds.len()), (2, 1));
        assert!(
            gone.warnings
                .iter()
                .any(|w| w.contains("{\"force\": \"111111111111\"}")),
            "{:?}",
            gone.warnings
        );
        let held = &gone.manifest.accounts;
        assert_eq!(held.len(), 1);
        assert_eq!(held[0].state, autoproxy::accounts::State::Held);
        for force in [
            Force::All,
            Force::Accounts(["111111111111".to_owned()].into()),
        ] {
            let trigger = Trigger::Manual {
                dry_run: false,
                force: force.clone(),
            };
            let forced = run(
                &trigger,
                swept(&[]),
                Some(&first.manifest),
                Some(&current),
                NOW,
            );
            assert_eq!(
                (forced.write, forced.routes),
                (Write::Publish, 0),
                "{force:?}"
            );
        }
        // Forcing another account releases nothing.
        let other = Trigger::Manual {
            dry_run: false,
            force: Force::Accounts(["222222222222".to_owned()].into()),
        };
        let still = run(
            &other,
            swept(&[]),
            Some(&first.manifest),
            Some(&current),
            NOW,
        );
        assert_eq!((still.routes, still.holds.len()), (2, 1));
    }

    #[test]
    fn the_manifest_remembers_who_holds_each_name() {
        let plan = run(&Trigger::Schedule, swept(&["a.internal"]), None, None, NOW);
        let holder = &plan.manifest.holders["a.internal"];
        assert_eq!(
            (holder.account.as_str(), holder.id.as_str()),
            ("111111111111", "Z0")
        );
    }
}
