//! Times as autoproxy writes and reads them: RFC 3339 in UTC to the second
//! (`2026-11-23T03:14:02Z`: the config header, the manifest's account states, the fleet
//! records) and Unix seconds (every comparison). The one home of the conversions between the
//! two; the calendar is the SDK's `DateTime` (aws-smithy-types, itself on the `time` crate),
//! which every function already builds.

use std::fmt;
use std::time::{SystemTime, UNIX_EPOCH};

use aws_sdk_s3::primitives::{DateTime, DateTimeFormat};

/// Unix seconds of an RFC 3339 time; `None` when it is not one, or is before 1970.
pub fn unix_seconds(text: &str) -> Option<u64> {
    DateTime::from_str(text, DateTimeFormat::DateTime)
        .ok()
        .and_then(|time| u64::try_from(time.secs()).ok())
}

/// Unix seconds as RFC 3339 UTC to the second. A time past the year 9999, which the format
/// cannot write, is written as `<n> (Unix seconds)`: readable, and refused by
/// [`unix_seconds`] as it should be.
pub fn rfc3339(unix: u64) -> String {
    let secs = i64::try_from(unix).unwrap_or(i64::MAX);
    DateTime::from_secs(secs)
        .fmt(DateTimeFormat::DateTime)
        .unwrap_or_else(|_| format!("{unix} (Unix seconds)"))
}

/// `time` in whole Unix seconds (the fraction cut); 0 for a time before 1970.
pub fn unix_of(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_secs())
}

/// Now, in whole Unix seconds.
pub fn now_unix() -> u64 {
    unix_of(SystemTime::now())
}

/// A moment to the second, read or taken once and passed on as itself: a run's time stamp,
/// the floor of its generation and the `generated-at` of its header. Displays as RFC 3339.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Stamp {
    unix: u64,
}

impl Stamp {
    pub const fn from_unix(unix: u64) -> Stamp {
        Stamp { unix }
    }

    pub fn now() -> Stamp {
        Stamp::from_unix(now_unix())
    }

    /// An RFC 3339 time; `None` when `text` is not one, or is before 1970.
    pub fn parse(text: &str) -> Option<Stamp> {
        unix_seconds(text).map(Stamp::from_unix)
    }

    pub const fn unix(self) -> u64 {
        self.unix
    }
}

impl fmt::Display for Stamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&rfc3339(self.unix))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn rfc3339_and_unix_seconds_convert_both_ways() {
        assert_eq!(unix_seconds("2026-11-23T03:14:02Z"), Some(1_795_403_642));
        assert_eq!(unix_seconds("1970-01-01T00:00:00Z"), Some(0));
        // A fraction is read and cut.
        assert_eq!(unix_seconds("2026-11-23T03:14:02.9Z"), Some(1_795_403_642));
        for bad in [
            "",
            "yesterday",
            "1795403642",
            "2026-11-23",
            "1969-12-31T23:59:59Z",
        ] {
            assert_eq!(unix_seconds(bad), None, "{bad:?}");
            assert_eq!(Stamp::parse(bad), None, "{bad:?}");
        }
        for (unix, text) in [
            (0, "1970-01-01T00:00:00Z"),
            (951_782_400, "2000-02-29T00:00:00Z"),
            (1_795_490_042, "2026-11-24T03:14:02Z"),
            (4_102_444_799, "2099-12-31T23:59:59Z"),
        ] {
            assert_eq!(rfc3339(unix), text);
            assert_eq!(unix_seconds(text), Some(unix));
            assert_eq!(Stamp::from_unix(unix).to_string(), text);
            assert_eq!(Stamp::parse(text), Some(Stamp::from_unix(unix)));
        }
        let far = rfc3339(u64::MAX);
        assert_eq!(far, format!("{} (Unix seconds)", u64::MAX));
        assert_eq!(unix_seconds(&far), None);
    }

    #[test]
    fn system_times_are_cut_to_whole_seconds() {
        let at = |secs: u64, nanos: u32| unix_of(UNIX_EPOCH + Duration::new(secs, nanos));
        assert_eq!(at(1_795_490_042, 999_999_999), 1_795_490_042);
        assert_eq!(at(0, 1), 0);
        assert_eq!(unix_of(UNIX_EPOCH - Duration::from_secs(1)), 0);
        let clock = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |since| since.as_secs());
        assert!(Stamp::now().unix().abs_diff(clock) <= 1);
        let now = Stamp::now();
        assert_eq!(Stamp::parse(&now.to_string()), Some(now));
    }
}
