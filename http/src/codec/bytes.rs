//! The byte rules of a request head's parts that the parser checks
//! beside its scan: which bytes a `Host` value may hold, the tables such
//! rules are made from, and the connection's memory of the last valid
//! `Host` value ([`KnownHost`]).

/// A byte a `Host` value may hold (RFC 3986 reg-name, IP literal, port):
/// letters, digits, `-._~%!$&'()*+,;=:[]`. Anything else is a 400. One
/// table load a byte.
#[inline(always)]
fn is_host_byte(b: u8) -> bool {
    HOST_BYTES[b as usize]
}

/// Whether every byte of `host` is a [`is_host_byte`]: one table load a
/// byte and no branch until the end (a Host value is short, and nearly
/// always valid).
#[inline]
pub(crate) fn all_host_bytes(host: &[u8]) -> bool {
    let mut ok = true;
    for &b in host {
        ok &= is_host_byte(b);
    }
    ok
}

/// The `Host` value a connection's parser last found valid, so that the
/// same value on its next request (a keep-alive client sends one value
/// on all of them) is one compare, not a check of every byte. Values
/// longer than [`KnownHost::BYTES`] are checked every time.
#[derive(Clone, Copy, Debug, Default)]
pub struct KnownHost {
    len: u8,
    bytes: [u8; KnownHost::BYTES],
}

impl KnownHost {
    /// The longest value kept.
    pub const BYTES: usize = 32;

    /// Whether every byte of `host` is one a `Host` value may hold
    /// ([`is_host_byte`]): from the kept value when `host` is it, else
    /// checked (and kept when valid).
    #[inline(always)]
    pub fn valid(&mut self, host: &[u8]) -> bool {
        if host.len() == usize::from(self.len) && self.is_kept(host) {
            return true;
        }
        self.check(host)
    }

    /// `host` (as long as the kept value) is the kept value: two word
    /// compares for a value of 8 to 16 bytes (most `Host` values), where a
    /// slice compare calls `memcmp`.
    #[inline(always)]
    fn is_kept(&self, host: &[u8]) -> bool {
        let n = host.len();
        let word =
            |b: &[u8], at: usize| u64::from_ne_bytes(b[at..at + 8].try_into().unwrap_or([0; 8]));
        if (8..=16).contains(&n) {
            return word(&self.bytes, 0) == word(host, 0)
                && word(&self.bytes, n - 8) == word(host, n - 8);
        }
        self.bytes.get(..n) == Some(host)
    }

    #[inline(never)]
    fn check(&mut self, host: &[u8]) -> bool {
        let ok = all_host_bytes(host);
        if ok && host.len() <= Self::BYTES {
            self.bytes[..host.len()].copy_from_slice(host);
            self.len = host.len() as u8;
        }
        ok
    }
}

/// [`is_host_byte`] for every byte.
static HOST_BYTES: [bool; 256] = alphanumeric_and(b"-._~%!$&'()*+,;=:[]");

/// A byte table: true for ASCII letters and digits and for `marks`.
pub(crate) const fn alphanumeric_and(marks: &[u8]) -> [bool; 256] {
    let mut t = [false; 256];
    let mut b = 0;
    while b < 256 {
        t[b] = (b as u8).is_ascii_alphanumeric();
        b += 1;
    }
    let mut i = 0;
    while i < marks.len() {
        t[marks[i] as usize] = true;
        i += 1;
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_host_byte_table_is_the_rule() {
        for b in 0..=255u8 {
            let rule = b.is_ascii_alphanumeric() || b"-._~%!$&'()*+,;=:[]".contains(&b);
            assert_eq!(is_host_byte(b), rule, "byte {b:#04x}");
        }
    }

    #[test]
    fn the_known_host_answers_what_the_check_answers() {
        // Runs of values on one connection: repeats, values of every
        // length a memory keeps and past it, one byte changed to a valid
        // or an invalid one, the empty value.
        let mut seed = 0x9e37_79b9_u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let mut known = KnownHost::default();
        let mut last: Vec<u8> = b"example.com:8080".to_vec();
        for _ in 0..20_000 {
            let r = next();
            let value: Vec<u8> = match r % 4 {
                0 => last.clone(),
                1 => {
                    let mut v = last.clone();
                    if !v.is_empty() {
                        let at = (r >> 8) as usize % v.len();
                        v[at] = b"a.-:/ #Z9\x80\\"[(r >> 20) as usize % 11];
                    }
                    v
                }
                2 => (0..(r >> 8) as usize % 40)
                    .map(|i| b"ab.9:-"[i % 6])
                    .collect(),
                _ => (0..(r >> 8) as usize % 24)
                    .map(|_| (next() & 0xff) as u8)
                    .collect(),
            };
            assert_eq!(known.valid(&value), all_host_bytes(&value), "{value:?}");
            last = value;
        }
    }
}
