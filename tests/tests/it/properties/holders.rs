//! Random small estates (four zones in three accounts, a parent and its child, one name in two
//! accounts) run after run, with random record changes and `ROUTING_RULES` changes, through
//! the generator's pure core as a run does it: match every zone, reload the last manifest with
//! this run's rules, settle ownership, merge. What must hold whatever happens:
//!
//! * a name never moves away from the zone that routed it while that zone still claims it, or
//!   within the grace after it stopped;
//! * no route points at a proxy name: neither its backend nor the backend record's value.

use std::collections::BTreeMap;

use autoproxy::ownership::{Grace, Holders, Mode, owned_routes};

use autoproxy::rules::{Rule, parse_rules};

use super::*;

const A: &str = "111111111111";
const B: &str = "222222222222";
const C: &str = "333333333333";
/// The estate: a parent zone, its child in another account, one name in two accounts.
const ZONES: [(&str, &str, &str); 4] = [
    (A, "ZA1", "a.internal"),
    (B, "ZB1", "b.a.internal"),
    (B, "ZB2", "c.internal"),
    (C, "ZC1", "c.internal"),
];
/// What an `eks` back record may point to: two endpoints, a name in the child zone, the proxy
/// (in two spellings).
const EKS_TARGETS: [&str; 5] = [
    "x.eks.amazonaws.com",
    "y.eks.amazonaws.com",
    "api.b.a.internal",
    PROXY,
    "Peering-Proxy.Tools.Example.COM.",
];
const INGRESS_BACKS: [&str; 2] = ["elb.example.com", "peering-proxy.tools.example.com."];
const GRACE_SECONDS: u64 = 24 * 3600;
/// Runs are this far apart: every run of a case falls within one grace.
const STEP_SECONDS: u64 = 600;

/// The three tables a run may have: the EKS rule's port and then its id change.
fn tables() -> [Vec<Rule>; 3] {
    let table = |eks_id: &str, eks_port: u16, api_port: u16| {
        parse_rules(&format!(
            r#"[{{"id": "api", "front": "proxy.api", "back": "api", "back_types": ["A"], "sni": "front", "port": {api_port}}},
                {{"id": "ingress-int", "front": "*.int", "back": "ingress-int", "back_types": ["A", "CNAME"], "sni": "front-suffix"}},
                {{"id": "{eks_id}", "front": "proxy.eks", "back": "eks", "back_types": ["CNAME"], "sni": "back-target", "port": {eks_port}}}]"#
        ))
        .unwrap()
    };
    [
        table("eks", 443, 443),
        table("eks", 8443, 443),
        table("eks2", 8443, 6443),
    ]
}

/// One zone's records in one run: the api pair, an eks pair to a target, an ingress pair to a
/// back, each present or not.
#[derive(Debug, Clone)]
struct ZoneState {
    api: bool,
    eks: Option<usize>,
    ingress: Option<usize>,
}

fn zone_state() -> BoxedStrategy<ZoneState> {
    (
        any::<bool>(),
        proptest::option::of(0..EKS_TARGETS.len()),
        proptest::option::of(0..INGRESS_BACKS.len()),
    )
        .prop_map(|(api, eks, ingress)| ZoneState { api, eks, ingress })
        .boxed()
}

/// Runs: each with its rule table and every zone's records.
fn runs() -> BoxedStrategy<Vec<(usize, Vec<ZoneState>)>> {
    vec((0..3_usize, vec(zone_state(), ZONES.len())), 2..7).boxed()
}

fn records(name: &str, state: &ZoneState) -> Vec<RecordSet> {
    let mut records = Vec::new();
    if state.api {
        records.push(RecordSet::new(&format!("api.{name}."), "A", &["10.0.0.1"]));
        records.push(RecordSet::new(
            &format!("proxy.api.{name}."),
            "CNAME",
            &[PROXY],
        ));
    }
    if let Some(target) = state.eks {
        records.push(RecordSet::new(
            &format!("eks.{name}."),
            "CNAME",
            &[EKS_TARGETS[target]],
        ));
        records.push(RecordSet::new(
            &format!("proxy.eks.{name}."),
            "CNAME",
            &[PROXY],
        ));
    }
    if let Some(back) = state.ingress {
        let back = INGRESS_BACKS[back];
        records.push(RecordSet::new(
            &format!("ingress-int.{name}."),
            "CNAME",
            &[back],
        ));
        records.push(RecordSet::new(
            &format!("\\052.int.{name}."),
            "CNAME",
            &[PROXY],
        ));
    }
    records
}

/// Who routed each SNI last, and when that zone last claimed it.
#[derive(Default)]
struct Memory {
    routed_by: BTreeMap<String, (ZoneKey, u64)>,
}

/// One run's sweep: every zone matched with `rules`; the manifest and each zone's records.
fn sweep(rules: &[Rule], states: &[ZoneState]) -> (Manifest, BTreeMap<ZoneKey, Vec<RecordSet>>) {
    let mut manifest = Manifest::default();
    let mut estate = BTreeMap::new();
    let proxies = [HostName::parse(PROXY).unwrap()];
    for ((account, id, name), state) in ZONES.iter().zip(states) {
        let zone = Zone {
            account: (*account).to_owned(),
            id: (*id).to_owned(),
            name: format!("{name}."),
            private: true,
        };
        let records = records(name, state);
        let entry = ZoneEntry::matched(&zone, records.clone(), rules, &proxies);
        manifest.zones.insert(zone_key(&zone.key()), entry);
        estate.insert(zone.key(), records);
    }
    (manifest, estate)
}

/// No route's backend, nor the value of a backend record, is the proxy.
fn no_loop(
    routes: &[Route],
    estate: &BTreeMap<ZoneKey, Vec<RecordSet>>,
) -> Result<(), TestCaseError> {
    let proxy = normalize(PROXY);
    for route in routes {
        prop_assert!(normalize(route.back.as_str()) != proxy, "{route:?}");
        let values = estate[&route.zone_key()]
            .iter()
            .filter(|set| normalize(&set.name).to_host().ok().as_ref() == Some(&route.back))
            .filter_map(|set| set.target().map(normalize));
        for value in values {
            prop_assert!(value != proxy, "{route:?} points at the proxy");
        }
    }
    Ok(())
}

impl Memory {
    /// Checks that no SNI moved from the zone that routed it last while that zone claims it
    /// (in `manifest`, before ownership) or within the grace since it last did; then records
    /// this run.
    fn check(
        &mut self,
        step: usize,
        now: u64,
        manifest: &Manifest,
        routes: &[Route],
        tally: &Tally,
    ) -> Result<(), TestCaseError> {
        for (sni, (holder, last_claim)) in &mut self.routed_by {
            let claims = manifest.zones.values().flat_map(|entry| &entry.routes);
            if claims
                .into_iter()
                .any(|r| r.sni == *sni && r.zone_key() == *holder)
            {
                *last_claim = now;
            }
        }
        for route in routes {
            let zone = route.zone_key();
            match self.routed_by.get(&route.sni) {
                Some((holder, last_claim)) => {
                    let kept = *holder == zone || now >= last_claim + GRACE_SECONDS;
                    prop_assert!(
                        kept,
                        "run {step}: {} moved from {holder} (last claimed at {last_claim}) to {zone}",
                        route.sni
                    );
                }
                None => tally.add("first holder", 1),
            }
            self.routed_by.insert(route.sni.clone(), (zone, now));
        }
        Ok(())
    }
}

#[test]
pub(super) fn a_name_stays_with_its_holder_and_no_route_points_at_the_proxy() {
    let tables = tables();
    let tally = Tally::default();
    let line = check_property("ownership over runs", 300, runs(), |runs| {
        let mut memory = Memory::default();
        let mut stored: Option<String> = None;
        for (step, (table, states)) in runs.iter().enumerate() {
            let rules = &tables[*table];
            let now = NOW + STEP_SECONDS * step as u64;
            let (mut manifest, estate) = sweep(rules, states);
            // The last manifest, as the handler reads it with this run's rules.
            let previous = stored
                .as_deref()
                .and_then(|text| Manifest::from_json(text, rules).ok().flatten());
            if previous.as_ref().is_some_and(|p| p.stale_routes > 0) {
                tally.add("rules changed", 1);
            }
            let holders = previous.as_ref().map(Holders::of).unwrap_or_default();
            let grace = Grace {
                now,
                seconds: GRACE_SECONDS,
            };
            let owned = owned_routes(&manifest.zones, &holders, Mode::FirstHolder, grace);
            owned.holders.store(&mut manifest);
            let (routes, _) = merge_claims(owned.candidates);
            tally.add("routes", routes.len());
            no_loop(&routes, &estate)?;
            memory.check(step, now, &manifest, &routes, &tally)?;
            stored = Some(manifest.to_json());
        }
        Ok(())
    });
    println!("{line}: {tally}");
    tally.require(&["routes", "first holder", "rules changed"]);
}
