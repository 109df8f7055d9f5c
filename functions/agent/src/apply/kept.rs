//! Map files kept byte for byte, so that an undo puts back what served rather than a table
//! computed again from files a failed generation already changed (docs/ARCHITECTURE.md,
//! "The apply"): last-known-good's maps beside each live one (`<map>.last-good`), copied when
//! the config is kept; and the live maps as they were before this run installed its own.

use std::path::{Path, PathBuf};

use autoproxy::artifact::MapFiles;

use super::files;

/// A map file's bytes: `None` when there was no file.
pub type Saved = Vec<(PathBuf, Option<Vec<u8>>)>;

/// Where last-known-good's copy of the live map at `path` is kept.
fn copy_of(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".last-good");
    PathBuf::from(name)
}

/// The generation's own maps of the config `text` (the address map belongs to all): the
/// route tables, and the generation map where the layout has one.
fn generation_maps(dir: &Path, text: &str, generation: u64) -> Vec<PathBuf> {
    let maps = MapFiles::named_by(text, generation);
    [Some(maps.routes), Some(maps.suffixes), maps.generation]
        .into_iter()
        .flatten()
        .map(|path| dir.join(path))
        .collect()
}

/// Copies the live maps of `text` beside them as last-known-good's, each a durable replace.
pub fn keep(dir: &Path, text: &str, generation: u64) -> std::io::Result<()> {
    if MapFiles::named_by(text, generation).generation.is_none() {
        // A layout whose maps are in a directory of their generation: they stay as they are
        // until it is replaced, and a rollback could not tell kept copies as its own.
        return Ok(());
    }
    for path in generation_maps(dir, text, generation) {
        let bytes = std::fs::read(&path).unwrap_or_default();
        files::replace(&copy_of(&path), &bytes, 0o644)?;
    }
    Ok(())
}

/// Last-known-good's kept maps, when they are its: every copy is there and the kept
/// generation map names `generation` (a layout without one cannot tell, so it never
/// counts as kept).
pub fn last_good(dir: &Path, text: &str, generation: u64) -> Option<Saved> {
    let maps = MapFiles::named_by(text, generation);
    let generation_map = dir.join(maps.generation.as_ref()?);
    let kept = std::fs::read(copy_of(&generation_map)).ok()?;
    if kept != MapFiles::generation_table(generation).as_bytes() {
        return None;
    }
    generation_maps(dir, text, generation)
        .into_iter()
        .map(|path| {
            let bytes = std::fs::read(copy_of(&path)).ok()?;
            Some((path, Some(bytes)))
        })
        .collect()
}

/// Puts `saved` back in place, each file a durable replace (a file that was not there is
/// removed, the removal flushed); how many files.
pub fn put_back(saved: &Saved) -> std::io::Result<usize> {
    for (path, bytes) in saved {
        let parent = path.parent().unwrap_or(Path::new("/"));
        match bytes {
            Some(bytes) => {
                std::fs::create_dir_all(parent)?;
                files::replace(path, bytes, 0o644)?;
            }
            None => match std::fs::remove_file(path) {
                Err(err) if err.kind() != std::io::ErrorKind::NotFound => return Err(err),
                Err(_) => {}
                Ok(()) => files::sync_dir(parent)?,
            },
        }
    }
    Ok(saved.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONFIG: &str = "# generation: 7\nglobal\n#@route a.example h:443 r 1 Z\n";

    fn write(path: &Path, text: &str) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    #[test]
    fn kept_maps_come_back_byte_for_byte_only_for_their_generation() {
        let dir = std::env::temp_dir().join(format!("autoproxy-kept-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let maps = MapFiles::named_by(CONFIG, 7);
        let routes = dir.join(&maps.routes);
        let generation = dir.join(maps.generation.clone().unwrap());
        write(&routes, "a.example old:443\n");
        write(&dir.join(&maps.suffixes), "");
        write(&generation, &MapFiles::generation_table(7));
        keep(&dir, CONFIG, 7).unwrap();
        let kept = last_good(&dir, CONFIG, 7).unwrap();

        write(&routes, "a.example new:443\n");
        write(&generation, &MapFiles::generation_table(8));
        assert_eq!(put_back(&kept).unwrap(), 3);
        assert_eq!(
            std::fs::read_to_string(&routes).unwrap(),
            "a.example old:443\n"
        );
        assert_eq!(
            std::fs::read_to_string(&generation).unwrap(),
            MapFiles::generation_table(7)
        );
        // Kept for generation 7: not for 8.
        assert!(last_good(&dir, CONFIG, 8).is_none());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
