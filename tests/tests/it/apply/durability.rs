//! Every file is on disk (fsync) before the rename that installs it.
//!
//! The agent calls fsync(2) itself, so the run is observed from the kernel's side: the
//! document's `sh` runs under `strace -f -y` (every process of the run, each file descriptor
//! with the path it names at the moment of the call), which logs the writes, the fsyncs and
//! the renames in the order they completed.

use std::os::unix::fs::FileTypeExt;

use super::*;

/// What the trace shows, in order; only calls that succeeded.
#[derive(Debug, Clone, PartialEq)]
enum Event {
    /// Bytes written to a file.
    Write(PathBuf, u64),
    /// fsync or fdatasync of a file or directory.
    Sync(PathBuf),
    /// An fsync or fdatasync that failed.
    SyncFailed(PathBuf),
    Rename {
        from: PathBuf,
        to: PathBuf,
    },
    /// A name removed.
    Unlink(PathBuf),
}

/// One apply run under strace (`-DD`: the tracer is a grandchild in a group of its own, so the
/// run's process group and exit status are the script's own).
struct Strace {
    dir: tempfile::TempDir,
}

impl Strace {
    fn new() -> Strace {
        Strace {
            dir: tempfile::Builder::new()
                .prefix("autoproxy-strace-")
                .tempdir()
                .unwrap(),
        }
    }

    fn log(&self) -> PathBuf {
        self.dir.path().join("strace.log")
    }

    fn wrapper(&self) -> Vec<String> {
        [
            "strace",
            "-DD",
            // Interruptible (a fatal signal is blocked only while a call is decoded): with
            // `-o FILE` strace would block SIGTERM for good.
            "-I2",
            "-f",
            "-y",
            "-qq",
            "-s",
            "0",
            "-e",
            "signal=none",
            "-e",
            "trace=fsync,fdatasync,write,pwrite64,writev,pwritev,pwritev2,copy_file_range,sendfile,rename,renameat,renameat2,unlink,unlinkat",
            "-o",
        ]
        .into_iter()
        .map(str::to_owned)
        .chain([self.log().display().to_string(), "--".to_owned()])
        .collect()
    }

    /// Ends the tracer (it stays attached to an HAProxy the run started) and returns the
    /// events it logged, clearing the log for the next run.
    fn take(&self) -> Vec<Event> {
        let log = self.log().display().to_string();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let tracers = tracers_of(&log);
            if tracers.is_empty() {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "strace still runs: {tracers:?}"
            );
            // SIGTERM: strace detaches from what it still traces and exits.
            let _ = std::process::Command::new("kill")
                .arg("-TERM")
                .args(tracers.iter().map(ToString::to_string))
                .stderr(std::process::Stdio::null())
                .status();
            std::thread::sleep(Duration::from_millis(50));
        }
        let text = std::fs::read_to_string(self.log()).unwrap_or_default();
        let _ = std::fs::remove_file(self.log());
        parse(&text)
    }
}

/// Live strace processes writing `log`.
fn tracers_of(log: &str) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
            let zombie = std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|stat| Some(stat.rsplit_once(") ")?.1.starts_with('Z')))
                .unwrap_or(true);
            args.first().is_some_and(|a| a.ends_with(b"strace"))
                && args.contains(&log.as_bytes())
                && !zombie
        })
        .collect()
}

/// The events of an `strace -f -y` log, in the order the calls completed (a call another
/// process interrupted is split into `<unfinished ...>` and `<... resumed>`).
fn parse(text: &str) -> Vec<Event> {
    let mut pending: BTreeMap<String, String> = BTreeMap::new();
    let mut events = Vec::new();
    for line in text.lines() {
        let Some((pid, rest)) = line.split_once(' ') else {
            continue;
        };
        let rest = rest.trim_start();
        let call = if let Some(started) = rest.strip_suffix(" <unfinished ...>") {
            pending.insert(pid.to_owned(), started.to_owned());
            continue;
        } else if let Some(resumed) = rest.strip_prefix("<... ") {
            let Some((_, tail)) = resumed.split_once(" resumed>") else {
                continue;
            };
            let Some(head) = pending.remove(pid) else {
                continue;
            };
            head + tail
        } else {
            rest.to_owned()
        };
        if let Some(event) = event_of(&call) {
            events.push(event);
        }
    }
    events
}

/// `name(args) = result`, as an event if it is one that succeeded.
fn event_of(call: &str) -> Option<Event> {
    let (name, rest) = call.split_once('(')?;
    let (args, result) = rest.rsplit_once(") = ")?;
    let result: i64 = result.split_whitespace().next()?.parse().ok()?;
    let fds = fd_paths(args);
    if result < 0 {
        return matches!(name, "fsync" | "fdatasync")
            .then(|| Some(Event::SyncFailed(fds.first()?.clone())))
            .flatten();
    }
    match name {
        "write" | "pwrite64" | "writev" | "pwritev" | "pwritev2" => {
            Some(Event::Write(fds.first()?.clone(), result.unsigned_abs()))
        }
        "copy_file_range" => Some(Event::Write(fds.get(1)?.clone(), result.unsigned_abs())),
        "sendfile" => Some(Event::Write(fds.first()?.clone(), result.unsigned_abs())),
        "fsync" | "fdatasync" => Some(Event::Sync(fds.first()?.clone())),
        "rename" | "renameat" | "renameat2" if result == 0 => {
            let paths = quoted_paths(args);
            let [from, to] = paths.get(..2)? else {
                return None;
            };
            Some(Event::Rename {
                from: from.clone(),
                to: to.clone(),
            })
        }
        "unlink" | "unlinkat" if result == 0 => {
            Some(Event::Unlink(quoted_paths(args).first()?.clone()))
        }
        _ => None,
    }
}

/// The paths `-y` shows for file descriptors (`3</dir/file>`), in order.
fn fd_paths(args: &str) -> Vec<PathBuf> {
    let mut paths = Vec::new();
    let mut rest = args;
    while let Some(open) = rest.find('<') {
        let before = &rest[..open];
        let after = &rest[open + 1..];
        let Some(close) = after.find('>') else { break };
        let fd = before.rsplit([' ', ',', '(']).next().unwrap_or("");
        if !fd.is_empty() && fd.bytes().all(|b| b.is_ascii_digit()) {
            paths.push(PathBuf::from(&after[..close]));
        }
        rest = &after[close + 1..];
    }
    paths
}

/// The quoted path arguments of a rename, each made absolute with the directory descriptor
/// before it (`AT_FDCWD</cwd>`).
fn quoted_paths(args: &str) -> Vec<PathBuf> {
    let mut paths = Vec::new();
    let mut base = PathBuf::from("/");
    let mut rest = args;
    loop {
        let quote = rest.find('"');
        let dirfd = rest.find('<');
        match (quote, dirfd) {
            (Some(q), Some(d)) if d < q => {
                let after = &rest[d + 1..];
                let Some(close) = after.find('>') else { break };
                base = PathBuf::from(&after[..close]);
                rest = &after[close + 1..];
            }
            (Some(q), _) => {
                let after = &rest[q + 1..];
                let Some(close) = after.find('"') else { break };
                paths.push(base.join(&after[..close]));
                rest = &after[close + 1..];
            }
            _ => break,
        }
    }
    paths
}

/// The index of every sync of `path`.
fn syncs_of<'a>(events: &'a [Event], path: &'a Path) -> impl Iterator<Item = usize> + 'a {
    events
        .iter()
        .enumerate()
        .filter(move |(_, event)| matches!(event, Event::Sync(p) if p == path))
        .map(|(index, _)| index)
}

/// Bytes written to `path` before index `end`, and the index of the last write.
fn written(events: &[Event], path: &Path, end: usize) -> (u64, Option<usize>) {
    events[..end]
        .iter()
        .enumerate()
        .filter_map(|(index, event)| match event {
            Event::Write(p, n) if p == path => Some((index, *n)),
            _ => None,
        })
        .fold((0, None), |(total, _), (index, n)| (total + n, Some(index)))
}

/// The rule, for every rename in the trace: what it installs (a file, or a directory and the
/// files in it) was synced after its last write and before the rename; the directory it lands
/// in was synced after it.
#[track_caller]
fn assert_every_rename_durable(events: &[Event]) {
    for (at, event) in events.iter().enumerate() {
        let Event::Rename { from, to } = event else {
            continue;
        };
        // HAProxy binds its UNIX sockets at a temporary name and renames them: no data.
        if std::fs::symlink_metadata(to).is_ok_and(|m| m.file_type().is_socket()) {
            continue;
        }
        let mut contents: Vec<&Path> = events[..at]
            .iter()
            .filter_map(|event| match event {
                Event::Write(p, _) | Event::Sync(p) if p.starts_with(from) && p != from => {
                    Some(p.as_path())
                }
                _ => None,
            })
            .collect();
        contents.sort();
        contents.dedup();
        // A file removed before the rename is not installed by it.
        contents.retain(|file| {
            !events[..at]
                .iter()
                .any(|event| matches!(event, Event::Unlink(p) if p == file))
        });
        let mut last_write_inside = None;
        for file in contents.iter().copied().chain([from.as_path()]) {
            let (_, last_write) = written(events, file, at);
            let synced = syncs_of(events, file).any(|i| last_write.is_none_or(|w| w < i) && i < at);
            assert!(
                synced,
                "{file:?} was not synced after its last write (event {last_write:?}) and before the rename at {at} ({from:?} -> {to:?}): {events:#?}"
            );
            if file != from {
                last_write_inside = last_write_inside.max(last_write);
            }
        }
        if !contents.is_empty() {
            let synced =
                syncs_of(events, from).any(|i| last_write_inside.is_none_or(|w| w < i) && i < at);
            assert!(
                synced,
                "directory {from:?} was not synced after its files were written: {events:#?}"
            );
        }
        let parent = to.parent().unwrap();
        assert!(
            syncs_of(events, parent).any(|i| i > at),
            "{parent:?} was not synced after the rename {from:?} -> {to:?}: {events:#?}"
        );
    }
}

/// A run's trace: it saw renames (strace could attach), no fsync failed, and every rename is
/// durable.
#[track_caller]
fn assert_traced(events: &[Event], run: &Run) {
    assert!(
        events.iter().any(|e| matches!(e, Event::Rename { .. })),
        "strace saw no rename (is ptrace allowed here?):\n{run}"
    );
    let failed: Vec<&Event> = events
        .iter()
        .filter(|e| matches!(e, Event::SyncFailed(_)))
        .collect();
    assert!(failed.is_empty(), "fsync failed: {failed:?}\n{run}");
    assert_every_rename_durable(events);
}

/// The one rename of a `<prefix>…` in `dir` to `to`; its index and its source.
#[track_caller]
fn rename_of(events: &[Event], dir: &Path, prefix: &str, to: &Path) -> (usize, PathBuf) {
    let found: Vec<(usize, &PathBuf)> = events
        .iter()
        .enumerate()
        .filter_map(|(index, event)| match event {
            Event::Rename { from, to: target }
                if target == to
                    && from.parent() == Some(dir)
                    && from
                        .file_name()
                        .is_some_and(|name| name.to_string_lossy().starts_with(prefix)) =>
            {
                Some((index, from))
            }
            _ => None,
        })
        .collect();
    let [(index, from)] = found.as_slice() else {
        panic!("expected one rename {dir:?}/{prefix}… -> {to:?}: {found:?}\nall: {events:#?}")
    };
    (*index, (*from).clone())
}

/// The staging file of `<prefix>…` in `dir` renamed to `to`, written complete (`size` bytes)
/// before it; the index of its rename.
#[track_caller]
fn staged_file(events: &[Event], dir: &Path, prefix: &str, to: &Path, size: u64) -> usize {
    let (at, from) = rename_of(events, dir, prefix, to);
    let (bytes, _) = written(events, &from, at);
    assert_eq!(
        bytes, size,
        "{from:?} was renamed into place before it was complete"
    );
    at
}

/// The first sync of `dir` after index `after`.
fn synced_after(events: &[Event], dir: &Path, after: usize) -> Option<usize> {
    syncs_of(events, dir).find(|&i| i > after)
}

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

/// A crash on XFS after a rename can leave a zero-length file in place unless its data was
/// flushed first: every file the apply renames into place (the config, its maps, the seeded
/// address map, last-known-good, a rollback's restore, and the launcher's cached agent) is
/// synced at its staging path, complete, before its rename, and the directory after.
#[test]
fn every_file_is_on_disk_before_the_rename_that_installs_it() {
    let f = Fixture::new(&["a", "b"]);
    let strace = Strace::new();
    let dir = f.haproxy.dir().to_owned();
    let maps = dir.join("autoproxy");
    let config = f.haproxy.config_path();
    let apply_with = |document: &Document, text: &str| {
        let version = f.upload(text);
        let run = f
            .spawn(
                document,
                &[("ConfigVersion", &version)],
                &[],
                &strace.wrapper(),
            )
            .unwrap()
            .wait(RUN_TIMEOUT);
        let events = strace.take();
        assert_traced(&events, &run);
        (run, events)
    };
    let apply = |text: &str| apply_with(&f.document, text);
    let len = |text: &str| u64::try_from(text.len()).unwrap();

    // The first install: the cached agent, the seeded address map, generation 1's maps, the
    // config.
    let first = config_with_both_maps(&f, 1, "g1.test", "a", false);
    let (run, events) = apply(&first);
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
    let new = staged_file(&events, &dir, ".autoproxy-new.", &config, len(&first));
    assert_maps_synced(&f, &events, new);
    let seeded = std::fs::metadata(maps.join("addresses.map")).unwrap().len();
    let addresses = staged_file(
        &events,
        &maps,
        ".autoproxy-addresses.",
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

    // The next generation, new routes only (applied without a reload): last-known-good too.
    let second = config_with_both_maps(&f, 2, "g2.test", "b", false);
    let (run, events) = apply(&second);
    assert!(run.success(), "{run}{}", f.haproxy.log());
    assert_eq!(run.step("update").len(), 1, "{run}");
    assert_eq!(f.installed(), second);
    let new = staged_file(&events, &dir, ".autoproxy-new.", &config, len(&second));
    assert_maps_synced(&f, &events, new);
    let last_good = PathBuf::from(format!("{}.last-good", config.display()));
    let kept = staged_file(
        &events,
        &dir,
        ".autoproxy-last-good.",
        &last_good,
        len(&first),
    );
    assert!(kept < new, "last-known-good before the config");
    assert_eq!(f.last_good().as_deref(), Some(first.as_str()));
    assert!(
        synced_after(&events, &dir, new).is_some(),
        "{dir:?} synced after the config's rename: {events:#?}"
    );

    // A reload that fails: the rollback's restore of generation 2, its maps first.
    let failing = f
        .haproxy
        .apply_document_reloading_with(&f.haproxy.reload_command(&["fail-once"]))
        .unwrap();
    let third = config_with_both_maps(&f, 3, "g3.test", "a", true);
    let (run, events) = apply_with(&failing, &third);
    assert_eq!(run.status, Some(2), "{run}");
    assert_eq!(f.installed(), second);
    let new = staged_file(&events, &dir, ".autoproxy-new.", &config, len(&third));
    let restore = staged_file(&events, &dir, ".autoproxy-restore.", &config, len(&second));
    assert!(new < restore, "the restore after the swap");
    let routes = maps.join("routes.map");
    let (maps_restored, _) = rename_of(&events, &maps, ".restore.", &routes);
    assert!(
        maps_restored < restore,
        "the maps restored before the config"
    );
    let (second_routes, _) = MapFiles::route_tables(&second);
    assert_eq!(std::fs::read_to_string(&routes).unwrap(), second_routes);
    assert!(
        synced_after(&events, &dir, restore).is_some(),
        "{dir:?} synced after the restore's rename: {events:#?}"
    );
}

/// The checker itself, on made-up traces: it accepts a durable install (across a call split by
/// another process's) and refuses each way one can fall short.
#[test]
fn the_trace_checker_refuses_every_rename_that_is_not_durable() {
    let good = "\
10 write(3</d/.new.1>, \"\"..., 5) = 5
10 fsync(3</d/.new.1> <unfinished ...>
11 write(1<pipe:[1]>, \"\"..., 3) = 3
10 <... fsync resumed>) = 0
10 renameat2(AT_FDCWD</d>, \".new.1\", AT_FDCWD</d>, \"cfg\", 0) = 0
10 fsync(4</d>) = 0
";
    let events = parse(good);
    assert_eq!(
        events,
        [
            Event::Write("/d/.new.1".into(), 5),
            Event::Write("pipe:[1]".into(), 3),
            Event::Sync("/d/.new.1".into()),
            Event::Rename {
                from: "/d/.new.1".into(),
                to: "/d/cfg".into()
            },
            Event::Sync("/d".into()),
        ]
    );
    assert_every_rename_durable(&events);
    assert_every_rename_durable(&parse(
        "10 write(3</d/.s/.count>, \"\"..., 5) = 5\n10 unlinkat(AT_FDCWD</>, \"/d/.s/.count\", 0) = 0\n\
         10 write(3</d/.s/routes.map>, \"\"..., 5) = 5\n10 fsync(3</d/.s/routes.map>) = 0\n\
         10 fsync(4</d/.s>) = 0\n10 rename(\"/d/.s\", \"/d/gen-1\") = 0\n10 fsync(5</d>) = 0\n",
    ));
    for bad in [
        // The file never synced.
        "10 write(3</d/.new.1>, \"\"..., 5) = 5\n10 rename(\"/d/.new.1\", \"/d/cfg\") = 0\n10 fsync(4</d>) = 0\n",
        // Synced before its last write.
        "10 fsync(3</d/.new.1>) = 0\n10 write(3</d/.new.1>, \"\"..., 5) = 5\n10 rename(\"/d/.new.1\", \"/d/cfg\") = 0\n10 fsync(4</d>) = 0\n",
        // Synced only after the rename (its descriptor then names the new path).
        "10 write(3</d/.new.1>, \"\"..., 5) = 5\n10 rename(\"/d/.new.1\", \"/d/cfg\") = 0\n10 fsync(3</d/cfg>) = 0\n10 fsync(4</d>) = 0\n",
        // The directory synced before the rename, not after.
        "10 write(3</d/.new.1>, \"\"..., 5) = 5\n10 fsync(3</d/.new.1>) = 0\n10 fsync(4</d>) = 0\n10 rename(\"/d/.new.1\", \"/d/cfg\") = 0\n",
        // A failed fsync is none.
        "10 write(3</d/.new.1>, \"\"..., 5) = 5\n10 fsync(3</d/.new.1>) = -1 EIO (Input/output error)\n10 rename(\"/d/.new.1\", \"/d/cfg\") = 0\n10 fsync(4</d>) = 0\n",
        // A directory renamed with a file in it never synced.
        "10 write(3</d/.s/routes.map>, \"\"..., 5) = 5\n10 fsync(4</d/.s>) = 0\n10 rename(\"/d/.s\", \"/d/gen-1\") = 0\n10 fsync(5</d>) = 0\n",
        // A file removed from the directory is not installed with it, but the others are.
        "10 write(3</d/.s/.count>, \"\"..., 5) = 5\n10 unlink(\"/d/.s/.count\") = 0\n10 write(3</d/.s/routes.map>, \"\"..., 5) = 5\n10 fsync(4</d/.s>) = 0\n10 rename(\"/d/.s\", \"/d/gen-1\") = 0\n10 fsync(5</d>) = 0\n",
        // A directory renamed whose own entries were never synced.
        "10 write(3</d/.s/routes.map>, \"\"..., 5) = 5\n10 fsync(3</d/.s/routes.map>) = 0\n10 rename(\"/d/.s\", \"/d/gen-1\") = 0\n10 fsync(5</d>) = 0\n",
    ] {
        let events = parse(bad);
        assert!(
            std::panic::catch_unwind(|| assert_every_rename_durable(&events)).is_err(),
            "accepted: {bad}"
        );
    }
}
