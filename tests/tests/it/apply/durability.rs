//! Every file is on disk (fsync) before the rename that installs it.
//!
//! The agent calls fsync(2) itself, so the run is observed from the kernel's side: the
//! document's `sh` runs under `strace -f -y` (every process of the run, each file descriptor
//! with the path it names at the moment of the call), which logs the writes, the fsyncs and
//! the renames in the order they completed.

mod renames;
mod strace;

use renames::{assert_traced, rename_of, staged_file, synced_after, written};
use strace::{Event, Strace};

use super::*;

/// A config with an exact and a suffix route to `backend`, so both route maps have content;
/// with `reload`, a setting of its own too, so that HAProxy must reload to take it.
fn config_with_both_maps(
    f: &Fixture,
    generation: u64,
    zone: &str,
    backend: &str,
    reload: bool,
) -> String {
    let exact = proxy::api_route(zone, f.backends.get(backend));
    let mut suffix = exact.clone();
    suffix.rule = "ingress-int".to_owned();
    suffix.sni = format!(".int.{zone}");
    suffix.sni_match = SniMatch::Suffix;
    let mut options = f.haproxy.options(f.backends.port);
    if reload {
        options.maxconn -= u32::try_from(generation).unwrap();
    }
    proxy::render(generation, &[exact, suffix], &options)
}

/// The maps were written complete in a staging directory and synced before their renames,
/// which came (and were synced, in the maps directory) before the config's rename at `new`.
#[track_caller]
fn assert_maps_synced(f: &Fixture, events: &[Event], new: usize) {
    let maps = f.haproxy.dir().join("autoproxy");
    let stable = MapFiles::stable();
    for path in [stable.routes, stable.suffixes, stable.generation.unwrap()] {
        let installed = f.haproxy.dir().join(&path);
        let renames: Vec<(usize, &PathBuf)> = events
            .iter()
            .enumerate()
            .filter_map(|(index, event)| match event {
                Event::Rename { from, to } if *to == installed => Some((index, from)),
                _ => None,
            })
            .collect();
        let [(at, from)] = renames.as_slice() else {
            panic!("expected one rename to {installed:?}: {renames:?}\nall: {events:#?}")
        };
        assert!(
            from.parent()
                .and_then(|stage| stage.file_name())
                .is_some_and(|name| name.to_string_lossy().starts_with(".stage.")),
            "{path} comes from a staging directory: {from:?}"
        );
        let size = std::fs::metadata(&installed).unwrap().len();
        assert!(size > 0, "{path} has content");
        assert_eq!(
            written(events, from, *at).0,
            size,
            "{path} complete in {from:?} before its rename"
        );
        assert!(*at < new, "the maps before the config: {events:#?}");
        assert!(
            synced_after(events, &maps, *at).is_some_and(|i| i < new),
            "{maps:?} (the maps' renames) synced before the config's rename: {events:#?}"
        );
    }
}

/// Applies through the document with its `sh` under strace; each run's trace checked with
/// [`assert_traced`].
struct Traced<'a> {
    f: &'a Fixture,
    strace: Strace,
}

impl Traced<'_> {
    fn apply_with(&self, document: &Document, text: &str) -> (Run, Vec<Event>) {
        let version = self.f.upload(text);
        let run = self
            .f
            .spawn(
                document,
                &[("ConfigVersion", &version)],
                &[],
                &self.strace.wrapper(),
            )
            .unwrap()
            .wait(RUN_TIMEOUT);
        let events = self.strace.take();
        assert_traced(&events, &run);
        (run, events)
    }

    fn apply(&self, text: &str) -> (Run, Vec<Event>) {
        self.apply_with(&self.f.document, text)
    }
}

fn len(text: &str) -> u64 {
    u64::try_from(text.len()).unwrap()
}

/// A crash on XFS after a rename can leave a zero-length file in place unless its data was
/// flushed first: every file the apply renames into place (the config, its maps, the seeded
/// address map, last-known-good, a rollback's restore, and the launcher's cached agent) is
/// synced at its staging path, complete, before its rename, and the directory after.
#[test]
fn every_file_is_on_disk_before_the_rename_that_installs_it() {
    let f = Fixture::new(&["a", "b"]);
    let traced = Traced {
        f: &f,
        strace: Strace::new(),
    };
    let first = config_with_both_maps(&f, 1, "g1.test", "a", false);
    first_install(&traced, &first);
    let second = config_with_both_maps(&f, 2, "g2.test", "b", false);
    route_only_change(&traced, &first, &second);
    failed_reload(&traced, &second);
}

/// The first install: the cached agent, the seeded address map, generation 1's maps, the
/// config.
fn first_install(traced: &Traced<'_>, first: &str) {
    let f = traced.f;
    let dir = f.haproxy.dir().to_owned();
    let maps = dir.join("autoproxy");
    let config = f.haproxy.config_path();
    let (run, events) = traced.apply(first);
    assert!(run.success(), "{run}{}", f.haproxy.log());
    let cache = f
        .haproxy
        .agent_directory()
        .join("agent")
        .join(autoproxy_tests::agent::Published::describe(BUCKET).sha256);
    rename_of(
        &events,
        &cache,
        ".autoproxy-agent.",
        &cache.join("autoproxy-agent"),
    );
    let new = staged_file(&events, &dir, ".autoproxy-new.", &config, len(first));
    assert_maps_synced(f, &events, new);
    let seeded = std::fs::metadata(maps.join("addresses.map")).unwrap().len();
    let addresses = staged_file(
        &events,
        &maps,
        ".addresses.map.",
        &maps.join("addresses.map"),
        seeded,
    );
    assert!(addresses < new, "the address map before the config");
    assert!(
        synced_after(&events, &maps, addresses).is_some_and(|i| i < new),
        "{maps:?} (the address map's rename) synced before the config's rename: {events:#?}"
    );
    assert!(
        synced_after(&events, &dir, new).is_some(),
        "{dir:?} synced after the config's rename: {events:#?}"
    );
}

/// The next generation, new routes only (applied without a reload): last-known-good too.
fn route_only_change(traced: &Traced<'_>, first: &str, second: &str) {
    let f = traced.f;
    let dir = f.haproxy.dir().to_owned();
    let config = f.haproxy.config_path();
    let (run, events) = traced.apply(second);
    assert!(run.success(), "{run}{}", f.haproxy.log());
    assert_eq!(run.step("update").len(), 1, "{run}");
    assert_eq!(f.installed(), second);
    let new = staged_file(&events, &dir, ".autoproxy-new.", &config, len(second));
    assert_maps_synced(f, &events, new);
    let last_good = PathBuf::from(format!("{}.last-good", config.display()));
    let kept = staged_file(
        &events,
        &dir,
        ".autoproxy-last-good.",
        &last_good,
        len(first),
    );
    assert!(kept < new, "last-known-good before the config");
    assert_eq!(f.last_good().as_deref(), Some(first));
    assert!(
        synced_after(&events, &dir, new).is_some(),
        "{dir:?} synced after the config's rename: {events:#?}"
    );
}

/// A reload that fails: the rollback's restore of generation 2, its maps first.
fn failed_reload(traced: &Traced<'_>, second: &str) {
    let f = traced.f;
    let dir = f.haproxy.dir().to_owned();
    let maps = dir.join("autoproxy");
    let config = f.haproxy.config_path();
    let failing = f
        .haproxy
        .apply_document_reloading_with(&f.haproxy.reload_command(&["fail-once"]))
        .unwrap();
    let third = config_with_both_maps(f, 3, "g3.test", "a", true);
    let (run, events) = traced.apply_with(&failing, &third);
    assert_eq!(run.status, Some(2), "{run}");
    assert_eq!(f.installed(), second);
    let new = staged_file(&events, &dir, ".autoproxy-new.", &config, len(&third));
    let restore = staged_file(&events, &dir, ".autoproxy-restore.", &config, len(second));
    assert!(new < restore, "the restore after the swap");
    let routes = maps.join("routes.map");
    let (maps_restored, _) = rename_of(&events, &maps, ".routes.map.", &routes);
    assert!(
        maps_restored < restore,
        "the maps restored before the config"
    );
    let (second_routes, _) = MapFiles::route_tables(second);
    assert_eq!(std::fs::read_to_string(&routes).unwrap(), second_routes);
    assert!(
        synced_after(&events, &dir, restore).is_some(),
        "{dir:?} synced after the restore's rename: {events:#?}"
    );
}
