//! The floors (docs/ARCHITECTURE.md, "The proxy agent"): the two programs, `apply` and the
//! address service (`resolve`), stand on the same ground floor and never import each other;
//! nothing on the ground floor imports either; the host floor imports only itself. Checked on
//! the agent's source as text, every file under `src/`.

use std::path::{Path, PathBuf};

/// The host floor's modules: they know the host, nothing of HAProxy, DNS or the maps.
const HOST: [&str; 3] = ["files", "proc", "child"];

/// Every `.rs` file under `src` (its module path, its file) but `lib.rs` and `main.rs`.
fn modules(src: &Path) -> Vec<(Vec<String>, PathBuf)> {
    let mut found = Vec::new();
    let mut dirs = vec![src.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let relative = path.strip_prefix(src).unwrap_or(&path).with_extension("");
                let module: Vec<String> = relative
                    .components()
                    .map(|c| c.as_os_str().to_string_lossy().into_owned())
                    .collect();
                if module != ["lib"] && module != ["main"] {
                    found.push((module, path));
                }
            }
        }
    }
    found
}

/// The files whose top-level module is one of `tops`.
fn floor(src: &Path, tops: &[&str]) -> Vec<(Vec<String>, PathBuf)> {
    modules(src)
        .into_iter()
        .filter(|(module, _)| tops.contains(&module[0].as_str()))
        .collect()
}

/// The places in `files` that name one of the crate's top-level modules outside `allowed`
/// (comments aside), in every form a path takes: `crate::other`, `crate :: other`, inside a
/// group (`crate::{a, other}`, nested and over several lines), a glob at the crate's root
/// (`crate::*`, which names every module), and `super::super::…` chains that climb to the
/// root (resolved from the file's own module path).
fn naming(files: &[(Vec<String>, PathBuf)], allowed: &[&str]) -> Vec<String> {
    files
        .iter()
        .flat_map(|(module, file)| {
            let text = std::fs::read_to_string(file).unwrap_or_default();
            let code: String = text
                .lines()
                .map(|line| line.split_once("//").map_or(line, |(code, _)| code))
                .collect::<Vec<_>>()
                .join("\n");
            named_at_root(&code, module.len())
                .into_iter()
                .filter(|(name, _)| !allowed.contains(&name.as_str()))
                .map(|(name, line)| format!("{}:{line} {name}", file.display()))
                .collect::<Vec<_>>()
        })
        .collect()
}

/// The first segment below the crate's root of every path in `code` that starts at `crate`,
/// or at enough `super`s to climb there from a file `depth` modules deep, with its line.
fn named_at_root(code: &str, depth: usize) -> Vec<(String, usize)> {
    let chars: Vec<char> = code.chars().collect();
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    let skip_space = |mut at: usize| {
        while chars.get(at).is_some_and(|c| c.is_whitespace()) {
            at += 1;
        }
        at
    };
    let word_at = |at: usize| {
        let end = (at..chars.len())
            .find(|i| !ident(chars[*i]))
            .unwrap_or(chars.len());
        (chars[at..end].iter().collect::<String>(), end)
    };
    let line_of = |at: usize| chars[..at].iter().filter(|c| **c == '\n').count() + 1;
    let inline = inline_depths(&chars);
    let mut found = Vec::new();
    let mut at = 0;
    while at < chars.len() {
        if at > 0 && ident(chars[at - 1]) || !ident(chars[at]) {
            at += 1;
            continue;
        }
        let (word, mut end) = word_at(at);
        let rooted = match word.as_str() {
            "crate" => true,
            "super" => {
                // `super::super::…`: one step up for each.
                let mut supers = 1;
                loop {
                    let colons = skip_space(end);
                    if chars.get(colons..colons + 2) != Some(&[':', ':']) {
                        break;
                    }
                    let (next, next_end) = word_at(skip_space(colons + 2));
                    if next != "super" {
                        break;
                    }
                    supers += 1;
                    end = next_end;
                }
                supers >= depth + inline[at]
            }
            _ => false,
        };
        let colons = skip_space(end);
        if !rooted || chars.get(colons..colons + 2) != Some(&[':', ':']) {
            at = end;
            continue;
        }
        at = group_heads(&chars, skip_space(colons + 2), &mut found, &line_of);
    }
    found
}

/// For each character, how many inline modules (`mod name { … }`) enclose it: a `super`
/// there climbs out of those first.
fn inline_depths(chars: &[char]) -> Vec<usize> {
    let ident = |c: &char| c.is_alphanumeric() || *c == '_';
    // The word that ends before `at`, skipping white space, and where it starts.
    let word_before = |at: usize| {
        let end = (0..at)
            .rev()
            .find(|i| !chars[*i].is_whitespace())
            .map_or(0, |i| i + 1);
        let start = (0..end)
            .rev()
            .find(|i| !ident(&chars[*i]))
            .map_or(0, |i| i + 1);
        (chars[start..end].iter().collect::<String>(), start)
    };
    let mut depths = vec![0; chars.len()];
    // Each open brace: whether it opens an inline module.
    let mut open: Vec<bool> = Vec::new();
    let mut mods = 0;
    for (at, c) in chars.iter().enumerate() {
        match c {
            '{' => {
                let (name, start) = word_before(at);
                let is_mod = !name.is_empty() && word_before(start).0 == "mod";
                mods += usize::from(is_mod);
                open.push(is_mod);
            }
            '}' => mods -= usize::from(open.pop().unwrap_or(false)),
            _ => {}
        }
        depths[at] = mods;
    }
    depths
}

/// The first segment of the path at `next` (each top-level path's, for a group), pushed
/// with its line; where the scan goes on.
fn group_heads(
    chars: &[char],
    mut next: usize,
    found: &mut Vec<(String, usize)>,
    line_of: &dyn Fn(usize) -> usize,
) -> usize {
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    let skip_space = |mut at: usize| {
        while chars.get(at).is_some_and(|c| c.is_whitespace()) {
            at += 1;
        }
        at
    };
    let mut depth = 0;
    loop {
        if chars.get(next) == Some(&'{') {
            depth += 1;
            next = skip_space(next + 1);
        }
        let end = if chars.get(next) == Some(&'*') {
            next + 1
        } else {
            (next..chars.len())
                .find(|i| !ident(chars[*i]))
                .unwrap_or(chars.len())
        };
        if end > next {
            found.push((chars[next..end].iter().collect(), line_of(next)));
        }
        if depth == 0 {
            return end.max(next + 1);
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
        return i.max(next + 1);
    }
}

#[test]
fn neither_program_imports_the_other_and_the_floors_import_only_down() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let all = modules(&src);
    let tops: Vec<String> = all
        .iter()
        .map(|(module, _)| module[0].clone())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    let tops: Vec<&str> = tops.iter().map(String::as_str).collect();
    let except = |gone: &[&str]| -> Vec<&str> {
        tops.iter().copied().filter(|t| !gone.contains(t)).collect()
    };
    let apply = floor(&src, &["apply"]);
    let resolve = floor(&src, &["resolve"]);
    let host = floor(&src, &HOST);
    let ground = floor(
        &src,
        &except(&["apply", "resolve", "files", "proc", "child"]),
    );
    assert!(
        apply.len() > 5 && resolve.len() > 5 && ground.len() > 20 && host.len() == 3,
        "{apply:?} {resolve:?} {ground:?} {host:?}"
    );
    assert_eq!(naming(&apply, &except(&["resolve"])), Vec::<String>::new());
    assert_eq!(naming(&resolve, &except(&["apply"])), Vec::<String>::new());
    assert_eq!(
        naming(&ground, &except(&["apply", "resolve"])),
        Vec::<String>::new()
    );
    assert_eq!(naming(&host, &HOST), Vec::<String>::new());
}

/// The check itself: every form of a path that names a module outside the floor is found,
/// and only those.
#[test]
fn the_floors_check_finds_every_form_of_a_path() {
    let probe = std::env::temp_dir().join(format!("autoproxy-floors-{}.rs", std::process::id()));
    std::fs::write(
        &probe,
        "use crate::resolve::once;\nuse crate::resolver_like;\n// crate::resolve\n\
         use crate::{files, resolve};\nuse crate :: resolve;\n\
         use crate::{\n    dns::{engine, once},\n    resolve::observe,\n};\n\
         let x = crate::resolve::main; // crate::resolve\n\
         use super::super::resolve::held;\nuse super::dns;\nuse crate::*;\n\
         use super::super::{files, resolve};\n",
    )
    .unwrap_or_default();
    // As a file two modules deep (`src/a/b.rs`): `super::super` is the crate's root.
    let files = [(vec!["a".to_owned(), "b".to_owned()], probe.clone())];
    let allowed = ["resolver_like", "files", "dns"];
    let found = naming(&files, &allowed);
    let places: Vec<&str> = found
        .iter()
        .filter_map(|place| place.rsplit(':').next())
        .collect();
    assert_eq!(
        places,
        [
            "1 resolve",
            "4 resolve",
            "5 resolve",
            "8 resolve",
            "10 resolve",
            "11 resolve",
            "13 *",
            "14 resolve"
        ],
        "{found:?}"
    );
    let _ = std::fs::remove_file(probe);
}
