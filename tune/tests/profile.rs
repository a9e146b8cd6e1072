//! Groups by the profile's routes, and the `--write` fragment compiling.

mod common;

use common::{known, line, opts, run, BASE_MS};
use gapura_tune::{compile_profile_text, fragment, Options};

const PROFILE: &str = r#"
[server]
listen = ["127.0.0.1:8080"]

[[upstream]]
name = "app"
servers = ["app.internal:9001"]

[quota]
window_ms = 2000

[[host]]
names = ["a.test"]
kind = "proxy"
  [[host.route]]
  path = "/"
  upstream = "app"
  [[host.route]]
  path = "/api"
  upstream = "app"
  [[host.route]]
  path = "/ws"
  match = "exact"
  upstream = "app"

[[host]]
names = ["b.test"]
body = "b\n"
"#;

fn with_profile() -> Options {
    let mut o = opts();
    o.profile = Some(compile_profile_text(PROFILE).unwrap());
    o
}

#[test]
fn lines_group_by_the_route_the_gate_picks() {
    let paths = [
        ("a.test", "/api/x"),
        ("A.TEST:443", "/API/y?q=1"),
        ("a.test", "/api/../api/z"),
        ("a.test", "/apix"),
        ("a.test", "/"),
        ("a.test", "/ws"),
        ("b.test", "/anything"),
        ("c.test", "/"),
    ];
    let log: String = paths
        .iter()
        .enumerate()
        .map(|(i, (h, p))| line(BASE_MS + i as u64, "192.0.2.1", h, p))
        .collect();
    let a = run(&log, &with_profile());
    assert_eq!(a.window_ms, 2000);
    let mut got: Vec<(String, String, u64)> = a
        .groups
        .iter()
        .map(|g| (g.name.host.clone(), g.name.route.clone(), g.requests))
        .collect();
    got.sort();
    let want = [
        ("(no host)", "*", 1),
        ("a.test", "/", 2),
        ("a.test", "/api", 3),
        ("a.test", "= /ws", 1),
        ("b.test", "*", 1),
    ];
    let want: Vec<(String, String, u64)> = want
        .iter()
        .map(|(h, r, n)| (h.to_string(), r.to_string(), *n))
        .collect();
    assert_eq!(got, want);
}

#[test]
fn the_fragment_compiles_into_a_profile_using_its_limits() {
    let (mut log, _) = known(20, 60, &[1, 2, 3, 9], 11);
    // Enough clients and seconds on the two other groups for a suggestion.
    for s in 0..61u64 {
        for c in 0..10u64 {
            let client = format!("198.51.100.{c}");
            log.push_str(&line(
                BASE_MS + s * 1000 + 20 + c,
                &client,
                "a.test",
                "/api/v1",
            ));
            log.push_str(&line(BASE_MS + s * 1000 + 40 + c, &client, "c.test", "/"));
        }
    }
    let a = run(&log, &with_profile());
    let text = fragment::render(&a, "test.log");
    assert!(text.contains("name = \"no-host\""), "{text}");
    assert!(text.contains("name = \"a-test-api\""), "{text}");
    assert!(text.contains("[quota.source]"), "{text}");
    let profile = format!(
        "[server]\nlisten = [\"127.0.0.1:8080\"]\n\n[[host]]\nnames = [\"a.test\"]\n\
         rate_limit = \"a-test-api\"\n\n[[host]]\nnames = [\"c.test\"]\nrate_limit = \"no-host\"\n\n{text}"
    );
    let c = compile_profile_text(&profile).unwrap_or_else(|e| panic!("{e}\n{profile}"));
    assert!(c.snapshot.gate.rate_limits.len() >= 2);
    assert!(c.snapshot.gate.quota.source.is_some());
}

#[test]
fn hashed_clients_leave_the_fragment_without_a_budget() {
    let log: String = (0..5)
        .map(|i| line(BASE_MS + i * 300, "0123456789abcdef", "a.test", "/"))
        .collect();
    let a = run(&log, &opts());
    let text = fragment::render(&a, "test.log");
    assert!(!text.contains("[quota.source]"), "{text}");
    // One client over two seconds: no rate limit either, and it says why.
    assert!(text.contains("not enough to suggest from"), "{text}");
    let profile =
        format!("[server]\nlisten = [\"127.0.0.1:8080\"]\n[[host]]\nnames = [\"a.test\"]\n{text}");
    compile_profile_text(&profile).unwrap_or_else(|e| panic!("{e}\n{profile}"));
}

#[test]
fn a_profile_that_does_not_compile_is_one_error_text() {
    let e = compile_profile_text("[server]\nlisten = 3\n").unwrap_err();
    assert!(e.contains("does not compile"), "{e}");
    let e = gapura_tune::compile_profile(std::path::Path::new("/nonexistent/p.toml")).unwrap_err();
    assert!(e.contains("profile.read"), "{e}");
}
