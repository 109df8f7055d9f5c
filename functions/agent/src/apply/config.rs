//! What the apply reads from a config's text besides what HAProxy's runtime API needs
//! (`crate::haproxy` parses the stats socket): the header's generation and sha256, and the
//! structure that decides between a runtime update and a reload.

use std::path::Path;

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

/// What HAProxy builds from a config, as text: the body without its route-table lines and its
/// borders (`#@network`, `#@public-backs`: the agent's, HAProxy never reads them), and with
/// the generation in `description` blanked. Two configs whose structures are equal differ
/// only in their routes and borders, which HAProxy takes at run time (a member's new network
/// reloads no proxy).
pub fn structure(text: &str) -> String {
    let mut kept = String::with_capacity(text.len());
    for line in autoproxy::artifact::body(text).lines() {
        if line.starts_with(autoproxy::artifact::ROUTE_LINE)
            || line.starts_with(autoproxy::artifact::SUFFIX_LINE)
            || line.starts_with(autoproxy::artifact::NETWORK_LINE)
            || line.starts_with(autoproxy::artifact::PUBLIC_BACKS_LINE)
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

#[cfg(test)]
mod tests {
    use super::*;

    const CONFIG: &str = "# generation: 7\n# sha256: abc\nglobal\n    master-worker\n    description autoproxy generation 7\n    stats socket unix@/run/haproxy/admin.sock mode 660 level admin\n\ndefaults\n    description not-this\n    stats socket /elsewhere\n";

    #[test]
    fn the_header_gives_the_generation() {
        assert_eq!(header_generation(CONFIG), Some(7));
        assert_eq!(header_sha256(CONFIG).as_deref(), Some("abc"));
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
        assert_eq!(
            base,
            structure(&config(
                7,
                "#@route a.example b:443 api 1 Z1\n#@network 1 10.1.0.0/16\n#@public-backs refuse\n",
                100
            )),
            "the borders are data too"
        );
        assert_eq!(base, structure(&config(8, "", 100)));
        assert_ne!(base, structure(&config(7, "", 200)), "a setting changed");
        assert!(base.contains("#@nameserver"), "nameservers are settings");
        assert!(!base.contains("# sha256"), "the header is not structure");
    }
}
