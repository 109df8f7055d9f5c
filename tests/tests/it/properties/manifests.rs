//! Manifests → merge → render.

use super::*;

/// A manifest as the generator writes it: each zone with every default rule's route, made by
/// the rule itself (what the load check compares with).
pub(super) fn valid_manifest() -> BoxedStrategy<Manifest> {
    let zone = (
        vec(re("[a-z0-9]([a-z0-9-]{0,10}[a-z0-9])?"), 1..4),
        select(vec!["111111111111", "222222222222"]),
        re("Z[0-9A-Z]{1,21}"),
    );
    (vec(zone, 1..4), 0..=NOW)
        .prop_map(|(zones, generation)| {
            let mut manifest = Manifest {
                generation,
                ..Manifest::default()
            };
            for (labels, account, id) in zones {
                let name = labels.join(".");
                let zone_name = HostName::parse(&name).unwrap();
                let zone = Zone {
                    account: account.to_owned(),
                    id: id.clone(),
                    name: format!("{name}."),
                    private: true,
                };
                let routes = DEFAULT_RULES
                    .iter()
                    .filter_map(|rule| rule.route(&zone.key(), &zone_name, None))
                    .collect();
                manifest
                    .zones
                    .insert(zone_key(&zone.key()), ZoneEntry::new(&zone, routes, vec![]));
            }
            manifest
        })
        .boxed()
}

/// A stored manifest's text, and whether it must load and render (as the generator wrote
/// it): a valid one changed in a few places (text put into its strings, or any change), a
/// valid one unchanged, or any JSON.
pub(super) fn manifest_text() -> BoxedStrategy<(String, bool)> {
    let splice = (any::<usize>(), any::<usize>(), hostile())
        .prop_map(|(n, at, text)| Mutation::Splice(n, at, text));
    let changed = |mutations: BoxedStrategy<Vec<Mutation>>| {
        (valid_manifest(), mutations).prop_map(|(manifest, mutations)| {
            let mut value = serde_json::to_value(&manifest).unwrap();
            for m in &mutations {
                mutate(&mut value, m);
            }
            (value.to_string(), false)
        })
    };
    prop_oneof![
        5 => changed(vec(splice, 1..4).boxed()),
        4 => changed(vec(mutation(), 1..4).boxed()),
        1 => valid_manifest().prop_map(|m| (m.to_json(), true)),
        1 => json().prop_map(|mut value| {
            if let Some(object) = value.as_object_mut() {
                object.insert("format".into(), json!(1));
            }
            (value.to_string(), false)
        }),
    ]
    .boxed()
}

/// What the generator does with a stored manifest before rendering: the sweep merges it (here
/// an event for a zone of an account not configured, so nothing is read), the ownership rules
/// pick the zones that may route, then the routes are resolved and numbered from it.
pub(super) fn merge_and_resolve(
    runtime: &tokio::runtime::Runtime,
    manifest: &Manifest,
) -> Result<(Vec<Route>, u64), TestCaseError> {
    let proxies = proxies();
    let ignore = IgnoreZones::default();
    let borders = autoproxy::networks::Borders::unjudged();
    let matching = Matching {
        rules: &DEFAULT_RULES,
        proxies: &proxies,
        ignore: &ignore,
        borders: &borders,
    };
    let hint = ZoneKey {
        account: "999999999999".into(),
        id: "ZHINT".into(),
    };
    let swept = runtime
        .block_on(discovery::sweep(
            &[],
            Some(manifest),
            &Scope::Zones(vec![hint]),
            matching,
            None,
        ))
        .map_err(|err| TestCaseError::fail(format!("the merge failed: {err}")))?;
    prop_assert_eq!(
        &swept.manifest.zones,
        &manifest.zones,
        "the merge lost zones"
    );
    let owned = ownership::owned_routes(
        &swept.manifest.zones,
        &ownership::Holders::of(manifest),
        ownership::Mode::FirstHolder,
        ownership::Grace {
            now: NOW,
            seconds: 24 * 3600,
        },
    );
    let (routes, _conflicts) = merge_claims(owned.candidates);
    Ok((routes, publish::next_generation(manifest.generation, NOW)))
}

/// `Some((routes, config))` when the manifest loads and renders, `None` when it is refused (or
/// of another format); the refusals are checked to say why.
pub(super) fn load_and_render(
    text: &str,
    runtime: &tokio::runtime::Runtime,
    render: &Render,
    tally: &Tally,
) -> Result<Option<(Vec<Route>, String, u64)>, TestCaseError> {
    let manifest = match Manifest::from_json(text, &DEFAULT_RULES) {
        Ok(Some(manifest)) => manifest,
        Ok(None) => {
            tally.add("other format", 1);
            let value: Value = serde_json::from_str(text).unwrap();
            prop_assert!(value.get("format") != Some(&json!(1)), "{text}");
            return Ok(None);
        }
        Err(err) => {
            tally.add("refused on load", 1);
            prop_assert!(!err.to_string().is_empty());
            return Ok(None);
        }
    };
    prop_assert!(manifest.generation <= artifact::MAX_GENERATION);
    let (routes, generation) = merge_and_resolve(runtime, &manifest)?;
    match render.render(&routes, generation) {
        Ok(config) => {
            tally.add("rendered", 1);
            Ok(Some((routes, config, generation)))
        }
        Err(err) => {
            tally.add("refused by the renderer", 1);
            let message = err.to_string();
            prop_assert!(
                message.contains("refusing to write") && message.contains("it contains"),
                "unclear refusal: {message}"
            );
            Ok(None)
        }
    }
}

pub(super) fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap()
}

#[test]
pub(super) fn manifest_values_reach_the_config_only_when_clean() {
    let render = Render::new();
    let runtime = runtime();
    let tally = Tally::default();
    let line = check_property(
        "manifest→config (bytes)",
        1_000,
        manifest_text(),
        |(text, as_written)| {
            match load_and_render(&text, &runtime, &render, &tally)? {
                Some((routes, config, generation)) => {
                    check_structure(&config, &routes, &render.baseline(generation))?;
                    check_clean(&config, &routes)?;
                }
                None => prop_assert!(!as_written, "a manifest as written was refused: {text}"),
            }
            Ok(())
        },
    );
    println!("{line}: {tally}");
    tally.require(&["rendered", "refused on load", "other format"]);
}
