//! Which HAProxy the tests and the data-plane benchmark drive: the `haproxy` first on PATH,
//! the one the harness starts and the agent's `haproxy -c` runs. The supported range is run
//! twice (2.6 from Debian 12's package, 3.0 built by `.ci/tools.sh`, put first on PATH by the
//! Makefile); [`EXPECT_VAR`] says which one a run means to drive, so that a PATH that did not
//! take effect fails the run instead of testing 2.6 twice.

use std::process::Command;

/// When set (`3.0`, `2.6.12`), the `haproxy` on PATH must report that version.
pub const EXPECT_VAR: &str = "AUTOPROXY_EXPECT_HAPROXY";

/// An `haproxy -v` that could not be had or did not say what was expected.
#[derive(Debug, thiserror::Error)]
pub enum VersionError {
    #[error("running `haproxy -v` (is HAProxy on PATH? .ci/tools.sh installs it): {0}")]
    NotRun(#[from] std::io::Error),
    #[error("`haproxy -v` printed no \"HAProxy version X.Y.Z\" line; it printed {0:?}")]
    Unreadable(String),
    #[error("{EXPECT_VAR}={expected}, but the haproxy on PATH is {found:?}")]
    Unexpected { expected: String, found: String },
}

/// What `haproxy -v` said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Version {
    /// The first line, as printed (`HAProxy version 3.0.11-9e587df 2025/06/02 - …`).
    pub line: String,
    /// The release number alone (`3.0.11`), without the build or packaging suffix.
    pub number: String,
}

impl Version {
    /// Reads the first line of `haproxy -v`'s output.
    pub fn parse(output: &str) -> Result<Version, VersionError> {
        let line = output.lines().next().unwrap_or_default().trim();
        let number = line
            .strip_prefix("HAProxy version ")
            .and_then(|rest| rest.split(['-', ' ', '+', '~']).next())
            .filter(|n| !n.is_empty() && n.split('.').all(|p| p.parse::<u32>().is_ok()))
            .ok_or_else(|| VersionError::Unreadable(output.to_owned()))?;
        Ok(Version {
            line: line.to_owned(),
            number: number.to_owned(),
        })
    }

    /// `major.minor` (`3.0`).
    pub fn branch(&self) -> String {
        self.number.split('.').take(2).collect::<Vec<_>>().join(".")
    }

    /// Whether this is `expected`: the same release, or a release of the same branch when
    /// `expected` is a branch (`3.0` is `3.0.11`; `3.0` is not `3.01`, `3` is not `3.0.11`).
    pub fn is(&self, expected: &str) -> bool {
        let ours: Vec<&str> = self.number.split('.').collect();
        let theirs: Vec<&str> = expected.trim().split('.').collect();
        theirs.len() >= 2 && ours.len() >= theirs.len() && ours[..theirs.len()] == theirs[..]
    }
}

/// The version of the `haproxy` first on PATH.
pub fn on_path() -> Result<Version, VersionError> {
    let output = Command::new("haproxy").arg("-v").output()?;
    Version::parse(&String::from_utf8_lossy(&output.stdout))
}

/// The version of the `haproxy` on PATH, checked against [`EXPECT_VAR`] when it is set.
pub fn check_expected() -> Result<Version, VersionError> {
    let version = on_path()?;
    match std::env::var(EXPECT_VAR) {
        Ok(expected) if !expected.trim().is_empty() && !version.is(&expected) => {
            Err(VersionError::Unexpected {
                expected,
                found: version.line,
            })
        }
        _ => Ok(version),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const V30: &str = "HAProxy version 3.0.11-9e587df 2025/06/02 - https://haproxy.org/\n\
                       Status: long-term supported branch\n";
    const V26: &str = "HAProxy version 2.6.12-1+deb12u4 2026/10/17 - https://haproxy.org/\n";

    fn check(output: &str, expected: &str, is: bool) {
        let version = Version::parse(output).unwrap();
        assert_eq!(
            version.is(expected),
            is,
            "{} is {expected}?",
            version.number
        );
    }

    #[test]
    fn releases_and_branches_match_only_their_own() {
        check(V30, "3.0", true);
        check(V30, "3.0.11", true);
        check(V30, " 3.0 ", true);
        check(V30, "2.6", false);
        check(V30, "3.0.1", false);
        check(V30, "3.01", false);
        check(V30, "3", false);
        check(V30, "", false);
        check(V26, "2.6", true);
        check(V26, "2.6.12", true);
        check(V26, "3.0", false);
    }

    #[test]
    fn the_number_drops_build_and_packaging_suffixes() {
        let version = Version::parse(V26).unwrap();
        assert_eq!(version.number, "2.6.12");
        assert_eq!(version.branch(), "2.6");
        assert_eq!(Version::parse(V30).unwrap().number, "3.0.11");
        assert_eq!(
            Version::parse(V30).unwrap().line,
            "HAProxy version 3.0.11-9e587df 2025/06/02 - https://haproxy.org/"
        );
    }

    #[test]
    fn anything_else_is_unreadable() {
        for output in [
            "",
            "haproxy: not found",
            "HAProxy version ",
            "HAProxy version x.y",
        ] {
            assert!(
                matches!(Version::parse(output), Err(VersionError::Unreadable(_))),
                "{output:?}"
            );
        }
    }
}
