//! HTTP tokens (RFC 9110 §5.6.2): the one table of token characters that
//! methods and header names are checked against. O(1) a byte, no
//! allocation.

/// Whether each byte is a `tchar`: ASCII letters, digits and
/// ``!#$%&'*+-.^_`|~``.
pub const TCHAR: [bool; 256] = {
    let mut t = [false; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        t[b] = c.is_ascii_alphanumeric()
            || matches!(
                c,
                b'!' | b'#'
                    | b'$'
                    | b'%'
                    | b'&'
                    | b'\''
                    | b'*'
                    | b'+'
                    | b'-'
                    | b'.'
                    | b'^'
                    | b'_'
                    | b'`'
                    | b'|'
                    | b'~'
            );
        b += 1;
    }
    t
};

/// Whether `b` is a token character.
#[inline]
pub fn is_tchar(b: u8) -> bool {
    TCHAR[usize::from(b)]
}

/// Whether `s` is a token: one or more token characters.
pub fn is_token(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(is_tchar)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_holds_exactly_the_rfc_9110_token_characters() {
        let specials = b"!#$%&'*+-.^_`|~";
        for b in 0..=255u8 {
            let want = b.is_ascii_alphanumeric() || specials.contains(&b);
            assert_eq!(is_tchar(b), want, "byte {b:#04x}");
        }
        assert!(is_token("X-Frame-Options") && is_token("GET"));
        assert!(!is_token("") && !is_token("X Frame") && !is_token("a:b"));
    }
}
