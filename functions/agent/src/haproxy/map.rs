//! HAProxy's map commands, typed: the one place their text is written. A map, a key and a
//! value each go out as one word: HAProxy splits a command at spaces (so a key with a space
//! would be read as a key and a value), runs what follows `;` as a second command, reads `\`
//! as an escape, and takes a key or map written `#<n>` as an entry's or map's number.
//! A word that would be read as anything but itself is refused before a byte is sent.
//!
//! A new version of a map is opened by `prepare map`, filled with `add map @<version>` and
//! switched to by `commit map @<version>`: [`MapVersion`] comes only from HAProxy's answer to
//! the first, so a commit names a version HAProxy gave.

use super::RuntimeError;

/// A version of a map that `prepare map` opened, not committed yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MapVersion(u32);

impl MapVersion {
    /// The version in HAProxy's answer to `prepare map`: `New version created: N`.
    pub(super) fn from_answer(command: &str, answer: &str) -> Result<MapVersion, RuntimeError> {
        answer
            .trim()
            .strip_prefix("New version created: ")
            .and_then(|version| version.trim().parse().ok())
            .map(MapVersion)
            .ok_or_else(|| RuntimeError::Unexpected {
                command: command.to_owned(),
                expected: "'New version created: N'",
                answer: autoproxy::excerpt(answer, 200),
            })
    }
}

/// A change to a running worker's map that answers nothing when it succeeds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MapChange<'a> {
    /// `add map <map> <key> <value>`: a new entry (HAProxy adds a second one for a key it
    /// holds, so this is for a key it lacks).
    Add {
        map: &'a str,
        key: &'a str,
        value: &'a str,
    },
    /// `set map <map> <key> <value>`: a new value for a key the map holds.
    Set {
        map: &'a str,
        key: &'a str,
        value: &'a str,
    },
    /// `del map <map> <key>`: the key's entries gone.
    Delete { map: &'a str, key: &'a str },
    /// `commit map @<version> <map>`: the version [`prepare`] opened and the payloads filled
    /// becomes the map, atomically.
    Commit { map: &'a str, version: MapVersion },
}

impl MapChange<'_> {
    /// The command's one line, every word checked.
    pub fn line(&self) -> Result<String, RuntimeError> {
        match *self {
            MapChange::Add { map, key, value } => Ok(format!(
                "add map {} {} {}",
                map_word("add map", map)?,
                key_word("add map", key)?,
                value_word("add map", value)?
            )),
            MapChange::Set { map, key, value } => Ok(format!(
                "set map {} {} {}",
                map_word("set map", map)?,
                key_word("set map", key)?,
                value_word("set map", value)?
            )),
            MapChange::Delete { map, key } => Ok(format!(
                "del map {} {}",
                map_word("del map", map)?,
                key_word("del map", key)?
            )),
            MapChange::Commit { map, version } => Ok(format!(
                "commit map @{} {}",
                version.0,
                map_word("commit map", map)?
            )),
        }
    }
}

/// `prepare map <map>`: opens a new, empty version of the map.
pub(super) fn prepare(map: &str) -> Result<String, RuntimeError> {
    Ok(format!("prepare map {}", map_word("prepare map", map)?))
}

/// `add map @<version> <map>`: the command a payload of entries follows.
pub(super) fn fill(map: &str, version: MapVersion) -> Result<String, RuntimeError> {
    Ok(format!(
        "add map @{} {}",
        version.0,
        map_word("add map", map)?
    ))
}

/// `show map <map>`: the entries of the map's current version.
pub(super) fn show(map: &str) -> Result<String, RuntimeError> {
    Ok(format!("show map {}", map_word("show map", map)?))
}

/// A map file's name as the config names it: one word, not a map number (`#<n>`) nor a
/// version (`@<n>`).
fn map_word<'a>(command: &'static str, map: &'a str) -> Result<&'a str, RuntimeError> {
    word(command, "map", map).and_then(|map| {
        if map.starts_with(['#', '@']) {
            Err(not_one_word(command, "map", map))
        } else {
            Ok(map)
        }
    })
}

/// A key: one word, not an entry's number (`#<n>`).
fn key_word<'a>(command: &'static str, key: &'a str) -> Result<&'a str, RuntimeError> {
    word(command, "key", key).and_then(|key| {
        if key.starts_with('#') {
            Err(not_one_word(command, "key", key))
        } else {
            Ok(key)
        }
    })
}

fn value_word<'a>(command: &'static str, value: &'a str) -> Result<&'a str, RuntimeError> {
    word(command, "value", value)
}

/// One word of a command: not empty, no white space or control character, no `;` (a second
/// command) and no `\` (HAProxy's escape).
fn word<'a>(
    command: &'static str,
    what: &'static str,
    text: &'a str,
) -> Result<&'a str, RuntimeError> {
    if text.is_empty()
        || text
            .chars()
            .any(|c| c.is_whitespace() || c.is_control() || c == ';' || c == '\\')
    {
        return Err(not_one_word(command, what, text));
    }
    Ok(text)
}

fn not_one_word(command: &'static str, what: &'static str, text: &str) -> RuntimeError {
    RuntimeError::NotOneWord {
        command,
        what,
        word: autoproxy::excerpt(text, 200),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const M: &str = "m";

    /// `rendered` is `expected` (a line), or refused as not one word when `expected` is `None`.
    #[track_caller]
    fn check(rendered: Result<String, RuntimeError>, expected: Option<&str>) {
        match (rendered, expected) {
            (Ok(line), Some(expected)) => assert_eq!(line, expected),
            (Err(RuntimeError::NotOneWord { .. }), None) => {}
            (rendered, expected) => panic!("expected {expected:?}, got {rendered:?}"),
        }
    }

    fn add<'a>(map: &'a str, key: &'a str, value: &'a str) -> Result<String, RuntimeError> {
        MapChange::Add { map, key, value }.line()
    }

    fn set<'a>(map: &'a str, key: &'a str, value: &'a str) -> Result<String, RuntimeError> {
        MapChange::Set { map, key, value }.line()
    }

    fn del<'a>(map: &'a str, key: &'a str) -> Result<String, RuntimeError> {
        MapChange::Delete { map, key }.line()
    }

    fn commit(map: &str, version: u32) -> Result<String, RuntimeError> {
        MapChange::Commit {
            map,
            version: MapVersion(version),
        }
        .line()
    }

    #[test]
    fn map_commands_render_one_line_each() {
        check(add(M, "a", "10.0.0.1"), Some("add map m a 10.0.0.1"));
        check(add(M, "a", "b.x:443"), Some("add map m a b.x:443"));
        check(set(M, "a.test", "::1"), Some("set map m a.test ::1"));
        check(del(M, "a.test"), Some("del map m a.test"));
        check(commit("r.map", 7), Some("commit map @7 r.map"));
        check(prepare("r.map"), Some("prepare map r.map"));
        check(fill("r.map", MapVersion(7)), Some("add map @7 r.map"));
        check(show("a/b.map"), Some("show map a/b.map"));
    }

    #[test]
    fn a_word_that_would_not_be_read_as_itself_is_refused() {
        check(add(M, "a b", "10.0.0.1"), None);
        check(add(M, "a", "10.0.0.1 x"), None);
        check(add(M, "a\nshow info", "10.0.0.1"), None);
        check(add(M, "a", "10.0.0.1\r"), None);
        check(add(M, "a\tb", "1"), None);
        check(add(M, "a;shutdown", "1"), None);
        check(add(M, "a\\ b", "1"), None);
        check(add(M, "", "1"), None);
        check(add(M, "a", ""), None);
        check(add("", "a", "1"), None);
        check(add("my map", "a", "1"), None);
        check(add("#3", "a", "1"), None);
        check(add("@1", "a", "1"), None);
        check(set(M, "#1", "1"), None);
        check(del(M, "#0x55d1c0a0"), None);
        check(del(M, "a b"), None);
        check(commit("a\nb", 1), None);
        check(prepare("r.map;show info"), None);
        check(fill("", MapVersion(1)), None);
        check(show("a b"), None);
    }

    #[test]
    fn the_version_comes_from_prepare_s_answer() {
        let version = MapVersion::from_answer("prepare map m", "New version created: 12\n");
        assert_eq!(version.ok(), Some(MapVersion(12)));
        for answer in ["Unknown map identifier.\n", "New version created: x\n", ""] {
            assert!(
                matches!(
                    MapVersion::from_answer("prepare map m", answer),
                    Err(RuntimeError::Unexpected { .. })
                ),
                "{answer:?}"
            );
        }
    }
}
