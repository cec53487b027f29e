//! Moments as the API writes them: RFC 3339 in UTC to the second, for any moment a commit or a token can carry.
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The last second RFC 3339 can write (its years have four digits): 9999-12-31T23:59:59Z.
/// git accepts later dates (`@253402300800` is year 10000); they are written as this one.
pub const LAST: u64 = 253_402_300_799;

/// `at` in RFC 3339, clamped to what the format can say: before 1970 reads as the epoch, after
/// year 9999 as [`LAST`]. Never fails, whatever a pushed commit's date is.
pub fn rfc3339(at: SystemTime) -> String {
    unix(at.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs()))
}

/// Seconds since the epoch in RFC 3339, clamped as [`rfc3339`] clamps.
pub fn unix(secs: u64) -> String {
    humantime::format_rfc3339_seconds(UNIX_EPOCH + Duration::from_secs(secs.min(LAST))).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_moment_git_or_a_token_can_carry_is_written() {
        assert_eq!(unix(0), "1970-01-01T00:00:00Z");
        assert_eq!(unix(1_700_000_000), "2023-11-14T22:13:20Z");
        assert_eq!(unix(LAST), "9999-12-31T23:59:59Z");
        // Year 10000 and the end of git's and a token's range: clamped, not a panic.
        for past in [LAST + 1, i64::MAX as u64, u64::MAX] {
            assert_eq!(unix(past), "9999-12-31T23:59:59Z", "{past}");
        }
        assert_eq!(
            rfc3339(UNIX_EPOCH + Duration::from_secs(i64::MAX as u64)),
            "9999-12-31T23:59:59Z"
        );
        assert_eq!(
            rfc3339(UNIX_EPOCH - Duration::from_secs(1)),
            "1970-01-01T00:00:00Z"
        );
    }
}
