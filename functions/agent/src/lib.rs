//! autoproxy-agent: the proxy half of autoproxy, one program on every peering-proxy instance
//! (docs/ARCHITECTURE.md, "The proxy agent").
//!
//! * `apply` is what the apply document runs: it installs one generation of the config
//!   (download, verify, check, swap, reload, check, roll back) and writes the fleet record.
//! * `resolve` is the systemd service that keeps the backends' addresses current at a paced
//!   DNS rate, and answers the apply's "resolve these names now".
//!
//! The two never import each other. Below them, the ground floor both stand on: `haproxy`
//! (the runtime client, typed map commands), `control` (both ends of `resolver.sock`), `dns`
//! (the engine, its schedule and knobs, one-shot resolution), `address_map`, `addresses`,
//! `routes`, `record`, `running`, `log`; and the host floor: `files` (one durable replace),
//! `proc` (one `/proc` reader), `child` (bounded child processes) and `unit` (the systemd
//! unit). Both parse the artifact with [`autoproxy::artifact`], the module the generator
//! writes it with.

pub mod address_map;
pub mod addresses;
pub mod apply;
pub mod child;
pub mod control;
pub mod dns;
pub mod files;
pub mod haproxy;
pub mod log;
pub mod proc;
pub mod record;
pub mod resolve;
pub mod routes;
pub mod running;
pub mod unit;

/// The floors (docs/ARCHITECTURE.md, "The proxy agent"): the two programs, `apply` and the
/// address service (`resolve`), stand on the same ground floor and never import each other,
/// and nothing on the ground floor imports either.
#[cfg(test)]
mod floors {
    use std::path::{Path, PathBuf};

    /// Every `.rs` file of a program: its module file and its directory.
    fn program(src: &Path, name: &str) -> Vec<PathBuf> {
        let mut files = vec![src.join(format!("{name}.rs"))];
        let mut dirs = vec![src.join(name)];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
                let path = entry.path();
                if path.is_dir() {
                    dirs.push(path);
                } else if path.extension().is_some_and(|e| e == "rs") {
                    files.push(path);
                }
            }
        }
        files
    }

    /// The lines of `files` that name `crate::<other>` (comments aside), in any form:
    /// `crate::other`, `crate :: other`, `crate::{a, other::x}`, over several lines too.
    fn naming(files: &[PathBuf], other: &str) -> Vec<String> {
        files
            .iter()
            .flat_map(|file| {
                let text = std::fs::read_to_string(file).unwrap_or_default();
                let code: Vec<&str> = text
                    .lines()
                    .map(|line| line.split("//").next().unwrap_or_default())
                    .collect();
                let joined = code.join("\n");
                crate_paths(&joined)
                    .into_iter()
                    .filter(|(_, first)| first == other)
                    .map(|(at, _)| {
                        let number = joined[..at].matches('\n').count();
                        format!("{}:{}: {}", file.display(), number + 1, code[number].trim())
                    })
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    /// Every module named right after `crate::` in `code`, each with where its path starts:
    /// the word that follows, or each first word in a `{…}` group (nested groups included).
    fn crate_paths(code: &str) -> Vec<(usize, String)> {
        let is_word = |c: char| c.is_alphanumeric() || c == '_';
        let mut found = Vec::new();
        for (at, _) in code.match_indices("crate") {
            let before = code[..at].chars().next_back();
            if before.is_some_and(is_word) {
                continue;
            }
            let rest = code[at + "crate".len()..].trim_start();
            let Some(rest) = rest.strip_prefix("::") else {
                continue;
            };
            let rest = rest.trim_start();
            if let Some(group) = rest.strip_prefix('{') {
                let mut depth = 1;
                let mut word = String::new();
                let mut first = true;
                for c in group.chars() {
                    if is_word(c) {
                        if first && depth == 1 {
                            word.push(c);
                        }
                        continue;
                    }
                    if !word.is_empty() {
                        found.push((at, std::mem::take(&mut word)));
                        first = false;
                    }
                    match c {
                        '{' => depth += 1,
                        '}' => depth -= 1,
                        ',' if depth == 1 => first = true,
                        _ => {}
                    }
                    if depth == 0 {
                        break;
                    }
                }
            } else {
                let word: String = rest.chars().take_while(|c| is_word(*c)).collect();
                found.push((at, word));
            }
        }
        found
    }

    /// The ground floor: every module file but the two programs, `lib.rs` and `main.rs`.
    fn ground(src: &Path) -> Vec<PathBuf> {
        let programs = [src.join("apply"), src.join("resolve")];
        let mut files = Vec::new();
        let mut dirs = vec![src.to_path_buf()];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
                let path = entry.path();
                if path.is_dir() && !programs.contains(&path) {
                    dirs.push(path);
                } else if path.extension().is_some_and(|e| e == "rs") {
                    files.push(path);
                }
            }
        }
        let above = ["apply.rs", "resolve.rs", "lib.rs", "main.rs"].map(|name| src.join(name));
        files.retain(|file| !above.contains(file));
        files
    }

    #[test]
    fn neither_program_imports_the_other_and_the_ground_floor_imports_neither() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let apply = program(&src, "apply");
        let resolve = program(&src, "resolve");
        let ground = ground(&src);
        assert!(
            apply.len() > 5 && resolve.len() > 5 && ground.len() > 20,
            "{apply:?} {resolve:?} {ground:?}"
        );
        assert!(
            ground
                .iter()
                .all(|file| !apply.contains(file) && !resolve.contains(file)),
            "{ground:?}"
        );
        assert_eq!(naming(&apply, "resolve"), Vec::<String>::new());
        assert_eq!(naming(&resolve, "apply"), Vec::<String>::new());
        assert_eq!(naming(&ground, "apply"), Vec::<String>::new());
        assert_eq!(naming(&ground, "resolve"), Vec::<String>::new());
        // The check itself: a line that names the other program is found.
        let probe =
            std::env::temp_dir().join(format!("autoproxy-floors-{}.rs", std::process::id()));
        std::fs::write(
            &probe,
            "use crate::resolve::once;\nuse crate::resolver_like;\n// crate::apply\n\
             use crate::{files, resolve};\nuse crate :: resolve;\nuse crate::{\n    \
             dns::{self, once},\n    resolve::single,\n};\nuse crate::{a::{resolve}, b};\n\
             let x = 1; // crate::resolve\n",
        )
        .unwrap_or_default();
        let found = naming(std::slice::from_ref(&probe), "resolve");
        assert_eq!(found.len(), 4, "{found:#?}");
        let _ = std::fs::remove_file(probe);
    }
}
