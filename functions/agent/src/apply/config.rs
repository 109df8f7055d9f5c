//! What the apply reads from a config's text besides its header: the `global` section's
//! `description` (the generation it runs as) and `stats socket` (where to ask).

use std::path::{Path, PathBuf};

/// The arguments of the first `keyword` line in the `global` section, joined by one space.
pub fn global_value(text: &str, keyword: &str) -> Option<String> {
    let mut in_global = false;
    for line in text.lines() {
        let mut words = line.split_whitespace();
        let Some(first) = words.next() else { continue };
        if !line.starts_with([' ', '\t']) {
            if !first.starts_with('#') {
                in_global = first == "global";
            }
            continue;
        }
        if in_global && first == keyword {
            return Some(words.collect::<Vec<_>>().join(" "));
        }
    }
    None
}

/// The path of the first `stats socket` in `global` (plain or `unix@`), if it is absolute.
pub fn stats_socket(text: &str) -> Option<String> {
    let value = global_value(text, "stats")?;
    let mut words = value.split_whitespace();
    if words.next() != Some("socket") {
        return None;
    }
    let path = words.next()?;
    let path = path.strip_prefix("unix@").unwrap_or(path);
    path.starts_with('/').then(|| path.to_owned())
}

/// A socket path that is only a path: letters, digits and `. _ / -`, absolute, no `..`.
pub fn safe_socket_path(path: &str) -> bool {
    path.starts_with('/')
        && (2..=201).contains(&path.len())
        && !path.contains("..")
        && path
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._/-".contains(&b))
}

/// The generation in a config file's header; 0 for a missing file or one without a header.
pub fn generation_of(path: &Path) -> u64 {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|text| header_generation(&text))
        .unwrap_or(0)
}

/// The `# generation:` of a text's header, without checking the rest of it.
pub fn header_generation(text: &str) -> Option<u64> {
    let head = &text[..autoproxy::artifact::body_offset(text)];
    head.lines()
        .find_map(|line| line.strip_prefix("# generation: "))
        .and_then(autoproxy::artifact::parse_generation)
}

/// The `# sha256:` of a text's header.
pub fn header_sha256(text: &str) -> Option<String> {
    let head = &text[..autoproxy::artifact::body_offset(text)];
    head.lines()
        .find_map(|line| line.strip_prefix("# sha256: "))
        .map(|s| s.trim().to_owned())
}

/// What HAProxy builds from a config, as text: the body without its route-table lines, and
/// with the generation in `description` blanked. Two configs whose structures are equal
/// differ only in their routes, which HAProxy can take at run time.
pub fn structure(text: &str) -> String {
    let mut kept = String::with_capacity(text.len());
    for line in autoproxy::artifact::body(text).lines() {
        if line.starts_with(autoproxy::artifact::ROUTE_LINE)
            || line.starts_with(autoproxy::artifact::SUFFIX_LINE)
        {
            continue;
        }
        let trimmed = line.trim_start();
        if let Some(generation) = trimmed.strip_prefix("description autoproxy generation ") {
            let indent = &line[..line.len() - trimmed.len()];
            kept.push_str(indent);
            kept.push_str("description autoproxy generation ");
            kept.push_str(&"*".repeat(usize::from(!generation.is_empty())));
        } else {
            kept.push_str(line);
        }
        kept.push('\n');
    }
    kept
}

/// The stats socket a config file declares, if it is there and declares a usable one.
pub fn socket_of(path: &Path) -> Option<PathBuf> {
    let text = std::fs::read_to_string(path).ok()?;
    stats_socket(&text)
        .filter(|p| safe_socket_path(p))
        .map(PathBuf::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONFIG: &str = "# generation: 7\n# sha256: abc\nglobal\n    master-worker\n    description autoproxy generation 7\n    stats socket unix@/run/haproxy/admin.sock mode 660 level admin\n\ndefaults\n    description not-this\n    stats socket /elsewhere\n";

    #[test]
    fn global_keywords_are_read_from_global_only() {
        assert_eq!(
            global_value(CONFIG, "description").as_deref(),
            Some("autoproxy generation 7")
        );
        assert_eq!(
            stats_socket(CONFIG).as_deref(),
            Some("/run/haproxy/admin.sock")
        );
        assert_eq!(
            global_value("defaults\n    description x\n", "description"),
            None
        );
        assert_eq!(
            stats_socket("global\n    stats socket ipv4@127.0.0.1:9\n"),
            None
        );
        assert_eq!(header_generation(CONFIG), Some(7));
        assert_eq!(header_generation("global\n"), None);
    }

    #[test]
    fn structure_ignores_routes_and_the_generation_only() {
        let config = |generation: u64, routes: &str, maxconn: u32| {
            format!(
                "# generation: {generation}\n# sha256: x\nglobal\n    description autoproxy generation {generation}\n    maxconn {maxconn}\n{routes}#@nameserver 10.0.0.2:53\n"
            )
        };
        let base = structure(&config(7, "#@route a.example b:443 api 1 Z1\n", 100));
        assert_eq!(
            base,
            structure(&config(
                9,
                "#@route c.example d:443 api 1 Z1\n#@suffix e.example f:443 i 1 Z1\n",
                100
            ))
        );
        assert_eq!(base, structure(&config(8, "", 100)));
        assert_ne!(base, structure(&config(7, "", 200)), "a setting changed");
        assert!(base.contains("#@nameserver"), "nameservers are settings");
        assert!(!base.contains("# sha256"), "the header is not structure");
    }

    #[test]
    fn a_socket_path_must_be_only_a_path() {
        for (path, ok) in [
            ("/run/haproxy/admin.sock", true),
            ("/tmp/x,ignoreeof", false),
            ("/run/../etc/x", false),
            ("run/haproxy.sock", false),
            ("/a b", false),
        ] {
            assert_eq!(safe_socket_path(path), ok, "{path}");
        }
    }
}
