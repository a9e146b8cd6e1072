//! `gapura explain` through the real binary: it gives the same answer as a
//! running server for the same request, and prints one line per step of
//! the chain.

mod common;

use common::gate::{explain_json, explain_text as explain};
use common::*;

/// One described request, sent to the server and to `explain` alike.
struct Case {
    method: &'static str,
    host: &'static str,
    path: String,
    headers: Vec<(String, String)>,
    /// Body bytes sent after the head (as many as a Content-Length says).
    body: usize,
}

fn case(method: &'static str, host: &'static str, path: &str) -> Case {
    Case {
        method,
        host,
        path: path.to_string(),
        headers: Vec::new(),
        body: 0,
    }
}

impl Case {
    fn header(mut self, name: &str, value: &str) -> Case {
        self.headers.push((name.to_string(), value.to_string()));
        self
    }

    fn body(mut self, len: usize) -> Case {
        self.body = len;
        self.header("Content-Length", &len.to_string())
    }

    fn explain_args(&self) -> Vec<String> {
        let mut args = Vec::new();
        for (n, v) in &self.headers {
            args.push("-H".to_string());
            args.push(format!("{n}: {v}"));
        }
        args.push(self.method.to_string());
        args.push(format!("http://{}{}", self.host, self.path));
        args
    }

    fn wire(&self) -> Vec<u8> {
        let mut head = format!(
            "{} {} HTTP/1.1\r\nHost: {}\r\n",
            self.method, self.path, self.host
        );
        for (n, v) in &self.headers {
            head.push_str(&format!("{n}: {v}\r\n"));
        }
        head.push_str("\r\n");
        let mut bytes = head.into_bytes();
        bytes.resize(bytes.len() + self.body, b'x');
        bytes
    }

    fn label(&self) -> String {
        let path: String = self.path.chars().take(40).collect();
        format!(
            "{} {}{path} ({} headers, body {})",
            self.method,
            self.host,
            self.headers.len(),
            self.body
        )
    }
}

/// The matrix's profile: respond, redirect and proxy hosts, tight request
/// limits on the proxy host, a route with a larger body limit, and a
/// rate-limited host.
fn matrix_profile(upstream: std::net::SocketAddr) -> String {
    profile(
        "",
        &format!(
            r#"
[[rate_limit]]
name = "once"
requests = 1
per = "minute"
burst = 1

[[upstream]]
name = "app"
servers = ["{upstream}"]

[[host]]
names = ["r.test"]
kind = "respond"
body = "r\n"

[[host]]
names = ["down.test"]
kind = "respond"
status = 503
body = "down\n"

[[host]]
names = ["redir.test"]
kind = "redirect"
status = 301
target = "https://example.com"

[[host]]
names = ["p.test"]
kind = "proxy"
limits = {{ max_url_bytes = 256, max_header_count = 8, max_header_bytes = "1 KiB", max_body_bytes = 100 }}
  [[host.route]]
  path = "/api"
  upstream = "app"
  [[host.route]]
  path = "/exact"
  match = "exact"
  upstream = "app"
  [[host.route]]
  path = "/big"
  upstream = "app"
  limits = {{ max_body_bytes = "1 KiB" }}

[[host]]
names = ["rl.test"]
kind = "proxy"
rate_limit = "once"
  [[host.route]]
  path = "/"
  upstream = "app"
"#
        ),
    )
}

fn matrix() -> Vec<Case> {
    let mut many = case("GET", "p.test", "/api/x");
    for i in 0..8 {
        many = many.header(&format!("X-H{i}"), "1");
    }
    vec![
        case("GET", "r.test", "/"),
        case("HEAD", "r.test", "/"),
        case("GET", "down.test", "/"),
        case("GET", "redir.test", "/a?b=1"),
        case("GET", "unknown.test", "/"),
        case("GET", "unknown.test", &format!("/{}", "u".repeat(9000))),
        case("GET", "p.test", "/api/x"),
        case("GET", "p.test", "/API/./x"),
        case("GET", "p.test", "/exact"),
        case("GET", "p.test", "/exact/more"),
        case("GET", "p.test", "/administrator"),
        case("GET", "p.test", "/"),
        case("GET", "p.test", "/bad%zz"),
        // 414: the host allows 256 bytes of target.
        case("GET", "p.test", &format!("/api/{}", "a".repeat(300))),
        case("GET", "p.test", &format!("/api/{}", "a".repeat(200))),
        // 431: nine header lines against 8, and 1100 bytes against 1 KiB.
        many,
        case("GET", "p.test", "/api/x").header("X-Big", &"v".repeat(1100)),
        case("GET", "p.test", "/api/x").header("X-Big", &"v".repeat(900)),
        // 413: the host allows 100 body bytes, the /big route 1 KiB.
        case("POST", "p.test", "/api/x").body(1000),
        case("POST", "p.test", "/api/x").body(100),
        case("POST", "p.test", "/big").body(1000),
        case("POST", "p.test", "/big").body(2000),
        // A rate limit's first request, and the exempt robots.txt.
        case("GET", "rl.test", "/first"),
        case("GET", "rl.test", "/robots.txt"),
        // A forwarding header from a peer nobody trusts changes nothing.
        case("GET", "p.test", "/api/f").header("X-Forwarded-For", "203.0.113.9"),
    ]
}

/// What the running server answered: a forward is whatever the upstream
/// answers (200 here, with its marker header).
fn served_status(g: &Gapura, c: &Case) -> (u16, bool) {
    let r = request(g.addr, &c.wire());
    (r.status, r.header("X-Upstream") == Some("yes"))
}

#[test]
fn explain_gives_the_running_servers_answer_for_a_matrix_of_requests() {
    let up = common::upstream::fixed(b"up");
    let text = matrix_profile(up.addr);
    let dir = TempDir::new();
    let file = dir.0.join("matrix.toml");
    std::fs::write(&file, &text).unwrap();
    // One fresh server; the rate-limited host sees each bucket's first
    // request only, as explain's empty tables do.
    let g = Gapura::start(&text);
    let mut report = Vec::new();
    let mut mismatches = Vec::new();
    for c in matrix() {
        let said = explain_json(&file, &c.explain_args());
        let kind = said["answer"]["kind"].as_str().unwrap().to_string();
        let (status, forwarded) = served_status(&g, &c);
        let agrees = if kind == "forward" {
            assert!(said["answer"]["status"].is_null(), "{said}");
            forwarded && status == 200
        } else {
            !forwarded && said["answer"]["status"].as_u64() == Some(u64::from(status))
        };
        let line = format!(
            "{}: explain {kind} {}, server {status}{}",
            c.label(),
            said["answer"]["status"],
            if forwarded { " from the upstream" } else { "" }
        );
        if !agrees {
            mismatches.push(line.clone());
        }
        report.push(line);
    }
    assert!(
        mismatches.is_empty(),
        "explain and the server disagree:\n{}\n\nall cases:\n{}",
        mismatches.join("\n"),
        report.join("\n")
    );
    // The matrix covers each kind of answer.
    let all = report.join("\n");
    for needle in [
        "explain forward",
        "explain respond 200",
        "explain respond 503",
        "explain redirect 301",
        "explain refuse 400",
        "explain refuse 404",
        "explain refuse 413",
        "explain refuse 414",
        "explain refuse 431",
    ] {
        assert!(all.contains(needle), "no case for {needle}:\n{all}");
    }
}

#[test]
fn explain_reads_empty_tables_not_the_running_servers_buckets() {
    let up = common::upstream::fixed(b"up");
    let text = matrix_profile(up.addr);
    let dir = TempDir::new();
    let file = dir.0.join("rl.toml");
    std::fs::write(&file, &text).unwrap();
    let g = Gapura::start(&text);
    let c = case("GET", "rl.test", "/");
    let said = explain_json(&file, &c.explain_args());
    assert_eq!(said["answer"]["kind"], "forward", "{said}");
    assert_eq!(served_status(&g, &c), (200, true));
    // The server's bucket (burst 1) is spent; explain still sees a first
    // request, and says so.
    assert_eq!(served_status(&g, &c), (429, false));
    let said = explain_json(&file, &c.explain_args());
    assert_eq!(said["answer"]["kind"], "forward", "{said}");
    let quota = said["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["step"] == "rate limit")
        .unwrap();
    assert_eq!(quota["says"], "within every rate limit (on empty tables)");
}

/// The step names of explain's text output, in order, and the answer line.
fn step_names(out: &str) -> Vec<String> {
    out.lines()
        .skip(1)
        .map(|l| {
            assert!(l.starts_with("  "), "{l:?}");
            l[2..].get(..15).unwrap_or(&l[2..]).trim_end().to_string()
        })
        .collect()
}

#[test]
fn explain_prints_one_line_per_step_in_chain_order() {
    let up = common::upstream::fixed(b"up");
    let dir = TempDir::new();
    let file = dir.0.join("steps.toml");
    std::fs::write(&file, matrix_profile(up.addr)).unwrap();
    let args = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();

    let out = explain(&file, &args(&["GET", "http://rl.test/api/x"]));
    let first = out.lines().next().unwrap();
    assert_eq!(first, "GET http://rl.test/api/x from 127.0.0.1");
    assert_eq!(
        step_names(&out),
        [
            "client",
            "host",
            "path",
            "route",
            "budgets",
            "request limits",
            "rate limit",
            "answer"
        ],
        "{out}"
    );
    let lines: Vec<&str> = out.lines().collect();
    assert!(
        lines[1].ends_with("the client is the peer 127.0.0.1 (direct)"),
        "{out}"
    );
    assert!(lines[2].ends_with("matched host rl.test"), "{out}");
    assert!(lines[3].ends_with("canonical path /api/x"), "{out}");
    assert!(lines[4].ends_with("route #0 takes it"), "{out}");
    assert!(lines[5].ends_with("no budget applies"), "{out}");
    assert!(
        lines[6].ends_with("within the host's request limits"),
        "{out}"
    );
    assert!(
        lines[7].ends_with("within every rate limit (on empty tables)"),
        "{out}"
    );
    assert!(
        lines[8].ends_with(&format!(
            "forward along route / (prefix) to group app ({})",
            up.addr
        )),
        "{out}"
    );

    // A respond host without limits reads no path; a refusal names its status.
    let out = explain(&file, &args(&["http://r.test/"]));
    assert_eq!(
        step_names(&out),
        ["client", "host", "budgets", "request limits", "answer"],
        "{out}"
    );
    assert!(out.contains("no budget applies"), "{out}");
    assert!(out.ends_with("answer 200 from the host\n"), "{out}");

    let long = format!("http://p.test/api/{}", "a".repeat(300));
    let out = explain(&file, &args(&["GET", &long]));
    assert!(out.contains("target longer than allowed: 414"), "{out}");
    assert!(out.ends_with("refuse 414 with its page\n"), "{out}");

    let out = explain(&file, &args(&["http://nobody.test/"]));
    assert_eq!(
        step_names(&out),
        ["client", "host", "budgets", "request limits", "answer"],
        "{out}"
    );
    assert!(out.contains("no host takes this Host header"), "{out}");
    assert!(out.ends_with("refuse 404 with its page\n"), "{out}");

    let out = explain(&file, &args(&["http://rl.test/robots.txt"]));
    assert!(out.contains("robots.txt is never limited"), "{out}");

    // JSON lists the same steps as the text.
    let json = explain_json(&file, &args(&["GET", "http://rl.test/api/x"]));
    let names: Vec<&str> = json["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["step"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "client",
            "host",
            "path",
            "route",
            "budgets",
            "request limits",
            "rate limit"
        ]
    );
    assert_eq!(json["request"]["peer"], "127.0.0.1");
    assert_eq!(json["request"]["method"], "GET");
}

fn proxy_trusting_profile(upstream: std::net::SocketAddr, trusted: bool) -> String {
    let client = if trusted {
        "[client]\nmode = \"x_forwarded_for\"\ntrusted_proxies = [\"127.0.0.0/16\"]\n"
    } else {
        ""
    };
    profile(
        "",
        &format!(
            r#"{client}
[[rate_limit]]
name = "once"
requests = 1
per = "minute"
burst = 1

[[upstream]]
name = "app"
servers = ["{upstream}"]

[[host]]
names = ["app.test"]
kind = "proxy"
rate_limit = "once"
  [[host.route]]
  path = "/"
  upstream = "app"
"#
        ),
    )
}

#[test]
fn via_proxy_names_the_forwarded_client_only_when_the_peer_is_trusted() {
    let up = common::upstream::fixed(b"up");
    let dir = TempDir::new();
    let trusted = dir.0.join("trusted.toml");
    let direct = dir.0.join("direct.toml");
    std::fs::write(&trusted, proxy_trusting_profile(up.addr, true)).unwrap();
    std::fs::write(&direct, proxy_trusting_profile(up.addr, false)).unwrap();
    let args: Vec<String> = [
        "--via",
        "proxy",
        "--client",
        "203.0.113.7",
        "http://app.test/x",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();

    let out = explain(&trusted, &args);
    let client = out.lines().nth(1).unwrap();
    assert_eq!(step_names(&out)[0], "client", "{out}");
    assert!(
        client.ends_with("the client is 203.0.113.7, named by peer 127.0.0.1 (trusted_proxy)"),
        "{out}"
    );
    // Without the trust the forwarding header is someone's claim, ignored.
    let out = explain(&direct, &args);
    assert!(
        out.lines()
            .nth(1)
            .unwrap()
            .ends_with("the client is the peer 127.0.0.1 (direct)"),
        "{out}"
    );

    // The running server agrees: behind the trusted proxy each named client
    // has its own bucket; without the trust the proxy's address is the key.
    let send = |g: &Gapura, xff: &str| {
        request(
            g.addr,
            format!("GET /x HTTP/1.1\r\nHost: app.test\r\nX-Forwarded-For: {xff}\r\n\r\n")
                .as_bytes(),
        )
        .status
    };
    let g = Gapura::start(&proxy_trusting_profile(up.addr, true));
    assert_eq!(send(&g, "203.0.113.7"), 200);
    assert_eq!(send(&g, "203.0.113.7"), 429);
    assert_eq!(send(&g, "203.0.113.8"), 200);
    let g = Gapura::start(&proxy_trusting_profile(up.addr, false));
    assert_eq!(send(&g, "203.0.113.7"), 200);
    assert_eq!(send(&g, "203.0.113.8"), 429);
}

#[test]
fn explain_live_reads_the_running_servers_tables_without_changing_them() {
    let text = profile(
        "",
        r#"
[quota.source]
requests = 1000

[[rate_limit]]
name = "three"
requests = 1
per = "minute"
burst = 3

[[host]]
names = ["live.test"]
default = true
body = "ok\n"
rate_limit = "three"
"#,
    );
    let g = Gapura::start(&text);
    let get = || {
        request(
            g.addr,
            b"GET / HTTP/1.1\r\nHost: live.test\r\nConnection: close\r\n\r\n",
        )
        .status
    };
    for _ in 0..2 {
        assert_eq!(get(), 200);
    }
    let ask = || {
        let out = std::process::Command::new(common::bin())
            .args(["explain", "--json", "--live", "--admin"])
            .arg(g.admin.to_string())
            .arg("--profile")
            .arg(&g.profile)
            .args(["GET", "http://live.test/"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8(out.stdout).unwrap();
        // One document: the chain's decision with the live tables under
        // `live`.
        let doc = serde_json::from_str::<serde_json::Value>(&text).unwrap();
        assert_eq!(doc["answer"]["kind"], "respond", "{doc}");
        doc["live"].clone()
    };
    let live = ask();
    let shard = &live["shards"][0];
    // Text mode renders the live tables as text.
    let live_text = || {
        let out = std::process::Command::new(common::bin())
            .args(["explain", "--live", "--admin"])
            .arg(g.admin.to_string())
            .arg("--profile")
            .arg(&g.profile)
            .args(["GET", "http://live.test/"])
            .output()
            .unwrap();
        String::from_utf8(out.stdout).unwrap()
    };
    let text = live_text();
    assert!(
        text.contains(
            "live tables of the running server:\n  shard 0: client 127.0.0.1, host live.test"
        ),
        "{text}"
    );
    assert!(!text.contains('{'), "{text}");
    // The live tables' own verdict beside the tokens.
    assert!(
        text.contains("rate limit three: 1 token: this client's next request is within it"),
        "{text}"
    );
    assert_eq!(shard["host"], "live.test");
    assert_eq!(shard["client"], "127.0.0.1");
    assert_eq!(shard["rate_limit"]["name"], "three");
    assert_eq!(shard["rate_limit"]["tokens"], 1, "{live}");
    // The window started at the first request (1 s long): both counted,
    // or none when it rolled over since.
    assert!(
        shard["source_window_count"].as_u64().unwrap() <= 2,
        "{live}"
    );
    // Whether credentials are in the verification cache is never said.
    assert!(shard.get("verification_cached").is_none(), "{live}");
    // Asking again changed nothing: still one token.
    assert_eq!(ask()["shards"][0]["rate_limit"]["tokens"], 1);
    assert_eq!(get(), 200);
    assert_eq!(ask()["shards"][0]["rate_limit"]["tokens"], 0);
    let text = live_text();
    assert!(
        text.contains("rate limit three: 0 tokens: this client's next request now gets 429"),
        "{text}"
    );
}

#[test]
fn explain_tells_an_https_url_from_a_plaintext_one() {
    let dir = TempDir::new();
    let file = dir.0.join("https.toml");
    std::fs::write(
        &file,
        "[[host]]\nnames = [\"s.test\"]\nkind = \"respond\"\nstatus = 200\nbody = \"s\"\nhttps_redirect = true\n",
    )
    .unwrap();
    let args = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let plain = explain(&file, &args(&["GET", "http://s.test/x"]));
    assert!(
        plain.contains("the request came in plaintext: 308 to https"),
        "{plain}"
    );
    assert!(
        plain.contains("redirect 308 to https (port 443)"),
        "{plain}"
    );
    let tls = explain(&file, &args(&["GET", "https://s.test/x"]));
    assert!(tls.contains("the request came over TLS"), "{tls}");
    assert!(tls.contains("answer 200 from the host"), "{tls}");
}

/// A GET on the admin listener with `auth` (an `Authorization` value).
fn admin_get(addr: std::net::SocketAddr, path: &str, auth: Option<&str>) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    let auth = auth.map_or(String::new(), |a| format!("Authorization: {a}\r\n"));
    write!(s, "GET {path} HTTP/1.1\r\nHost: admin\r\n{auth}\r\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

#[test]
fn an_admin_token_guards_every_admin_path_but_healthz() {
    use std::os::unix::fs::PermissionsExt;
    let dir = TempDir::new();
    let token_file = dir.0.join("admin.token");
    std::fs::write(&token_file, "s3cret-admin-token-0123\n").unwrap();
    std::fs::set_permissions(&token_file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let text = profile(
        &format!("admin_token_file = {:?}", token_file.display().to_string()),
        HELLO_HOST,
    );
    let g = Gapura::start(&text);
    let bearer = "Bearer s3cret-admin-token-0123";
    for path in [
        "/metrics",
        "/heap",
        "/explain?method=GET&path=/&peer=127.0.0.1",
    ] {
        for auth in [
            None,
            Some("Bearer wrong-token-0000000000"),
            Some("Basic czNjcmV0"),
        ] {
            let r = admin_get(g.admin, path, auth);
            assert!(r.starts_with("HTTP/1.1 401"), "{path} {auth:?}: {r}");
            assert!(!r.contains("gapura_requests_total"), "{r}");
        }
    }
    assert!(admin_get(g.admin, "/metrics", Some(bearer)).contains("gapura_requests_total"));
    assert!(admin_get(g.admin, "/healthz", None).starts_with("HTTP/1.1 200"));
    // explain --live reads the token from the profile and is let in.
    let out = std::process::Command::new(common::bin())
        .args(["explain", "--json", "--live", "--admin"])
        .arg(g.admin.to_string())
        .arg("--profile")
        .arg(&g.profile)
        .args(["GET", "http://hello.test/"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // A token file others can read is refused by check and run alike.
    std::fs::set_permissions(&token_file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let profile_file = dir.0.join("open.toml");
    std::fs::write(&profile_file, &text).unwrap();
    let check = std::process::Command::new(common::bin())
        .arg("check")
        .arg(&profile_file)
        .output()
        .unwrap();
    assert!(!check.status.success());
    assert!(String::from_utf8_lossy(&check.stderr).contains("chmod 600"));
    assert!(Gapura::try_start(&text, &[]).is_err());
}

/// Text a person reads has words, not the code's names: no `Some(`,
/// `None`, `Prefix(`, `Count(` and no CamelCase word (an enum variant).
fn reads_as_words(text: &str) {
    for bad in ["Some(", "None", "Prefix(", "Exact(", "Count(", "(\""] {
        assert!(!text.contains(bad), "{bad:?} in:\n{text}");
    }
    for word in text.split(|c: char| !c.is_ascii_alphanumeric()) {
        let b = word.as_bytes();
        let camel = b
            .windows(2)
            .any(|w| w[0].is_ascii_lowercase() && w[1].is_ascii_uppercase());
        assert!(!camel, "{word:?} in:\n{text}");
    }
}

#[test]
fn explain_check_and_the_pages_speak_in_words() {
    let up = common::upstream::fixed(b"up");
    let dir = TempDir::new();
    let file = dir.0.join("words.toml");
    let text = profile(
        "",
        &format!(
            r#"
[[rate_limit]]
name = "site"
requests = 1
per = "minute"

[[access_list]]
name = "office"
allow = ["10.0.0.0/8"]
deny = ["192.0.2.0/24"]
users = [
  {{ name = "alice", password_hash = "$pbkdf2-sha256$i=100000$4oIHnorXlottSFKouWKuKg$tDCbfNfDmlED4CXmuasw/mB3qPueQOt0glrBdB1jrCk" }},
]

[[rule_set]]
name = "edge"
  [[rule_set.rule]]
  path.prefix = "/admin"
  action = "deny"
  [[rule_set.rule]]
  user_agent = {{ contains = ["curl"] }}
  action = "challenge"

[[upstream]]
name = "app"
servers = ["{}"]

[[host]]
names = ["a.test"]
kind = "proxy"
access_list = "office"
rule_set = "edge"
rate_limit = "site"
proof_of_work = {{ enabled = true, when = "edge" }}
[host.maintenance]
enabled = true
mode = "shadow"
  [[host.route]]
  path = "/"
  upstream = "app"
  [[host.route]]
  path = "/exact"
  match = "exact"
  upstream = "app"
"#,
            up.addr
        ),
    );
    std::fs::write(&file, &text).unwrap();
    for args in [
        vec!["GET", "http://a.test/x"],
        vec!["GET", "http://a.test/admin"],
        vec!["--peer", "192.0.2.9", "GET", "http://a.test/x"],
        vec![
            "-H",
            "Authorization: Basic YWxpY2U6eA==",
            "GET",
            "http://a.test/exact",
        ],
        vec![
            "-H",
            "User-Agent: curl/8",
            "-H",
            "Cookie: gapura_pow=x",
            "GET",
            "http://a.test/x",
        ],
        vec!["GET", "http://a.test/%00"],
    ] {
        reads_as_words(&common::gate::explain_text(&file, &args));
    }
    let check = std::process::Command::new(common::bin())
        .arg("check")
        .arg(&file)
        .output()
        .unwrap();
    reads_as_words(&String::from_utf8_lossy(&check.stdout));
    reads_as_words(&String::from_utf8_lossy(&check.stderr));
    // A refusal's plain-text page.
    let g = Gapura::start(&text);
    let r = request(g.addr, b"GET /x HTTP/1.1\r\nHost: nobody.test\r\n\r\n");
    reads_as_words(&String::from_utf8_lossy(&r.body));
}
