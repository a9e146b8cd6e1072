//! The canonical matching path: the one spelling of a request path that
//! routes, rule sets and path-keyed limits match on.
//!
//! Guarantee: two request paths a server could take for the same resource
//! canonicalise to the same bytes, so no encoding trick or redundant spelling
//! (`%2F`, `%5C`, `\`, `//`, `;` parameters, `.` and `..` segments, trailing
//! dots, upper case) reaches a route or dodges a rule it should not. The rules,
//! applied in one left-to-right pass over the path (the query, from the first
//! `?`, is ignored):
//!
//! 1. Every `%XX` escape is decoded exactly once. An escape that is not two
//!    hex digits is an error, and so is any control byte (below 0x20, or 0x7F)
//!    raw or decoded. A decoded `%` or `?` keeps its escape (`%25`, `%3f`) so
//!    the output never decodes a second time: `%252F` is the three bytes
//!    `%2f` of one segment, never a separator.
//! 2. `/`, `\`, `%2F` and `%5C` separate segments; empty segments vanish.
//! 3. `;` (raw or `%3B`) starts a segment's parameters, dropped to the next
//!    separator: `/a;x=1/b` is `/a/b`, `/..;/` is `/../`.
//! 4. `.` is dropped, `..` removes the previous segment (never above the
//!    root); other segments lose their trailing dots (`admin.` is `admin`), and
//!    a segment of only dots (`...`) is dropped like `.`.
//! 5. ASCII letters are lowercased; other bytes (UTF-8) are kept.
//! 6. The result starts with `/` and has no trailing `/` (except the root):
//!    `/a/` is `/a`.
//!
//! Why one pass into a caller's buffer: it is computed on the request path,
//! where the gate may not allocate; the output is never longer than the input,
//! so a [`PathScratch`] of [`MAX_PATH_BYTES`] always suffices. [`canonical`]
//! first checks whether the path already is canonical (the common case) and
//! then returns it borrowed, copying nothing. A `..` rewinds over the bytes it
//! removes, each written byte at most once, so the whole stays O(n).

/// Longest path (the target up to its `?`) canonicalised: the largest target
/// length a profile may allow, 16 KiB. Longer is [`PathError::TooLong`].
pub const MAX_PATH_BYTES: usize = 16 * 1024;

/// A stack buffer the canonical form of any accepted path fits in.
pub type PathScratch = [u8; MAX_PATH_BYTES];

/// Why a path has no canonical form. The caller answers 400.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PathError {
    /// The path does not start with `/` (not origin form).
    NotOriginForm,
    /// Longer than [`MAX_PATH_BYTES`], or longer than the output buffer.
    TooLong,
    /// A `%` not followed by two hex digits.
    BadEscape,
    /// A control byte or NUL, sent raw or percent-encoded.
    ControlByte,
}

impl std::fmt::Display for PathError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            PathError::NotOriginForm => "path does not start with '/'",
            PathError::TooLong => "path too long",
            PathError::BadEscape => "invalid percent escape",
            PathError::ControlByte => "control byte in path",
        })
    }
}

impl std::error::Error for PathError {}

/// The path part of an origin-form target: everything before the first `?`.
/// O(n), no allocation.
#[inline]
pub fn path_of(target: &[u8]) -> &[u8] {
    match target.iter().position(|&b| b == b'?') {
        Some(q) => &target[..q],
        None => target,
    }
}

#[inline]
fn is_control(b: u8) -> bool {
    b < 0x20 || b == 0x7F
}

/// A hex digit's value.
#[inline]
pub(crate) fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// The bytes [`is_canonical`] must look at: separators, dots, `%`, the
/// bytes canonicalisation rewrites (upper case, `\\`, `;`, `?`) and
/// controls. Every other byte passes as itself.
static NEEDS_LOOK: [bool; 256] = {
    let mut t = [false; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        t[b] = matches!(c, b'/' | b'.' | b'%' | b'\\' | b';' | b'?' | b'A'..=b'Z')
            || c < 0x20
            || c == 0x7F;
        b += 1;
    }
    t
};

/// Whether `path` (no query) is already canonical, that is whether
/// [`canonicalize`] would return it unchanged. O(n), no allocation.
pub fn is_canonical(path: &[u8]) -> bool {
    canonical_len(path) == Some(path.len())
}

/// The length of `target`'s path part (before the first `?`) when that
/// part is already canonical, else `None`: [`path_of`] and
/// [`is_canonical`] in one pass. O(n), no allocation.
#[inline]
fn canonical_len(target: &[u8]) -> Option<usize> {
    if target.first() != Some(&b'/') {
        return None;
    }
    let mut prev = b'/';
    let mut i = 1;
    while i < target.len() {
        let b = target[i];
        if !NEEDS_LOOK[usize::from(b)] {
            // The common byte: nothing to check, it only becomes `prev`.
            prev = b;
            i += 1;
            continue;
        }
        match b {
            // The query starts: the path ends here.
            b'?' => break,
            b'/' if prev == b'/' || prev == b'.' => return None,
            b'\\' | b';' | b'A'..=b'Z' => return None,
            b'%' => {
                let escape = target.get(i + 1..i + 3);
                if escape != Some(b"25") && escape != Some(b"3f") {
                    return None;
                }
                i += 2;
            }
            _ if is_control(b) => return None,
            _ => {}
        }
        prev = target[i];
        i += 1;
    }
    // No trailing separator, no trailing dot in the last segment ("/"
    // alone is canonical).
    let ends_well = i == 1 || (prev != b'/' && prev != b'.');
    (ends_well && i <= MAX_PATH_BYTES).then_some(i)
}

/// One decoded unit of the raw path.
enum Unit {
    Separator,
    Params,
    /// A byte written as itself (lowercased).
    Byte(u8),
    /// A byte that keeps its escape in the output (`%25`, `%3f`).
    Escaped(&'static [u8; 3]),
}

/// Decodes the unit at `path[*i]` and advances `i` past it.
#[inline]
fn next_unit(path: &[u8], i: &mut usize) -> Result<Unit, PathError> {
    let b = path[*i];
    let decoded = if b == b'%' {
        let (Some(hi), Some(lo)) = (
            path.get(*i + 1).copied().and_then(hex),
            path.get(*i + 2).copied().and_then(hex),
        ) else {
            return Err(PathError::BadEscape);
        };
        *i += 3;
        let v = hi << 4 | lo;
        match v {
            b'%' => return Ok(Unit::Escaped(b"%25")),
            b'?' => return Ok(Unit::Escaped(b"%3f")),
            _ => v,
        }
    } else {
        *i += 1;
        b
    };
    Ok(match decoded {
        b'/' | b'\\' => Unit::Separator,
        b';' => Unit::Params,
        _ if is_control(decoded) => return Err(PathError::ControlByte),
        _ => Unit::Byte(decoded),
    })
}

/// Output under construction: `out[..base]` holds the finished segments
/// (`""` or `/s1/.../sk`), `out[base..len]` the open one with its `/`.
struct Writer<'o> {
    out: &'o mut [u8],
    base: usize,
    len: usize,
}

impl Writer<'_> {
    #[inline]
    fn push(&mut self, b: u8) -> Result<(), PathError> {
        if self.len == self.base {
            self.put(b'/')?;
        }
        self.put(b.to_ascii_lowercase())
    }

    #[inline]
    fn put(&mut self, b: u8) -> Result<(), PathError> {
        let slot = self.out.get_mut(self.len).ok_or(PathError::TooLong)?;
        *slot = b;
        self.len += 1;
        Ok(())
    }

    /// Closes the open segment: drops it, pops the previous one, or keeps it
    /// without its trailing dots.
    fn finish_segment(&mut self) {
        let segment = &self.out[self.base..self.len];
        if segment.is_empty() {
            return;
        }
        // segment[0] is the '/'.
        let name = &segment[1..];
        if name == b".." {
            let parent = self.out[..self.base]
                .iter()
                .rposition(|&b| b == b'/')
                .unwrap_or(0);
            self.base = parent;
            self.len = parent;
            return;
        }
        let mut end = self.len;
        while end > self.base + 1 && self.out[end - 1] == b'.' {
            end -= 1;
        }
        if end == self.base + 1 {
            // ".", or only dots: dropped.
            self.len = self.base;
        } else {
            self.len = end;
            self.base = end;
        }
    }
}

/// Writes the canonical form of `raw_path` (a target; from its first `?` on
/// it is ignored) into `out` and returns it. The output is never longer than
/// the path, so `out` of [`MAX_PATH_BYTES`] always suffices. O(n), no
/// allocation, never panics.
pub fn canonicalize<'o>(raw_path: &[u8], out: &'o mut [u8]) -> Result<&'o [u8], PathError> {
    let path = path_of(raw_path);
    if path.len() > MAX_PATH_BYTES {
        return Err(PathError::TooLong);
    }
    if path.first() != Some(&b'/') {
        return Err(PathError::NotOriginForm);
    }
    let mut w = Writer {
        out,
        base: 0,
        len: 0,
    };
    let mut in_params = false;
    let mut i = 0;
    while i < path.len() {
        match next_unit(path, &mut i)? {
            Unit::Separator => {
                w.finish_segment();
                in_params = false;
            }
            Unit::Params => in_params = true,
            _ if in_params => {}
            Unit::Byte(b) => w.push(b)?,
            Unit::Escaped(escape) => {
                w.push(escape[0])?;
                w.put(escape[1])?;
                w.put(escape[2])?;
            }
        }
    }
    w.finish_segment();
    let len = w.len;
    let out = w.out;
    if len == 0 {
        let slot = out.first_mut().ok_or(PathError::TooLong)?;
        *slot = b'/';
        return Ok(&out[..1]);
    }
    Ok(&out[..len])
}

/// The canonical form of `raw` (a target; the query is ignored): `raw`'s own
/// path, borrowed, when it already is canonical (no copy), else the rewrite
/// in `scratch`. O(n), no allocation.
#[inline]
pub fn canonical<'a>(raw: &'a [u8], scratch: &'a mut PathScratch) -> Result<&'a [u8], PathError> {
    if let Some(n) = canonical_len(raw) {
        return Ok(&raw[..n]);
    }
    canonicalize(path_of(raw), scratch)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn canon(raw: &str) -> Result<String, PathError> {
        let mut scratch = [0u8; MAX_PATH_BYTES];
        canonical(raw.as_bytes(), &mut scratch).map(|p| String::from_utf8_lossy(p).into_owned())
    }

    fn check(table: &[(&str, &str)]) {
        for (raw, want) in table {
            assert_eq!(canon(raw).as_deref(), Ok(*want), "canonical of {raw:?}");
        }
    }

    #[test]
    fn canonical_paths_come_back_borrowed_and_unchanged() {
        let mut scratch = [0u8; MAX_PATH_BYTES];
        for raw in ["/", "/a", "/a/b.html", "/.env", "/a%25b", "/a%3fb", "/x y"] {
            let got = canonical(raw.as_bytes(), &mut scratch).unwrap();
            assert_eq!(got, raw.as_bytes());
            assert_eq!(got.as_ptr(), raw.as_ptr(), "{raw} was copied");
        }
        let raw = b"/a/b?Q=/../X";
        let got = canonical(raw, &mut scratch).unwrap();
        assert_eq!(got, b"/a/b");
        assert_eq!(got.as_ptr(), raw.as_ptr());
    }

    #[test]
    fn encoded_separators_separate() {
        check(&[
            ("/admin%2Fsecret", "/admin/secret"),
            ("/admin%2fsecret", "/admin/secret"),
            ("/admin%5Csecret", "/admin/secret"),
            ("/admin%5csecret", "/admin/secret"),
            ("/%2F%2Fadmin%2F", "/admin"),
        ]);
        assert_eq!(canon("%2Fadmin"), Err(PathError::NotOriginForm));
    }

    #[test]
    fn backslash_is_a_separator() {
        check(&[
            ("/a\\b", "/a/b"),
            ("/a\\\\b\\", "/a/b"),
            ("/a\\..\\b", "/b"),
        ]);
    }

    #[test]
    fn case_is_folded_to_lower() {
        check(&[
            ("/ADMIN", "/admin"),
            ("/AdMiN/Panel", "/admin/panel"),
            ("/%41dmin", "/admin"),
            ("/%61dmin", "/admin"),
            ("/caf\u{c9}", "/caf\u{c9}"),
        ]);
    }

    #[test]
    fn repeated_separators_collapse() {
        check(&[
            ("//admin", "/admin"),
            ("/a//b///c", "/a/b/c"),
            ("///", "/"),
            ("/a/", "/a"),
            ("/a//", "/a"),
        ]);
    }

    #[test]
    fn dot_segments_resolve_and_never_climb_above_root() {
        check(&[
            ("/./admin", "/admin"),
            ("/a/./b/.", "/a/b"),
            ("/a/b/../c", "/a/c"),
            ("/a/b/..", "/a"),
            ("/../..", "/"),
            ("/../../admin", "/admin"),
            ("/a/../../b", "/b"),
            ("/..", "/"),
            ("/.", "/"),
        ]);
    }

    #[test]
    fn encoded_dots_decode_then_resolve() {
        check(&[
            ("/%2e%2e/admin", "/admin"),
            ("/a/%2E%2E/b", "/b"),
            ("/a/%2e/b", "/a/b"),
            ("/a/.%2e/b", "/b"),
            ("/static/%2e%2e%2fadmin", "/admin"),
            ("/static/..%5cadmin", "/admin"),
        ]);
    }

    #[test]
    fn segment_parameters_are_dropped() {
        check(&[
            ("/a;x=1/b", "/a/b"),
            ("/login;jsessionid=ABC123", "/login"),
            ("/admin;/", "/admin"),
            ("/static/..;/admin", "/admin"),
            ("/a/;x/b", "/a/b"),
            ("/a%3Bx/b", "/a/b"),
            ("/a;x%2Fb", "/a/b"),
            ("/;", "/"),
        ]);
    }

    #[test]
    fn trailing_dots_are_stripped_and_dot_only_segments_dropped() {
        check(&[
            ("/admin.", "/admin"),
            ("/admin..", "/admin"),
            ("/admin.%2e", "/admin"),
            ("/a./b", "/a/b"),
            ("/.env", "/.env"),
            ("/a.b.", "/a.b"),
            ("/.../admin", "/admin"),
            ("/a/..../b", "/a/b"),
        ]);
    }

    #[test]
    fn query_is_ignored() {
        check(&[
            ("/a?b=/../c", "/a"),
            ("/A?", "/a"),
            ("/?x", "/"),
            ("/a%3Fb?c", "/a%3fb"),
        ]);
    }

    #[test]
    fn decoding_happens_once() {
        check(&[
            ("/a%252Fb", "/a%252fb"),
            ("/a%25/b", "/a%25/b"),
            ("/%252e%252e/admin", "/%252e%252e/admin"),
            ("/a%3fb", "/a%3fb"),
        ]);
        // The output is a fixed point: canonicalising again changes nothing.
        let once = canon("/a%252Fb").unwrap();
        assert_eq!(canon(&once).unwrap(), once);
    }

    #[test]
    fn bad_escapes_and_control_bytes_are_errors() {
        for (raw, err) in [
            ("/a%zz", PathError::BadEscape),
            ("/a%0", PathError::BadEscape),
            ("/a%", PathError::BadEscape),
            ("/a%g0", PathError::BadEscape),
            ("/a%00", PathError::ControlByte),
            ("/a%0a", PathError::ControlByte),
            ("/a%7F", PathError::ControlByte),
            ("/a\tb", PathError::ControlByte),
            ("/a;%zz", PathError::BadEscape),
            ("", PathError::NotOriginForm),
            ("a/b", PathError::NotOriginForm),
            ("\\a", PathError::NotOriginForm),
            ("*", PathError::NotOriginForm),
        ] {
            assert_eq!(canon(raw), Err(err), "{raw:?}");
        }
        // An error after the query does not count.
        assert_eq!(canon("/a?%zz").as_deref(), Ok("/a"));
    }

    #[test]
    fn non_ascii_escapes_decode_to_their_bytes() {
        let mut scratch = [0u8; MAX_PATH_BYTES];
        let got = canonical(b"/caf%C3%A9", &mut scratch).unwrap();
        assert_eq!(got, "/caf\u{e9}".as_bytes());
    }

    #[test]
    fn length_bound_is_the_path_not_the_query() {
        let mut scratch = [0u8; MAX_PATH_BYTES];
        let mut raw = vec![b'a'; MAX_PATH_BYTES];
        raw[0] = b'/';
        assert_eq!(canonical(&raw, &mut scratch).unwrap().len(), MAX_PATH_BYTES);
        raw.extend_from_slice(b"?q");
        assert_eq!(canonical(&raw, &mut scratch).unwrap().len(), MAX_PATH_BYTES);
        raw.truncate(MAX_PATH_BYTES);
        raw.push(b'A');
        assert_eq!(canonical(&raw, &mut scratch), Err(PathError::TooLong));
        // A buffer too small for the output is an error, not a panic.
        let mut small = [0u8; 3];
        assert_eq!(canonicalize(b"/abcd", &mut small), Err(PathError::TooLong));
        assert_eq!(canonicalize(b"/ab", &mut small), Ok(&b"/ab"[..]));
        assert_eq!(canonicalize(b"/", &mut []), Err(PathError::TooLong));
    }

    #[test]
    fn worst_case_output_fits_the_scratch() {
        // Every unit kept and every escape kept: output == input length.
        let mut scratch = [0u8; MAX_PATH_BYTES];
        let mut raw = b"/".to_vec();
        while raw.len() + 3 <= MAX_PATH_BYTES {
            raw.extend_from_slice(b"%25");
        }
        let got = canonical(&raw, &mut scratch).unwrap();
        assert_eq!(got.len(), raw.len());
    }

    proptest::proptest! {
        #![proptest_config(proptest::test_runner::Config {
            rng_seed: proptest::test_runner::RngSeed::Fixed(0x9A7B_0001),
            ..proptest::test_runner::Config::default()
        })]
        /// The one-pass check over a whole target takes exactly the targets
        /// whose path part the rewrite leaves unchanged.
        #[test]
        fn one_pass_agrees_with_the_rewrite(raw in "/[a-cA/.%25f3?;\\\\]{0,24}") {
            let mut scratch = [0u8; MAX_PATH_BYTES];
            let fast = canonical_len(raw.as_bytes());
            let full = canonicalize(path_of(raw.as_bytes()), &mut scratch).ok();
            let unchanged = full == Some(path_of(raw.as_bytes()));
            proptest::prop_assert_eq!(fast.is_some(), unchanged, "{:?}", raw);
            if let Some(n) = fast {
                proptest::prop_assert_eq!(&raw.as_bytes()[..n], path_of(raw.as_bytes()));
            }
        }
    }

    #[test]
    fn is_canonical_agrees_with_examples() {
        for p in ["/", "/a", "/a/b", "/.env", "/a.b", "/a%25", "/a%3fb"] {
            assert!(is_canonical(p.as_bytes()), "{p}");
        }
        for p in [
            "", "a", "/a/", "//", "/a//b", "/.", "/..", "/a/./b", "/a/../b", "/a.", "/A", "/a\\b",
            "/a;b", "/a%2f", "/a%3F", "/a%2", "/a?b", "/a\0",
        ] {
            assert!(!is_canonical(p.as_bytes()), "{p:?}");
        }
    }
}
