//! Reading `Authorization: Basic` into a stack buffer.
//!
//! RFC 7617 credentials are `base64(name ":" password)`. The gate reads at
//! most [`MAX_CREDENTIALS_BYTES`] decoded bytes (a 64-byte name, the colon, a
//! 256-byte password) into a fixed array, splits on the first colon and
//! requires UTF-8. Everything else a client can send is an answer, never a
//! panic: no header or another scheme is *missing*; a repeated header, a
//! value over [`MAX_AUTHORIZATION_BYTES`], bad base64, no colon, an empty or
//! over-long name or password, or non-UTF-8 is *unreadable*. Both get the
//! 401 challenge without a verification, which tells nothing about which
//! names exist because the rules depend on the bytes alone. O(value), no
//! allocation.

use crate::client::HeaderLines;
use base64::alphabet;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use base64::Engine;
use std::fmt;

/// Longest user name (a profile's names are 1 to 64 visible ASCII bytes).
pub const MAX_NAME_BYTES: usize = 64;
/// Longest password read.
pub const MAX_PASSWORD_BYTES: usize = 256;
/// Longest decoded credentials: name, colon, password.
pub const MAX_CREDENTIALS_BYTES: usize = MAX_NAME_BYTES + 1 + MAX_PASSWORD_BYTES;
/// Longest base64 text that can decode to [`MAX_CREDENTIALS_BYTES`].
pub const MAX_ENCODED_BYTES: usize = MAX_CREDENTIALS_BYTES.div_ceil(3) * 4;
/// A header value longer than this is not looked at.
pub const MAX_AUTHORIZATION_BYTES: usize = 4096;

/// The header's name, lower case.
pub const AUTHORIZATION: &str = "authorization";

/// Padded or not; trailing bits tolerated (clients differ).
const LENIENT: GeneralPurpose = GeneralPurpose::new(
    &alphabet::STANDARD,
    GeneralPurposeConfig::new()
        .with_decode_padding_mode(DecodePaddingMode::Indifferent)
        .with_decode_allow_trailing_bits(true),
);

/// Why credentials could not be read. Stable names for explain and counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Unreadable {
    /// More than one `Authorization` line.
    Repeated,
    /// Over [`MAX_AUTHORIZATION_BYTES`], or base64 longer than
    /// [`MAX_CREDENTIALS_BYTES`] can need.
    TooLong,
    /// `Basic` with nothing after it.
    Empty,
    /// Not base64.
    Base64,
    /// No colon in the decoded bytes.
    NoColon,
    /// An empty or over-long name.
    Name,
    /// An empty or over-long password.
    Password,
    /// The decoded bytes are not UTF-8.
    NotUtf8,
}

impl Unreadable {
    pub fn as_str(self) -> &'static str {
        match self {
            Unreadable::Repeated => "repeated",
            Unreadable::TooLong => "too_long",
            Unreadable::Empty => "empty",
            Unreadable::Base64 => "base64",
            Unreadable::NoColon => "no_colon",
            Unreadable::Name => "name",
            Unreadable::Password => "password",
            Unreadable::NotUtf8 => "not_utf8",
        }
    }
}

/// Decoded credentials in a fixed buffer. Debug output never shows them.
#[derive(Clone)]
pub struct Credentials {
    buf: [u8; MAX_CREDENTIALS_BYTES + 2],
    len: u16,
    colon: u16,
}

impl Credentials {
    /// The name: 1 to 64 bytes of UTF-8.
    pub fn name(&self) -> &[u8] {
        &self.buf[..usize::from(self.colon)]
    }

    /// The password: 1 to 256 bytes of UTF-8 (it may hold colons).
    pub fn password(&self) -> &[u8] {
        &self.buf[usize::from(self.colon) + 1..usize::from(self.len)]
    }

    /// `name:password` as sent (what the cache key covers).
    pub fn as_sent(&self) -> &[u8] {
        &self.buf[..usize::from(self.len)]
    }
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Credentials { .. }")
    }
}

impl Drop for Credentials {
    fn drop(&mut self) {
        self.buf.fill(0);
        std::sync::atomic::compiler_fence(std::sync::atomic::Ordering::SeqCst);
    }
}

/// What a request's `Authorization` header holds.
#[derive(Debug)]
// On the stack by design: boxing the credentials would allocate.
#[allow(clippy::large_enum_variant)]
pub enum Authorization {
    /// No header, an empty one, or a scheme other than `Basic`.
    Missing,
    /// `Basic` credentials that cannot be read.
    Unreadable(Unreadable),
    Basic(Credentials),
}

/// Reads the request's `Authorization` lines. O(value), no allocation.
pub fn read_authorization<H: HeaderLines + ?Sized>(headers: &H) -> Authorization {
    let mut lines = headers.lines(AUTHORIZATION);
    let Some(first) = lines.next() else {
        return Authorization::Missing;
    };
    if lines.next().is_some() {
        return Authorization::Unreadable(Unreadable::Repeated);
    }
    parse_basic(first)
}

/// Parses one `Authorization` value.
pub fn parse_basic(value: &[u8]) -> Authorization {
    if value.len() > MAX_AUTHORIZATION_BYTES {
        return Authorization::Unreadable(Unreadable::TooLong);
    }
    let value = value.trim_ascii();
    if value.is_empty() {
        return Authorization::Missing;
    }
    let (scheme, rest) = match value.iter().position(|&b| b == b' ' || b == b'\t') {
        Some(i) => (&value[..i], value[i..].trim_ascii_start()),
        None => (value, &value[value.len()..]),
    };
    if !scheme.eq_ignore_ascii_case(b"basic") {
        return Authorization::Missing;
    }
    if rest.is_empty() {
        return Authorization::Unreadable(Unreadable::Empty);
    }
    if rest.len() > MAX_ENCODED_BYTES {
        return Authorization::Unreadable(Unreadable::TooLong);
    }
    let mut c = Credentials {
        buf: [0; MAX_CREDENTIALS_BYTES + 2],
        len: 0,
        colon: 0,
    };
    let Ok(n) = LENIENT.decode_slice(rest, &mut c.buf) else {
        return Authorization::Unreadable(Unreadable::Base64);
    };
    if n > MAX_CREDENTIALS_BYTES {
        return Authorization::Unreadable(Unreadable::TooLong);
    }
    c.len = n as u16;
    let Some(colon) = c.buf[..n].iter().position(|&b| b == b':') else {
        return Authorization::Unreadable(Unreadable::NoColon);
    };
    c.colon = colon as u16;
    if std::str::from_utf8(&c.buf[..n]).is_err() {
        return Authorization::Unreadable(Unreadable::NotUtf8);
    }
    if colon == 0 || colon > MAX_NAME_BYTES {
        return Authorization::Unreadable(Unreadable::Name);
    }
    let password = n - colon - 1;
    if password == 0 || password > MAX_PASSWORD_BYTES {
        return Authorization::Unreadable(Unreadable::Password);
    }
    Authorization::Basic(c)
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::engine::general_purpose::STANDARD;

    fn basic(raw: &[u8]) -> Vec<u8> {
        let mut v = b"Basic ".to_vec();
        v.extend_from_slice(STANDARD.encode(raw).as_bytes());
        v
    }

    fn unreadable(value: &[u8]) -> Option<Unreadable> {
        match parse_basic(value) {
            Authorization::Unreadable(u) => Some(u),
            _ => None,
        }
    }

    #[test]
    fn basic_credentials_split_on_the_first_colon() {
        let Authorization::Basic(c) = parse_basic(&basic(b"alice:pa:ss")) else {
            panic!()
        };
        assert_eq!(c.name(), b"alice");
        assert_eq!(c.password(), b"pa:ss");
        assert_eq!(c.as_sent(), b"alice:pa:ss");
        assert_eq!(format!("{c:?}"), "Credentials { .. }");
    }

    #[test]
    fn the_scheme_is_case_insensitive_and_padding_optional() {
        for v in [
            &b"basic YWxpY2U6cHc="[..],
            b"BASIC YWxpY2U6cHc=",
            b"Basic   YWxpY2U6cHc",
            b"  Basic\tYWxpY2U6cHc=  ",
        ] {
            let Authorization::Basic(c) = parse_basic(v) else {
                panic!("{v:?}")
            };
            assert_eq!(c.as_sent(), b"alice:pw");
        }
    }

    #[test]
    fn no_header_or_another_scheme_is_missing() {
        let none: [(&str, &[u8]); 0] = [];
        assert!(matches!(
            read_authorization(&none[..]),
            Authorization::Missing
        ));
        for v in [
            &b""[..],
            b"   ",
            b"Bearer abc.def",
            b"Basicfoo",
            b"Digest x=1",
        ] {
            assert!(matches!(parse_basic(v), Authorization::Missing), "{v:?}");
        }
    }

    #[test]
    fn malformed_values_are_unreadable() {
        use Unreadable::*;
        assert_eq!(unreadable(b"Basic"), Some(Empty));
        assert_eq!(unreadable(b"Basic  "), Some(Empty));
        assert_eq!(unreadable(b"Basic !!!!"), Some(Base64));
        assert_eq!(unreadable(b"Basic YWxp Y2U6cHc="), Some(Base64));
        assert_eq!(unreadable(&basic(b"alicepw")), Some(NoColon));
        assert_eq!(unreadable(&basic(b":pw")), Some(Name));
        assert_eq!(unreadable(&basic(b"alice:")), Some(Password));
        assert_eq!(
            unreadable(&basic(
                &[b'a'; 65].iter().chain(b":pw").copied().collect::<Vec<_>>()
            )),
            Some(Name)
        );
        let mut long_pw = b"alice:".to_vec();
        long_pw.extend_from_slice(&[b'p'; 257]);
        assert_eq!(unreadable(&basic(&long_pw)), Some(Password));
        assert_eq!(unreadable(&basic(b"al\xffce:pw")), Some(NotUtf8));
        assert_eq!(unreadable(&basic(b"alice:p\xc3")), Some(NotUtf8));
        let mut huge = b"Basic ".to_vec();
        huge.extend(std::iter::repeat_n(b'A', 5000));
        assert_eq!(unreadable(&huge), Some(TooLong));
        let mut just_over = b"Basic ".to_vec();
        just_over.extend(std::iter::repeat_n(b'A', MAX_ENCODED_BYTES + 1));
        assert_eq!(unreadable(&just_over), Some(TooLong));
    }

    #[test]
    fn the_longest_readable_credentials_fit() {
        let mut raw = vec![b'n'; MAX_NAME_BYTES];
        raw.push(b':');
        raw.extend_from_slice(&[b'p'; MAX_PASSWORD_BYTES]);
        let v = basic(&raw);
        assert_eq!(v.len(), 6 + MAX_ENCODED_BYTES);
        let Authorization::Basic(c) = parse_basic(&v) else {
            panic!()
        };
        assert_eq!(c.as_sent().len(), MAX_CREDENTIALS_BYTES);
        // A shorter name leaves room for a longer password, but not past 256.
        let mut raw = b"n:".to_vec();
        raw.extend_from_slice(&[b'p'; 300]);
        assert_eq!(unreadable(&basic(&raw)), Some(Unreadable::Password));
    }

    #[test]
    fn a_repeated_header_is_unreadable() {
        let a = basic(b"alice:pw");
        let headers: [(&str, &[u8]); 2] = [("Authorization", &a), ("authorization", &a)];
        assert!(matches!(
            read_authorization(&headers[..]),
            Authorization::Unreadable(Unreadable::Repeated)
        ));
    }

    #[test]
    fn hostile_bytes_never_panic() {
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        for len in 0..600 {
            let mut v = b"Basic ".to_vec();
            for _ in 0..len {
                crate::testing::xorshift64(&mut state);
                v.push(state as u8);
            }
            let _ = parse_basic(&v);
            let _ = parse_basic(&v[6..]);
        }
    }
}
