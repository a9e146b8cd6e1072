//! The access log through the real binary: one JSON line per request with
//! every key, the deciding step named, no credentials, cookies or query;
//! hashed addresses; the combined format; reopening on SIGUSR1.

mod common;

use common::gate::{basic, req_with};
use common::*;
use std::path::Path;
use std::time::Duration;

fn log_profile(path: &Path, extra: &str) -> String {
    profile(
        &format!("access_log = {{ path = \"{}\"{extra} }}", path.display()),
        r#"
[[access_list]]
name = "staff"
users = [{ name = "alice", password_hash = "$pbkdf2-sha256$i=100000$YyL45f2NjRWx82ZN2Q0D2A$gWBUOhuyMMRVCLxwGPL+wC6YjqC2LMZqQ1Qx8O7uIUA" }]

[[host]]
names = ["log.test"]
body = "ok\n"

[[host]]
names = ["auth.test"]
body = "secret\n"
access_list = "staff"
"#,
    )
}

/// The file's lines once it holds `n` (the shards hand lines over once a
/// second).
fn lines(path: &Path, n: usize) -> Vec<String> {
    let mut got = Vec::new();
    wait_until(Duration::from_secs(10), || {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        got = text.lines().map(str::to_string).collect();
        got.len() >= n
    });
    got
}

#[test]
fn every_request_gets_a_json_line_without_secrets() {
    let dir = TempDir::new();
    let path = dir.0.join("access.log");
    let g = Gapura::start(&log_profile(&path, ""));
    let r = request(
        g.addr,
        &req_with(
            "GET",
            "log.test",
            "/page?token=hunter2",
            &["Cookie: session=s3cr3t", "Connection: close"],
        ),
    );
    assert_eq!(r.status, 200);
    let wrong = format!("Authorization: {}", basic("alice", "wrong-password"));
    let r = request(
        g.addr,
        &req_with("GET", "auth.test", "/", &[&wrong, "Connection: close"]),
    );
    assert_eq!(r.status, 401);
    let r = request(
        g.addr,
        &req_with("GET", "nowhere.test", "/", &["Connection: close"]),
    );
    assert_eq!(r.status, 404);
    let got = lines(&path, 3);
    assert_eq!(got.len(), 3, "{got:?}");
    let text = got.join("\n");
    for secret in ["hunter2", "s3cr3t", "Basic ", "wrong-password", "token="] {
        assert!(!text.contains(secret), "{secret} in the log: {text}");
    }
    let first: serde_json::Value = serde_json::from_str(&got[0]).unwrap();
    for key in [
        "time",
        "shard",
        "connection",
        "client",
        "host",
        "method",
        "path",
        "status",
        "bytes",
        "upstream_ms",
        "total_ms",
        "request_id",
        "verdict",
        "step",
    ] {
        assert!(first.get(key).is_some(), "{key} missing: {first}");
    }
    assert_eq!(first["client"], "127.0.0.1");
    assert_eq!(first["host"], "log.test");
    assert_eq!(first["method"], "GET");
    assert_eq!(first["path"], "/page");
    assert_eq!(first["status"], 200);
    assert_eq!(first["verdict"], "respond");
    assert_eq!(first["step"], "answer");
    assert!(first["bytes"].as_u64().unwrap() > 3);
    assert_eq!(first["request_id"].as_str().unwrap().len(), 24);
    let second: serde_json::Value = serde_json::from_str(&got[1]).unwrap();
    assert_eq!(second["status"], 401);
    assert_eq!(second["step"], "access_list");
    // Checked on the pool and refused: one line, for the answer.
    assert_eq!(second["verdict"], "challenge");
    let third: serde_json::Value = serde_json::from_str(&got[2]).unwrap();
    assert_eq!(third["status"], 404);
    assert_eq!(third["step"], "host");
    // Three connections (each request closed its own): three serials.
    let serials: std::collections::BTreeSet<u64> = [&first, &second, &third]
        .iter()
        .map(|v| v["connection"].as_u64().unwrap())
        .collect();
    assert_eq!(serials.len(), 3, "{text}");
    assert_eq!(g.metric("gapura_access_log_lines_total{shard=\"0\"}"), 3);
}

#[test]
fn hashed_addresses_and_the_combined_format() {
    let dir = TempDir::new();
    let path = dir.0.join("hashed.log");
    let g = Gapura::start(&log_profile(&path, ", log_addresses = \"hash\""));
    assert_eq!(
        request(
            g.addr,
            &req_with("GET", "log.test", "/", &["Connection: close"])
        )
        .status,
        200
    );
    let got = lines(&path, 1);
    let v: serde_json::Value = serde_json::from_str(&got[0]).unwrap();
    let client = v["client"].as_str().unwrap();
    assert_eq!(client.len(), 16, "{client}");
    assert!(client.bytes().all(|b| b.is_ascii_hexdigit()), "{client}");
    assert!(!got[0].contains("127.0.0.1"));
    drop(g);

    let path = dir.0.join("combined.log");
    let g = Gapura::start(&log_profile(&path, ", format = \"combined\""));
    assert_eq!(
        request(
            g.addr,
            &req_with("GET", "log.test", "/a?b=c", &["Connection: close"])
        )
        .status,
        200
    );
    let got = lines(&path, 1);
    assert!(got[0].starts_with("127.0.0.1 - - ["), "{}", got[0]);
    assert!(got[0].contains("] \"GET /a HTTP/1.1\" 200 "), "{}", got[0]);
}

#[test]
fn sigusr1_reopens_the_file_for_rotation() {
    let dir = TempDir::new();
    let path = dir.0.join("rotate.log");
    let g = Gapura::start(&log_profile(&path, ""));
    assert_eq!(
        request(
            g.addr,
            &req_with("GET", "log.test", "/one", &["Connection: close"])
        )
        .status,
        200
    );
    assert_eq!(lines(&path, 1).len(), 1);
    let rotated = dir.0.join("rotate.log.1");
    std::fs::rename(&path, &rotated).unwrap();
    g.signal(libc::SIGUSR1);
    assert!(g.wait_log("access log: reopening", Duration::from_secs(10)));
    // The writer has opened the new file before the next buffer.
    assert!(g.wait_log("access log: reopened ", Duration::from_secs(10)));
    assert_eq!(
        request(
            g.addr,
            &req_with("GET", "log.test", "/two", &["Connection: close"])
        )
        .status,
        200
    );
    let new = lines(&path, 1);
    assert_eq!(new.len(), 1, "{new:?}");
    assert!(new[0].contains("\"path\":\"/two\""), "{new:?}");
    let old = std::fs::read_to_string(&rotated).unwrap();
    assert_eq!(old.lines().count(), 1);
    assert!(old.contains("\"path\":\"/one\""));
}

#[test]
fn an_access_log_that_cannot_be_opened_stops_the_start_and_check_says_so() {
    let dir = TempDir::new();
    let path = dir.0.join("no-such-dir").join("access.log");
    let text = log_profile(&path, "");
    let err = Gapura::try_start(&text, &[])
        .err()
        .expect("the start is refused");
    assert!(err.contains("access log: cannot open"), "{err}");
    let file = dir.0.join("p.toml");
    std::fs::write(&file, &text).unwrap();
    let check = std::process::Command::new(common::bin())
        .arg("check")
        .arg(&file)
        .output()
        .unwrap();
    assert!(!check.status.success());
    let said = String::from_utf8_lossy(&check.stderr);
    assert!(
        said.contains("does not exist") && said.contains("would not start"),
        "{said}"
    );
}

#[test]
fn lines_the_writer_cannot_write_are_counted_as_unwritten() {
    let dir = TempDir::new();
    let path = dir.0.join("first.log");
    let g = Gapura::start(&log_profile(&path, ""));
    // A reload to a file in a directory that does not exist: the writer
    // cannot open it, says so, and counts what it cannot write.
    let moved = dir.0.join("gone").join("second.log");
    let text = std::fs::read_to_string(&g.profile)
        .unwrap()
        .replace(&path.display().to_string(), &moved.display().to_string());
    std::fs::write(&g.profile, text).unwrap();
    g.signal(libc::SIGHUP);
    assert!(g.wait_log("access log: cannot open", Duration::from_secs(10)));
    for _ in 0..3 {
        let r = request(
            g.addr,
            &req_with("GET", "log.test", "/x", &["Connection: close"]),
        );
        assert_eq!(r.status, 200);
    }
    assert_eq!(
        g.wait_metric(
            "gapura_access_log_unwritten_total",
            3,
            Duration::from_secs(10)
        ),
        3
    );
}

/// Credentials, cookies and the identity header's value are echoed
/// nowhere: not in a refusal page (401, 429), not in the access log, not
/// in `explain`'s text or JSON.
#[test]
fn secrets_are_echoed_nowhere_pages_log_or_explain() {
    let dir = TempDir::new();
    let path = dir.0.join("access.log");
    let text = log_profile(&path, "")
        + "\n[quota]\nwindow_ms = 60000\n[quota.identity]\nheader = \"x-api-key\"\nrequests = 1\n";
    let g = Gapura::start(&text);
    let wrong = basic("alice", "pw-secret-1");
    let headers = [
        format!("Authorization: {wrong}"),
        "Proxy-Authorization: Basic cHJveHlzZWNyZXQ=".to_string(),
        "Cookie: session=cookie-secret-2".to_string(),
        "X-Api-Key: key-secret-3".to_string(),
    ];
    let h: Vec<&str> = headers.iter().map(String::as_str).collect();
    let secrets = [
        wrong.as_str(),
        "pw-secret-1",
        "cHJveHlzZWNyZXQ=",
        "cookie-secret-2",
        "key-secret-3",
    ];
    let clean = |what: &str, text: &str| {
        for s in secrets {
            assert!(!text.contains(s), "{what} echoes {s}: {text}");
        }
    };
    let html = [h.clone(), vec!["Accept: text/html"]].concat();
    let mut statuses = Vec::new();
    for (host, hs) in [
        ("auth.test", &h),
        ("log.test", &h),
        ("log.test", &h),
        ("log.test", &html),
    ] {
        let r = request(g.addr, &req_with("GET", host, "/", hs));
        clean(
            &format!("the {} page", r.status),
            &String::from_utf8_lossy(&r.body),
        );
        clean("a header", &format!("{:?}", r.headers));
        statuses.push(r.status);
    }
    assert_eq!(statuses[0], 401);
    assert_eq!(statuses[2], 429, "the identity budget refused the second");
    let logged = lines(&path, 4).join("\n");
    assert!(logged.lines().count() >= 4);
    clean("the access log", &logged);
    let file = common::gate::ProfileFile::new(&text);
    let mut args = vec!["http://log.test/".to_string()];
    for x in &headers {
        args.push("-H".into());
        args.push(x.clone());
    }
    clean("explain", &common::gate::explain_text(&file.path, &args));
    clean(
        "explain --json",
        &common::gate::explain_json(&file.path, &args).to_string(),
    );
}
