//! How much a person is told, in one place (docs/ARCHITECTURE.md, "Warnings"): whatever the
//! zones hold, a zone's warnings and a run's stay small.
//!
//! A zone's warnings of one kind are one entry: a count and the first [`EXAMPLES`], each at
//! most [`EXAMPLE_BYTES`] ([`zone_lines`]); the matcher counts refused record names as it
//! reads them, so a zone of ten thousand keeps three. A run's summary carries at most
//! [`RUN_BYTES`] of warnings, measured as they serialise: the first ones, then one line saying
//! how many more and where they are ([`bound_run`]). Without these bounds, 30,000 records
//! with escaped names made a 34 MB reply (Lambda answers at most 6 MB) and tripled the
//! generator's memory.
//!
//! What the matcher ([`crate::rules`]) warns of is a [`Warning`]; how each reads, its text.

use crate::model::ZoneKey;
use crate::names::{HostName, NameError};
use crate::near_miss::NearMiss;
use crate::networks::Border;

mod text;

/// Examples kept of one kind of warning in one zone.
pub const EXAMPLES: usize = 3;
/// One example at most, in bytes (a name shown escaped is up to four times its length).
pub const EXAMPLE_BYTES: usize = 512;
/// One entry of a zone's warnings at most, in bytes: a count and its examples.
pub const LINE_BYTES: usize = 2048;
/// Entries kept per zone at most: one per kind (a manifest written before these bounds may
/// hold one per record).
pub const ZONE_LINES: usize = 16;
/// A run's warnings at most, in bytes of the summary's JSON.
pub const RUN_BYTES: usize = 256 * 1024;

/// Something the matcher skipped or decided, worth a person's attention.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Warning {
    /// A zone whose name is not a plain host name: none of its records can be routed.
    ZoneName { zone: ZoneKey, error: NameError },
    /// Records whose names are not plain host names: skipped. One warning for the zone,
    /// counted while indexing: it keeps the first few errors, never one per record, so a zone
    /// of such records costs no more memory than an empty one.
    RecordName {
        zone: ZoneKey,
        zone_name: HostName,
        skipped: usize,
        first: Vec<NameError>,
    },
    /// The front record points at the proxy but the back record is missing or of the wrong
    /// type, so clients are sent to the proxy for a name it cannot route.
    MissingBack {
        zone: ZoneKey,
        front: HostName,
        back: HostName,
        expected: String,
    },
    /// The back record's value, which the rule's mode reads as the SNI (`back-target`: the
    /// CNAME's target), is not a plain host name: no SNI to route.
    BackTarget {
        zone: ZoneKey,
        back: HostName,
        error: NameError,
    },
    /// The front record is a CNAME to a name that is almost the proxy's (see
    /// [`crate::near_miss`]): the zone meant to opt in and gets no route.
    NearProxy {
        zone: ZoneKey,
        front: HostName,
        near: NearMiss,
    },
    /// The back record is a proxy name, or its value (a CNAME's or an alias's target) is: the
    /// route would send every connection back into the proxy.
    BackIsProxy {
        zone: ZoneKey,
        back: HostName,
        proxy: String,
    },
    /// An A back record holds an address no route of its zone's account may reach: never a
    /// backend (loopback, unspecified, link-local, multicast, broadcast; see
    /// [`crate::networks::never_backend`]), inside another member's network, or public (see
    /// [`crate::networks`]).
    BackAddress {
        zone: ZoneKey,
        back: HostName,
        address: String,
        why: Border,
    },
    /// The back name is a routing-policy set (weighted, failover, …): several record sets,
    /// each with a set identifier. `routed` says whether a route was made all the same.
    PolicySet {
        zone: ZoneKey,
        back: HostName,
        set_ids: Vec<String>,
        routed: bool,
    },
    /// Two rules of one zone yield one SNI: neither routes it.
    SameSni {
        zone: ZoneKey,
        sni: String,
        rules: Vec<String>,
    },
    /// Two zones claim the same SNI (the same zone name in two accounts): one wins.
    SniConflict {
        sni: String,
        kept: ZoneKey,
        dropped: ZoneKey,
    },
}

impl Warning {
    /// What the warning is about, as one word: a zone's warnings of one kind are reported as
    /// one entry (see [`zone_lines`]).
    pub fn kind(&self) -> &'static str {
        match self {
            Warning::ZoneName { .. } => "zone name",
            Warning::RecordName { .. } => "record name",
            Warning::MissingBack { .. } => "missing back",
            Warning::BackTarget { .. } => "back target",
            Warning::NearProxy { .. } => "near proxy",
            Warning::BackIsProxy { .. } => "back is proxy",
            Warning::BackAddress {
                why: Border::Never(_),
                ..
            } => "back address",
            Warning::BackAddress { .. } => "back network",
            Warning::PolicySet { .. } => "policy set",
            Warning::SameSni { .. } => "same sni",
            Warning::SniConflict { .. } => "sni conflict",
        }
    }
}

/// A zone's warnings as stored and reported: one entry per kind, in the order each kind first
/// appeared; a kind seen once is its own text, a kind seen more often its count and the first
/// [`EXAMPLES`].
pub fn zone_lines(warnings: &[Warning]) -> Vec<String> {
    let mut kinds: Vec<(&str, Vec<&Warning>)> = Vec::new();
    for warning in warnings {
        match kinds.iter_mut().find(|(kind, _)| *kind == warning.kind()) {
            Some((_, seen)) => seen.push(warning),
            None => kinds.push((warning.kind(), vec![warning])),
        }
    }
    kinds
        .into_iter()
        .map(|(kind, seen)| match seen.as_slice() {
            [one] => crate::excerpt(&one.to_string(), LINE_BYTES),
            _ => {
                let examples: Vec<String> = seen
                    .iter()
                    .take(EXAMPLES)
                    .map(|w| crate::excerpt(&w.to_string(), EXAMPLE_BYTES))
                    .collect();
                let line = format!(
                    "{} warnings of one kind ({kind}), the first {}: {}",
                    seen.len(),
                    examples.len(),
                    examples.join(" | ")
                );
                crate::excerpt(&line, LINE_BYTES)
            }
        })
        .collect()
}

/// A zone's stored entries within the bounds: at most [`ZONE_LINES`] of at most
/// [`LINE_BYTES`], the rest counted in a last one. A manifest written before these bounds
/// held one entry per refused record; reading it this way keeps every later run small.
pub fn compact_zone(lines: Vec<String>) -> Vec<String> {
    if lines.len() <= ZONE_LINES && lines.iter().all(|line| line.len() <= LINE_BYTES) {
        return lines;
    }
    let more = lines.len().saturating_sub(ZONE_LINES);
    let mut kept: Vec<String> = lines
        .into_iter()
        .take(ZONE_LINES)
        .map(|line| crate::excerpt(&line, LINE_BYTES))
        .collect();
    if more > 0 {
        kept.push(format!(
            "{more} more warning(s) of this zone not kept (a manifest written before warnings \
             were bounded); the next read of the zone reports them as they are"
        ));
    }
    kept
}

/// A run's warnings within `budget` bytes of JSON (each string as it serialises, with its
/// comma): the first ones that fit, in order, then, when some did not, one line saying how
/// many more and that every zone's are in the manifest at `manifest` (its
/// `zones.<account>/<zone-id>.warnings`). The line itself is counted within the budget.
pub fn bound_run(warnings: Vec<String>, budget: usize, manifest: &str) -> Vec<String> {
    let cost = |text: &String| serde_json::to_string(text).map_or(text.len(), |j| j.len()) + 1;
    // The list's brackets: one byte more than its items with their commas.
    let total: usize = 1 + warnings.iter().map(cost).sum::<usize>();
    if total <= budget {
        return warnings;
    }
    let last_line = |more: usize| {
        format!(
            "{more} more warning(s) not shown: a run reports at most {budget} bytes of \
             warnings; every zone's are in the manifest {manifest} (zones.<account>/<zone-id>\
             .warnings), and {{\"explain\": \"<name>\"}} gives one name's"
        )
    };
    // The last line's own size, with the largest count it could carry.
    let reserve = cost(&last_line(warnings.len()));
    let mut used = 1;
    let mut kept = Vec::new();
    let count = warnings.len();
    for warning in warnings {
        let size = cost(&warning);
        if used + size + reserve > budget {
            break;
        }
        used += size;
        kept.push(warning);
    }
    let more = count - kept.len();
    kept.push(last_line(more));
    kept
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ZoneKey;
    use crate::names::{HostName, NameError};

    fn zone() -> ZoneKey {
        ZoneKey {
            account: "111111111111".into(),
            id: "Z1".into(),
        }
    }

    fn missing(back: &str) -> Warning {
        Warning::MissingBack {
            zone: zone(),
            front: HostName::parse(&format!("proxy.{back}")).unwrap(),
            back: HostName::parse(back).unwrap(),
            expected: "A".into(),
        }
    }

    fn bad_names(skipped: usize, name_bytes: usize) -> Warning {
        let error = |i: usize| NameError::BadCharacter {
            name: format!("\"{i}{}\"", "\\043".repeat(name_bytes)),
            found: "'#'".into(),
        };
        Warning::RecordName {
            zone: zone(),
            zone_name: HostName::parse("z.internal").unwrap(),
            skipped,
            first: (0..skipped.min(EXAMPLES)).map(error).collect(),
        }
    }

    #[test]
    fn a_zone_reports_each_kind_once_with_its_count_and_first_examples() {
        // (warnings, entries expected, fragments of each entry)
        let one = missing("a.z.internal");
        let cases: Vec<(Vec<Warning>, Vec<&[&str]>)> = vec![
            (vec![], vec![]),
            (vec![one.clone()], vec![&["proxy.a.z.internal points at"]]),
            (
                vec![
                    missing("a.z.internal"),
                    bad_names(10_000, 250),
                    missing("b.z.internal"),
                    missing("c.z.internal"),
                    missing("d.z.internal"),
                ],
                vec![
                    &[
                        "4 warnings of one kind (missing back), the first 3:",
                        "a.z.internal",
                        "c.z.internal",
                    ],
                    &["10000 records in zone z.internal (Z1 in account 111111111111) skipped"],
                ],
            ),
            (
                vec![bad_names(1, 10)],
                vec![&["record in zone z.internal (Z1 in account 111111111111) skipped: "]],
            ),
        ];
        for (warnings, expected) in cases {
            let lines = zone_lines(&warnings);
            assert_eq!(lines.len(), expected.len(), "{lines:#?}");
            for (line, fragments) in lines.iter().zip(expected) {
                assert!(line.len() <= LINE_BYTES, "{} bytes", line.len());
                for fragment in fragments {
                    assert!(line.contains(fragment), "{fragment:?} not in {line}");
                }
            }
            if warnings.len() == 5 {
                assert!(!lines[0].contains("d.z.internal"), "{}", lines[0]);
            }
        }
    }

    #[test]
    fn each_example_is_bounded() {
        // Three names of 1,000 escaped bytes each: every example is cut, the entry stays small.
        let line = &zone_lines(&[bad_names(10_000, 1_000)])[0];
        assert!(line.len() < EXAMPLES * (EXAMPLE_BYTES + 10) + 200, "{line}");
        assert_eq!(line.matches('…').count(), EXAMPLES, "{line}");
    }

    #[test]
    fn a_stored_zone_of_one_entry_per_record_is_compacted_on_reading() {
        let short = |n: usize| (0..n).map(|i| format!("w{i}")).collect::<Vec<_>>();
        for (lines, kept, last) in [
            (short(0), 0, None),
            (short(ZONE_LINES), ZONE_LINES, None),
            (short(10_000), ZONE_LINES + 1, Some("9984 more warning(s)")),
            (vec!["x".repeat(10 * LINE_BYTES)], 1, None),
        ] {
            let compacted = compact_zone(lines);
            assert_eq!(compacted.len(), kept, "{compacted:?}");
            assert!(compacted.iter().all(|l| l.len() <= LINE_BYTES + 3));
            if let Some(last) = last {
                assert!(compacted[kept - 1].starts_with(last), "{compacted:?}");
            }
        }
    }

    #[test]
    fn a_run_keeps_its_first_warnings_within_the_budget_and_says_how_many_more() {
        let lines = |n: usize, bytes: usize| -> Vec<String> {
            (0..n)
                .map(|i| format!("{i:05}{}", "\\".repeat(bytes)))
                .collect()
        };
        let json = |w: &Vec<String>| serde_json::to_string(w).unwrap().len();
        let at = "s3://b/haproxy/haproxy.manifest.json";
        // (warnings, budget, lines kept before the last, more)
        for (warnings, budget, kept, more) in [
            (lines(0, 10), 1_000, 0, None),
            (lines(3, 10), 1_000, 3, None),
            // 30,000 entries of 1 KB (2 KB as JSON: every backslash doubles): the first fit.
            (lines(30_000, 1_000), RUN_BYTES, 130, Some(29_870)),
            // Nothing fits but the last line.
            (lines(2, 10_000), 1_000, 0, Some(2)),
        ] {
            let bounded = bound_run(warnings.clone(), budget, at);
            assert!(json(&bounded) <= budget, "{budget}: {}", json(&bounded));
            assert_eq!(bounded[..kept], warnings[..kept]);
            match more {
                None => assert_eq!(bounded, warnings),
                Some(more) => {
                    assert_eq!(bounded.len(), kept + 1, "{:?}", bounded.last());
                    let last = &bounded[kept];
                    assert!(
                        last.starts_with(&format!("{more} more warning(s)")),
                        "{last}"
                    );
                    assert!(last.contains(at), "{last}");
                }
            }
        }
    }
}
