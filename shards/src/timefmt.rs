//! RFC 3339 timestamps <-> Unix seconds, the only time format the API speaks.

use std::time::{SystemTime, UNIX_EPOCH};

use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

/// Latest instant RFC 3339 can express: 9999-12-31T23:59:59Z (four-digit years only).
/// Stored times past it are shown as this value rather than failing the response.
pub const MAX_RFC3339_S: u64 = 253_402_300_799;

/// Why a timestamp string was rejected. The `Display` text is meant for the user.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TimeError {
    #[error("not an RFC 3339 timestamp with an offset, like 2030-01-31T12:00:00Z")]
    Syntax,
    #[error("timestamp is before 1970-01-01T00:00:00Z")]
    BeforeEpoch,
}

/// Seconds since the Unix epoch by the wall clock (0 if the clock is before 1970).
pub fn now_s() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Parses an RFC 3339 timestamp with any offset into Unix seconds. A fractional second
/// rounds up, so a link asked to live until `t` lives at least until `t`.
pub fn parse_rfc3339_s(text: &str) -> Result<u64, TimeError> {
    let t = OffsetDateTime::parse(text, &Rfc3339).map_err(|_| TimeError::Syntax)?;
    let secs = t.unix_timestamp();
    if secs < 0 {
        return Err(TimeError::BeforeEpoch);
    }
    let round_up = u64::from(t.nanosecond() > 0);
    Ok(secs as u64 + round_up)
}

/// Formats Unix seconds as RFC 3339 in UTC (`2030-01-31T12:00:00Z`), clamped to
/// [`MAX_RFC3339_S`].
pub fn format_rfc3339_utc(secs: u64) -> String {
    let clamped = secs.min(MAX_RFC3339_S) as i64;
    // Both conversions are infallible for 0..=MAX_RFC3339_S; the fallback keeps this total.
    OffsetDateTime::from_unix_timestamp(clamped)
        .ok()
        .and_then(|t| t.format(&Rfc3339).ok())
        .unwrap_or_else(|| "9999-12-31T23:59:59Z".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_utc() {
        assert_eq!(format_rfc3339_utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(format_rfc3339_utc(1_900_000_000), "2030-03-17T17:46:40Z");
        assert_eq!(format_rfc3339_utc(MAX_RFC3339_S), "9999-12-31T23:59:59Z");
        assert_eq!(format_rfc3339_utc(u64::MAX), "9999-12-31T23:59:59Z");
    }

    #[test]
    fn parses_offsets_and_fractions() {
        assert_eq!(parse_rfc3339_s("2030-03-17T17:46:40Z"), Ok(1_900_000_000));
        assert_eq!(
            parse_rfc3339_s("2030-03-17T19:46:40+02:00"),
            Ok(1_900_000_000)
        );
        assert_eq!(
            parse_rfc3339_s("2030-03-17T12:46:40-05:00"),
            Ok(1_900_000_000)
        );
        assert_eq!(
            parse_rfc3339_s("2030-03-17T17:46:40.25Z"),
            Ok(1_900_000_001)
        );
        assert_eq!(parse_rfc3339_s("1970-01-01T00:00:00Z"), Ok(0));
    }

    #[test]
    fn rejects_bad_input() {
        assert_eq!(parse_rfc3339_s("2030-03-17"), Err(TimeError::Syntax));
        assert_eq!(
            parse_rfc3339_s("2030-03-17T17:46:40"),
            Err(TimeError::Syntax)
        );
        assert_eq!(parse_rfc3339_s("tomorrow"), Err(TimeError::Syntax));
        assert_eq!(parse_rfc3339_s(""), Err(TimeError::Syntax));
        assert_eq!(
            parse_rfc3339_s("1969-12-31T23:59:59Z"),
            Err(TimeError::BeforeEpoch)
        );
    }

    #[test]
    fn round_trips() {
        for s in [0, 1, 86_399, 1_700_000_000, 4_102_444_800, MAX_RFC3339_S] {
            assert_eq!(parse_rfc3339_s(&format_rfc3339_utc(s)), Ok(s));
        }
    }
}
