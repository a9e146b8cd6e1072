//! Exact and prefix path patterns, looked up without allocating.
//!
//! A [`PathMatcher`] holds the exact and the prefix patterns of a route table
//! or a rule set, each kind grouped by pattern (a pattern's insertion
//! indices ascending) with an open-addressing hash index over the groups. A
//! request's canonical path (see [`crate::path`]) is looked up once for the
//! exact patterns and once per segment boundary for the prefixes; each
//! look-up hashes the key in O(1) (its length and its first and last eight
//! bytes), probes one or a few adjacent slots, and compares bytes only
//! against the pattern whose hash it meets. A lookup costs O(segments) and
//! allocates nothing; a path no pattern takes, the common case, is settled
//! by the probes alone. A prefix matches at segment boundaries only:
//! `/admin` takes `/admin` and `/admin/x`, never `/administrator`; the
//! prefix `/` takes every path.
//!
//! Patterns are validated when inserted: they are written decoded and must be
//! a path some request could canonicalise to, since any other pattern could
//! never match. ASCII case is ignored (patterns are lowercased). Two orders of
//! precedence are offered, because rule sets and routes differ:
//!
//! - [`PathMatcher::lookup`] (rule sets): the lowest insertion index among
//!   every exact and prefix match, so the document's order is the precedence;
//! - [`PathMatcher::best_route`] (proxy routes): an exact match beats any
//!   prefix, then the longest prefix wins, then the lowest insertion index.
//!
//! Duplicate patterns are kept (two rules may share a path and differ in
//! methods); refusing duplicate routes is the profile validator's business.

use crate::path::{is_canonical, MAX_PATH_BYTES};

/// How a pattern matches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PathKind {
    /// The whole canonical path equals the pattern.
    Exact,
    /// The canonical path is the pattern or continues it with `/`.
    Prefix,
}

/// Why a pattern was refused. [`PatternError::code`] is the last part of the
/// profile code (`ruleSet.rule.path.invalid`, `.encoded`, `.notCanonical`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PatternError {
    /// Empty, not starting with `/`, over [`MAX_PATH_BYTES`], or holding a
    /// control byte or a `?`.
    Invalid,
    /// Holds a `%`: patterns are written decoded.
    Encoded,
    /// Not a canonical path, so no request's canonical path equals it: a
    /// trailing `/`, `//`, `\`, `;`, a `.` or `..` segment, a trailing dot.
    NotCanonical,
}

impl std::fmt::Display for PatternError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            PatternError::Invalid => "a path starts with '/' and holds no control byte or '?'",
            PatternError::Encoded => "write the path decoded, without '%' escapes",
            PatternError::NotCanonical => {
                "no request's canonical path could equal this pattern (no trailing '/', '//', \
                 '\\', ';', dot segments or trailing dots)"
            }
        })
    }
}

impl std::error::Error for PatternError {}

/// Checks a pattern and returns it lowercased. Allocates; O(pattern length).
pub fn compile_pattern(pattern: &str) -> Result<Box<[u8]>, PatternError> {
    let bytes = pattern.as_bytes();
    if bytes.first() != Some(&b'/')
        || bytes.len() > MAX_PATH_BYTES
        || bytes.iter().any(|&b| b < 0x20 || b == 0x7F || b == b'?')
    {
        return Err(PatternError::Invalid);
    }
    if bytes.contains(&b'%') {
        return Err(PatternError::Encoded);
    }
    let lower = bytes.to_ascii_lowercase();
    if !is_canonical(&lower) {
        return Err(PatternError::NotCanonical);
    }
    Ok(lower.into_boxed_slice())
}

/// The insertion indices of one pattern, ascending.
#[derive(Clone, Debug)]
struct Group {
    pattern: Box<[u8]>,
    indices: Vec<usize>,
}

/// A slot of a [`Table`]'s hash index: a group and its pattern's hash.
#[derive(Clone, Copy, Debug)]
struct Slot {
    hash: u64,
    group: u32,
}

const EMPTY: u32 = u32::MAX;

/// The patterns of one kind, grouped by pattern, with an open-addressing
/// (linear probing) hash index over the groups, at most half full so a
/// probe ends within a few slots.
#[derive(Clone, Debug)]
struct Table {
    groups: Vec<Group>,
    slots: Box<[Slot]>,
    /// 64 minus log2(slots): the hash's top bits pick the first slot.
    shift: u32,
    /// Bit `min(length, 63)` for every pattern length: a key of a length no
    /// pattern has is settled without a probe.
    lens: u64,
    /// The group of the pattern `/`, which every prefix look-up asks for:
    /// found without a probe.
    root: Option<u32>,
}

/// The hash of a pattern or key: its length and its first and last eight
/// bytes (four, or three picked, for a shorter one), mixed. O(1) whatever
/// the length; a collision costs one byte comparison, never a wrong match.
#[inline]
fn key_hash(key: &[u8]) -> u64 {
    let n = key.len();
    let (head, tail) = if n >= 8 {
        (
            u64::from_le_bytes(key[..8].try_into().expect("eight bytes")),
            u64::from_le_bytes(key[n - 8..].try_into().expect("eight bytes")),
        )
    } else if n >= 4 {
        (
            u64::from(u32::from_le_bytes(key[..4].try_into().expect("four bytes"))),
            u64::from(u32::from_le_bytes(
                key[n - 4..].try_into().expect("four bytes"),
            )),
        )
    } else if n > 0 {
        let b = |i: usize| u64::from(key[i]);
        (b(0) | b(n / 2) << 8 | b(n - 1) << 16, 0)
    } else {
        (0, 0)
    };
    let h = head.wrapping_mul(0x9e37_79b9_7f4a_7c15)
        ^ tail.rotate_left(29).wrapping_mul(0xc2b2_ae3d_27d4_eb4f)
        ^ n as u64;
    (h ^ (h >> 31)).wrapping_mul(0x1656_67b1_9e37_79f9)
}

impl Default for Table {
    fn default() -> Self {
        Table {
            groups: Vec::new(),
            slots: Box::new([]),
            shift: 64,
            lens: 0,
            root: None,
        }
    }
}

impl Table {
    /// Adds `index` under `pattern`. Allocates; O(1) amortised (the index
    /// doubles when half full).
    fn insert(&mut self, pattern: Box<[u8]>, index: usize) {
        if let Some(g) = self.group_of(&pattern) {
            // Indices come in ascending order.
            self.groups[g as usize].indices.push(index);
            return;
        }
        let g = self.groups.len() as u32;
        self.lens |= 1 << pattern.len().min(63);
        if *pattern == *b"/" {
            self.root = Some(g);
        }
        self.groups.push(Group {
            pattern,
            indices: vec![index],
        });
        if self.groups.len() * 2 > self.slots.len() {
            let size = (self.groups.len() * 2).next_power_of_two().max(8);
            self.slots = vec![
                Slot {
                    hash: 0,
                    group: EMPTY,
                };
                size
            ]
            .into_boxed_slice();
            self.shift = 64 - size.trailing_zeros();
            for g in 0..self.groups.len() as u32 {
                self.place(g);
            }
        } else {
            self.place(g);
        }
    }

    fn place(&mut self, group: u32) {
        let hash = key_hash(&self.groups[group as usize].pattern);
        let mask = self.slots.len() - 1;
        let mut at = (hash >> self.shift) as usize;
        while self.slots[at].group != EMPTY {
            at = (at + 1) & mask;
        }
        self.slots[at] = Slot { hash, group };
    }

    /// The group whose pattern equals `key`. O(1) expected, no allocation.
    #[inline(always)]
    fn group_of(&self, key: &[u8]) -> Option<u32> {
        if self.lens >> key.len().min(63) & 1 == 0 {
            return None;
        }
        if key == b"/" {
            return self.root;
        }
        let hash = key_hash(key);
        let mask = self.slots.len() - 1;
        let mut at = (hash >> self.shift) as usize;
        loop {
            let slot = self.slots[at];
            if slot.group == EMPTY {
                return None;
            }
            if slot.hash == hash && *self.groups[slot.group as usize].pattern == *key {
                return Some(slot.group);
            }
            at = (at + 1) & mask;
        }
    }

    /// The insertion indices of the pattern equal to `key`, ascending
    /// (empty if none).
    #[inline]
    fn find(&self, key: &[u8]) -> &[usize] {
        self.group_of(key)
            .map_or(&[], |g| &self.groups[g as usize].indices)
    }
}

/// Exact and prefix patterns with a value each. Immutable once built; lives
/// in the snapshot.
#[derive(Clone, Debug)]
pub struct PathMatcher<T> {
    /// By insertion index.
    values: Vec<T>,
    exact: Table,
    prefix: Table,
}

impl<T> Default for PathMatcher<T> {
    fn default() -> Self {
        PathMatcher {
            values: Vec::new(),
            exact: Table::default(),
            prefix: Table::default(),
        }
    }
}

impl<T> PathMatcher<T> {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a pattern and returns its insertion index (0, 1, ...), which is
    /// its precedence among equals. Allocates; O(pattern) amortised
    /// (compile time only).
    pub fn insert(
        &mut self,
        kind: PathKind,
        pattern: &str,
        value: T,
    ) -> Result<usize, PatternError> {
        let pattern = compile_pattern(pattern)?;
        let index = self.values.len();
        match kind {
            PathKind::Exact => self.exact.insert(pattern, index),
            PathKind::Prefix => self.prefix.insert(pattern, index),
        }
        self.values.push(value);
        Ok(index)
    }

    /// Number of patterns.
    pub fn len(&self) -> usize {
        self.values.len()
    }

    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// The value inserted with `index`. O(1).
    pub fn get(&self, index: usize) -> Option<&T> {
        self.values.get(index)
    }

    /// The match with the lowest insertion index among every exact and
    /// prefix pattern that takes `canonical_path`. O(segments), no
    /// allocation.
    #[inline]
    pub fn lookup(&self, canonical_path: &[u8]) -> Option<(usize, &T)> {
        self.lookup_where(canonical_path, |_, _| true)
    }

    /// Like [`lookup`](Self::lookup), among the matches whose value `accept`
    /// takes (a rule's other conditions): the lowest accepted index. `accept`
    /// runs only on candidates that could still win. O(segments +
    /// candidates), no allocation.
    pub fn lookup_where(
        &self,
        canonical_path: &[u8],
        mut accept: impl FnMut(usize, &T) -> bool,
    ) -> Option<(usize, &T)> {
        let mut best: Option<usize> = None;
        let mut visit = |indices: &[usize]| {
            for &i in indices {
                if best.is_some_and(|b| i >= b) {
                    break;
                }
                if accept(i, &self.values[i]) {
                    best = Some(i);
                    break;
                }
            }
        };
        visit(self.exact.find(canonical_path));
        if !self.prefix.groups.is_empty() {
            for key in prefixes_longest_first(canonical_path) {
                visit(self.prefix.find(key));
            }
        }
        best.map(|i| (i, &self.values[i]))
    }

    /// Route precedence: an exact match first, else the longest matching
    /// prefix; among equal patterns the lowest insertion index.
    /// O(segments), no allocation.
    pub fn best_route(&self, canonical_path: &[u8]) -> Option<(usize, &T)> {
        let &found = self.exact.find(canonical_path).first().or_else(|| {
            prefixes_longest_first(canonical_path).find_map(|key| self.prefix.find(key).first())
        })?;
        Some((found, &self.values[found]))
    }
}

/// `path` itself, then `path` cut before each `/` from the right, then `/`:
/// `/a/b`, `/a`, `/`.
#[inline]
fn prefixes_longest_first(path: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut end = Some(path.len());
    std::iter::from_fn(move || {
        let e = end?;
        let key = &path[..e];
        end = match key.iter().rposition(|&b| b == b'/') {
            _ if e <= 1 => None,
            Some(0) => Some(1),
            other => other,
        };
        Some(key)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::path::{canonical, MAX_PATH_BYTES};

    fn matcher(patterns: &[(PathKind, &str)]) -> PathMatcher<&'static str> {
        let mut m = PathMatcher::new();
        for (i, (kind, p)) in patterns.iter().enumerate() {
            assert_eq!(m.insert(*kind, p, "v"), Ok(i));
        }
        m
    }

    fn index(found: Option<(usize, &&str)>) -> Option<usize> {
        found.map(|(i, _)| i)
    }

    #[test]
    fn prefix_matches_at_segment_boundaries_only() {
        let m = matcher(&[(PathKind::Prefix, "/admin")]);
        for p in ["/admin", "/admin/x", "/admin/x/y"] {
            assert_eq!(index(m.lookup(p.as_bytes())), Some(0), "{p}");
            assert_eq!(index(m.best_route(p.as_bytes())), Some(0), "{p}");
        }
        for p in ["/administrator", "/admi", "/", "/x/admin", "/admin.x"] {
            assert_eq!(index(m.lookup(p.as_bytes())), None, "{p}");
            assert_eq!(index(m.best_route(p.as_bytes())), None, "{p}");
        }
    }

    #[test]
    fn root_prefix_takes_every_path() {
        let m = matcher(&[(PathKind::Prefix, "/")]);
        for p in ["/", "/a", "/a/b/c", "/administrator"] {
            assert_eq!(index(m.lookup(p.as_bytes())), Some(0), "{p}");
            assert_eq!(index(m.best_route(p.as_bytes())), Some(0), "{p}");
        }
    }

    #[test]
    fn exact_matches_only_the_whole_path() {
        let m = matcher(&[(PathKind::Exact, "/login")]);
        assert_eq!(index(m.lookup(b"/login")), Some(0));
        assert_eq!(index(m.lookup(b"/login/x")), None);
        assert_eq!(index(m.lookup(b"/logi")), None);
        assert_eq!(index(m.lookup(b"/")), None);
    }

    #[test]
    fn lookup_takes_the_lowest_insertion_index() {
        let m = matcher(&[
            (PathKind::Prefix, "/api"),
            (PathKind::Exact, "/api/users"),
            (PathKind::Prefix, "/api/users"),
            (PathKind::Prefix, "/"),
        ]);
        assert_eq!(index(m.lookup(b"/api/users")), Some(0));
        assert_eq!(index(m.lookup(b"/other")), Some(3));
        let m = matcher(&[(PathKind::Prefix, "/"), (PathKind::Exact, "/a")]);
        assert_eq!(index(m.lookup(b"/a")), Some(0));
    }

    #[test]
    fn best_route_prefers_exact_then_longest_prefix_then_insertion_order() {
        let m = matcher(&[
            (PathKind::Prefix, "/"),
            (PathKind::Prefix, "/api"),
            (PathKind::Prefix, "/api/v1"),
            (PathKind::Exact, "/api/v1/health"),
            (PathKind::Prefix, "/api/v1"),
        ]);
        assert_eq!(index(m.best_route(b"/api/v1/health")), Some(3));
        assert_eq!(index(m.best_route(b"/api/v1/health/x")), Some(2));
        assert_eq!(index(m.best_route(b"/api/v1")), Some(2));
        assert_eq!(index(m.best_route(b"/api/v2")), Some(1));
        assert_eq!(index(m.best_route(b"/apiv1")), Some(0));
        assert_eq!(index(m.best_route(b"/")), Some(0));
        // The same table under rule-set precedence: the root prefix is first.
        assert_eq!(index(m.lookup(b"/api/v1/health")), Some(0));
    }

    #[test]
    fn lookup_where_skips_matches_whose_other_conditions_fail() {
        let mut m = PathMatcher::new();
        m.insert(PathKind::Prefix, "/admin", "POST").unwrap();
        m.insert(PathKind::Exact, "/admin/login", "GET").unwrap();
        m.insert(PathKind::Prefix, "/admin", "GET").unwrap();
        m.insert(PathKind::Prefix, "/", "GET").unwrap();
        let get = |_: usize, method: &&str| *method == "GET";
        assert_eq!(m.lookup_where(b"/admin/login", get), Some((1, &"GET")));
        assert_eq!(m.lookup_where(b"/admin/x", get), Some((2, &"GET")));
        assert_eq!(m.lookup_where(b"/x", get), Some((3, &"GET")));
        assert_eq!(m.lookup_where(b"/x", |_, _| false), None);
        assert_eq!(m.lookup(b"/admin/login"), Some((0, &"POST")));
    }

    #[test]
    fn patterns_ignore_case() {
        let m = matcher(&[(PathKind::Prefix, "/Admin")]);
        assert_eq!(index(m.lookup(b"/admin/x")), Some(0));
    }

    #[test]
    fn patterns_must_be_decoded_and_canonical() {
        let mut m = PathMatcher::new();
        for (p, err) in [
            ("", PatternError::Invalid),
            ("admin", PatternError::Invalid),
            ("/a?b", PatternError::Invalid),
            ("/a\tb", PatternError::Invalid),
            ("/a%2Fb", PatternError::Encoded),
            ("/%61dmin", PatternError::Encoded),
            ("/a/", PatternError::NotCanonical),
            ("//a", PatternError::NotCanonical),
            ("/a/../b", PatternError::NotCanonical),
            ("/./a", PatternError::NotCanonical),
            ("/a.", PatternError::NotCanonical),
            ("/a;x=1", PatternError::NotCanonical),
            ("/a\\b", PatternError::NotCanonical),
        ] {
            assert_eq!(m.insert(PathKind::Prefix, p, ()), Err(err), "{p:?}");
        }
        assert!(m.is_empty());
    }

    #[test]
    fn no_redundant_spelling_dodges_a_prefix() {
        let m = matcher(&[(PathKind::Prefix, "/admin")]);
        let mut scratch = [0u8; MAX_PATH_BYTES];
        for raw in [
            "/ADMIN",
            "/admin/",
            "//admin",
            "/x/../admin",
            "/%61dmin/x",
            "/admin;jsessionid=1",
            "/admin.",
            "/static/..%2Fadmin",
            "/static/..%5Cadmin",
            "/static\\..\\admin",
            "/%2e%2e/admin?x",
        ] {
            let path = canonical(raw.as_bytes(), &mut scratch).unwrap();
            assert_eq!(index(m.lookup(path)), Some(0), "{raw}");
        }
        for raw in ["/administrator", "/admin%252F", "/adm/in"] {
            let path = canonical(raw.as_bytes(), &mut scratch).unwrap();
            assert_eq!(index(m.lookup(path)), None, "{raw}");
        }
    }

    #[test]
    fn prefixes_are_listed_longest_first() {
        let all = |p: &'static [u8]| prefixes_longest_first(p).collect::<Vec<_>>();
        assert_eq!(all(b"/a/b"), vec![&b"/a/b"[..], b"/a", b"/"]);
        assert_eq!(all(b"/"), vec![&b"/"[..]]);
        assert_eq!(all(b"/abc"), vec![&b"/abc"[..], b"/"]);
        assert_eq!(all(b""), vec![&b""[..]]);
        assert_eq!(all(b"ab"), vec![&b"ab"[..]]);
    }
}
