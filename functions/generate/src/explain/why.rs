//! The reasoning of `explain`, without I/O: from the published config, the manifest and the
//! records read from Route53 just now, the steps that say why a name is or is not routed.

use std::collections::{BTreeMap, BTreeSet};

use autoproxy::artifact::{self, ROUTE_LINE, SUFFIX_DEPTH, SUFFIX_LINE};
use autoproxy::manifest::{Manifest, ZoneEntry};
use autoproxy::model::{RecordSet, SniMatch, Zone, ZoneKey, ZoneRecords};
use autoproxy::names::{HostName, normalize};
use autoproxy::networks::Borders;
use autoproxy::ownership::{self, Grace, Holders, Mode, Owned};
use autoproxy::rules::{Rule, zone_routes_within};
use autoproxy::s3::CurrentConfig;

use super::{CarriedRoute, Explanation, ZoneRef};

mod records;

use records::{describe_back, describe_front};

/// What Route53 answered for one zone just now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ZoneRead {
    /// The sets the rules can read (see [`autoproxy::rules::Sieve`]).
    Records(ZoneRecords),
    /// The zone no longer exists.
    Gone,
    /// The zone's account is not among those this generator scans.
    NotScanned,
    Failed(String),
}

/// Everything `explain` read.
#[derive(Debug, Clone, Copy)]
pub struct Facts<'a> {
    pub name: &'a HostName,
    pub config: Option<&'a CurrentConfig>,
    pub manifest: Option<&'a Manifest>,
    pub proxies: &'a [HostName],
    /// Where a back may point: the members' networks and `ALLOW_PUBLIC_BACKS`.
    pub borders: &'a Borders,
    /// The rule table the generator matches with.
    pub rules: &'a [Rule],
    /// The zones of the proxy VPCs with `PROXY_VPCS`; `None` for first-holder ownership.
    pub associated: Option<&'a BTreeSet<ZoneKey>>,
    pub reads: &'a BTreeMap<ZoneKey, ZoneRead>,
    /// Now, and how long an absent holder keeps an SNI outside every zone.
    pub grace: Grace,
}

/// The zones the manifest knows that are `name` or a parent of it, deepest first; then those
/// that claim it as an SNI outside themselves (a `back-target` rule's).
pub fn candidates<'a>(name: &HostName, manifest: Option<&'a Manifest>) -> Vec<&'a ZoneEntry> {
    let Some(manifest) = manifest else {
        return Vec::new();
    };
    let mut found: Vec<(usize, &ZoneEntry)> = manifest
        .zones
        .values()
        .filter_map(|entry| {
            let zone = normalize(&entry.name).to_host().ok()?;
            name.is_within(&zone).then(|| (zone.as_str().len(), entry))
        })
        .collect();
    found.sort_by(|(a, x), (b, y)| b.cmp(a).then(x.account.cmp(&y.account)));
    let claims = manifest.zones.values().filter(|entry| {
        entry
            .routes
            .iter()
            .any(|route| route.sni == name.as_str() && ownership::is_outside(route))
    });
    let mut zones: Vec<&ZoneEntry> = found.into_iter().map(|(_, entry)| entry).collect();
    for entry in claims {
        if !zones.iter().any(|z| std::ptr::eq(*z, entry)) {
            zones.push(entry);
        }
    }
    zones
}

/// Why `facts.name` is or is not routed.
pub fn explain(facts: &Facts<'_>) -> Explanation {
    let name = facts.name;
    let mut out = Explanation {
        name: name.as_str().to_owned(),
        routed: false,
        why: Vec::new(),
        generation: None,
        route: None,
        account: None,
        zone: None,
        rule: None,
        records: Vec::new(),
        ownership: None,
        refusal: None,
        warnings: Vec::new(),
    };
    config_step(&mut out, facts.config);
    let zones = candidates(name, facts.manifest);
    let Some(manifest) = facts.manifest.filter(|_| !zones.is_empty()) else {
        unknown_step(&mut out, facts.manifest);
        return out;
    };
    let mode = facts.associated.map_or(Mode::FirstHolder, Mode::Vpc);
    let owned = ownership::owned_routes_beside(
        &manifest.zones,
        &manifest.unread_entries(),
        &Holders::of(manifest),
        mode,
        facts.grace,
    );
    let findings: Vec<Finding> = zones
        .iter()
        .map(|entry| zone_finding(facts, manifest, &owned, entry))
        .collect();
    // The zone the answer is about: the one whose route carries the name, else one refused,
    // else the deepest a rule would route it from.
    let carrier = out.route.as_ref();
    let rank = |finding: &Finding| match carrier {
        Some(route) if route.account == finding.key.account && route.zone_id == finding.key.id => 0,
        _ if finding.refusal.is_some() => 1,
        _ if finding.rule.is_some() => 2,
        _ => 3,
    };
    let chosen = (0..findings.len())
        .min_by_key(|&i| rank(&findings[i]))
        .unwrap_or(0);
    for finding in &findings {
        out.why.extend(finding.why.iter().cloned());
        for warning in &finding.warnings {
            if !out.warnings.contains(warning) {
                out.warnings.push(warning.clone());
            }
        }
    }
    if let Some(finding) = findings.into_iter().nth(chosen) {
        out.account = Some(finding.key.account);
        out.zone = Some(ZoneRef {
            id: finding.key.id,
            name: finding.name.as_str().to_owned(),
        });
        out.rule = finding.rule.map(|rule| rule.id.clone());
        out.records = finding.records;
        out.ownership = finding.ownership;
        out.refusal = finding.refusal;
    }
    out.why.push(if out.routed {
        format!("so {name} is routed")
    } else {
        format!("so {name} is not routed")
    });
    out
}

/// What the published config says: the route that carries the name, if any.
fn config_step(out: &mut Explanation, config: Option<&CurrentConfig>) {
    let Some(config) = config else {
        out.why
            .push("no config has been published yet: nothing is routed".to_owned());
        return;
    };
    let header = config.header.as_ref();
    out.generation = header.map(|h| h.generation);
    let published = header.map_or_else(
        || "the published config (no autoproxy header)".to_owned(),
        |h| {
            format!(
                "generation {} (published {} by {})",
                h.generation, h.generated_at, h.trigger
            )
        },
    );
    match carried(&config.text, &out.name) {
        Some(route) => {
            let matched = match route.sni_match {
                SniMatch::Exact => format!("SNI {}", route.sni),
                SniMatch::Suffix => format!("SNI ending in {}", route.sni),
            };
            out.why.push(format!(
                "{published} routes it: {matched} → {} (rule {}, zone {} in account {})",
                route.back, route.rule, route.zone_id, route.account
            ));
            out.routed = true;
            out.route = Some(route);
        }
        None => out.why.push(format!(
            "{published} has no route for SNI {} nor for any name it ends in: the proxy refuses \
             a connection for it",
            out.name
        )),
    }
}

/// The route of a config's route tables that HAProxy picks for `sni`: the exact name, else
/// the longest suffix, up to [`SUFFIX_DEPTH`] labels stripped.
pub fn carried(text: &str, sni: &str) -> Option<CarriedRoute> {
    let mut exact = BTreeMap::new();
    let mut suffixes = BTreeMap::new();
    for line in artifact::body(text).lines() {
        let (table, entry, sni_match) = if let Some(entry) = line.strip_prefix(ROUTE_LINE) {
            (&mut exact, entry, SniMatch::Exact)
        } else if let Some(entry) = line.strip_prefix(SUFFIX_LINE) {
            (&mut suffixes, entry, SniMatch::Suffix)
        } else {
            continue;
        };
        let fields: Vec<&str> = entry.split_whitespace().collect();
        if let [key, back, rule, account, zone_id, ..] = fields.as_slice() {
            table.insert(
                (*key).to_owned(),
                CarriedRoute {
                    sni: match sni_match {
                        SniMatch::Exact => (*key).to_owned(),
                        SniMatch::Suffix => format!(".{key}"),
                    },
                    sni_match,
                    back: (*back).to_owned(),
                    rule: (*rule).to_owned(),
                    account: (*account).to_owned(),
                    zone_id: (*zone_id).to_owned(),
                },
            );
        }
    }
    if let Some(route) = exact.remove(sni) {
        return Some(route);
    }
    // The longest suffix: the fewest labels stripped.
    suffixes
        .into_iter()
        .filter_map(|(key, route)| below(sni, &format!(".{key}")).map(|depth| (depth, route)))
        .min_by_key(|(depth, _)| *depth)
        .map(|(_, route)| route)
}

/// How many labels `name` has below `suffix` (its leading dot included, as a suffix route's SNI
/// is written), if it lies below it within the [`SUFFIX_DEPTH`] labels HAProxy strips.
fn below(name: &str, suffix: &str) -> Option<usize> {
    let head = name.strip_suffix(suffix)?;
    let stripped = head.split('.').count();
    (!head.is_empty() && stripped <= SUFFIX_DEPTH).then_some(stripped)
}

fn unknown_step(out: &mut Explanation, manifest: Option<&Manifest>) {
    let Some(manifest) = manifest else {
        out.why
            .push("there is no manifest yet (no run has finished): no zone is known".to_owned());
        out.why.push(format!("so {} is not routed", out.name));
        return;
    };
    out.why.push(format!(
        "none of the {} private zones the last run knew (generation {}) is {} or a parent of \
         it: its zone is public, in an account this generator does not scan, in IGNORE_ZONES, \
         or created since the last run (the next one reads it)",
        manifest.zones.len(),
        manifest.generation,
        out.name
    ));
    out.why.push(format!("so {} is not routed", out.name));
}

/// What one zone says about the name.
#[derive(Debug)]
struct Finding<'a> {
    key: ZoneKey,
    name: HostName,
    rule: Option<&'a Rule>,
    records: Vec<RecordSet>,
    ownership: Option<String>,
    refusal: Option<String>,
    why: Vec<String>,
    warnings: Vec<String>,
}

fn zone_finding<'a>(
    facts: &Facts<'a>,
    manifest: &Manifest,
    owned: &Owned,
    entry: &ZoneEntry,
) -> Finding<'a> {
    let key = ZoneKey {
        account: entry.account.clone(),
        id: entry.id.clone(),
    };
    // `candidates` admitted only zones whose name is a host name.
    let zone_name = normalize(&entry.name)
        .to_host()
        .unwrap_or_else(|_| facts.name.clone());
    let rule = serving_rule(facts.rules, entry, &key, &zone_name, facts.name);
    let first = if facts.name.is_within(&zone_name) {
        format!("zone {zone_name} ({key}) holds the name")
    } else {
        format!("zone {zone_name} ({key}) claims the name, outside it, as an SNI")
    };
    let mut finding = Finding {
        why: vec![first],
        key,
        name: zone_name,
        rule,
        records: Vec::new(),
        ownership: None,
        refusal: None,
        warnings: entry.warnings.clone(),
    };
    let Some(rule) = rule else {
        let fronts: Vec<String> = facts
            .rules
            .iter()
            .map(|r| finding.name.with_prefix(&r.front).to_string())
            .collect();
        finding.why.push(format!(
            "no rule routes {} from this zone: the rules' names there are {}",
            facts.name,
            fronts.join(", ")
        ));
        return finding;
    };
    records_step(&mut finding, facts, rule, entry);
    manifest_step(&mut finding, manifest, rule, entry);
    let outside = entry
        .routes
        .iter()
        .any(|route| route.rule == rule.id && ownership::is_outside(route));
    ownership_step(&mut finding, manifest, owned, outside.then_some(facts.name));
    finding
}

/// The rule of this zone that routes `name` as HAProxy picks it: an exact SNI before any
/// suffix, then the longest suffix, whatever the table's order.
fn serving_rule<'a>(
    rules: &'a [Rule],
    entry: &ZoneEntry,
    zone: &ZoneKey,
    zone_name: &HostName,
    name: &HostName,
) -> Option<&'a Rule> {
    rules
        .iter()
        .filter_map(|rule| Some((fits(rule, entry, zone, zone_name, name)?, rule)))
        .min_by_key(|(precedence, _)| *precedence)
        .map(|(_, rule)| rule)
}

/// Whether `rule` in this zone routes `name`, and how HAProxy ranks it (lower first): its
/// exact SNI (0), or a name ending in its suffix no deeper than HAProxy looks (the fewer
/// labels stripped, the earlier). The rule's SNI is the one its mode builds from the zone's
/// name, else (a mode that reads it from a record) the one the last run read.
fn fits(
    rule: &Rule,
    entry: &ZoneEntry,
    zone: &ZoneKey,
    zone_name: &HostName,
    name: &HostName,
) -> Option<usize> {
    let read = entry.routes.iter().filter(|route| route.rule == rule.id);
    rule.route(zone, zone_name, None)
        .into_iter()
        .chain(read.cloned())
        .filter_map(|route| match route.sni_match {
            SniMatch::Exact => (route.sni == name.as_str()).then_some(0),
            SniMatch::Suffix => below(name.as_str(), &route.sni),
        })
        .min()
}

/// The rule's two records as Route53 has them now, and what they make of the rule.
fn records_step(finding: &mut Finding, facts: &Facts<'_>, rule: &Rule, entry: &ZoneEntry) {
    let front = finding.name.with_prefix(&rule.front);
    let back = finding.name.with_prefix(&rule.back);
    let sni = rule.sni_mode.sni_text(&front, &back);
    finding.why.push(format!(
        "rule {} (sni {}): {front} must be a CNAME to the peering proxy and {back} a {} \
         record; HAProxy then forwards {sni} to {back}:{}",
        rule.id,
        rule.sni_mode,
        rule.back_types_text(),
        rule.port
    ));
    let read = match facts.reads.get(&finding.key) {
        Some(ZoneRead::Records(read)) => read,
        Some(ZoneRead::Gone) => {
            finding.why.push(
                "Route53 no longer has this zone: the next run drops what it gave".to_owned(),
            );
            return;
        }
        Some(ZoneRead::NotScanned) | None => {
            finding.why.push(format!(
                "account {} is not among the accounts this generator scans: the manifest is all \
                 there is",
                finding.key.account
            ));
            return;
        }
        Some(ZoneRead::Failed(err)) => {
            finding.why.push(format!(
                "reading the zone from Route53 failed ({err}): the manifest is as of the last run"
            ));
            return;
        }
    };
    let named = |wanted: &HostName| {
        read.records
            .iter()
            .filter(|set| normalize(&set.name).to_host().is_ok_and(|n| n == *wanted))
            .cloned()
            .collect::<Vec<_>>()
    };
    let fronts = named(&front);
    let backs = named(&back);
    finding
        .why
        .push(describe_front(&front, &fronts, facts.proxies));
    finding.why.push(if backs.is_empty() {
        format!("Route53 has no record {back}")
    } else if let Some(set) = backs.iter().find(|set| rule.accepts_back(&set.rtype)) {
        describe_back(rule, &back, set, (facts.borders, &finding.key.account))
    } else {
        let types: Vec<&str> = backs.iter().map(|set| set.rtype.as_str()).collect();
        format!(
            "{back} is a {} record, not {}",
            types.join("/"),
            rule.back_types_text()
        )
    });
    finding.records = fronts.into_iter().chain(backs).collect();
    change_step(finding, facts, rule, entry, read);
}

/// Whether Route53 now says otherwise than the last run read, and what the matcher warns of.
fn change_step(
    finding: &mut Finding,
    facts: &Facts<'_>,
    rule: &Rule,
    entry: &ZoneEntry,
    read: &ZoneRecords,
) {
    let zone = Zone {
        account: entry.account.clone(),
        id: entry.id.clone(),
        name: entry.name.clone(),
        private: true,
    };
    let now = zone_routes_within(
        std::slice::from_ref(rule),
        &ZoneRecords {
            zone,
            records: read.records.clone(),
            unnamed_left: read.unnamed_left,
        },
        facts.proxies,
        facts.borders,
    );
    let then = entry.routes.iter().any(|route| route.rule == rule.id);
    match (now.routes.is_empty(), then) {
        (false, false) => finding.why.push(
            "Route53 now gives this route, which the last run did not read: the next run (the \
             schedule, or the change's event) publishes it"
                .to_owned(),
        ),
        (true, true) => finding.why.push(
            "Route53 no longer gives this route, which the last run read: the next run drops it"
                .to_owned(),
        ),
        _ => {}
    }
    // As a run stores them: one entry per kind, however many records the zone refuses.
    finding
        .warnings
        .extend(autoproxy::warnings::zone_lines(&now.warnings));
}

/// What the last run read from the zone for this rule.
fn manifest_step(finding: &mut Finding, manifest: &Manifest, rule: &Rule, entry: &ZoneEntry) {
    let gave = entry.routes.iter().any(|route| route.rule == rule.id);
    finding.why.push(format!(
        "the last run (manifest of generation {}) read {} route for rule {} from this zone",
        manifest.generation,
        if gave { "a" } else { "no" },
        rule.id
    ));
    let key = autoproxy::manifest::zone_key(&finding.key);
    if manifest.pending.contains(&key) {
        finding.why.push(
            "the zone is pending: the last sweep ran out of time before reading it again"
                .to_owned(),
        );
    }
}

/// Whether this zone may route its name (docs/ARCHITECTURE.md, "Who may route a zone name"),
/// and, for an SNI outside the zone (`outside`), that name ("Who may route a name outside
/// every zone").
fn ownership_step(
    finding: &mut Finding<'_>,
    manifest: &Manifest,
    owned: &Owned,
    outside: Option<&HostName>,
) {
    let zone_name = finding.name.as_str();
    let (name, holders) = match outside {
        Some(sni) => (sni.as_str(), &manifest.outside_holders),
        None => (zone_name, &manifest.holders),
    };
    let refusal = owned.refusals.iter().find(|refusal| {
        *refusal.zone() == finding.key && (refusal.name() == name || refusal.name() == zone_name)
    });
    let holder = match holders.get(name) {
        Some(holder) if *holder == finding.key => format!("this zone holds the name {name}"),
        Some(holder) => format!("the name {name} is held by zone {holder}"),
        None => format!("no zone is known to hold the name {name}"),
    };
    let ownership = match refusal {
        Some(refusal) => {
            let text = refusal.to_string();
            finding.why.push(format!("refused: {text}"));
            finding.refusal = Some(text);
            format!("refused; {holder}")
        }
        None => holder,
    };
    finding.why.push(format!("ownership: {ownership}"));
    finding.ownership = Some(ownership);
}
