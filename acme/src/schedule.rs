//! When to act: a certificate's renewal time, the wait after a failure,
//! and a server's `Retry-After`. Pure: time and randomness are passed in.

use crate::validity::{days_from_civil, Validity};

/// The first wait after a failure; each further failure doubles it.
pub const BACKOFF_FIRST_S: u64 = 5;
/// The longest wait after failures.
pub const BACKOFF_MAX_S: u64 = 3600;
/// The longest `Retry-After` honoured (a longer one waits this long).
pub const RETRY_AFTER_MAX_S: u64 = 24 * 3600;
/// A certificate this close to its end is warned of at every check.
pub const EXPIRY_WARNING_S: i64 = 7 * 24 * 3600;

/// When to renew a certificate valid for `v`: once a third of its
/// lifetime remains, moved earlier by up to a thirtieth of the lifetime
/// (`random` picks where), so nodes and certificates issued together do
/// not all renew in the same second.
pub fn renew_at(v: Validity, random: u64) -> i64 {
    let life = (v.not_after - v.not_before).max(1);
    let spread = (life / 30).max(1) as u64;
    v.not_after - life / 3 - (random % spread) as i64
}

/// The wait after `failures` failures in a row (at least 1): doubling from
/// [`BACKOFF_FIRST_S`] to [`BACKOFF_MAX_S`], a random point in its upper
/// half (`random` picks it), in milliseconds.
pub fn backoff_ms(failures: u32, random: u64) -> u64 {
    let shift = failures.saturating_sub(1).min(20);
    let full = (BACKOFF_FIRST_S << shift).min(BACKOFF_MAX_S) * 1000;
    full / 2 + random % (full / 2 + 1)
}

/// The wait a server asked for with `Retry-After` (seconds, or an
/// HTTP-date against `now_s`), at most [`RETRY_AFTER_MAX_S`], in
/// milliseconds; `None` when the value is neither.
pub fn retry_after_ms(value: &str, now_s: i64) -> Option<u64> {
    let v = value.trim();
    let secs = if let Ok(n) = v.parse::<u64>() {
        n
    } else {
        (http_date(v)? - now_s).max(0) as u64
    };
    Some(secs.min(RETRY_AFTER_MAX_S) * 1000)
}

/// An IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`) as Unix seconds.
pub fn http_date(s: &str) -> Option<i64> {
    let mut parts = s.split_ascii_whitespace();
    let _weekday = parts.next()?;
    let day: i64 = parts.next()?.parse().ok()?;
    let month = match parts.next()? {
        "Jan" => 1,
        "Feb" => 2,
        "Mar" => 3,
        "Apr" => 4,
        "May" => 5,
        "Jun" => 6,
        "Jul" => 7,
        "Aug" => 8,
        "Sep" => 9,
        "Oct" => 10,
        "Nov" => 11,
        "Dec" => 12,
        _ => return None,
    };
    let year: i64 = parts.next()?.parse().ok()?;
    let mut hms = parts.next()?.split(':').map(|x| x.parse::<i64>().ok());
    let (h, m, sec) = (hms.next()??, hms.next()??, hms.next()??);
    if parts.next()? != "GMT" || !(1..=31).contains(&day) || h > 23 || m > 59 || sec > 60 {
        return None;
    }
    Some(days_from_civil(year, month, day) * 86_400 + h * 3600 + m * 60 + sec)
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: i64 = 86_400;

    #[test]
    fn renewal_comes_when_a_third_of_the_lifetime_remains_less_a_thirtieth_at_most() {
        let v = Validity {
            not_before: 0,
            not_after: 90 * DAY,
        };
        assert_eq!(renew_at(v, 0), 60 * DAY);
        let spread = 3 * DAY as u64;
        assert_eq!(renew_at(v, spread - 1), 60 * DAY - (spread as i64 - 1));
        assert_eq!(renew_at(v, spread), 60 * DAY);
        // A 64-day certificate renews between day 40.5 and day 42.7.
        let short = Validity {
            not_before: 1000,
            not_after: 1000 + 64 * DAY,
        };
        for r in [0u64, 7, 1 << 40, u64::MAX] {
            let at = renew_at(short, r) - 1000;
            assert!(at <= 64 * DAY - 64 * DAY / 3, "{at}");
            assert!(at > 64 * DAY - 64 * DAY / 3 - 64 * DAY / 30, "{at}");
        }
        // A certificate already past its end is due at once (in the past).
        let odd = Validity {
            not_before: 10,
            not_after: 10,
        };
        assert!(renew_at(odd, 5) <= 10);
    }

    #[test]
    fn backoff_doubles_from_five_seconds_to_an_hour_in_its_upper_half() {
        assert_eq!(backoff_ms(1, 0), 2_500);
        assert_eq!(backoff_ms(1, 2_500), 5_000);
        assert_eq!(backoff_ms(1, 2_501), 2_500);
        assert_eq!(backoff_ms(2, 0), 5_000);
        assert_eq!(backoff_ms(3, 0), 10_000);
        assert_eq!(backoff_ms(0, 0), 2_500);
        assert_eq!(backoff_ms(20, 0), 1_800_000);
        assert_eq!(
            backoff_ms(u32::MAX, u64::MAX),
            1_800_000 + u64::MAX % 1_800_001
        );
        for f in 1..40 {
            for r in [0, 1, 99, u64::MAX] {
                let w = backoff_ms(f, r);
                assert!((2_500..=3_600_000).contains(&w));
            }
        }
    }

    #[test]
    fn retry_after_takes_seconds_or_a_date_and_is_bounded() {
        assert_eq!(retry_after_ms("120", 0), Some(120_000));
        assert_eq!(retry_after_ms(" 0 ", 0), Some(0));
        assert_eq!(retry_after_ms("999999999", 0), Some(86_400_000));
        let at = 784_111_777; // Sun, 06 Nov 1994 08:49:37 GMT
        assert_eq!(http_date("Sun, 06 Nov 1994 08:49:37 GMT"), Some(at));
        assert_eq!(
            retry_after_ms("Sun, 06 Nov 1994 08:49:37 GMT", at - 30),
            Some(30_000)
        );
        assert_eq!(
            retry_after_ms("Sun, 06 Nov 1994 08:49:37 GMT", at + 30),
            Some(0)
        );
        assert_eq!(retry_after_ms("soon", 0), None);
        assert_eq!(retry_after_ms("Sun, 06 Foo 1994 08:49:37 GMT", 0), None);
        assert_eq!(retry_after_ms("Sun, 06 Nov 1994 08:49:37 UTC", 0), None);
        assert_eq!(retry_after_ms("-5", 0), None);
    }
}
