//! Proof of work through the real binary, a real upstream and the shipped
//! JavaScript solver (run by Node): challenge, solution, 303 with the
//! cookie, the protected page; forged, expired, wrong-host and
//! wrong-client cookies refused; the verify endpoint's refusals; a key
//! that cannot be used fails closed; explain says what the server does.

mod common;

use common::gate::{
    explain_json, explain_steps, reporting_upstream, req_with, rule_sample, wait_sample,
    ProfileFile,
};
use common::*;
use gapura_gate::pow::{host_id, mint_challenge, mint_cookie, solves, PowKey};
use std::net::IpAddr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const HTML: &str = "Accept: text/html,application/xhtml+xml";

fn pow_profile(up: std::net::SocketAddr, key_file: &std::path::Path, extra: &str) -> String {
    profile(
        &format!("pow_key_file = \"{}\"", key_file.display()),
        &format!(
            r#"
[[upstream]]
name = "app"
servers = ["{up}"]

[[host]]
names = ["p.test"]
default = true
kind = "proxy"
proof_of_work = {{ enabled = true, difficulty = 8, token_lifetime_hours = 2 }}
{extra}
  [[host.route]]
  path = "/"
  upstream = "app"
  [[host.route]]
  path = "/api"
  upstream = "app"
  proof_of_work = false
"#
        ),
    )
}

fn now_s() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// The key gapura created, read back as a test would from the file.
fn read_key(path: &std::path::Path) -> PowKey {
    let hex = std::fs::read_to_string(path).unwrap();
    let hex = hex.trim();
    let bytes: Vec<u8> = (0..32)
        .map(|i| u8::from_str_radix(&hex[i * 2..i * 2 + 2], 16).unwrap())
        .collect();
    PowKey::new(&bytes.try_into().unwrap())
}

fn attr(body: &str, name: &str) -> String {
    let start = body.find(&format!("{name}=\"")).unwrap() + name.len() + 2;
    body[start..start + body[start..].find('"').unwrap()].to_string()
}

/// Solves with the page's own script, as a browser's workers would.
fn solve_with_the_page_script(challenge: &str, difficulty: &str) -> String {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let out = std::process::Command::new("node")
        .arg(format!("{root}/gate/tests/pow_solver_check.js"))
        .arg(format!("{root}/gate/src/pow/solver.js"))
        .arg(challenge)
        .arg(difficulty.trim_start_matches('0'))
        .output()
        .expect("node runs the page's solver (Node.js is part of the build machine)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

fn solve(challenge: &str, difficulty: u8) -> String {
    (0u64..)
        .map(|n| n.to_string())
        .find(|c| solves(challenge.as_bytes(), c.as_bytes(), difficulty))
        .unwrap()
}

fn post_form(body: &str) -> Vec<u8> {
    format!(
        "POST /.well-known/gapura/pow HTTP/1.1\r\nHost: p.test\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

fn cookie_value(r: &Response) -> Option<String> {
    let c = r.header("Set-Cookie")?;
    Some(
        c.strip_prefix("gapura_pow=")?
            .split(';')
            .next()?
            .to_string(),
    )
}

#[test]
fn a_browser_solves_the_challenge_and_reaches_the_page() {
    let up = reporting_upstream();
    let dir = TempDir::new();
    let key_file = dir.0.join("pow.key");
    let g = Gapura::start(&pow_profile(up.addr, &key_file, ""));
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&key_file).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "the key file is created private");

    let page = request(g.addr, &req_with("GET", "p.test", "/page?x=1", &[HTML]));
    assert_eq!(page.status, 403);
    assert_eq!(page.header("Cache-Control"), Some("no-store"));
    let csp = page.header("Content-Security-Policy").unwrap();
    assert!(csp.contains("worker-src blob:") && csp.contains("script-src 'sha256-"));
    let body = String::from_utf8(page.body.clone()).unwrap();
    assert!(body.contains("<noscript>"));
    let challenge = attr(&body, "data-challenge");
    let difficulty = attr(&body, "data-difficulty");
    assert_eq!((challenge.len(), difficulty.as_str()), (56, "08"));
    assert!(
        up.requests.lock().unwrap().is_empty(),
        "nothing reached the upstream"
    );

    let counter = solve_with_the_page_script(&challenge, &difficulty);
    let form = format!("challenge={challenge}&solution={counter}&return=%2Fpage%3Fx%3D1");
    let verified = request(g.addr, &post_form(&form));
    assert_eq!(verified.status, 303);
    assert_eq!(verified.header("Location"), Some("/page?x=1"));
    let set = verified.header("Set-Cookie").unwrap();
    assert!(
        set.ends_with("; Path=/; Max-Age=7200; HttpOnly; SameSite=Lax"),
        "{set}"
    );
    let cookie = cookie_value(&verified).unwrap();

    let with = format!("Cookie: theme=dark; gapura_pow={cookie}");
    let r = request(
        g.addr,
        &req_with("GET", "p.test", "/page?x=1", &[HTML, &with]),
    );
    assert_eq!(r.status, 200);
    assert_eq!(r.header("X-Upstream"), Some("yes"));
    // A client that is not a browser gets the explanation, not the page.
    let api = request(
        g.addr,
        &req_with("GET", "p.test", "/data", &["Accept: application/json"]),
    );
    assert_eq!(api.status, 403);
    assert!(String::from_utf8_lossy(&api.body).contains("proof-of-work"));
    // A route with the switch off and robots.txt are never challenged.
    assert_eq!(
        request(g.addr, &req_with("GET", "p.test", "/api/x", &[HTML])).status,
        200
    );
    assert_eq!(
        request(g.addr, &req_with("GET", "p.test", "/robots.txt", &[HTML])).status,
        200
    );
    for (sample, want) in [
        ("gapura_pow_challenges_total", 1),
        ("gapura_pow_solved_total", 1),
        ("gapura_pow_non_browser_total", 1),
        ("gapura_pow_cookies_total{result=\"valid\"}", 1),
    ] {
        assert_eq!(
            g.wait_metric(sample, want, Duration::from_secs(5)),
            want,
            "{sample}"
        );
    }
}

#[test]
fn forged_expired_wrong_host_and_wrong_client_cookies_are_refused() {
    let up = reporting_upstream();
    let dir = TempDir::new();
    let key_file = dir.0.join("pow.key");
    let g = Gapura::start(&pow_profile(up.addr, &key_file, ""));
    let key = read_key(&key_file);
    let me: IpAddr = "127.0.0.1".parse().unwrap();
    let host = host_id("p.test");
    let later = now_s() + 3600;
    let text = |v: [u8; 35]| String::from_utf8(v.to_vec()).unwrap();
    let good = text(mint_cookie(&key, host, me, later, 8));
    let cases = [
        (
            "forged",
            text(mint_cookie(&PowKey::new(&[1; 32]), host, me, later, 8)),
        ),
        ("expired", text(mint_cookie(&key, host, me, now_s() - 5, 8))),
        (
            "wrong host",
            text(mint_cookie(&key, host_id("q.test"), me, later, 8)),
        ),
        (
            "wrong client",
            text(mint_cookie(
                &key,
                host,
                "127.0.0.2".parse().unwrap(),
                later,
                8,
            )),
        ),
        ("too easy", text(mint_cookie(&key, host, me, later, 4))),
        ("garbage", "x".repeat(35)),
    ];
    for (name, cookie) in &cases {
        let c = format!("Cookie: gapura_pow={cookie}");
        let r = request(g.addr, &req_with("GET", "p.test", "/", &[HTML, &c]));
        assert_eq!(r.status, 403, "{name}");
        assert!(
            String::from_utf8_lossy(&r.body).contains("data-challenge"),
            "{name}"
        );
    }
    assert!(up.requests.lock().unwrap().is_empty());
    let c = format!("Cookie: gapura_pow={good}");
    assert_eq!(
        request(g.addr, &req_with("GET", "p.test", "/", &[HTML, &c])).status,
        200
    );
    let refused = "gapura_pow_cookies_total{result=\"refused\"}";
    assert_eq!(g.wait_metric(refused, 6, Duration::from_secs(5)), 6);
}

#[test]
fn the_verify_endpoint_refuses_what_it_cannot_accept() {
    let up = reporting_upstream();
    let dir = TempDir::new();
    let key_file = dir.0.join("pow.key");
    let g = Gapura::start(&pow_profile(up.addr, &key_file, ""));
    let key = read_key(&key_file);
    let me: IpAddr = "127.0.0.1".parse().unwrap();
    let host = host_id("p.test");
    let fresh =
        String::from_utf8(mint_challenge(&key, host, me, now_s(), [5; 16], 8).to_vec()).unwrap();
    let good = solve(&fresh, 8);
    let bad = (0u64..)
        .map(|n| n.to_string())
        .find(|c| !solves(fresh.as_bytes(), c.as_bytes(), 8))
        .unwrap();
    let old = String::from_utf8(mint_challenge(&key, host, me, now_s() - 700, [6; 16], 8).to_vec())
        .unwrap();
    let old_solution = solve(&old, 8);
    let other = String::from_utf8(
        mint_challenge(&key, host_id("q.test"), me, now_s(), [7; 16], 8).to_vec(),
    )
    .unwrap();
    let other_solution = solve(&other, 8);
    let cases: [(&str, String, u16); 5] = [
        (
            "unsolved",
            format!("challenge={fresh}&solution={bad}&return=/"),
            403,
        ),
        (
            "not local",
            format!("challenge={fresh}&solution={good}&return=%2F%2Fevil.example"),
            403,
        ),
        (
            "another host's",
            format!("challenge={other}&solution={other_solution}&return=/"),
            403,
        ),
        ("missing fields", "challenge=x".to_string(), 403),
        (
            "expired",
            format!("challenge={old}&solution={old_solution}&return=/back"),
            303,
        ),
    ];
    for (name, form, want) in &cases {
        let r = request(g.addr, &post_form(form));
        assert_eq!(r.status, *want, "{name}");
        assert_eq!(cookie_value(&r), None, "{name}: no cookie");
    }
    let expired = request(g.addr, &post_form(&cases[4].1));
    assert_eq!(expired.header("Location"), Some("/back"));
    // Only POST, and a form of 2 KiB at most.
    assert_eq!(
        request(
            g.addr,
            &req_with("GET", "p.test", "/.well-known/gapura/pow", &[HTML])
        )
        .status,
        403
    );
    let big = format!(
        "challenge={fresh}&solution={good}&return=/&pad={}",
        "a".repeat(2100)
    );
    assert_eq!(request(g.addr, &post_form(&big)).status, 413);
    // Chunked works like a length.
    let form = format!("challenge={fresh}&solution={good}&return=/ok");
    let chunked = format!(
        "POST /.well-known/gapura/pow HTTP/1.1\r\nHost: p.test\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{form}\r\n0\r\n\r\n",
        form.len()
    );
    let r = request(g.addr, chunked.as_bytes());
    assert_eq!((r.status, r.header("Location")), (303, Some("/ok")));
    assert!(cookie_value(&r).is_some());
    for (reason, want) in [
        ("unsolved", 1),
        ("bad_return", 1),
        ("forged", 1),
        ("malformed", 2),
    ] {
        let s = format!("gapura_pow_rejected_total{{reason=\"{reason}\"}}");
        assert_eq!(
            g.wait_metric(&s, want, Duration::from_secs(5)),
            want,
            "{reason}"
        );
    }
}

#[test]
fn a_key_that_cannot_be_used_stops_check_and_run_alike() {
    let up = reporting_upstream();
    let dir = TempDir::new();
    let key_file = dir.0.join("pow.key");
    std::fs::write(&key_file, format!("{}\n", "ab".repeat(32))).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&key_file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let no_dir = dir.0.join("missing").join("pow.key");
    for (key, says) in [
        (&key_file, "is readable or writable by others"),
        (&no_dir, "does not exist"),
    ] {
        let text = pow_profile(up.addr, key, "");
        // `run` does not start, and says why.
        let Err(said) = Gapura::try_start(&text, &[]) else {
            panic!("started without a usable key ({says})");
        };
        assert!(said.contains("proof of work has no key"), "{said}");
        assert!(said.contains(says), "{said}");
        assert!(
            said.contains("error[server.pow_key_file.unusable] server.pow_key_file: "),
            "{said}"
        );
        assert!(!said.contains(&"ab".repeat(32)), "the key is never logged");
        // `check` says the same.
        let p = dir.0.join("check.toml");
        std::fs::write(&p, &text).unwrap();
        let out = std::process::Command::new(bin())
            .arg("check")
            .arg(&p)
            .output()
            .unwrap();
        assert!(!out.status.success(), "{says}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("proof of work has no key"), "{err}");
        assert!(err.contains(says), "{err}");
        assert!(err.contains("`gapura run` would not start"), "{err}");
        assert!(
            err.contains("error[server.pow_key_file.unusable] server.pow_key_file: "),
            "{err}"
        );
    }
}

/// A profile without `pow_key_file` (its warning,
/// `server.pow_key_file.missing`): the server starts and proof of work's
/// routes fail closed with 503; the others answer.
#[test]
fn without_a_key_file_proof_of_work_fails_closed() {
    let up = reporting_upstream();
    let dir = TempDir::new();
    let text = pow_profile(up.addr, &dir.0.join("unused.key"), "").replace(
        &format!("pow_key_file = \"{}\"", dir.0.join("unused.key").display()),
        "",
    );
    let g = Gapura::start(&text);
    let r = request(g.addr, &req_with("GET", "p.test", "/", &[HTML]));
    assert_eq!(r.status, 503);
    assert_eq!(
        request(g.addr, &req_with("GET", "p.test", "/api", &[HTML])).status,
        200
    );
    assert_eq!(
        g.wait_metric("gapura_pow_no_key_total", 1, Duration::from_secs(5)),
        1
    );
}

#[test]
fn a_rule_set_can_choose_who_is_challenged() {
    let up = reporting_upstream();
    let dir = TempDir::new();
    let key_file = dir.0.join("pow.key");
    let rules = r#"
[[rule_set]]
name = "suspects"
[[rule_set.rule]]
user_agent.contains = ["curl"]
action = "challenge"
"#;
    let text = pow_profile(up.addr, &key_file, "rule_set = \"suspects\"")
        .replace("difficulty = 8,", "difficulty = 8, when = \"suspects\",")
        + rules;
    let g = Gapura::start(&text);
    let ua = |s: &str| format!("User-Agent: {s}");
    let firefox = ua("Mozilla/5.0 Firefox/133.0");
    let curl = ua("curl/8.5");
    assert_eq!(
        request(g.addr, &req_with("GET", "p.test", "/", &[HTML, &firefox])).status,
        200
    );
    let r = request(g.addr, &req_with("GET", "p.test", "/", &[HTML, &curl]));
    assert_eq!(r.status, 403);
    assert!(String::from_utf8_lossy(&r.body).contains("data-challenge"));
    let challenged = rule_sample("suspects", "challenged");
    assert_eq!(wait_sample(&g, &challenged, 1, Duration::from_secs(5)), 1);
}

#[test]
fn explain_says_what_the_server_does() {
    let up = reporting_upstream();
    let dir = TempDir::new();
    let key_file = dir.0.join("pow.key");
    let text = pow_profile(up.addr, &key_file, "");
    let g = Gapura::start(&text);
    let key = read_key(&key_file);
    let cookie = String::from_utf8(
        mint_cookie(
            &key,
            host_id("p.test"),
            "127.0.0.1".parse().unwrap(),
            now_s() + 60,
            8,
        )
        .to_vec(),
    )
    .unwrap();
    let file = ProfileFile::new(&text);
    let url = "http://p.test/page";
    let cases = [
        (
            vec![HTML.to_string()],
            "pow_challenge",
            403u16,
            "no gapura_pow cookie",
        ),
        (
            vec!["Accept: application/json".into()],
            "pow_refuse",
            403,
            "not a browser",
        ),
        (
            vec![HTML.to_string(), format!("Cookie: gapura_pow={cookie}")],
            "forward",
            200,
            "a valid gapura_pow cookie",
        ),
    ];
    for (headers, kind, status, says) in cases {
        let mut args = vec![url.to_string(), "--client".into(), "127.0.0.1".into()];
        for h in &headers {
            args.push("-H".into());
            args.push(h.clone());
        }
        let said = explain_json(&file.path, &args);
        let steps = explain_steps(&said, "proof of work");
        assert!(steps.iter().any(|s| s.contains(says)), "{steps:?}");
        assert_eq!(said["answer"]["kind"], kind);
        let mut req = req_with(
            "GET",
            "p.test",
            "/page",
            &headers.iter().map(String::as_str).collect::<Vec<_>>(),
        );
        let r = request(g.addr, &std::mem::take(&mut req));
        assert_eq!(r.status, status, "the server agrees for {kind}");
    }
}

#[test]
fn the_cookie_is_secure_when_the_challenge_was_solved_over_tls() {
    use common::tls::{client_config, write_cert, ClientOptions, TlsClient};
    let up = reporting_upstream();
    let dir = TempDir::new();
    let key_file = dir.0.join("pow.key");
    let (cert, key, _) = write_cert(&dir.0, "p", &["p.test"]);
    let text = format!(
        "{}\n[[certificate]]\nnames = [\"p.test\"]\ncert = {cert:?}\nkey = {key:?}\n",
        pow_profile(up.addr, &key_file, "")
    )
    .replace(
        "listen = [\"127.0.0.1:0\"]",
        "listen = [\"127.0.0.1:0\", { addr = \"127.0.0.1:0\", tls = true }]",
    );
    let g = Gapura::start(&text);
    let config = client_config(ClientOptions::default());
    let mut c = TlsClient::connect(g.tls_addr.unwrap(), Some("p.test"), &config).unwrap();
    let page = c.request(&req_with("GET", "p.test", "/page", &[HTML]));
    assert_eq!(page.status, 403);
    let body = String::from_utf8(page.body.clone()).unwrap();
    let challenge = attr(&body, "data-challenge");
    let counter = solve(&challenge, 8);
    let form = format!("challenge={challenge}&solution={counter}&return=%2Fpage");
    let verified = c.request(&post_form(&form));
    assert_eq!(verified.status, 303);
    let set = verified.header("Set-Cookie").unwrap();
    assert!(set.ends_with("; HttpOnly; SameSite=Lax; Secure"), "{set}");
}

/// Proof of work's verify endpoint comes after the host's blocks through
/// maintenance: plain HTTP gets its redirect, maintenance stops it, as
/// they do any request; only then is a `POST` verified.
#[test]
fn the_verify_endpoint_waits_for_the_redirect_and_maintenance() {
    let up = reporting_upstream();
    let dir = TempDir::new();
    let key_file = dir.0.join("pow.key");
    let post = b"POST /.well-known/gapura/pow HTTP/1.1\r\nHost: p.test\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 3\r\n\r\na=b";
    let g = Gapura::start(&pow_profile(up.addr, &key_file, "https_redirect = true\n"));
    assert_eq!(request(g.addr, post).status, 308);
    let g = Gapura::start(&pow_profile(
        up.addr,
        &key_file,
        "\n[host.maintenance]\nenabled = true\n",
    ));
    assert_eq!(request(g.addr, post).status, 503);
    // Without them, the form is read and verified (a bad one: 303 back to
    // the challenge, or 403; never the upstream).
    let g = Gapura::start(&pow_profile(up.addr, &key_file, ""));
    let status = request(g.addr, post).status;
    assert!(matches!(status, 303 | 400 | 403), "{status}");
}
