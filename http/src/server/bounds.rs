//! What the server parses of a request head: the codec's outer bounds
//! (the largest limits a host may set) and the head's lines as the gate
//! reads them.

use crate::codec::HeadBounds;
use gapura_gate::client::HeaderLines;
use gapura_gate::limits::{OUTER_MAX_HEADERS, OUTER_MAX_HEAD_BYTES, URL_BYTES_BOUNDS};

/// Most header lines of a request head the server parses: the largest
/// header-count limit a host may set. More is 431 whatever the host says.
pub const REQUEST_LINES: usize = OUTER_MAX_HEADERS;

/// The codec's outer bounds for the server: what the largest limits a host
/// may set allow (the request line: the largest target bound, the method and
/// version beside it).
pub const HEAD_BOUNDS: HeadBounds = HeadBounds {
    max_head_bytes: OUTER_MAX_HEAD_BYTES,
    max_request_line_bytes: URL_BYTES_BOUNDS.1 as usize + 64,
};

/// Request header lines as the gate reads them: every line of a name.
pub struct Lines<'a, 'b>(pub &'a [httparse::Header<'b>]);

impl HeaderLines for Lines<'_, '_> {
    fn lines<'x>(&'x self, name: &'x str) -> impl Iterator<Item = &'x [u8]> + Clone + 'x {
        debug_assert!(name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-'));
        self.0
            .iter()
            .filter(move |h| name_is(h.name.as_bytes(), name.as_bytes()))
            .map(|h| h.value)
    }
}

/// Whether a parsed header name is `lower`, ASCII case ignored, eight bytes
/// at a time. `lower` holds only lower-case letters, digits and `-`; the
/// name is a token (the parser refuses anything else), and the only token
/// bytes that set bit 5 into one of those are the upper-case letters, so
/// `byte | 0x20` is exact.
#[inline]
fn name_is(name: &[u8], lower: &[u8]) -> bool {
    const FOLD: u64 = 0x2020_2020_2020_2020;
    let n = name.len();
    if n != lower.len() {
        return false;
    }
    if n < 8 {
        return name.iter().zip(lower).all(|(a, b)| (a | 0x20) == *b);
    }
    let word = |b: &[u8], at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap_or([0; 8]));
    let mut at = 0;
    while at + 8 < n {
        if (word(name, at) | FOLD) != word(lower, at) {
            return false;
        }
        at += 8;
    }
    // The last eight bytes, overlapping the words read.
    (word(name, n - 8) | FOLD) == word(lower, n - 8)
}

#[cfg(test)]
mod tests {
    use super::name_is;
    use proptest::prelude::*;

    const NAMES: [&str; 8] = [
        "user-agent",
        "x-forwarded-for",
        "forwarded",
        "authorization",
        "cf-connecting-ip",
        "cf-ipcountry",
        "cf-ray",
        "te",
    ];

    #[test]
    fn header_names_match_in_any_case_only_whole() {
        assert!(name_is(b"User-Agent", b"user-agent"));
        assert!(name_is(b"X-FORWARDED-FOR", b"x-forwarded-for"));
        assert!(name_is(b"cf-ray", b"cf-ray"));
        assert!(!name_is(b"User-Agents", b"user-agent"));
        assert!(!name_is(b"User_Agent", b"user-agent"));
        assert!(!name_is(b"X-Forwarded-Fox", b"x-forwarded-for"));
        assert!(!name_is(b"Y-Forwarded-For", b"x-forwarded-for"));
        assert!(!name_is(b"", b"te"));
    }

    proptest! {
        #![proptest_config(ProptestConfig {
            rng_seed: proptest::test_runner::RngSeed::Fixed(0x9A7B_0003),
            ..ProptestConfig::default()
        })]
        /// Over every token name the parser can hand on, the folded
        /// comparison is `eq_ignore_ascii_case`.
        #[test]
        fn agrees_with_ignoring_case(
            name in "[-!#$%&'*+.^_`|~0-9A-Za-z]{0,20}",
            pick in 0usize..8,
            case in any::<u32>(),
        ) {
            let lower = NAMES[pick];
            prop_assert_eq!(
                name_is(name.as_bytes(), lower.as_bytes()),
                name.eq_ignore_ascii_case(lower)
            );
            // The name itself in a random mix of cases.
            let mixed: String = lower
                .chars()
                .enumerate()
                .map(|(i, c)| if case >> (i % 32) & 1 == 1 { c.to_ascii_uppercase() } else { c })
                .collect();
            prop_assert!(name_is(mixed.as_bytes(), lower.as_bytes()));
        }
    }
}
