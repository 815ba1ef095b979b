//! The `Date` header value, formatted at most once per second rather than per response.

use std::io::Write;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Length of an IMF-fixdate, e.g. `Sun, 06 Nov 1994 08:49:37 GMT`.
pub const IMF_FIXDATE_BYTES: usize = 29;

/// Last second `httpdate` can format (9999-12-31T23:59:59Z); later clocks are clamped to it.
const MAX_FORMATTABLE_SECS: u64 = 253_402_300_799;

/// The current IMF-fixdate, per core. Call [`DateCache::refresh`] whenever the event loop wakes;
/// it reformats only when the wall-clock second changed.
#[derive(Clone, Debug)]
pub struct DateCache {
    bytes: [u8; IMF_FIXDATE_BYTES],
    secs: u64,
}

impl DateCache {
    /// A cache holding the date for `now`.
    pub fn new(now: SystemTime) -> DateCache {
        let mut cache = DateCache {
            bytes: [0; IMF_FIXDATE_BYTES],
            secs: 0,
        };
        cache.format(clamp_secs(now));
        cache
    }

    /// Updates the date if `now` is in a different second from the cached one. No allocation.
    pub fn refresh(&mut self, now: SystemTime) {
        let secs = clamp_secs(now);
        if secs != self.secs {
            self.format(secs);
        }
    }

    /// The cached IMF-fixdate bytes.
    pub fn get(&self) -> &[u8; IMF_FIXDATE_BYTES] {
        &self.bytes
    }

    fn format(&mut self, secs: u64) {
        let date = httpdate::HttpDate::from(UNIX_EPOCH + Duration::from_secs(secs));
        let mut cursor: &mut [u8] = &mut self.bytes;
        // An IMF-fixdate for years 1970..=9999 is always exactly 29 bytes, so this cannot fail.
        write!(cursor, "{date}").expect("IMF-fixdate is 29 bytes");
        debug_assert!(cursor.is_empty());
        self.secs = secs;
    }
}

/// Seconds since the epoch, clamped to what an IMF-fixdate can express: a clock before 1970 or
/// after 9999 is an operator problem and must not panic the server.
fn clamp_secs(now: SystemTime) -> u64 {
    now.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
        .min(MAX_FORMATTABLE_SECS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_imf_fixdate() {
        let t = UNIX_EPOCH + Duration::from_secs(784_111_777);
        assert_eq!(DateCache::new(t).get(), b"Sun, 06 Nov 1994 08:49:37 GMT");
    }

    #[test]
    fn refresh_changes_only_on_new_second() {
        let t = UNIX_EPOCH + Duration::from_secs(784_111_777);
        let mut c = DateCache::new(t);
        c.refresh(t + Duration::from_millis(999));
        assert_eq!(c.get(), b"Sun, 06 Nov 1994 08:49:37 GMT");
        c.refresh(t + Duration::from_millis(1000));
        assert_eq!(c.get(), b"Sun, 06 Nov 1994 08:49:38 GMT");
    }

    #[test]
    fn out_of_range_clocks_are_clamped_not_panicking() {
        let before = UNIX_EPOCH - Duration::from_secs(10);
        assert_eq!(
            DateCache::new(before).get(),
            b"Thu, 01 Jan 1970 00:00:00 GMT"
        );
        let after = UNIX_EPOCH + Duration::from_secs(MAX_FORMATTABLE_SECS + 1000);
        assert_eq!(
            DateCache::new(after).get(),
            b"Fri, 31 Dec 9999 23:59:59 GMT"
        );
    }
}
