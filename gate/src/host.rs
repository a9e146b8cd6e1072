//! Host matching and the fixed-answer host kinds.
//!
//! A request's `Host` is stripped of its port and of one trailing dot, then
//! looked up, ASCII case ignored: exact names first, then `*.suffix`
//! wildcards (the longest suffix wins; a wildcard matches any depth of
//! subdomain but not the bare suffix), then the default host. A table of up
//! to eight exact names compares them in place; a larger one lowercases the
//! name into a stack buffer and hashes it. No allocation either way
//! (`cargo bench -p gapura-bench --bench steps`, the host step on the
//! default profile: 25.5 ns hashed in an earlier run; 15.7 ns compared,
//! eight bytes a step, in docs/performance.md's "The chain, step by step").

use crate::answer::{end_head, Answer, WriteCtx};
use crate::hash::NameHasher;
use crate::sink::{Lines, Sink};
use std::collections::HashMap;
use std::hash::BuildHasherDefault;

/// Index of a host in its snapshot.
pub type HostId = u32;

/// Up to this many exact names, a lookup compares them one by one (cheaper
/// than lowercasing and hashing the name for the few a profile has).
const SCAN_NAMES: usize = 8;

/// Longest host name looked up; longer names match nothing (DNS caps at 253).
pub const MAX_HOST_BYTES: usize = 253;

#[derive(Clone, Debug, Default)]
pub struct HostTable {
    exact: HashMap<Box<[u8]>, HostId, BuildHasherDefault<NameHasher>>,
    /// The exact names again, while there are at most [`SCAN_NAMES`]:
    /// compared in place, ASCII case ignored, with no copy and no hash.
    few: Vec<(Box<[u8]>, HostId)>,
    /// (".suffix", id), longest suffix first.
    wildcards: Vec<(Box<[u8]>, HostId)>,
    default: Option<HostId>,
}

/// The last `Host` value looked up and the host it found, for the
/// requests that follow with the same bytes (a connection's keep-alive
/// requests, the clients of one site): one compare instead of the lookup.
/// Kept with a table's identity (its snapshot's generation and its
/// address): a reload's table is looked up afresh. Values longer than
/// [`HostMemo::BYTES`] are looked up every time.
#[derive(Clone, Copy, Debug, Default)]
pub struct HostMemo {
    table: usize,
    generation: u64,
    /// 0: nothing kept.
    len: u8,
    raw: [u8; HostMemo::BYTES],
    found: Option<HostId>,
}

impl HostMemo {
    /// The longest value kept.
    pub const BYTES: usize = 32;

    /// `table.lookup(host_header)`, from the memo when the value is the
    /// one it keeps for this table. Inlined: every request asks it.
    #[inline(always)]
    pub fn lookup(
        &mut self,
        table: &HostTable,
        generation: u64,
        host_header: Option<&[u8]>,
    ) -> Option<HostId> {
        let Some(raw) = host_header else {
            return table.lookup(None);
        };
        let at = table as *const HostTable as usize;
        if usize::from(self.len) == raw.len()
            && self.generation == generation
            && self.table == at
            && same_bytes(&self.raw, raw)
        {
            return self.found;
        }
        let found = table.lookup(Some(raw));
        if !raw.is_empty() && raw.len() <= Self::BYTES {
            self.table = at;
            self.generation = generation;
            self.len = raw.len() as u8;
            self.raw[..raw.len()].copy_from_slice(raw);
            self.found = found;
        }
        found
    }
}

/// Whether `raw` is the first `raw.len()` bytes of `kept` (false when
/// longer): two word compares for a value of 8 to 16 bytes (most `Host`
/// values), where a slice compare calls `memcmp`. For the memories of a
/// last `Host` value (this module's [`HostMemo`], the parser's).
#[inline(always)]
pub fn same_bytes<const N: usize>(kept: &[u8; N], raw: &[u8]) -> bool {
    let n = raw.len();
    let word = |b: &[u8], at: usize| u64::from_ne_bytes(b[at..at + 8].try_into().unwrap_or([0; 8]));
    if (8..=16).contains(&n) && n <= N {
        return word(kept, 0) == word(raw, 0) && word(kept, n - 8) == word(raw, n - 8);
    }
    kept.get(..n) == Some(raw)
}

/// Why a name could not be added.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HostNameError {
    Duplicate,
    Invalid,
}

impl HostTable {
    /// Adds a name (`example.com` or `*.example.com`). Allocates.
    pub fn insert(&mut self, name: &str, id: HostId) -> Result<(), HostNameError> {
        let lower = name.to_ascii_lowercase();
        let lower = lower.strip_suffix('.').unwrap_or(&lower).to_string();
        if let Some(suffix) = lower.strip_prefix("*.") {
            if !valid_name(suffix) {
                return Err(HostNameError::Invalid);
            }
            let key: Box<[u8]> = format!(".{suffix}").into_bytes().into_boxed_slice();
            if self.wildcards.iter().any(|(k, _)| *k == key) {
                return Err(HostNameError::Duplicate);
            }
            self.wildcards.push((key, id));
            self.wildcards.sort_by_key(|w| std::cmp::Reverse(w.0.len()));
            return Ok(());
        }
        if !valid_name(&lower) {
            return Err(HostNameError::Invalid);
        }
        let key = lower.into_bytes().into_boxed_slice();
        if self.exact.contains_key(&key) {
            return Err(HostNameError::Duplicate);
        }
        self.exact.insert(key.clone(), id);
        if self.exact.len() <= SCAN_NAMES {
            self.few.push((key, id));
        } else {
            self.few.clear();
        }
        Ok(())
    }

    pub fn set_default(&mut self, id: HostId) {
        self.default = Some(id);
    }

    pub fn default_host(&self) -> Option<HostId> {
        self.default
    }

    /// Finds the host for a `Host` header value (None: no header). O(name +
    /// wildcards), no allocation.
    pub fn lookup(&self, host_header: Option<&[u8]>) -> Option<HostId> {
        host_header
            .and_then(|raw| self.lookup_exact_or_wildcard(raw))
            .or(self.default)
    }

    /// The host a name or wildcard claims, without falling back to the
    /// default. O(name + wildcards), no allocation.
    pub fn lookup_exact_or_wildcard(&self, raw: &[u8]) -> Option<HostId> {
        if !self.few.is_empty() || self.exact.is_empty() {
            let name = strip(raw)?;
            if let Some((_, id)) = self.few.iter().find(|(k, _)| eq_lowered(name, k)) {
                return Some(*id);
            }
            return self
                .wildcards
                .iter()
                .find(|(suffix, _)| {
                    name.len() > suffix.len()
                        && eq_lowered(&name[name.len() - suffix.len()..], suffix)
                })
                .map(|(_, id)| *id);
        }
        let mut buf = [0u8; MAX_HOST_BYTES];
        let name = normalize(raw, &mut buf)?;
        if let Some(&id) = self.exact.get(name) {
            return Some(id);
        }
        self.wildcards
            .iter()
            .find(|(suffix, _)| name.len() > suffix.len() && name.ends_with(suffix))
            .map(|(_, id)| *id)
    }
}

/// Whether `name`, ASCII letters lowercased, is `lower` (a table's key,
/// stored lowercased): `name.eq_ignore_ascii_case(lower)` for such a key,
/// eight bytes a step.
#[inline]
fn eq_lowered(name: &[u8], lower: &[u8]) -> bool {
    if name.len() != lower.len() {
        return false;
    }
    let n = name.len();
    if n < 8 {
        return name
            .iter()
            .zip(lower)
            .all(|(x, y)| x.to_ascii_lowercase() == *y);
    }
    let word = |s: &[u8], i: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&s[i..i + 8]);
        u64::from_le_bytes(b)
    };
    // Whole words, then the last eight bytes (overlapping the words
    // before them: a byte compares the same in either).
    let mut i = 0;
    while i + 8 < n {
        if lower8(word(name, i)) != word(lower, i) {
            return false;
        }
        i += 8;
    }
    lower8(word(name, n - 8)) == word(lower, n - 8)
}

/// Eight bytes with each ASCII capital letter lowercased, every other byte
/// as it was.
#[inline]
fn lower8(x: u64) -> u64 {
    const ONES: u64 = 0x0101_0101_0101_0101;
    let seven = x & (0x7f * ONES);
    // A byte's high bit: its low seven bits are at least `A` (0x41), and
    // at most `Z` (0x5a); adding never carries across bytes.
    let from_a = seven + (0x80 - 0x41) * ONES;
    let past_z = seven + (0x80 - 0x5b) * ONES;
    // A capital: in that range, and an ASCII byte (its own high bit clear).
    let capital = from_a & !past_z & !x & (0x80 * ONES);
    x | (capital >> 2)
}

/// Lowercases `raw` into `buf` without its port and trailing dot.
fn normalize<'b>(raw: &[u8], buf: &'b mut [u8; MAX_HOST_BYTES]) -> Option<&'b [u8]> {
    let name = strip(raw)?;
    let out = &mut buf[..name.len()];
    for (o, &b) in out.iter_mut().zip(name) {
        *o = b.to_ascii_lowercase();
    }
    Some(out)
}

/// `raw` without surrounding whitespace, its port and one trailing dot;
/// `None` when nothing or more than [`MAX_HOST_BYTES`] is left.
fn strip(raw: &[u8]) -> Option<&[u8]> {
    let raw = raw.trim_ascii();
    let name = if raw.first() == Some(&b'[') {
        let end = raw.iter().position(|&b| b == b']')?;
        &raw[..=end]
    } else {
        match last_colon(raw) {
            Some(colon) => &raw[..colon],
            None => raw,
        }
    };
    let name = name.strip_suffix(b".").unwrap_or(name);
    if name.is_empty() || name.len() > MAX_HOST_BYTES {
        return None;
    }
    Some(name)
}

/// Index of the last `:` in `s`, eight bytes a step from the end (a
/// `Host` value is short; its port, when it has one, is at the end).
#[inline]
fn last_colon(s: &[u8]) -> Option<usize> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const LOW7: u64 = 0x7f * ONES;
    let mut end = s.len();
    while end >= 8 {
        let mut w = [0u8; 8];
        w.copy_from_slice(&s[end - 8..end]);
        let x = u64::from_le_bytes(w) ^ (u64::from(b':') * ONES);
        // The high bit of each zero byte of `x` (a colon in `s`), exact for
        // every byte: adding the low seven bits never carries out of a byte.
        let colons = !(((x & LOW7) + LOW7) | x) & !LOW7;
        if colons != 0 {
            return Some(end - 8 + (63 - colons.leading_zeros() as usize) / 8);
        }
        end -= 8;
    }
    s[..end].iter().rposition(|&b| b == b':')
}

/// Whether `name` is a host name or address literal a profile may list.
pub fn valid_name(name: &str) -> bool {
    if name.is_empty() || name.len() > MAX_HOST_BYTES {
        return false;
    }
    if name.starts_with('[') && name.ends_with(']') {
        return name[1..name.len() - 1]
            .parse::<std::net::Ipv6Addr>()
            .is_ok();
    }
    name.split('.').all(|label| {
        !label.is_empty()
            && label.len() <= 63
            && label
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    })
}

/// What a `redirect` host keeps of the request target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeepTarget {
    Nothing,
    Path,
    PathAndQuery,
}

/// A precomputed redirect: its status line, the fixed start of its
/// `Location` (the request's path may be appended) and its other lines.
#[derive(Clone, Debug)]
pub struct Redirect {
    pub status: u16,
    status_line: Lines,
    target: Box<[u8]>,
    rest: Lines,
    keep: KeepTarget,
}

impl Redirect {
    /// Allocates (compile time only). `target` is an absolute URL or path
    /// without CR or LF (the profile validator ensures it).
    pub fn new(status: u16, target: &str, keep: KeepTarget, headers: &[(&str, &str)]) -> Redirect {
        let target = if keep == KeepTarget::Nothing {
            target
        } else {
            target.trim_end_matches('/')
        };
        let mut rest = headers.to_vec();
        rest.push(("Content-Length", "0"));
        Redirect {
            status,
            status_line: Lines::status(status),
            target: target.as_bytes().into(),
            rest: Lines::new(None, &rest),
            keep,
        }
    }

    /// Writes the redirect for a request with raw target `target`
    /// (origin form, already validated by the parser). No allocation once
    /// `out` has capacity.
    #[inline]
    pub fn write_into<O: Sink>(&self, out: &mut O, target: &[u8], ctx: &WriteCtx<'_>) {
        self.write_start(out, target, ctx.date_line);
        end_head(out, ctx);
    }

    /// Status line, Location, fixed headers and Date; [`end_head`] finishes.
    #[inline]
    pub fn write_start<O: Sink>(&self, out: &mut O, target: &[u8], date_line: &[u8]) {
        out.head(self.status, &self.status_line);
        let kept = match self.keep {
            KeepTarget::Nothing => &target[..0],
            KeepTarget::Path => {
                let end = target
                    .iter()
                    .position(|&b| b == b'?')
                    .unwrap_or(target.len());
                &target[..end]
            }
            KeepTarget::PathAndQuery => target,
        };
        let kept: &[u8] = if kept.first() == Some(&b'/') {
            kept
        } else if self.keep != KeepTarget::Nothing {
            b"/"
        } else {
            b""
        };
        out.field(b"Location", http::header::LOCATION, &[&self.target, kept]);
        out.lines(&self.rest);
        out.date(date_line);
    }
}

/// What a matched host does.
#[derive(Clone, Debug)]
pub enum HostAction {
    /// A fixed answer.
    Respond(Answer),
    /// A redirect.
    Redirect(Redirect),
    /// Forward to upstreams by route.
    Proxy(crate::upstream::ProxyHost),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kept_bytes_compare_as_a_slice_compare_does() {
        // Every length a memo keeps, equal and differing at each place,
        // with a kept tail past the length that must not count.
        for n in 0..=HostMemo::BYTES {
            let raw: Vec<u8> = (0..n as u8).map(|i| b'a' + i % 26).collect();
            let mut kept = [b'#'; HostMemo::BYTES];
            kept[..n].copy_from_slice(&raw);
            assert!(same_bytes(&kept, &raw), "{n}");
            for at in 0..n {
                let mut other = kept;
                other[at] ^= 0x20;
                assert!(!same_bytes(&other, &raw), "{n} at {at}");
            }
        }
    }

    #[test]
    fn the_memo_answers_what_the_table_answers() {
        let a = table();
        let mut b = HostTable::default();
        b.insert("other.test", 7).unwrap();
        b.set_default(9);
        let long = format!("{}.example.com", "x".repeat(40));
        let values: [Option<&[u8]>; 10] = [
            Some(b"example.com"),
            Some(b"EXAMPLE.com:8080"),
            Some(b"a.example.com"),
            Some(b"a.api.example.com"),
            Some(b"other.test"),
            Some(b"[::1]:443"),
            Some(b""),
            Some(long.as_bytes()),
            Some(b"nowhere.test"),
            None,
        ];
        let mut memo = HostMemo::default();
        // Every pair of values in turn, on either table and generation.
        let mut seed = 0x2545_f491_u64;
        for _ in 0..4000 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let v = values[(seed % values.len() as u64) as usize];
            let (t, generation) = match (seed >> 8) % 3 {
                0 => (&a, 1),
                1 => (&b, 1),
                _ => (&b, 2),
            };
            assert_eq!(memo.lookup(t, generation, v), t.lookup(v), "{v:?}");
        }
    }

    #[test]
    fn the_last_colon_is_rpositions_for_every_byte_in_every_place() {
        for len in 0..40 {
            for at in 0..len {
                for b in [b':', b';', b'9', 0x3a | 0x80, 0, b'a', 0xff] {
                    for second in [None, Some(0), Some(len / 2), Some(len - 1)] {
                        let mut s = vec![b'x'; len];
                        s[at] = b;
                        if let Some(j) = second {
                            s[j] = b':';
                        }
                        assert_eq!(last_colon(&s), s.iter().rposition(|&c| c == b':'), "{s:?}");
                    }
                }
            }
        }
    }

    fn table() -> HostTable {
        let mut t = HostTable::default();
        t.insert("Example.com", 0).unwrap();
        t.insert("*.example.com", 1).unwrap();
        t.insert("*.api.example.com", 2).unwrap();
        t.insert("[::1]", 3).unwrap();
        t
    }

    #[test]
    fn lowered_comparison_is_the_ascii_case_blind_one_for_lowercased_keys() {
        // Every byte value in every position of names up to 40 bytes, each
        // against its own lowercased form and against one byte changed.
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for b in 0..=255u8 {
            for len in 1..=40usize {
                let at = len - 1 - (usize::from(b) % len);
                let mut name: Vec<u8> = (0..len).map(|_| next() as u8).collect();
                name[at] = b;
                let lower = name.to_ascii_lowercase();
                assert!(eq_lowered(&name, &lower), "{name:?}");
                for other in [b ^ 0x20, b.wrapping_add(1), b ^ 0x80] {
                    let mut changed = lower.clone();
                    // A key is stored lowercased.
                    changed[at] = other.to_ascii_lowercase();
                    assert_eq!(
                        eq_lowered(&name, &changed),
                        name.eq_ignore_ascii_case(&changed),
                        "{name:?} against {changed:?}"
                    );
                }
            }
        }
        assert!(!eq_lowered(b"example.com", b"example.co"));
        assert!(eq_lowered(b"", b""));
    }

    #[test]
    fn exact_names_ignore_case_port_and_trailing_dot() {
        let t = table();
        assert_eq!(t.lookup(Some(b"example.com")), Some(0));
        assert_eq!(t.lookup(Some(b"EXAMPLE.COM:8080")), Some(0));
        assert_eq!(t.lookup(Some(b"example.com.")), Some(0));
        assert_eq!(t.lookup(Some(b"[::1]:8080")), Some(3));
    }

    #[test]
    fn every_mix_of_cases_finds_what_the_lower_case_name_finds() {
        let t = table();
        for name in ["example.com", "v1.api.example.com:443", "www.example.com."] {
            let want = t.lookup(Some(name.as_bytes()));
            let letters = name.bytes().filter(u8::is_ascii_alphabetic).count();
            for mask in 0u32..(1 << letters.min(12)) {
                let mut i = 0;
                let mixed: Vec<u8> = name
                    .bytes()
                    .map(|b| {
                        if !b.is_ascii_alphabetic() {
                            return b;
                        }
                        i += 1;
                        if mask >> (i - 1) & 1 == 1 {
                            b.to_ascii_uppercase()
                        } else {
                            b
                        }
                    })
                    .collect();
                assert_eq!(
                    t.lookup(Some(&mixed)),
                    want,
                    "{}",
                    String::from_utf8_lossy(&mixed)
                );
            }
        }
    }

    #[test]
    fn a_table_of_many_names_finds_what_a_table_of_few_finds() {
        let mut many = table();
        for i in 0..20 {
            many.insert(&format!("host{i}.test"), 10 + i).unwrap();
        }
        let few = table();
        for name in [
            "example.com",
            "EXAMPLE.com:80",
            "www.example.com.",
            "v1.API.example.com",
            "[::1]:8080",
            "other.test",
            "",
        ] {
            assert_eq!(
                many.lookup(Some(name.as_bytes())),
                few.lookup(Some(name.as_bytes())),
                "{name}"
            );
        }
        assert_eq!(many.lookup(Some(b"HOST7.test")), Some(17));
        assert_eq!(many.lookup(Some(b"host19.test:8443")), Some(29));
    }

    #[test]
    fn longest_wildcard_wins_and_bare_suffix_does_not_match() {
        let t = table();
        assert_eq!(t.lookup(Some(b"www.example.com")), Some(1));
        assert_eq!(t.lookup(Some(b"a.b.example.com")), Some(1));
        assert_eq!(t.lookup(Some(b"v1.api.example.com")), Some(2));
        assert_eq!(t.lookup(Some(b"api.example.com")), Some(1));
        assert_eq!(t.lookup(Some(b"notexample.com")), None);
    }

    #[test]
    fn unknown_or_missing_host_falls_to_default() {
        let mut t = table();
        assert_eq!(t.lookup(Some(b"other.org")), None);
        t.set_default(9);
        assert_eq!(t.lookup(Some(b"other.org")), Some(9));
        assert_eq!(t.lookup(None), Some(9));
        assert_eq!(t.lookup(Some(&[b'a'; 300])), Some(9));
    }

    #[test]
    fn duplicates_and_invalid_names_are_refused() {
        let mut t = table();
        assert_eq!(t.insert("EXAMPLE.com", 5), Err(HostNameError::Duplicate));
        assert_eq!(t.insert("*.example.com", 5), Err(HostNameError::Duplicate));
        assert_eq!(t.insert("bad name", 5), Err(HostNameError::Invalid));
        assert_eq!(t.insert("a..b", 5), Err(HostNameError::Invalid));
    }

    #[test]
    fn redirect_keeps_what_it_is_told() {
        let ctx = WriteCtx {
            date_line: b"Date: x\r\n",
            head_only: false,
            close: false,
            keep_alive_10: false,
        };
        let r = Redirect::new(301, "https://example.com/", KeepTarget::PathAndQuery, &[]);
        let mut out = Vec::new();
        r.write_into(&mut out, b"/a/b?c=1", &ctx);
        assert_eq!(
            out,
            b"HTTP/1.1 301 Moved Permanently\r\nLocation: https://example.com/a/b?c=1\r\nContent-Length: 0\r\nDate: x\r\n\r\n"
        );
        let r = Redirect::new(302, "https://example.com", KeepTarget::Path, &[]);
        out.clear();
        r.write_into(&mut out, b"/a?c=1", &ctx);
        assert!(out.starts_with(b"HTTP/1.1 302 Found\r\nLocation: https://example.com/a\r\n"));
        let r = Redirect::new(308, "https://example.com/x", KeepTarget::Nothing, &[]);
        out.clear();
        r.write_into(&mut out, b"/a?c=1", &ctx);
        assert!(out.starts_with(
            b"HTTP/1.1 308 Permanent Redirect\r\nLocation: https://example.com/x\r\n"
        ));
    }
}
