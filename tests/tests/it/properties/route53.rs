//! Route53 data → rendered config.

use super::*;

#[test]
pub(super) fn route53_data_reaches_the_config_only_as_plain_host_names() {
    let render = Render::new();
    let proxies = proxies();
    let tally = Tally::default();
    let line = check_property("route53→config", 1_000, vec(zone(), 1..=3), |estate| {
        let mut candidates = Vec::new();
        for zone in &estate {
            let data = zone.zone_records();
            let outcome = zone_routes(&DEFAULT_RULES, &data, &proxies);
            if !zone.private {
                prop_assert!(outcome.routes.is_empty() && outcome.warnings.is_empty());
                continue;
            }
            let zone_ok = normalize(&data.zone.name).to_host().is_ok();
            if let Some(verdict) = zone.name.verdict() {
                prop_assert_eq!(zone_ok, verdict, "zone name {:?}", data.zone.name);
            }
            if !zone_ok {
                tally.add("zone names refused", 1);
                prop_assert!(outcome.routes.is_empty());
                prop_assert_eq!(outcome.warnings.len(), 1);
                prop_assert!(
                    matches!(outcome.warnings[0], Warning::ZoneName { .. }),
                    "{:?}",
                    outcome.warnings
                );
                check_warning_text(&outcome.warnings[0])?;
                continue;
            }
            // Every record name is accepted or named in a warning; where the generator
            // knows which, the validator agrees.
            let mut rejected = 0;
            for (record, set) in zone.records.iter().zip(&data.records) {
                let accepted = normalize(&set.name).to_host().is_ok();
                if let (_, Some(verdict)) = zone.record_name(&record.name) {
                    prop_assert_eq!(accepted, verdict, "record name {:?}", set.name);
                }
                rejected += usize::from(!accepted);
            }
            let named = refused_names(&outcome.warnings);
            prop_assert_eq!(named, rejected, "{:?}", outcome.warnings);
            tally.add("record names refused", rejected);
            tally.add("record names read", data.records.len() - rejected);
            for warning in &outcome.warnings {
                if matches!(warning, Warning::RecordName { .. }) {
                    check_warning_text(warning)?;
                }
            }
            for route in &outcome.routes {
                prop_assert!(is_sni(route), "SNI {:?}", route.sni);
                prop_assert!(is_host(route.back.as_str()), "{:?}", route.back);
            }
            candidates.extend(outcome.routes);
        }
        let (routes, conflicts) = merge_claims(candidates);
        tally.add("routes rendered", routes.len());
        tally.add("SNI conflicts", conflicts.len());
        let text = match render.render(&routes, NOW) {
            Ok(text) => text,
            Err(err) => return Err(TestCaseError::fail(format!("render failed: {err}"))),
        };
        check_structure(&text, &routes, &render.baseline(NOW))?;
        check_clean(&text, &routes)
    });
    println!("{line}: {tally}");
    tally.require(&[
        "routes rendered",
        "SNI conflicts",
        "record names read",
        "record names refused",
        "zone names refused",
    ]);
}

/// A zone with the API pair, every name in its own spelling, among noise that routes nothing.
#[derive(Debug, Clone)]
pub(super) struct ApiZone {
    pub(super) zone: Vec<Label>,
    pub(super) spellings: [Spelling; 4],
    pub(super) account: String,
    pub(super) id: String,
    /// The back record as an alias (no values) or a plain A record.
    pub(super) alias: bool,
    /// Extra records: hostile names (counted in one warning), and names no rule reads.
    pub(super) noise: Vec<(Vec<Label>, String, String)>,
    pub(super) shuffle: Vec<usize>,
}

pub(super) fn api_zone() -> BoxedStrategy<ApiZone> {
    let lower = re("[a-z0-9_-]{1,20}").prop_map(|text| Label::plain(&text));
    let noise_name = prop_oneof![
        2 => hostile_label().prop_map(|l| vec![l]),
        1 => re("n[a-z0-9]{0,8}").prop_map(|text| vec![Label::plain(&text)]),
        1 => Just(vec![Label::plain("proxy"), Label::plain("api"), Label::plain("k8s")]),
        1 => Just(vec![Label::plain("*"), Label::plain("int")]),
    ];
    (
        vec(lower, 1..=4),
        [spelling(), spelling(), spelling(), spelling()],
        re("[0-9]{12}"),
        re("Z[0-9A-Z]{1,21}"),
        any::<bool>(),
        vec((noise_name, record_type(), junk()), 0..6),
        vec(any::<usize>(), 8),
    )
        .prop_map(
            |(zone, spellings, account, id, alias, noise, shuffle)| ApiZone {
                zone,
                spellings,
                account,
                id,
                alias,
                noise,
                shuffle,
            },
        )
        .boxed()
}

#[test]
pub(super) fn a_well_formed_api_pair_always_routes_whatever_its_spelling() {
    let render = Render::new();
    let proxies = proxies();
    let line = check_property("route53 api pair→route", 500, api_zone(), |case| {
        let zone: Vec<&Label> = case.zone.iter().collect();
        let with = |prefix: &[&str], spelling: &Spelling| {
            let front: Vec<Label> = prefix.iter().map(|l| Label::plain(l)).collect();
            let labels: Vec<&Label> = front.iter().chain(zone.iter().copied()).collect();
            spell(&labels, spelling)
        };
        let proxy: Vec<Label> = PROXY.split('.').map(Label::plain).collect();
        let proxy = spell(&proxy.iter().collect::<Vec<_>>(), &case.spellings[3]);
        let back_name = with(&["api"], &case.spellings[1]);
        let mut records = vec![
            RecordSet::new(
                &with(&["proxy", "api"], &case.spellings[0]),
                "CNAME",
                &[&proxy],
            ),
            if case.alias {
                RecordSet::alias(&back_name, "A", "nlb.elb.amazonaws.com.")
            } else {
                RecordSet::new(&back_name, "A", &["10.0.0.1"])
            },
        ];
        let mut hostile = 0;
        for (prefix, rtype, value) in &case.noise {
            let labels: Vec<&Label> = prefix.iter().chain(zone.iter().copied()).collect();
            hostile += usize::from(prefix.iter().any(|l| !l.plain));
            // A front of another rule never points at the proxy here.
            let value = if value.contains("peering-proxy") {
                "elsewhere"
            } else {
                value
            };
            records.push(RecordSet::new(
                &spell(&labels, &case.spellings[2]),
                rtype,
                &[value],
            ));
        }
        let count = records.len();
        for (i, pick) in case.shuffle.iter().enumerate().take(count) {
            records.swap(i, pick % count);
        }
        let data = ZoneRecords {
            unnamed_left: 0,
            zone: Zone {
                account: case.account.clone(),
                id: case.id.clone(),
                name: spell(&zone, &case.spellings[2]),
                private: true,
            },
            records,
        };
        let outcome = zone_routes(&DEFAULT_RULES, &data, &proxies);
        let name: Vec<&str> = case
            .zone
            .iter()
            .map(|l| std::str::from_utf8(&l.bytes).unwrap())
            .collect();
        let name = name.join(".");
        let warned = refused_names(&outcome.warnings);
        prop_assert_eq!(warned, hostile, "{:?}", outcome.warnings);
        // However many, one warning for the zone.
        let warnings = usize::from(hostile > 0);
        prop_assert_eq!(outcome.warnings.len(), warnings, "{:?}", outcome.warnings);
        let (routes, conflicts) = merge_claims(outcome.routes);
        prop_assert!(conflicts.is_empty());
        prop_assert_eq!(routes.len(), 1, "{:?}", routes);
        let route = &routes[0];
        prop_assert_eq!(route.rule.as_str(), "api");
        prop_assert_eq!(route.sni_match, SniMatch::Exact);
        prop_assert_eq!(&route.sni, &format!("proxy.api.{name}"));
        prop_assert_eq!(route.back.as_str(), format!("api.{name}"));
        prop_assert_eq!(route.port, 443);
        let text = match render.render(&routes, NOW) {
            Ok(text) => text,
            Err(err) => return Err(TestCaseError::fail(format!("render failed: {err}"))),
        };
        prop_assert_eq!(
            route_lines(&text),
            vec![format!(
                "#@route proxy.api.{name} api.{name}:443 api {} {}",
                case.account, case.id
            )]
        );
        check_clean(&text, &routes)
    });
    println!("{line}");
}

/// The record names the matcher refused, as its one warning per zone counts them.
fn refused_names(warnings: &[Warning]) -> usize {
    warnings
        .iter()
        .map(|w| match w {
            Warning::RecordName { skipped, .. } => *skipped,
            _ => 0,
        })
        .sum()
}
