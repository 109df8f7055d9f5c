//! autoproxy-agent: the proxy half of autoproxy, one program on every peering-proxy instance
//! (docs/ARCHITECTURE.md, "The proxy agent").
//!
//! * `apply` is what the apply document runs: it installs one generation of the config
//!   (download, verify, check, swap, reload, check, roll back) and writes the fleet record.
//! * `resolve` is the systemd service that keeps the backends' addresses current at a paced
//!   DNS rate, and answers the apply's "resolve these names now".
//!
//! Both parse the artifact with [`autoproxy::artifact`], the module the generator writes it with.

pub mod address_map;
pub mod addresses;
pub mod apply;
pub mod child;
pub mod control;
pub mod files;
pub mod haproxy;
pub mod proc;
pub mod record;
pub mod resolve;
pub mod routes;
pub mod running;
pub mod unit;

/// The floors (docs/ARCHITECTURE.md, "The proxy agent"): the two programs, `apply` and the
/// address service (`resolve`), stand on the same ground floor and never import each other.
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

    /// The lines of `files` that name `crate::<other>` (comments aside).
    fn naming(files: &[PathBuf], other: &str) -> Vec<String> {
        let needle = format!("crate::{other}");
        files
            .iter()
            .flat_map(|file| {
                let text = std::fs::read_to_string(file).unwrap_or_default();
                text.lines()
                    .enumerate()
                    .filter(|(_, line)| !line.trim_start().starts_with("//"))
                    .filter(|(_, line)| {
                        line.match_indices(&needle).any(|(at, _)| {
                            !line[at + needle.len()..]
                                .starts_with(|c: char| c.is_alphanumeric() || c == '_')
                        })
                    })
                    .map(|(number, line)| {
                        format!("{}:{}: {}", file.display(), number + 1, line.trim())
                    })
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    #[test]
    fn neither_program_imports_the_other() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let apply = program(&src, "apply");
        let resolve = program(&src, "resolve");
        assert!(
            apply.len() > 5 && resolve.len() > 5,
            "{apply:?} {resolve:?}"
        );
        assert_eq!(naming(&apply, "resolve"), Vec::<String>::new());
        assert_eq!(naming(&resolve, "apply"), Vec::<String>::new());
        // The check itself: a line that names the other program is found.
        let probe =
            std::env::temp_dir().join(format!("autoproxy-floors-{}.rs", std::process::id()));
        std::fs::write(
            &probe,
            "use crate::resolve::once;\nuse crate::resolver_like;\n// crate::apply\n",
        )
        .unwrap_or_default();
        assert_eq!(naming(std::slice::from_ref(&probe), "resolve").len(), 1);
        let _ = std::fs::remove_file(probe);
    }
}
