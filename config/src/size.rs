//! Byte sizes: an integer, or a string `"N"` / `"N UNIT"` with a binary unit.
//!
//! Units are exactly `B`, `KiB`, `MiB`, `GiB` and `TiB` (powers of 1024); the
//! space between number and unit is optional. No fractions, no decimal
//! units: a size in a profile means one exact number of bytes.

/// Why a size string was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SizeError {
    /// Not a number with a known unit.
    Invalid,
    /// A valid size larger than `u64` holds.
    Overflow,
}

const UNITS: [(&str, u64); 5] = [
    ("B", 1),
    ("KiB", 1 << 10),
    ("MiB", 1 << 20),
    ("GiB", 1 << 30),
    ("TiB", 1 << 40),
];

/// Parses `"10 MiB"`, `"1KiB"`, `"1500"`, `"0 B"`. O(len), no allocation.
pub(crate) fn parse_size(s: &str) -> Result<u64, SizeError> {
    let s = s.trim();
    let digits_end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (number, unit) = s.split_at(digits_end);
    if number.is_empty() {
        return Err(SizeError::Invalid);
    }
    let unit = unit.trim_start();
    let multiplier = if unit.is_empty() {
        1
    } else {
        UNITS
            .iter()
            .find(|(name, _)| *name == unit)
            .map(|&(_, m)| m)
            .ok_or(SizeError::Invalid)?
    };
    let n: u64 = number.parse().map_err(|_| SizeError::Overflow)?;
    n.checked_mul(multiplier).ok_or(SizeError::Overflow)
}

/// Writes `bytes` in the largest unit that divides it exactly: `1 KiB`, `1500 B`.
pub(crate) fn format_size(bytes: u64) -> String {
    let (name, m) = UNITS
        .iter()
        .rev()
        // Units are powers of two: a multiple has no bits below the unit's.
        .find(|&&(_, m)| bytes != 0 && bytes & (m - 1) == 0)
        .copied()
        .unwrap_or(("B", 1));
    format!("{} {name}", bytes / m)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_with_and_without_units_parse_exactly() {
        assert_eq!(parse_size("10 MiB"), Ok(10_485_760));
        assert_eq!(parse_size("1 KiB"), Ok(1024));
        assert_eq!(parse_size("1KiB"), Ok(1024));
        assert_eq!(parse_size("1500"), Ok(1500));
        assert_eq!(parse_size("1500 B"), Ok(1500));
        assert_eq!(parse_size("0"), Ok(0));
        assert_eq!(parse_size(" 2 GiB "), Ok(2 << 30));
        assert_eq!(parse_size("1 TiB"), Ok(1 << 40));
    }

    #[test]
    fn unknown_units_fractions_and_signs_are_invalid() {
        for s in [
            "", "MiB", "10 MB", "10 kib", "1.5 MiB", "-1", "+1", "1 MiB x", "ten",
        ] {
            assert_eq!(parse_size(s), Err(SizeError::Invalid), "{s:?}");
        }
    }

    #[test]
    fn sizes_past_u64_overflow() {
        assert_eq!(parse_size("99999999999999999999"), Err(SizeError::Overflow));
        assert_eq!(parse_size("16777216 TiB"), Err(SizeError::Overflow));
    }

    #[test]
    fn sizes_format_in_their_largest_exact_unit() {
        assert_eq!(format_size(1024), "1 KiB");
        assert_eq!(format_size(1500), "1500 B");
        assert_eq!(format_size(100 << 20), "100 MiB");
        assert_eq!(format_size(0), "0 B");
    }
}
