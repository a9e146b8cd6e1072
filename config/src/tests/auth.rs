//! `[[auth_provider]]` and `auth`: presets, layering, and their codes.

use super::*;
use gapura_gate::auth::{HeaderMatch, Scope};
use gapura_gate::HostAction;

const UP: &str = r#"
[[upstream]]
name = "app"
servers = ["127.0.0.1:9001"]
"#;

fn host(auth: &str, route: &str) -> String {
    format!(
        r#"
[[host]]
names = ["a.test"]
kind = "proxy"
{auth}
  [[host.route]]
  path = "/"
  upstream = "app"
  [[host.route]]
  path = "/x"
  upstream = "app"
  {route}
"#
    )
}

fn route_auth(c: &Compiled) -> Vec<Option<u32>> {
    match &c.snapshot.entries[0].action {
        HostAction::Proxy(p) => p
            .routes
            .iter()
            .map(|r| r.policy.auth.map(|b| b.index))
            .collect(),
        _ => panic!("proxy host"),
    }
}

#[test]
fn presets_fill_path_headers_and_scope() {
    let c = ok(&format!(
        r#"{UP}
[[auth_provider]]
name = "a"
url = "http://127.0.0.1:9091"
preset = "authelia"

[[auth_provider]]
name = "b"
url = "http://localhost:9000/"
preset = "authentik"
cache = {{ ttl_ms = 0 }}

[[auth_provider]]
name = "c"
url = "http://127.0.0.1:4180/custom/check?x=1"
preset = "oauth2-proxy"
copy_headers = ["X-Auth-Request-User"]
request_headers = ["X-Api-Key"]
timeout_ms = 300
cache = {{ entries = 100, scope = "request" }}
{}"#,
        host("auth = \"a\"", "auth = \"c\"")
    ));
    let p = &c.snapshot.gate.auth_providers;
    assert_eq!(p.len(), 3);
    assert_eq!(p[0].path, "/api/authz/forward-auth");
    assert_eq!(p[0].copy.len(), 4);
    assert_eq!(p[0].scope, Scope::Request);
    assert_eq!(
        (p[0].ttl_ms, p[0].entries, p[0].timeout_ms),
        (10_000, 4096, 5000)
    );
    assert_eq!(p[1].path, "/outpost.goauthentik.io/auth/traefik");
    assert_eq!(p[1].copy, vec![HeaderMatch::parse("X-authentik-*")]);
    assert_eq!(p[1].scope, Scope::Host);
    assert_eq!(p[1].ttl_ms, 0);
    assert_eq!(p[1].authority, "localhost:9000");
    assert_eq!(p[2].path, "/custom/check?x=1", "a written path is kept");
    assert_eq!(p[2].copy, vec![HeaderMatch::parse("X-Auth-Request-User")]);
    assert!(p[2].send.iter().any(|s| &**s == "x-api-key"));
    assert_eq!(
        (p[2].entries, p[2].timeout_ms, p[2].scope),
        (128, 300, Scope::Request)
    );
    assert_eq!(route_auth(&c), [Some(0), Some(2)]);
    // The host strips the identity headers of both providers its routes ask.
    let strip = &c.snapshot.entries[0].extras.identity_strip;
    assert_eq!(strip.len(), 5);
}

#[test]
fn auth_layers_like_the_other_blocks() {
    let c = ok(&format!(
        r#"{UP}
[[auth_provider]]
name = "sso"
url = "http://127.0.0.1:9091/verify"

[defaults]
auth = "sso"
{}"#,
        host("", "auth = false")
    ));
    assert_eq!(route_auth(&c), [Some(0), None]);
}

#[test]
fn bad_providers_and_references_have_their_codes() {
    let provider = |body: &str| format!("{UP}\n[[auth_provider]]\nname = \"sso\"\n{body}\n");
    let cases = [
        ("", "authProvider.url.required"),
        ("url = \"https://sso.test/\"", "authProvider.url.invalid"),
        (
            "url = \"http://user:pw@sso.test/\"",
            "authProvider.url.invalid",
        ),
        ("url = \"http://127.0.0.1:0/\"", "authProvider.url.invalid"),
        (
            "url = \"http://nowhere.invalid/\"",
            "authProvider.url.unresolved",
        ),
        (
            "url = \"http://127.0.0.1:1/\"\npreset = \"okta\"",
            "authProvider.preset.invalid",
        ),
        (
            "url = \"http://127.0.0.1:1/\"\ncopy_headers = [\"Host\"]",
            "authProvider.header.invalid",
        ),
        (
            "url = \"http://127.0.0.1:1/\"\ncopy_headers = [\"X-Forwarded-User\"]",
            "authProvider.header.invalid",
        ),
        (
            "url = \"http://127.0.0.1:1/\"\nrequest_headers = [\"X-a*\"]",
            "authProvider.header.invalid",
        ),
        (
            "url = \"http://127.0.0.1:1/\"\ncopy_headers = [\"Cookie\"]",
            "authProvider.header.credential",
        ),
        (
            "url = \"http://127.0.0.1:1/\"\ncopy_headers = [\"Auth*\"]",
            "authProvider.header.credential",
        ),
        (
            "url = \"http://127.0.0.1:1/\"\ntimeout_ms = 0",
            "authProvider.timeout_ms.range",
        ),
        (
            "url = \"http://127.0.0.1:1/\"\ncache = { ttl_ms = 300001 }",
            "authProvider.cache.ttl_ms.range",
        ),
        (
            "url = \"http://127.0.0.1:1/\"\ncache = { entries = 8 }",
            "authProvider.cache.entries.range",
        ),
        (
            "url = \"http://127.0.0.1:1/\"\ncache = { scope = \"global\" }",
            "authProvider.cache.scope.invalid",
        ),
    ];
    for (body, code) in cases {
        let (got, path, _, _) = one(&provider(body));
        assert_eq!(got, code, "{body}");
        assert!(path.starts_with("auth_provider[0]"), "{path}");
    }
    let many: Vec<String> = (0..33).map(|i| format!("\"X-H{i}\"")).collect();
    let body = format!(
        "url = \"http://127.0.0.1:1/\"\ncopy_headers = [{}]",
        many.join(", ")
    );
    assert_eq!(one(&provider(&body)).0, "authProvider.headers.tooMany");
    assert_eq!(
        one(&format!("{UP}{}", host("auth = \"nope\"", ""))).0,
        "host.auth.unknown"
    );
    assert_eq!(
        one(&format!("{UP}{}", host("", "auth = \"nope\""))).0,
        "route.auth.unknown"
    );
    let twice = format!(
        "{UP}\n[[auth_provider]]\nname = \"a\"\nurl = \"http://127.0.0.1:1/\"\n[[auth_provider]]\nname = \"a\"\nurl = \"http://127.0.0.1:1/\"\n"
    );
    assert_eq!(one(&twice).0, "authProvider.name.duplicate");
}

#[test]
fn auth_mode_is_layered_and_checked() {
    use gapura_gate::mode::Mode;
    let c = ok(&format!(
        "{UP}\n[[auth_provider]]\nname = \"sso\"\nurl = \"http://127.0.0.1:9091/v\"\n{}",
        host(
            "auth = \"sso\"\nauth_mode = \"shadow\"",
            "auth_mode = \"enforce\""
        )
    ));
    let modes: Vec<Mode> = match &c.snapshot.entries[0].action {
        HostAction::Proxy(p) => p
            .routes
            .iter()
            .map(|r| r.policy.auth.unwrap().mode)
            .collect(),
        _ => panic!(),
    };
    assert_eq!(modes, [Mode::Shadow, Mode::Enforce]);
    let bad = format!(
        "{UP}\n[[auth_provider]]\nname = \"sso\"\nurl = \"http://127.0.0.1:9091/v\"\n{}",
        host("auth = \"sso\"\nauth_mode = \"loud\"", "")
    );
    assert_eq!(one(&bad).0, "host.auth.mode.invalid");
}

#[test]
fn a_sign_in_page_compiles_and_refuses_what_cannot_be_a_url() {
    let base = "[[auth_provider]]\nname = \"sso\"\nurl = \"http://127.0.0.1:9091\"\n";
    let c = ok(&format!("{base}sign_in = {{ url = \"/oauth2/start\" }}\n"));
    let s = c.snapshot.gate.auth_providers[0].sign_in.clone().unwrap();
    assert_eq!(
        (s.url.as_str(), s.return_parameter.as_str()),
        ("/oauth2/start", "rd")
    );
    assert_eq!(
        one(&format!("{base}sign_in = {{ url = \"//evil.example\" }}\n")).0,
        "authProvider.sign_in.url.invalid"
    );
    assert_eq!(
        one(&format!(
            "{base}sign_in = {{ url = \"/x\", return_parameter = \"a b\" }}\n"
        ))
        .0,
        "authProvider.sign_in.return_parameter.invalid"
    );
}
