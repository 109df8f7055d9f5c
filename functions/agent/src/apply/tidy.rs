//! What a run leaves behind, removed: route maps of past generations, and the files a killed
//! run or another writer set aside.

use super::{Run, config};

impl Run {
    /// Route maps of every generation but the running one and last-known-good's go.
    pub(super) fn tidy(&self, generation: u64) {
        let keep = config::generation_of(&self.paths.last_good);
        let Ok(entries) = std::fs::read_dir(&self.paths.maps_dir) else {
            return;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(g) = name
                .to_str()
                .and_then(|n| n.strip_prefix("gen-"))
                .and_then(|g| g.parse::<u64>().ok())
            else {
                continue;
            };
            if g != generation && g != keep && entry.path().is_dir() {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
        self.remove_leftovers();
    }

    /// Staging a killed run left behind (under the lock, no other run is staging): its
    /// `autoproxy/.stage.*` directories, the files it set aside through `files::replace` (the
    /// maps, the fleet record), and `.autoproxy-*` files beside the config (an older agent's
    /// child output files among them: today's have no name); and the address map's files set
    /// aside by the address service, which writes under a lock of its own, once that writer
    /// is gone ([`leftover`]).
    pub(super) fn remove_leftovers(&self) {
        for (dir, prefixes) in [
            (&self.paths.maps_dir, MAPS_LEFTOVERS),
            (
                &self.paths.dir,
                &[
                    ".autoproxy-new.",
                    ".autoproxy-check.",
                    ".autoproxy-last-good.",
                    ".autoproxy-restore.",
                    ".autoproxy-output.",
                ][..],
            ),
        ] {
            let Ok(entries) = std::fs::read_dir(dir) else {
                continue;
            };
            for entry in entries.flatten() {
                let path = entry.path();
                let leftover = entry
                    .file_name()
                    .to_str()
                    .is_some_and(|name| leftover(name, prefixes));
                if !leftover || self.undo.temps.contains(&path) {
                    continue;
                }
                let _ = if path.is_dir() {
                    std::fs::remove_dir_all(&path)
                } else {
                    std::fs::remove_file(&path)
                };
            }
        }
    }
}

/// What a killed run leaves in the maps directory: its staging, the route maps and the fleet
/// record set aside under the apply's lock (`files::temp_path` names: `.<file>.<pid>.<nanos>`),
/// and the address map set aside by the address service, under its own lock.
const MAPS_LEFTOVERS: &[&str] = &[
    ".stage.",
    ".routes.map.",
    ".suffixes.map.",
    ".generation.map.",
    ".addresses.map.",
    ".last-apply.json.",
];

/// The prefixes in [`MAPS_LEFTOVERS`] whose writer may still be writing: their files are
/// leftovers only once the process that named them has ended.
const OTHERS_TEMPS: &[&str] = &[".addresses.map."];

/// Whether the file `name` is a leftover of one of `prefixes`; a file another writer sets
/// aside only when its pid (the name's second to last part) names no live process.
fn leftover(name: &str, prefixes: &[&str]) -> bool {
    let Some(prefix) = prefixes.iter().find(|p| name.starts_with(**p)) else {
        return false;
    };
    if !OTHERS_TEMPS.contains(prefix) {
        return true;
    }
    let mut parts = name[prefix.len()..].split('.');
    match (
        parts.next().and_then(|pid| pid.parse::<u32>().ok()),
        parts.next(),
        parts.next(),
    ) {
        (Some(pid), Some(_nanos), None) => !crate::proc::exists(pid),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::files;

    /// The temp files `files::replace` writes for the address map and the fleet record are
    /// found; one whose writer still runs (the address service under its lock) is kept. The
    /// fleet record is written only under the apply's lock, which this run holds: its temp
    /// is a leftover whoever named it.
    #[test]
    fn leftovers_are_the_temps_actually_written_and_only_a_gone_writers() {
        let dir = Path::new("/autoproxy");
        let name = |path: std::path::PathBuf| {
            path.file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default()
        };
        let mut child = std::process::Command::new("true").spawn().expect("spawns");
        child.wait().expect("ends");
        let gone = child.id();
        let live = name(files::temp_path(dir, ".addresses.map"));
        assert!(!leftover(&live, MAPS_LEFTOVERS), "{live} is being written");
        for written in [".addresses.map", ".last-apply.json"] {
            let ours = name(files::temp_path(dir, written));
            let theirs = ours.replacen(&std::process::id().to_string(), &gone.to_string(), 1);
            assert!(leftover(&theirs, MAPS_LEFTOVERS), "{theirs} is not found");
        }
        for kept in [
            "addresses.map",
            "last-apply.json",
            ".addresses.map.lock",
            "routes.map",
        ] {
            assert!(!leftover(kept, MAPS_LEFTOVERS), "{kept}");
        }
        assert!(leftover(".routes.map.1.2", MAPS_LEFTOVERS));
        let record = name(files::temp_path(dir, ".last-apply.json"));
        assert!(leftover(&record, MAPS_LEFTOVERS), "{record} is a leftover");
    }
}
