//! Route53 names: one normaliser and one validator, used for listings, events, CNAME values
//! and settings alike.
//!
//! Route53 returns every character outside `a-z 0-9 - _` as a `\ddd` octal escape (`*` is
//! `\052`), keeps whatever case the caller used, and ends names with a dot. [`normalize`]
//! undoes all of that; [`DomainName::to_host`] then admits only plain host names, because a
//! name is pasted into haproxy.cfg, where `#` starts a comment, a space splits arguments, a
//! newline ends a statement and `"…"` expands `${VARS}`.

use std::fmt;

use serde::{Serialize, Serializer};

/// A decoded, lower-cased DNS name, kept as labels so that a dot that arrived escaped
/// (`a\056b`) stays inside its label instead of silently becoming a label separator.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DomainName {
    labels: Vec<String>,
}

/// A name that passed validation: labels of `[a-z0-9_-]`, optionally a leading `*` label.
/// The only kind of name the rules and the renderer accept.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct HostName(String);

/// Why a name is not a plain host name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    #[error("expected a host name, got an empty name")]
    Empty,
    #[error("expected a host name, got {name} with an empty label")]
    EmptyLabel { name: String },
    #[error(
        "expected a host name of a-z, 0-9, '-', '_' (and a leading '*' label), \
         got {name} containing {found}"
    )]
    BadCharacter { name: String, found: String },
    #[error("expected '*' only as the whole first label, got {name}")]
    MisplacedWildcard { name: String },
    #[error("expected labels of at most 63 characters and names of at most 253, got {name}")]
    TooLong { name: String },
}

/// Decodes every `\ddd` octal escape (and `\x` for any other character), lower-cases ASCII,
/// and strips one trailing dot.
pub fn normalize(raw: &str) -> DomainName {
    let bytes = raw.as_bytes();
    let mut labels = Vec::new();
    let mut label: Vec<u8> = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => match octal_escape(&bytes[i + 1..]) {
                Some(byte) => {
                    label.push(byte);
                    i += 4;
                }
                None => match bytes.get(i + 1) {
                    // `\.` and friends: the character itself, inside the label.
                    Some(&next) if !next.is_ascii_digit() => {
                        label.push(next);
                        i += 2;
                    }
                    // A lone or malformed escape stays visible so validation rejects it.
                    _ => {
                        label.push(b'\\');
                        i += 1;
                    }
                },
            },
            b'.' => {
                labels.push(finish_label(&mut label));
                i += 1;
            }
            byte => {
                label.push(byte);
                i += 1;
            }
        }
    }
    // One trailing dot ends the name: it does not open an empty last label.
    let ends_with_dot = raw.ends_with('.') && !raw.ends_with("\\.");
    if !ends_with_dot || !label.is_empty() {
        labels.push(finish_label(&mut label));
    }
    if labels.len() == 1 && labels[0].is_empty() && raw.is_empty() {
        labels.clear();
    }
    DomainName { labels }
}

fn octal_escape(rest: &[u8]) -> Option<u8> {
    let digits = rest.get(..3)?;
    if !digits.iter().all(|d| (b'0'..=b'7').contains(d)) {
        return None;
    }
    let value = digits
        .iter()
        .fold(0u32, |acc, d| acc * 8 + u32::from(d - b'0'));
    u8::try_from(value).ok()
}

fn finish_label(label: &mut Vec<u8>) -> String {
    let bytes = std::mem::take(label);
    let text = match String::from_utf8(bytes) {
        Ok(text) => text,
        Err(err) => String::from_utf8_lossy(err.as_bytes()).into_owned(),
    };
    text.to_ascii_lowercase()
}

impl DomainName {
    /// The labels, leftmost first.
    pub fn labels(&self) -> &[String] {
        &self.labels
    }

    /// Admits the name only if it is a plain host name; the error names the offending
    /// character.
    pub fn to_host(&self) -> Result<HostName, NameError> {
        if self.labels.is_empty() {
            return Err(NameError::Empty);
        }
        // Shown only in an error: most names pass, and the escaped form of a hostile one is up
        // to four times its length.
        let shown = || self.to_string();
        let mut length = 0;
        for (index, label) in self.labels.iter().enumerate() {
            if label.is_empty() {
                return Err(NameError::EmptyLabel { name: shown() });
            }
            if label.len() > 63 {
                return Err(NameError::TooLong { name: shown() });
            }
            length += label.len() + 1;
            if label == "*" {
                if index == 0 {
                    continue;
                }
                return Err(NameError::MisplacedWildcard { name: shown() });
            }
            if let Some(bad) = label.chars().find(|c| !is_host_char(*c)) {
                if bad == '*' {
                    return Err(NameError::MisplacedWildcard { name: shown() });
                }
                return Err(NameError::BadCharacter {
                    name: shown(),
                    found: describe_char(bad),
                });
            }
        }
        if length - 1 > 253 {
            return Err(NameError::TooLong { name: shown() });
        }
        Ok(HostName(self.labels.join(".")))
    }

    /// True when this name is `suffix` or ends with `.suffix`, label-wise.
    pub fn ends_with(&self, suffix: &DomainName) -> bool {
        self.labels.ends_with(&suffix.labels)
    }
}

fn is_host_char(c: char) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_'
}

fn describe_char(c: char) -> String {
    match c {
        '.' => "an escaped '.' inside a label".to_owned(),
        ' ' => "a space".to_owned(),
        c if c.is_control() => format!("the control character U+{:04X}", u32::from(c)),
        c if !c.is_ascii() => format!("the non-ASCII character {c:?} (U+{:04X})", u32::from(c)),
        c => format!("{c:?}"),
    }
}

/// Shows the name in Route53's own escaped form, so a hostile name is safe to log and
/// unambiguous to read.
impl fmt::Display for DomainName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.labels.is_empty() {
            return f.write_str("\"\"");
        }
        f.write_str("\"")?;
        for (index, label) in self.labels.iter().enumerate() {
            if index > 0 {
                f.write_str(".")?;
            }
            if label == "*" {
                f.write_str("*")?;
                continue;
            }
            for byte in label.bytes() {
                if is_host_char(char::from(byte)) {
                    write!(f, "{}", char::from(byte))?;
                } else {
                    write!(f, "\\{byte:03o}")?;
                }
            }
        }
        f.write_str("\"")
    }
}

impl HostName {
    /// Normalises and validates in one step: the path for settings and CNAME values.
    pub fn parse(raw: &str) -> Result<Self, NameError> {
        normalize(raw).to_host()
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The name as labels: the form [`DomainName::ends_with`] compares.
    pub fn to_domain(&self) -> DomainName {
        DomainName {
            labels: self.0.split('.').map(str::to_owned).collect(),
        }
    }

    /// True when this name is `zone` or lies under it, label-wise: the one test of "inside
    /// a zone" (ownership, `explain`, near misses), never a string suffix (`xa.internal` is
    /// not inside `a.internal`).
    pub fn is_within(&self, zone: &HostName) -> bool {
        self.to_domain().ends_with(&zone.to_domain())
    }

    /// This name, then each name it lies under, one label shorter each time
    /// (`a.b.c`, `b.c`, `c`): the zones that may hold it, deepest first.
    pub fn ancestors(&self) -> impl Iterator<Item = &str> {
        std::iter::successors(Some(self.0.as_str()), |name| {
            name.split_once('.').map(|(_, rest)| rest)
        })
    }

    /// `prefix.self`, for building the names a rule looks for. `prefix` is rule data.
    pub fn with_prefix(&self, prefix: &str) -> HostName {
        if prefix.is_empty() {
            self.clone()
        } else {
            HostName(format!("{prefix}.{}", self.0))
        }
    }
}

impl fmt::Display for HostName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Serialize for HostName {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

impl<'de> serde::Deserialize<'de> for HostName {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = String::deserialize(deserializer)?;
        HostName::parse(&raw).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `check(raw, Ok(host))` or `check(raw, Err(fragment of the message))`.
    fn check(raw: &str, expected: Result<&str, &str>) {
        let got = normalize(raw).to_host();
        match (expected, got) {
            (Ok(want), Ok(host)) => assert_eq!(host.as_str(), want, "input {raw:?}"),
            (Err(fragment), Err(err)) => {
                let message = err.to_string();
                assert!(
                    message.contains(fragment),
                    "input {raw:?}: error {message:?} should mention {fragment:?}"
                );
            }
            (want, got) => panic!("input {raw:?}: expected {want:?}, got {got:?}"),
        }
    }

    #[test]
    fn plain_names_pass_through() {
        check("api.prod.example.com", Ok("api.prod.example.com"));
        check("ingress-int.a_b.example", Ok("ingress-int.a_b.example"));
        check("x", Ok("x"));
    }

    #[test]
    fn case_and_one_trailing_dot_are_normalised() {
        check("API.Prod.Example.COM.", Ok("api.prod.example.com"));
        check("proxy.api.z.", Ok("proxy.api.z"));
        check("z..", Err("empty label"));
        check(".z", Err("empty label"));
    }

    #[test]
    fn every_octal_escape_is_decoded() {
        check("\\052.int.z.", Ok("*.int.z"));
        check("*.int.z", Ok("*.int.z"));
        check("\\141pi.z", Ok("api.z")); // \141 = 'a'
        check("\\055x.z", Ok("-x.z")); // \055 = '-'
        check("\\137x.z", Ok("_x.z")); // \137 = '_'
        check("\\101PI.Z", Ok("api.z")); // \101 = 'A', then lower-cased
    }

    #[test]
    fn hostile_names_are_rejected_naming_the_character() {
        check("a\\056b.z", Err("escaped '.' inside a label"));
        check("a\\.b.z", Err("escaped '.' inside a label"));
        check("a\\040b.z", Err("a space"));
        check("a b.z", Err("a space"));
        check("a\\043b.z", Err("'#'"));
        check("a#b.z", Err("'#'"));
        check("a\\042b.z", Err("'\"'"));
        check("a\\047b.z", Err("'\\''"));
        check("a\\073b.z", Err("';'"));
        check("a\\044{x}.z", Err("'$'"));
        check("a\\012b.z", Err("control character U+000A"));
        check("a\\015b.z", Err("control character U+000D"));
        check("a\\011b.z", Err("control character U+0009"));
        check("a\\000b.z", Err("control character U+0000"));
        check("caf\\303\\251.z", Err("non-ASCII"));
        check("café.z", Err("non-ASCII"));
        check("a\\\\b.z", Err("'\\\\'"));
        check("a\\9b.z", Err("'\\\\'"));
        check("a\\", Err("'\\\\'"));
    }

    #[test]
    fn wildcard_only_as_whole_first_label() {
        check("*.z", Ok("*.z"));
        check("a.*.z", Err("'*' only as the whole first label"));
        check("a*.z", Err("'*' only as the whole first label"));
        check("\\052a.z", Err("'*' only as the whole first label"));
    }

    #[test]
    fn empty_and_oversized_names_are_rejected() {
        check("", Err("empty name"));
        check(".", Err("empty label"));
        check(&format!("{}.z", "a".repeat(64)), Err("at most 63"));
        let long = vec!["abcdefghi"; 26].join(".");
        check(&long, Err("at most 253"));
    }

    #[test]
    fn display_re_escapes_so_hostile_names_log_safely() {
        assert_eq!(normalize("a\\012b.Z.").to_string(), "\"a\\012b.z\"");
        assert_eq!(normalize("a\\056b.z").to_string(), "\"a\\056b.z\"");
        assert_eq!(normalize("\\052.int.z").to_string(), "\"*.int.z\"");
    }

    #[test]
    fn escaped_dot_is_not_a_label_separator() {
        assert_ne!(normalize("a\\056b.z"), normalize("a.b.z"));
        assert_eq!(normalize("a\\056b.z").labels().len(), 2);
        assert!(normalize("proxy.api.Z.").ends_with(&normalize("z")));
        assert!(!normalize("xz").ends_with(&normalize("z")));
    }

    #[test]
    fn inside_a_zone_is_label_wise() {
        let host = |raw: &str| HostName::parse(raw).unwrap();
        for (name, zone, within) in [
            ("api.b.a.internal", "a.internal", true),
            ("a.internal", "a.internal", true),
            ("xa.internal", "a.internal", false),
            ("a.internal", "api.a.internal", false),
            ("*.int.a.internal", "int.a.internal", true),
        ] {
            assert_eq!(
                host(name).is_within(&host(zone)),
                within,
                "{name} in {zone}"
            );
            assert_eq!(
                host(name).ancestors().any(|a| a == zone),
                within,
                "{name} in {zone}"
            );
        }
    }
}
