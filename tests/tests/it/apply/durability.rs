//! Every file is on disk (fsync) before the rename that installs it.

use super::*;

/// What one argument of a `sync` call was at the moment of the call.
#[derive(Debug, Clone, PartialEq)]
enum Synced {
    Dir(PathBuf),
    /// A file and its size.
    File(PathBuf, u64),
    Missing(PathBuf),
}

impl Synced {
    fn path(&self) -> &Path {
        match self {
            Synced::Dir(path) | Synced::File(path, _) | Synced::Missing(path) => path,
        }
    }
}

/// A `sync` placed first in PATH (the script only appends the system directories): it logs
/// each call, one line per path argument as it is at that moment, then runs the real `sync`.
struct SyncShim {
    dir: tempfile::TempDir,
}

impl SyncShim {
    fn new() -> SyncShim {
        let real = ["/usr/bin/sync", "/bin/sync"]
            .into_iter()
            .map(Path::new)
            .find(|path| path.is_file())
            .expect("coreutils sync");
        let dir = tempfile::Builder::new()
            .prefix("autoproxy-sync-shim-")
            .tempdir()
            .unwrap();
        let log = dir.path().join("sync.log");
        let script = format!(
            r#"#!/bin/sh
for arg in "$@"; do
  case $arg in -*) continue ;; esac
  if [ -d "$arg" ]; then echo "dir $arg"
  elif [ -f "$arg" ]; then echo "file $(wc -c <"$arg") $arg"
  else echo "missing $arg"; fi
done >>'{log}'
echo end >>'{log}'
exec '{real}' "$@"
"#,
            log = log.display(),
            real = real.display()
        );
        let shim = dir.path().join("sync");
        std::fs::write(&shim, script).unwrap();
        std::fs::set_permissions(&shim, std::fs::Permissions::from_mode(0o755)).unwrap();
        SyncShim { dir }
    }

    /// The environment that puts the shim first (then the pinned tools, as the agent
    /// stand-in does).
    fn env(&self) -> Vec<(String, String)> {
        let inherited = std::env::var("PATH").unwrap_or_default();
        let tools = autoproxy_tests::moto::tools_bin();
        vec![(
            "PATH".to_owned(),
            format!(
                "{}:{}:{inherited}",
                self.dir.path().display(),
                tools.display()
            ),
        )]
    }

    /// The calls logged since the last `take`, in order, each its arguments.
    fn take(&self) -> Vec<Vec<Synced>> {
        let log = self.dir.path().join("sync.log");
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let _ = std::fs::remove_file(&log);
        let mut calls = vec![Vec::new()];
        for line in text.lines() {
            let (kind, rest) = line.split_once(' ').unwrap_or((line, ""));
            let current = calls.last_mut().unwrap();
            match kind {
                "end" => calls.push(Vec::new()),
                "dir" => current.push(Synced::Dir(rest.into())),
                "missing" => current.push(Synced::Missing(rest.into())),
                "file" => {
                    let (size, path) = rest.trim_start().split_once(' ').unwrap();
                    current.push(Synced::File(path.into(), size.parse().unwrap()));
                }
                other => panic!("sync log line {other:?}"),
            }
        }
        calls.pop();
        calls
    }
}

/// The calls, by index, that named a path in `dir` whose name starts with `prefix`.
fn synced_in<'a>(calls: &'a [Vec<Synced>], dir: &Path, prefix: &str) -> Vec<(usize, &'a Synced)> {
    calls
        .iter()
        .enumerate()
        .flat_map(|(index, call)| call.iter().map(move |arg| (index, arg)))
        .filter(|(_, arg)| {
            arg.path().parent() == Some(dir)
                && arg
                    .path()
                    .file_name()
                    .is_some_and(|name| name.to_string_lossy().starts_with(prefix))
        })
        .collect()
}

/// The one staging file in `dir` named `<prefix>…` that was synced, complete (`size` bytes),
/// and is gone now (renamed into place); the index of its call.
#[track_caller]
fn staged_file(calls: &[Vec<Synced>], dir: &Path, prefix: &str, size: u64) -> usize {
    let found = synced_in(calls, dir, prefix);
    let [(index, Synced::File(path, synced))] = found.as_slice() else {
        panic!("expected one file {prefix}… in {dir:?} synced: {found:?}\nall calls: {calls:#?}")
    };
    assert_eq!(*synced, size, "{path:?} was synced before it was complete");
    assert!(!path.exists(), "{path:?} was renamed into place after");
    *index
}

/// The calls, by index, that synced directory `dir`.
fn synced_dir(calls: &[Vec<Synced>], dir: &Path) -> Vec<usize> {
    calls
        .iter()
        .enumerate()
        .filter(|(_, call)| call.contains(&Synced::Dir(dir.to_owned())))
        .map(|(index, _)| index)
        .collect()
}

/// A config with an exact and a suffix route to `backend`, so both route maps have content.
fn config_with_both_maps(f: &Fixture, generation: u64, zone: &str, backend: &str) -> String {
    let exact = proxy::api_route(zone, f.backends.get(backend));
    let mut suffix = exact.clone();
    suffix.rule = "ingress-int".to_owned();
    suffix.sni = format!(".int.{zone}");
    suffix.sni_match = SniMatch::Suffix;
    proxy::render(
        generation,
        &[exact, suffix],
        &f.haproxy.options(f.backends.port),
    )
}

/// Checks the maps of `generation` were synced complete in their staging directory, before
/// the config's own sync at call `new`; the maps directory (holding their rename) by then.
#[track_caller]
fn assert_maps_synced(f: &Fixture, calls: &[Vec<Synced>], generation: u64, new: usize) {
    let maps = f.haproxy.dir().join("autoproxy");
    let stage = synced_in(calls, &maps, &format!(".gen-{generation}."));
    let [(at, Synced::Dir(stage))] = stage.as_slice() else {
        panic!("expected the staging directory of generation {generation} synced: {calls:#?}")
    };
    assert!(!stage.exists(), "{stage:?} was renamed into place after");
    let installed = maps.join(format!("gen-{generation}"));
    for name in ["routes.map", "suffixes.map"] {
        let size = std::fs::metadata(installed.join(name)).unwrap().len();
        assert!(size > 0, "{name} has routes");
        assert_eq!(
            staged_file(calls, stage, name, size),
            *at,
            "{name} synced with its directory"
        );
    }
    assert!(*at < new, "the maps before the config: {calls:#?}");
    assert!(
        synced_dir(calls, &maps)
            .iter()
            .any(|&index| *at < index && index <= new),
        "{maps:?} (the maps' rename) synced before the config's rename: {calls:#?}"
    );
}

/// A crash on XFS after a rename can leave a zero-length file in place unless its data was
/// flushed first: every file the apply renames into place (the config, its maps, the seeded
/// address map, last-known-good, a rollback's restore) is synced at its staging path, complete,
/// before its rename, and the directory after.
#[test]
fn every_file_is_on_disk_before_the_rename_that_installs_it() {
    let f = Fixture::new(&["a", "b"]);
    let shim = SyncShim::new();
    let dir = f.haproxy.dir().to_owned();
    let maps = dir.join("autoproxy");
    let apply = |text: &str| {
        let version = f.upload(text);
        let run = f
            .try_run(&f.document, &[("ConfigVersion", &version)], &shim.env())
            .unwrap();
        let calls = shim.take();
        let missing: Vec<&Synced> = calls
            .iter()
            .flatten()
            .filter(|arg| matches!(arg, Synced::Missing(_)))
            .collect();
        assert!(missing.is_empty(), "synced what did not exist: {missing:?}");
        (run, calls)
    };
    let len = |text: &str| u64::try_from(text.len()).unwrap();

    // The first install: the seeded address map, generation 1's maps, the config.
    let first = config_with_both_maps(&f, 1, "g1.test", "a");
    let (run, calls) = apply(&first);
    assert!(run.success(), "{run}{}", f.haproxy.log());
    let new = staged_file(&calls, &dir, ".autoproxy-new.", len(&first));
    assert_maps_synced(&f, &calls, 1, new);
    let seeded = std::fs::metadata(maps.join("addresses.map")).unwrap().len();
    assert!(staged_file(&calls, &maps, ".autoproxy-addresses.", seeded) < new);
    assert!(
        synced_dir(&calls, &dir).iter().any(|&index| index > new),
        "{dir:?} synced after the config's rename: {calls:#?}"
    );

    // The next generation: last-known-good too.
    let second = config_with_both_maps(&f, 2, "g2.test", "b");
    let (run, calls) = apply(&second);
    assert!(run.success(), "{run}{}", f.haproxy.log());
    assert_eq!(f.installed(), second);
    let new = staged_file(&calls, &dir, ".autoproxy-new.", len(&second));
    assert_maps_synced(&f, &calls, 2, new);
    assert!(staged_file(&calls, &dir, ".autoproxy-last-good.", len(&first)) < new);
    assert_eq!(f.last_good().as_deref(), Some(first.as_str()));
    assert!(
        synced_dir(&calls, &dir).iter().any(|&index| index > new),
        "{dir:?} synced after the config's rename: {calls:#?}"
    );

    // A generation that cannot start: the rollback's restore of generation 2.
    let squatter = TcpListener::bind("127.0.0.1:0").unwrap();
    let mut options = f.haproxy.options(f.backends.port);
    options.http_bind = squatter.local_addr().unwrap().to_string();
    let third = f.config_with(3, &[("g3.test", "a")], &options);
    let (run, calls) = apply(&third);
    assert_eq!(run.status, Some(2), "{run}");
    assert_eq!(f.installed(), second);
    let restore = staged_file(&calls, &dir, ".autoproxy-restore.", len(&second));
    assert!(
        synced_dir(&calls, &dir)
            .iter()
            .any(|&index| index > restore),
        "{dir:?} synced after the restore's rename: {calls:#?}"
    );
    drop(squatter);
}
