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
//! `routes`, `own` (this proxy's own address ranges and the fleet's other proxies: no route
//! into itself), `record`, `running`,
//! `log`; and the host floor: `files` (one durable replace),
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
pub mod own;
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

    /// The places in `files` that name `crate::<other>` (comments aside), in every form a
    /// path takes: `crate::other`, `crate :: other`, and inside a group, `crate::{a, other}`,
    /// nested and over several lines.
    fn naming(files: &[PathBuf], other: &str) -> Vec<String> {
        files
            .iter()
            .flat_map(|file| {
                let text = std::fs::read_to_string(file).unwrap_or_default();
                let code: String = text
                    .lines()
                    .map(|line| line.split_once("//").map_or(line, |(code, _)| code))
                    .collect::<Vec<_>>()
                    .join("\n");
                named_under_crate(&code)
                    .into_iter()
                    .filter(|(name, _)| name == other)
                    .map(|(_, line)| format!("{}:{line}", file.display()))
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    /// The first segment of every path that starts at `crate` in `code`, with its line number.
    fn named_under_crate(code: &str) -> Vec<(String, usize)> {
        let chars: Vec<char> = code.chars().collect();
        let ident = |c: char| c.is_alphanumeric() || c == '_';
        let skip_space = |mut at: usize| {
            while chars.get(at).is_some_and(|c| c.is_whitespace()) {
                at += 1;
            }
            at
        };
        let line_of = |at: usize| chars[..at].iter().filter(|c| **c == '\n').count() + 1;
        let mut found = Vec::new();
        let mut at = 0;
        while at + 5 <= chars.len() {
            let word = chars[at..at + 5].iter().collect::<String>() == "crate";
            let starts = at == 0 || !ident(chars[at - 1]);
            if !(word && starts && !chars.get(at + 5).is_some_and(|c| ident(*c))) {
                at += 1;
                continue;
            }
            let colons = skip_space(at + 5);
            if chars.get(colons..colons + 2) != Some(&[':', ':']) {
                at += 5;
                continue;
            }
            let mut next = skip_space(colons + 2);
            let mut depth = 0;
            // A group: the first segment of each of its top-level paths.
            loop {
                if chars.get(next) == Some(&'{') {
                    depth += 1;
                    next = skip_space(next + 1);
                }
                let end = (next..chars.len())
                    .find(|i| !ident(chars[*i]))
                    .unwrap_or(chars.len());
                if end > next {
                    found.push((chars[next..end].iter().collect(), line_of(next)));
                }
                if depth == 0 {
                    break;
                }
                // On to the next path of the group, past this one's own nested groups.
                let mut inner = 0;
                let mut i = end;
                while let Some(c) = chars.get(i) {
                    match c {
                        '{' => inner += 1,
                        '}' if inner > 0 => inner -= 1,
                        '}' | ',' if inner == 0 => break,
                        _ => {}
                    }
                    i += 1;
                }
                if chars.get(i) == Some(&',') {
                    next = skip_space(i + 1);
                    if chars.get(next) != Some(&'}') {
                        continue;
                    }
                }
                break;
            }
            at = next.max(at + 5);
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
             use crate::{files, resolve};\nuse crate :: resolve;\n\
             use crate::{\n    dns::{engine, once},\n    resolve::observe,\n};\n\
             let x = crate::resolve::main; // crate::resolve\n",
        )
        .unwrap_or_default();
        let found = naming(std::slice::from_ref(&probe), "resolve");
        let lines: Vec<&str> = found
            .iter()
            .filter_map(|place| place.rsplit(':').next())
            .collect();
        assert_eq!(lines, ["1", "4", "5", "8", "10"], "{found:?}");
        assert_eq!(
            naming(std::slice::from_ref(&probe), "apply"),
            Vec::<String>::new()
        );
        let _ = std::fs::remove_file(probe);
    }
}
