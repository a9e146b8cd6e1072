//! Property tests for the canonical matching path and globs.

use gapura_gate::glob::Glob;
use gapura_gate::path::{canonical, canonicalize, is_canonical, PathScratch, MAX_PATH_BYTES};
use gapura_gate::pathmatch::{PathKind, PathMatcher};
use proptest::prelude::*;

/// Pieces that exercise every rule: separators raw and encoded, dots,
/// parameters, escapes valid and not, case, the query, non-ASCII.
const PIECES: &[&str] = &[
    "/", "/", "/", "\\", ".", ".", "..", ";", "=", "a", "b", "B", "Z", "%2f", "%2F", "%5c", "%5C",
    "%2e", "%2E", "%25", "%252F", "%3f", "%3F", "%3b", "%41", "%c3%a9", "%zz", "%0", "%", "%00",
    "?", "#", " ", "é", "\t",
];

fn piece_path() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(prop::sample::select(PIECES), 0..24).prop_map(|pieces| {
        let mut raw = b"/".to_vec();
        for p in pieces {
            raw.extend_from_slice(p.as_bytes());
        }
        raw
    })
}

fn assert_canonical_shape(out: &[u8]) {
    assert_eq!(out.first(), Some(&b'/'));
    assert!(out.len() == 1 || !out.ends_with(b"/"), "{out:?}");
    for bad in [&b"//"[..], b"/./", b"/../", b"\\", b";", b"?"] {
        assert!(
            !out.windows(bad.len()).any(|w| w == bad),
            "{bad:?} in {out:?}"
        );
    }
    assert!(!out.ends_with(b"/.") && !out.ends_with(b"/.."), "{out:?}");
    assert!(!out.iter().any(|b| b.is_ascii_uppercase()), "{out:?}");
    assert!(!out.iter().any(|&b| b < 0x20 || b == 0x7F), "{out:?}");
    assert!(is_canonical(out), "{out:?}");
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 4096,
        rng_seed: proptest::test_runner::RngSeed::Fixed(0x9A7B_0007),
        ..ProptestConfig::default()
    })]

    #[test]
    fn canonicalize_never_panics_on_any_bytes(raw in prop::collection::vec(any::<u8>(), 0..64)) {
        let mut scratch = [0u8; MAX_PATH_BYTES];
        let _ = canonicalize(&raw, &mut scratch);
        let mut small = [0u8; 4];
        let _ = canonicalize(&raw, &mut small);
        let mut with_slash = b"/".to_vec();
        with_slash.extend_from_slice(&raw);
        if let Ok(out) = canonicalize(&with_slash, &mut scratch) {
            assert_canonical_shape(out);
        }
    }

    #[test]
    fn canonical_output_is_a_fixed_point_with_the_promised_shape(raw in piece_path()) {
        let mut scratch: PathScratch = [0u8; MAX_PATH_BYTES];
        let mut again: PathScratch = [0u8; MAX_PATH_BYTES];
        let mut borrowed: PathScratch = [0u8; MAX_PATH_BYTES];
        let once = canonicalize(&raw, &mut scratch);
        prop_assert_eq!(once, canonical(&raw, &mut borrowed));
        if let Ok(out) = once {
            assert_canonical_shape(out);
            prop_assert!(out.len() <= raw.len());
            prop_assert_eq!(canonicalize(out, &mut again), Ok(out));
        }
    }

    #[test]
    fn is_canonical_means_canonicalize_changes_nothing(raw in piece_path()) {
        let mut scratch = [0u8; MAX_PATH_BYTES];
        let path = gapura_gate::path::path_of(&raw);
        let unchanged = canonicalize(path, &mut scratch) == Ok(path);
        prop_assert_eq!(is_canonical(path), unchanged);
    }

    #[test]
    fn case_of_the_input_never_matters(raw in piece_path()) {
        let mut a = [0u8; MAX_PATH_BYTES];
        let mut b = [0u8; MAX_PATH_BYTES];
        let lower = raw.to_ascii_lowercase();
        prop_assert_eq!(canonicalize(&raw, &mut a), canonicalize(&lower, &mut b));
    }

    #[test]
    fn glob_agrees_with_a_backtracking_reference(
        pattern in prop::collection::vec(prop::sample::select(&["/", "/", "*", "**", "a", "b", "."][..]), 0..8),
        path in prop::collection::vec(prop::sample::select(&["/", "/", "a", "b", "."][..]), 0..10),
    ) {
        let pattern = format!("/{}", pattern.concat());
        let path = format!("/{}", path.concat());
        if let Ok(glob) = Glob::compile(&pattern) {
            prop_assert_eq!(
                glob.matches(path.as_bytes()),
                reference(pattern.as_bytes(), 0, path.as_bytes(), 0),
                "pattern {} path {}", pattern, path
            );
        }
    }
}

fn segments_path() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop::sample::select(&["a", "b", "ab", "segment-nine", "segment-ten"][..]),
        0..4,
    )
    .prop_map(|segments| format!("/{}", segments.join("/")))
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 2048,
        rng_seed: proptest::test_runner::RngSeed::Fixed(0x9A7B_0008),
        ..ProptestConfig::default()
    })]

    #[test]
    fn path_matcher_agrees_with_a_linear_scan(
        patterns in prop::collection::vec((any::<bool>(), segments_path()), 0..8),
        path in segments_path(),
    ) {
        let mut m = PathMatcher::new();
        for (i, (exact, p)) in patterns.iter().enumerate() {
            let kind = if *exact { PathKind::Exact } else { PathKind::Prefix };
            prop_assert_eq!(m.insert(kind, p, i), Ok(i));
        }
        let takes = |exact: bool, p: &str| {
            path == p || (!exact && (p == "/" || path.starts_with(&format!("{p}/"))))
        };
        let first = patterns.iter().position(|(exact, p)| takes(*exact, p));
        prop_assert_eq!(m.lookup(path.as_bytes()).map(|(i, _)| i), first);
        let best = patterns
            .iter()
            .position(|(exact, p)| *exact && takes(true, p))
            .or_else(|| {
                let longest = patterns
                    .iter()
                    .filter(|(exact, p)| !*exact && takes(false, p))
                    .map(|(_, p)| p.len())
                    .max()?;
                patterns
                    .iter()
                    .position(|(exact, p)| !*exact && p.len() == longest && takes(false, p))
            });
        prop_assert_eq!(m.best_route(path.as_bytes()).map(|(i, _)| i), best);
        if let Some((i, v)) = m.lookup(path.as_bytes()) {
            prop_assert_eq!(i, *v);
        }
    }
}

/// The glob's meaning, written directly over the pattern text and matched by
/// backtracking: exponential, for short inputs only.
fn reference(p: &[u8], pi: usize, s: &[u8], si: usize) -> bool {
    if pi == p.len() {
        return si == s.len();
    }
    if p[pi] != b'*' {
        return si < s.len() && s[si] == p[pi] && reference(p, pi + 1, s, si + 1);
    }
    if p.get(pi + 1) == Some(&b'*') {
        if p[pi - 1] == b'/' && p.get(pi + 2) == Some(&b'/') {
            // `/**/`: the '/' before has matched; resume after none or more
            // whole segments, each with its '/'.
            return (si..=s.len())
                .filter(|&j| j == si || s[j - 1] == b'/')
                .any(|j| reference(p, pi + 3, s, j));
        }
        return (si..=s.len()).any(|j| reference(p, pi + 2, s, j));
    }
    let mut j = si;
    loop {
        if reference(p, pi + 1, s, j) {
            return true;
        }
        if j == s.len() || s[j] == b'/' {
            return false;
        }
        j += 1;
    }
}

#[test]
fn reference_agrees_on_the_documented_examples() {
    for (p, s, want) in [
        ("/**/.env", "/.env", true),
        ("/**/.env", "/a/b/.env", true),
        ("/**/.env", "/a.env", false),
        ("/*.php", "/a/b.php", false),
        ("/**.php", "/a/b.php", true),
    ] {
        assert_eq!(reference(p.as_bytes(), 0, s.as_bytes(), 0), want, "{p} {s}");
        assert_eq!(
            Glob::compile(p).unwrap().matches(s.as_bytes()),
            want,
            "{p} {s}"
        );
    }
}
