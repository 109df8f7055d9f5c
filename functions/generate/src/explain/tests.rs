use std::collections::BTreeMap;

use autoproxy::manifest::{Manifest, ZoneEntry, zone_key};
use autoproxy::model::{RecordSet, Route, Zone, ZoneKey, ZoneRecords};
use autoproxy::names::HostName;
use autoproxy::ownership::{self, Grace, Holders, Mode};
use autoproxy::render::{DEFAULT_TEMPLATE, RenderInput, RenderOptions, Renderer};
use autoproxy::rules::{DEFAULT_RULES, Rule, Sieve, merge_claims, parse_rules};
use autoproxy::s3::CurrentConfig;
use serde_json::json;

use super::why::{self, Facts, ZoneRead};

/// The time of these answers, and the default grace.
const GRACE: Grace = Grace {
    now: 1_795_403_642,
    seconds: 24 * 3600,
};
use super::*;

const PROXY: &str = "peering-proxy.tools.example.com";
const A: &str = "111111111111";
const B: &str = "222222222222";

fn proxies() -> Vec<HostName> {
    vec![HostName::parse(PROXY).unwrap()]
}

/// The api pair of a zone, its front pointing at `target`.
fn api_pair(zone: &str, target: &str) -> Vec<RecordSet> {
    vec![
        RecordSet::new(&format!("api.{zone}."), "A", &["10.0.0.1"]),
        RecordSet::new(&format!("proxy.api.{zone}."), "CNAME", &[target]),
    ]
}

fn ingress_pair(zone: &str) -> Vec<RecordSet> {
    vec![
        RecordSet::new(&format!("\\052.int.{zone}."), "CNAME", &[PROXY]),
        RecordSet::new(
            &format!("ingress-int.{zone}."),
            "CNAME",
            &["elb.example.com"],
        ),
    ]
}

/// A zone's account, id, name and records.
type Seed<'a> = (&'a str, &'a str, &'a str, Vec<RecordSet>);

/// What a run leaves behind after reading `zones` (holders remembered from `previous`), and
/// Route53 answering with the same records now.
struct World {
    rules: Vec<Rule>,
    manifest: Manifest,
    config: CurrentConfig,
    reads: BTreeMap<ZoneKey, ZoneRead>,
}

fn run(zones: &[Seed<'_>], previous: Option<&Manifest>) -> World {
    run_with(&DEFAULT_RULES, zones, previous)
}

fn run_with(rules: &[Rule], zones: &[Seed<'_>], previous: Option<&Manifest>) -> World {
    let mut manifest = Manifest {
        generation: 7,
        ..Manifest::default()
    };
    let mut reads = BTreeMap::new();
    for (account, id, name, records) in zones {
        let zone = Zone {
            account: (*account).to_owned(),
            id: (*id).to_owned(),
            name: format!("{name}."),
            private: true,
        };
        let entry = ZoneEntry::matched(&zone, records.clone(), rules, &proxies());
        manifest.zones.insert(zone_key(&zone.key()), entry);
        let read = Sieve::new(rules, &zone).sift(records.clone());
        reads.insert(zone.key(), ZoneRead::Records(read));
    }
    let remembered = previous.map(Holders::of).unwrap_or_default();
    let owned = ownership::owned_routes(&manifest.zones, &remembered, Mode::FirstHolder, GRACE);
    owned.holders.store(&mut manifest);
    let (routes, _) = merge_claims(owned.candidates);
    World {
        rules: rules.to_vec(),
        manifest,
        config: rendered(&routes),
        reads,
    }
}

fn rendered(routes: &[Route]) -> CurrentConfig {
    let resolvers = ["10.0.0.2:53".parse().unwrap()];
    let rendered = Renderer::new(DEFAULT_TEMPLATE)
        .unwrap()
        .render(&RenderInput {
            routes,
            resolvers: &resolvers,
            proxies: &[],
            options: &RenderOptions::default(),
            generation: 7,
            generated_at: "2026-11-23T03:14:02Z",
            trigger: "schedule",
        })
        .unwrap();
    CurrentConfig {
        text: rendered.text,
        header: Some(rendered.header),
        etag: None,
        version_id: None,
    }
}

fn ask(world: &World, name: &str) -> Explanation {
    let name = HostName::parse(name).unwrap();
    why::explain(&Facts {
        name: &name,
        config: Some(&world.config),
        manifest: Some(&world.manifest),
        proxies: &proxies(),
        borders: &autoproxy::networks::Borders::unjudged(),
        rules: &world.rules,
        associated: None,
        reads: &world.reads,
        grace: GRACE,
    })
}

/// Every fragment appears in one of the steps.
fn assert_says(answer: &Explanation, fragments: &[&str]) {
    for fragment in fragments {
        assert!(
            answer.why.iter().any(|step| step.contains(fragment)),
            "no step says {fragment:?}: {:#?}",
            answer.why
        );
    }
}

#[test]
fn a_routed_name_names_its_route_zone_rule_and_generation() {
    let mut records = api_pair("prod.example.internal", PROXY);
    records.extend(ingress_pair("prod.example.internal"));
    let world = run(&[(A, "Z1", "prod.example.internal", records)], None);

    let answer = ask(&world, "Proxy.API.prod.example.internal.");
    assert_eq!(answer.name, "proxy.api.prod.example.internal");
    assert!(answer.routed, "{answer:#?}");
    assert_eq!(answer.generation, Some(7));
    assert_eq!(
        (answer.account.as_deref(), answer.rule.as_deref()),
        (Some(A), Some("api"))
    );
    assert_eq!(answer.zone.as_ref().unwrap().id, "Z1");
    let route = answer.route.as_ref().unwrap();
    assert_eq!(route.back, "api.prod.example.internal:443");
    // The answer's key is `backend`, as it always was: callers read it.
    let json = serde_json::to_value(&answer).unwrap();
    assert_eq!(json["route"]["backend"], "api.prod.example.internal:443");
    assert_eq!(answer.records.len(), 2);
    assert_says(
        &answer,
        &[
            "generation 7 (published 2026-11-23T03:14:02Z by schedule) routes it: SNI \
             proxy.api.prod.example.internal → api.prod.example.internal:443",
            "is a CNAME to the peering proxy",
            "api.prod.example.internal is a A record: the backend exists",
            "ownership: this zone holds the name prod.example.internal",
        ],
    );
    assert_eq!(
        answer.why.last().unwrap(),
        "so proxy.api.prod.example.internal is routed"
    );

    let app = ask(&world, "shop.int.prod.example.internal");
    assert!(app.routed);
    assert_eq!(app.rule.as_deref(), Some("ingress-int"));
    assert_says(
        &app,
        &["SNI ending in .int.prod.example.internal → ingress-int"],
    );
}

#[test]
fn a_name_held_by_another_zone_is_refused_and_says_by_whom() {
    // B held shared.example.internal first (not opted in); then A's zone of the same name
    // opts in.
    let first = run(&[(B, "ZB", "shared.example.internal", vec![])], None);
    let world = run(
        &[
            (
                A,
                "ZA",
                "shared.example.internal",
                api_pair("shared.example.internal", PROXY),
            ),
            (B, "ZB", "shared.example.internal", vec![]),
        ],
        Some(&first.manifest),
    );
    let answer = ask(&world, "proxy.api.shared.example.internal");
    assert!(!answer.routed);
    assert_eq!(answer.account.as_deref(), Some(A));
    assert!(
        answer
            .ownership
            .as_deref()
            .is_some_and(|o| o.starts_with("refused; ")),
        "{answer:#?}"
    );
    let refusal = answer.refusal.as_deref().unwrap();
    assert!(
        refusal.contains("account 222222222222 held the name first"),
        "{refusal}"
    );
    assert_says(
        &answer,
        &[
            "has no route for SNI proxy.api.shared.example.internal",
            "refused: zone shared.example.internal (ZA in account 111111111111) opted in",
            "the name shared.example.internal is held by zone ZB in account 222222222222",
            "Route53 has no record proxy.api.shared.example.internal",
        ],
    );
}

#[test]
fn a_mistyped_target_is_named_with_the_proxy_it_missed() {
    let records = api_pair("qa.example.internal", "peering-prxoy.tools.example.com.");
    let world = run(&[(A, "Z1", "qa.example.internal", records)], None);
    let answer = ask(&world, "proxy.api.qa.example.internal");
    assert!(!answer.routed);
    assert_says(
        &answer,
        &[
            "proxy.api.qa.example.internal is a CNAME to peering-prxoy.tools.example.com, one \
             edit away from the peering proxy's name peering-proxy.tools.example.com",
            "read no route for rule api",
        ],
    );
    assert!(
        answer.warnings.iter().any(|w| w.contains("a typo?")),
        "{:?}",
        answer.warnings
    );
}

#[test]
fn a_back_at_a_loopback_address_is_named_as_never_a_backend() {
    let mut records = api_pair("qa.example.internal", PROXY);
    records[0] = RecordSet::new("api.qa.example.internal.", "A", &["127.0.0.2"]);
    let world = run(&[(A, "Z1", "qa.example.internal", records)], None);
    let answer = ask(&world, "proxy.api.qa.example.internal");
    assert!(!answer.routed);
    assert_says(
        &answer,
        &[
            "api.qa.example.internal is an A record at 127.0.0.2, a loopback address: the proxy \
           itself: never a backend, so no route",
        ],
    );
}

#[test]
fn an_unknown_name_says_no_zone_holds_it() {
    let world = run(&[(A, "Z1", "prod.example.internal", vec![])], None);
    let answer = ask(&world, "proxy.api.nowhere.example.internal");
    assert!(!answer.routed);
    assert!(
        answer.account.is_none() && answer.zone.is_none(),
        "{answer:#?}"
    );
    assert_says(&answer, &["none of the 1 private zones the last run knew"]);
    // A name in a known zone that no rule routes.
    let other = ask(&world, "www.prod.example.internal");
    assert_says(
        &other,
        &["no rule routes www.prod.example.internal from this zone"],
    );
}

#[test]
fn a_change_since_the_last_run_is_named() {
    let mut world = run(&[(A, "Z1", "new.example.internal", vec![])], None);
    let zone = Zone {
        account: A.into(),
        id: "Z1".into(),
        name: "new.example.internal.".into(),
        private: true,
    };
    let records = api_pair("new.example.internal", PROXY);
    world.reads.insert(
        zone.key(),
        ZoneRead::Records(ZoneRecords::whole(zone, records)),
    );
    let answer = ask(&world, "proxy.api.new.example.internal");
    assert!(!answer.routed);
    assert_says(&answer, &["Route53 now gives this route", "the next run"]);
}

#[test]
fn the_carried_route_is_the_one_haproxy_picks() {
    let text = "# generation: 1\nglobal\n\
                #@route proxy.api.a.internal api.a.internal:443 api 111111111111 Z1\n\
                #@suffix int.a.internal ingress-int.a.internal:443 ingress-int 111111111111 Z1\n\
                #@suffix b.int.a.internal ingress-int.b.a.internal:443 ingress-int 1 Z2\n";
    let back = |sni: &str| carried(text, sni).map(|r| r.back);
    assert_eq!(
        back("proxy.api.a.internal").as_deref(),
        Some("api.a.internal:443")
    );
    assert_eq!(
        back("x.int.a.internal").as_deref(),
        Some("ingress-int.a.internal:443")
    );
    // The longest suffix wins.
    assert_eq!(
        back("x.b.int.a.internal").as_deref(),
        Some("ingress-int.b.a.internal:443")
    );
    assert_eq!(back("int.a.internal"), None);
    assert_eq!(back("api.a.internal"), None);
    // Eight labels are stripped at most, as the template's frontend does.
    assert!(carried(text, "1.2.3.4.5.6.7.8.int.a.internal").is_some());
    assert!(carried(text, "0.1.2.3.4.5.6.7.8.int.a.internal").is_none());
}

#[test]
fn requests_are_decoded_or_refused_saying_what_was_expected() {
    let name = |payload: Value| request(&payload).map(|r| r.map(|n| n.to_string()));
    assert_eq!(name(json!({"dry_run": true})), None);
    assert_eq!(name(json!([])), None);
    assert_eq!(
        name(json!({"explain": "\\052.INT.prod.example.internal."})),
        Some(Ok("*.int.prod.example.internal".to_owned()))
    );
    for (payload, expected) in [
        (json!({"explain": 5}), "expected a name as a string, got 5"),
        (
            json!({"explain": ""}),
            "expected a host name, got an empty name",
        ),
        (json!({"explain": "a b.internal"}), "containing a space"),
        (
            json!({"explain": "a.internal", "force": true}),
            "and no other field",
        ),
    ] {
        let err = request(&payload).unwrap().unwrap_err().to_string();
        assert!(err.contains(expected), "{payload}: {err}");
    }
}

const ENDPOINT: &str = "abc123.gr7.us-east-1.eks.amazonaws.com";

/// An EKS-shaped zone: `eks.<zone>` CNAME → the endpoint, `proxy.eks.<zone>` CNAME → proxy.
fn eks_pair(zone: &str) -> Vec<RecordSet> {
    vec![
        RecordSet::new(
            &format!("eks.{zone}."),
            "CNAME",
            &["ABC123.gr7.us-east-1.eks.amazonaws.com."],
        ),
        RecordSet::new(&format!("proxy.eks.{zone}."), "CNAME", &[PROXY]),
    ]
}

#[test]
fn an_endpoint_name_outside_every_zone_is_explained_by_its_holder_and_claimants() {
    let rules = parse_rules(
        r#"[{"id": "eks", "front": "proxy.eks", "back": "eks", "back_types": ["CNAME"], "sni": "back-target"}]"#,
    )
    .unwrap();
    let first = run_with(
        &rules,
        &[(
            B,
            "ZB",
            "b.example.internal",
            eks_pair("b.example.internal"),
        )],
        None,
    );
    let world = run_with(
        &rules,
        &[
            (
                A,
                "ZA",
                "a.example.internal",
                eks_pair("a.example.internal"),
            ),
            (
                B,
                "ZB",
                "b.example.internal",
                eks_pair("b.example.internal"),
            ),
        ],
        Some(&first.manifest),
    );
    let answer = ask(&world, ENDPOINT);
    assert!(answer.routed, "{answer:#?}");
    assert_eq!(answer.account.as_deref(), Some(B));
    assert_eq!(answer.rule.as_deref(), Some("eks"));
    assert_eq!(
        answer.route.as_ref().unwrap().back,
        "eks.b.example.internal:443"
    );
    assert_says(
        &answer,
        &[
            &format!("SNI {ENDPOINT} → eks.b.example.internal:443"),
            &format!(
                "eks.b.example.internal is a CNAME to ABC123.gr7.us-east-1.eks.amazonaws.com.: the backend exists, and clients send {ENDPOINT} as SNI"
            ),
            // What explain cannot see, the address the proxies resolve, it says who judges.
            "each proxy judges the address it resolves: one inside another member's network (not \
             in account 222222222222's own 0 network(s)), link-local holds the route",
            &format!("ownership: this zone holds the name {ENDPOINT}"),
            // The newcomer is in the answer too, refused.
            "zone a.example.internal (ZA in account 111111111111) claims the name, outside it, as an SNI",
            &format!(
                "refused: SNI {ENDPOINT} (outside every zone) is held by zone ZB in account 222222222222"
            ),
        ],
    );
}

#[test]
fn the_rule_named_is_the_one_haproxy_picks_not_the_first_in_the_table() {
    // The suffix rule comes first in the table, but HAProxy matches the exact name first.
    let rules = parse_rules(
        r#"[
        {"id": "apps", "front": "*.apps", "back": "router", "back_types": ["A"], "sni": "front-suffix"},
        {"id": "kube", "front": "proxy.apps", "back": "kube", "back_types": ["A"], "sni": "front", "port": 6443}
    ]"#,
    )
    .unwrap();
    let zone = "z.internal";
    let records = vec![
        RecordSet::new(&format!("*.apps.{zone}."), "CNAME", &[PROXY]),
        RecordSet::new(&format!("router.{zone}."), "A", &["10.0.0.1"]),
        RecordSet::new(&format!("proxy.apps.{zone}."), "CNAME", &[PROXY]),
        RecordSet::new(&format!("kube.{zone}."), "A", &["10.0.0.2"]),
    ];
    let world = run_with(&rules, &[(A, "ZA", zone, records)], None);
    let answer = ask(&world, &format!("proxy.apps.{zone}"));
    assert_eq!(answer.route.as_ref().map(|r| r.rule.as_str()), Some("kube"));
    assert_eq!(answer.rule.as_deref(), Some("kube"), "{:#?}", answer.why);
    // A name only the suffix covers is the suffix rule's.
    let answer = ask(&world, &format!("web.apps.{zone}"));
    assert_eq!(answer.rule.as_deref(), Some("apps"), "{:#?}", answer.why);
}
