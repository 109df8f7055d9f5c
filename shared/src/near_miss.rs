//! A front record that almost points at the peering proxy: its CNAME target is one edit away
//! from the proxy's name (a typo), or another name under the proxy's own zone (an old proxy, a
//! sibling host). Either way the zone meant to opt in and gets no route, and nothing else would
//! tell anyone: the rule simply does not match. Pure, so the matcher and `explain` share it.

use std::fmt;

use crate::names::HostName;

/// How a target misses the proxy's name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Miss {
    /// One insertion, deletion, substitution or swap of two adjacent characters away.
    OneEdit,
    /// Another name under the zone the proxy's name is in (`old-proxy.tools.example.com`
    /// beside `peering-proxy.tools.example.com`).
    SameZone { zone: String },
}

/// A target that misses one of the proxy's names, and which.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NearMiss {
    pub target: HostName,
    pub proxy: HostName,
    pub miss: Miss,
}

impl fmt::Display for NearMiss {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let NearMiss {
            target,
            proxy,
            miss,
        } = self;
        match miss {
            Miss::OneEdit => write!(
                f,
                "is a CNAME to {target}, one edit away from the peering proxy's name {proxy} \
                 (a typo?): no route until it points at {proxy}"
            ),
            Miss::SameZone { zone } => write!(
                f,
                "is a CNAME to {target}, another name under the proxy's zone {zone}, not the \
                 peering proxy {proxy}: no route until it points at {proxy}"
            ),
        }
    }
}

/// Whether `target` (not itself a proxy name) nearly names one of `proxies`: a one-edit miss
/// of any proxy first, then a name under any proxy's zone.
pub fn near_proxy(target: &HostName, proxies: &[HostName]) -> Option<NearMiss> {
    if proxies.contains(target) {
        return None;
    }
    let found = |proxy: &HostName, miss: Miss| NearMiss {
        target: target.clone(),
        proxy: proxy.clone(),
        miss,
    };
    if let Some(proxy) = proxies
        .iter()
        .find(|proxy| one_edit_apart(target.as_str(), proxy.as_str()))
    {
        return Some(found(proxy, Miss::OneEdit));
    }
    proxies.iter().find_map(|proxy| {
        let zone = proxy_zone(proxy)?;
        let under = target.is_within(&zone) && *target != zone;
        under.then(|| {
            found(
                proxy,
                Miss::SameZone {
                    zone: zone.as_str().to_owned(),
                },
            )
        })
    })
}

/// The zone a proxy's name is in: the name without its first label, when that leaves at least
/// two labels (`tools.example.com`; never a bare `com`, under which everything would be).
fn proxy_zone(proxy: &HostName) -> Option<HostName> {
    let zone = proxy.ancestors().nth(1)?;
    zone.contains('.')
        .then(|| HostName::parse(zone).ok())
        .flatten()
}

/// Damerau–Levenshtein distance exactly 1 (restricted: adjacent swaps), in one pass.
pub fn one_edit_apart(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let (short, long) = if a.len() <= b.len() { (a, b) } else { (b, a) };
    let Some(i) = short.iter().zip(long).position(|(x, y)| x != y) else {
        // One is a prefix of the other: one edit exactly when one character longer.
        return long.len() == short.len() + 1;
    };
    match long.len() - short.len() {
        // A substitution at i, or a swap of i and i+1.
        0 => {
            short[i + 1..] == long[i + 1..]
                || (i + 1 < short.len()
                    && short[i] == long[i + 1]
                    && short[i + 1] == long[i]
                    && short[i + 2..] == long[i + 2..])
        }
        // The longer one has one character more at i.
        1 => short[i..] == long[i + 1..],
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_edit_apart_is_distance_one_exactly() {
        for (a, b, expected) in [
            ("peering-proxy", "peering-proxy", false),
            ("peering-proxy", "peering-prxoy", true), // swap
            ("peering-proxy", "peering-proxi", true), // substitution
            ("peering-proxy", "peering-prox", true),  // deletion at the end
            ("peering-proxy", "peeringproxy", true),  // deletion inside
            ("peering-proxy", "peering-proxyy", true), // insertion
            ("peering-proxy", "xpeering-proxy", true), // insertion at the start
            ("peering-proxy", "peering-prxy", true),
            ("peering-proxy", "peering-pr0xi", false), // two substitutions
            ("peering-proxy", "peering-rpxoy", false), // two swaps
            ("peering-proxy", "peering-pro", false),   // two deletions
            ("ab", "ba", true),
            ("abc", "ca", false),
            ("", "a", true),
            ("", "", false),
        ] {
            assert_eq!(one_edit_apart(a, b), expected, "{a:?} {b:?}");
            assert_eq!(one_edit_apart(b, a), expected, "{b:?} {a:?}");
        }
    }

    /// `check(target, Some(("one-edit" | "same-zone", proxy)))` or `None`.
    fn check(target: &str, expected: Option<(&str, &str)>) {
        let proxies = [
            HostName::parse("peering-proxy.tools.example.com").unwrap(),
            HostName::parse("proxy-b.net.example.org").unwrap(),
        ];
        let got = near_proxy(&HostName::parse(target).unwrap(), &proxies).map(|near| {
            let kind = match near.miss {
                Miss::OneEdit => "one-edit",
                Miss::SameZone { .. } => "same-zone",
            };
            (kind, near.proxy.as_str().to_owned())
        });
        let expected = expected.map(|(kind, proxy)| (kind, proxy.to_owned()));
        assert_eq!(got, expected, "{target}");
    }

    #[test]
    fn near_misses_of_any_proxy_name() {
        let p = "peering-proxy.tools.example.com";
        check(p, None);
        check("peering-prxoy.tools.example.com", Some(("one-edit", p)));
        check("peering-proxy.tools.example.co", Some(("one-edit", p)));
        check("peering-proxytools.example.com", Some(("one-edit", p)));
        check("old-proxy.tools.example.com", Some(("same-zone", p)));
        check("a.b.tools.example.com", Some(("same-zone", p)));
        check(
            "proxy-c.net.example.org",
            Some(("one-edit", "proxy-b.net.example.org")),
        );
        check(
            "other.net.example.org",
            Some(("same-zone", "proxy-b.net.example.org")),
        );
        // Far from both: someone else's name.
        check("someone-else.example.com", None);
        check("tools.example.com", None);
        check("peering-proxy.tools.example.com.evil.com", None);
        check("xtools.example.com", None);
    }

    #[test]
    fn a_proxy_directly_under_a_top_level_domain_has_no_zone_to_share() {
        let proxies = [HostName::parse("proxy.internal").unwrap()];
        let near = |t: &str| near_proxy(&HostName::parse(t).unwrap(), &proxies);
        assert_eq!(near("anything.internal"), None);
        assert!(near("proxi.internal").is_some());
    }

    #[test]
    fn the_text_names_the_target_and_the_proxy() {
        let near = near_proxy(
            &HostName::parse("old-proxy.tools.example.com").unwrap(),
            &[HostName::parse("peering-proxy.tools.example.com").unwrap()],
        )
        .unwrap()
        .to_string();
        assert!(near.contains("old-proxy.tools.example.com"), "{near}");
        assert!(
            near.contains("under the proxy's zone tools.example.com"),
            "{near}"
        );
    }
}
