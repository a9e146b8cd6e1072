//! The cached `Date` header line, one per shard, refreshed once a second by a
//! shard task instead of formatting a date per response.

use std::cell::Cell;
use std::time::{SystemTime, UNIX_EPOCH};

/// `Date: Sun, 06 Nov 1994 08:49:37 GMT\r\n` is 37 bytes.
pub const DATE_LINE_LEN: usize = 37;

#[derive(Debug)]
pub struct DateCache {
    line: Cell<[u8; DATE_LINE_LEN]>,
}

impl Default for DateCache {
    fn default() -> Self {
        let c = DateCache {
            line: Cell::new([0; DATE_LINE_LEN]),
        };
        c.refresh();
        c
    }
}

impl DateCache {
    /// Re-formats from the wall clock. Called by the shard's ticker.
    pub fn refresh(&self) {
        let secs = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        self.line.set(format_date_line(secs));
    }

    /// The current line. Copies 37 bytes.
    #[inline]
    pub fn line(&self) -> [u8; DATE_LINE_LEN] {
        self.line.get()
    }
}

/// Formats `Date: <IMF-fixdate>\r\n` for Unix time `secs`.
pub fn format_date_line(secs: u64) -> [u8; DATE_LINE_LEN] {
    const DAYS: [&[u8; 3]; 7] = [b"Thu", b"Fri", b"Sat", b"Sun", b"Mon", b"Tue", b"Wed"];
    const MONTHS: [&[u8; 3]; 12] = [
        b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep", b"Oct", b"Nov",
        b"Dec",
    ];
    let days = secs / 86_400;
    let rem = secs % 86_400;
    let (h, m, s) = (rem / 3600, (rem % 3600) / 60, rem % 60);
    let weekday = DAYS[(days % 7) as usize];
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let mut out = *b"Date: Thu, 01 Jan 1970 00:00:00 GMT\r\n";
    out[6..9].copy_from_slice(weekday);
    let two = |v: u64, at: &mut [u8]| {
        at[0] = b'0' + (v / 10) as u8;
        at[1] = b'0' + (v % 10) as u8;
    };
    two(day as u64, &mut out[11..13]);
    out[14..17].copy_from_slice(MONTHS[(month - 1) as usize]);
    let y = year.clamp(0, 9999) as u64;
    two(y / 100, &mut out[18..20]);
    two(y % 100, &mut out[20..22]);
    two(h, &mut out[23..25]);
    two(m, &mut out[26..28]);
    two(s, &mut out[29..31]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_known_instants() {
        assert_eq!(
            &format_date_line(0),
            b"Date: Thu, 01 Jan 1970 00:00:00 GMT\r\n"
        );
        assert_eq!(
            &format_date_line(784_111_777),
            b"Date: Sun, 06 Nov 1994 08:49:37 GMT\r\n"
        );
        assert_eq!(
            &format_date_line(1_709_210_096),
            b"Date: Thu, 29 Feb 2024 12:34:56 GMT\r\n"
        );
    }
}
