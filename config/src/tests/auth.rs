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
    // oauth2-proxy's preset sends a refused browser to its sign-in page;
    // the others have none.
    let sign_in = p[2].sign_in.as_ref().expect("oauth2-proxy's sign-in page");
    assert_eq!(
        (sign_in.url.as_str(), sign_in.return_parameter.as_str()),
        ("/oauth2/start", "rd")
    );
    assert!(p[0].sign_in.is_none() && p[1].sign_in.is_none());
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
        ("url = \"ftp://sso.test/\"", "authProvider.url.invalid"),
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

/// A provider `sso` whose `url` is on line 3 and anything else from line 4.
fn tls_provider(url: &str, rest: &str) -> String {
    format!("[[auth_provider]]\nname = \"sso\"\nurl = \"{url}\"\n{rest}\n")
}

fn provider_of(src: &str) -> gapura_gate::auth::AuthProvider {
    ok(src).snapshot.gate.auth_providers[0].clone()
}

#[test]
fn an_https_url_calls_over_tls_verified_for_its_host() {
    use gapura_gate::upstream::{ClientCertificate, UpstreamRoots, UpstreamTls};
    let public = |name: &str| UpstreamTls {
        server_name: Some(name.into()),
        roots: UpstreamRoots::Public,
        client: None,
        verify: true,
        label: String::new(),
    };
    let p = provider_of(&tls_provider("https://LocalHost/verify", ""));
    assert_eq!(
        p.addr,
        "127.0.0.1:443".parse().unwrap(),
        "port 443 unless written"
    );
    assert_eq!(
        (p.authority.as_str(), p.path.as_str()),
        ("LocalHost", "/verify")
    );
    assert_eq!(p.tls.as_deref(), Some(&public("localhost")));
    // `tls = true` is the same as none written; an address is the name.
    let ip = provider_of(&tls_provider("https://127.0.0.1:8443", "tls = true"));
    assert_eq!(ip.addr, "127.0.0.1:8443".parse().unwrap());
    assert_eq!(ip.tls.as_deref(), Some(&public("127.0.0.1")));
    // The table of an upstream: its own authority, name and client certificate.
    let own = provider_of(&tls_provider(
        "https://localhost:9443/v",
        "tls = { server_name = \"SSO.internal\", ca_file = \"ca.pem\", client_cert = \"edge.pem\", client_key = \"edge.key\" }",
    ));
    assert_eq!(
        own.tls.as_deref(),
        Some(&UpstreamTls {
            server_name: Some("sso.internal".into()),
            roots: UpstreamRoots::Own(vec![b"ca.pem".to_vec()]),
            client: Some(ClientCertificate {
                chain: vec![b"edge.pem".to_vec()],
                key: b"edge.key".to_vec(),
            }),
            verify: true,
            label: "ca.pem, edge.pem".into(),
        })
    );
    // http:// stays plaintext, on port 80 unless written.
    let plain = provider_of(&tls_provider("http://localhost/v", ""));
    assert_eq!(
        (plain.tls, plain.addr),
        (None, "127.0.0.1:80".parse().unwrap())
    );
    // Another client certificate is another provider (its idle
    // connections are not used), though its files are the same size.
    let with = |cert: &str| {
        provider_of(&tls_provider(
            "https://localhost/v",
            &format!("tls = {{ client_cert = \"{cert}\", client_key = \"k.pem\" }}"),
        ))
        .identity
    };
    assert_ne!(with("a.pem"), with("b.pem"));
    assert_eq!(with("a.pem"), with("a.pem"));
}

#[test]
fn verify_off_for_a_provider_loads_with_the_upstream_warning() {
    let c = ok(&tls_provider(
        "https://localhost/v",
        "tls = { verify = false }",
    ));
    assert!(
        !c.snapshot.gate.auth_providers[0]
            .tls
            .as_ref()
            .unwrap()
            .verify
    );
    let w: Vec<_> = other_warnings(&c).iter().map(|w| key(w)).collect();
    assert_eq!(
        w,
        [at(
            "upstream.tls.verify_off",
            "auth_provider[0].tls.verify",
            4,
            18
        )]
    );
}

#[test]
fn a_providers_tls_refusals_name_the_key_at_fault() {
    let one_of = |url: &str, rest: &str| one(&tls_provider(url, rest));
    let scheme = at("authProvider.tls.scheme", "auth_provider[0].tls", 4, 7);
    assert_eq!(one_of("http://localhost/v", "tls = true"), scheme);
    assert_eq!(
        one_of("http://localhost/v", "tls = { ca_file = \"ca.pem\" }"),
        scheme
    );
    assert_eq!(one_of("https://localhost/v", "tls = false"), scheme);
    assert_eq!(
        one_of("https://localhost/v", "tls = { ca_file = \"missing.pem\" }"),
        at(
            "upstream.tls.ca_file.unreadable",
            "auth_provider[0].tls.ca_file",
            4,
            19
        )
    );
    assert_eq!(
        one_of(
            "https://localhost/v",
            "tls = { client_cert = \"edge.pem\" }"
        ),
        at(
            "upstream.tls.client_cert.incomplete",
            "auth_provider[0].tls.client_cert",
            4,
            7
        )
    );
    assert_eq!(
        one_of(
            "https://localhost/v",
            "tls = { client_cert = \"c.pem\", client_key = \"other.key\" }"
        ),
        at(
            "upstream.tls.client_key.mismatch",
            "auth_provider[0].tls.client_key",
            4,
            45
        )
    );
    assert_eq!(
        one_of(
            "https://localhost/v",
            "tls = { server_name = \"bad name\" }"
        ),
        at(
            "upstream.tls.server_name.invalid",
            "auth_provider[0].tls.server_name",
            4,
            23
        )
    );
    // A host no certificate can name.
    assert_eq!(
        one_of("https://local..host/v", ""),
        at("authProvider.url.invalid", "auth_provider[0].url", 3, 7)
    );
    let unknown = errors(&tls_provider("https://localhost/v", "tls = { ca = \"x\" }"));
    assert_eq!(unknown.len(), 1, "{unknown:#?}");
}

#[test]
fn a_written_sign_in_wins_over_the_presets() {
    let c = ok(&format!(
        r#"{UP}
[[auth_provider]]
name = "c"
url = "http://127.0.0.1:4180"
preset = "oauth2-proxy"
sign_in = {{ url = "https://sso.example/start", return_parameter = "next" }}
{}"#,
        host("auth = \"c\"", "")
    ));
    let s = c.snapshot.gate.auth_providers[0].sign_in.as_ref().unwrap();
    assert_eq!(
        (s.url.as_str(), s.return_parameter.as_str()),
        ("https://sso.example/start", "next")
    );
}
