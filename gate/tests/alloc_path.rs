//! Proves that canonicalising a path, matching a glob and looking up path
//! patterns allocate nothing: a counting global allocator records every
//! allocation made on this test's thread while the calls run.

use gapura_gate::glob::Glob;
use gapura_gate::path::{canonical, canonicalize, PathScratch, MAX_PATH_BYTES};
use gapura_gate::pathmatch::{PathKind, PathMatcher};

mod common;
use common::allocations_in;

#[test]
fn canonicalising_allocates_nothing_borrowed_or_rewritten() {
    let mut scratch: PathScratch = [0u8; MAX_PATH_BYTES];
    let mut out = [0u8; 256];
    let mut long = vec![b'/'; 1];
    for _ in 0..800 {
        long.extend_from_slice(b"a/%2E%2E/B;x/..%2f");
    }
    let n = allocations_in(|| {
        // Already canonical: borrowed.
        let p = canonical(b"/static/app.js?v=1", &mut scratch).unwrap();
        assert_eq!(p, b"/static/app.js");
        // Rewritten in the scratch.
        let p = canonical(b"/STATIC//a/../App.js;jsessionid=1", &mut scratch).unwrap();
        assert_eq!(p, b"/static/app.js");
        let p = canonical(&long, &mut scratch).unwrap();
        assert_eq!(p, b"/");
        let p = canonicalize(b"/a%2fb%5Cc/.%2e/d.", &mut out).unwrap();
        assert_eq!(p, b"/a/b/d");
        assert!(canonical(b"/a%zz", &mut scratch).is_err());
    });
    assert_eq!(n, 0);
}

#[test]
fn glob_matching_allocates_nothing() {
    let env = Glob::compile("/**/.env").unwrap();
    let worst = Glob::compile("/**/a*a*a*a*a*b").unwrap();
    let mut path = b"/".to_vec();
    path.extend(std::iter::repeat_n(b'a', 8_000));
    let n = allocations_in(|| {
        assert!(env.matches(b"/a/b/.env"));
        assert!(!env.matches(b"/a.env"));
        assert!(!worst.matches(&path));
    });
    assert_eq!(n, 0);
}

#[test]
fn path_matcher_lookups_allocate_nothing() {
    let mut m = PathMatcher::new();
    m.insert(PathKind::Prefix, "/", "root").unwrap();
    m.insert(PathKind::Prefix, "/admin", "admin").unwrap();
    m.insert(PathKind::Exact, "/admin/login", "login").unwrap();
    for i in 0..100 {
        m.insert(PathKind::Prefix, &format!("/p{i}/x"), "p")
            .unwrap();
    }
    let mut scratch: PathScratch = [0u8; MAX_PATH_BYTES];
    let n = allocations_in(|| {
        let path = canonical(b"/Admin//login/", &mut scratch).unwrap();
        assert_eq!(m.best_route(path), Some((2, &"login")));
        assert_eq!(m.lookup(path), Some((0, &"root")));
        assert_eq!(
            m.lookup_where(path, |_, v| *v != "root"),
            Some((1, &"admin"))
        );
        assert_eq!(m.best_route(b"/p7/x/y/z"), Some((10, &"p")));
        assert_eq!(m.best_route(b"/administrator"), Some((0, &"root")));
    });
    assert_eq!(n, 0);
}

#[test]
fn the_counter_sees_an_allocation() {
    let n = allocations_in(|| {
        let v = std::hint::black_box(vec![1u8; 16]);
        drop(v);
    });
    assert_eq!(n, 1);
}
