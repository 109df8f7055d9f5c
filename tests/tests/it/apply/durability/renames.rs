//! The rule the trace is held to: what a rename installs was synced, complete, before it, and
//! the directory it lands in after it; and the lookups the test makes in a trace.

use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};

use autoproxy_tests::ssm_agent::Run;

use super::strace::{Event, parse};

/// The index of every sync of `path`.
pub(super) fn syncs_of<'a>(
    events: &'a [Event],
    path: &'a Path,
) -> impl Iterator<Item = usize> + 'a {
    events
        .iter()
        .enumerate()
        .filter(move |(_, event)| matches!(event, Event::Sync(p) if p == path))
        .map(|(index, _)| index)
}

/// Bytes written to `path` before index `end`, and the index of the last write.
pub(super) fn written(events: &[Event], path: &Path, end: usize) -> (u64, Option<usize>) {
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
pub(super) fn assert_every_rename_durable(events: &[Event]) {
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
pub(super) fn assert_traced(events: &[Event], run: &Run) {
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
pub(super) fn rename_of(events: &[Event], dir: &Path, prefix: &str, to: &Path) -> (usize, PathBuf) {
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
pub(super) fn staged_file(
    events: &[Event],
    dir: &Path,
    prefix: &str,
    to: &Path,
    size: u64,
) -> usize {
    let (at, from) = rename_of(events, dir, prefix, to);
    let (bytes, _) = written(events, &from, at);
    assert_eq!(
        bytes, size,
        "{from:?} was renamed into place before it was complete"
    );
    at
}

/// The first sync of `dir` after index `after`.
pub(super) fn synced_after(events: &[Event], dir: &Path, after: usize) -> Option<usize> {
    syncs_of(events, dir).find(|&i| i > after)
}

/// The checker itself, on made-up traces: it accepts a durable install (across a call split by
/// another process's) and refuses each way one can fall short.
#[test]
fn the_trace_checker_refuses_every_rename_that_is_not_durable() {
    let good = "\
10 write(3</d/.new.1>, \"\"..., 5) = 5
10 fsync(3</d/.new.1> <unfinished ...>
11 write(1<pipe:[1]>, \"\"..., 3) = 3
10 <... fsync resumed>)              = 0
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
