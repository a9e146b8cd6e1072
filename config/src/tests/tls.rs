//! `[[certificate]]`, `[tls]` and TLS listeners: what compiles, and every
//! error with its code, path and position.

use super::*;
use gapura_gate::tls::TlsVersion;

const TLS: &str = r#"
[server]
listen = ["127.0.0.1:8080", { addr = "127.0.0.1:8443", tls = true }]

[tls]
min_version = "1.3"
handshake_timeout_ms = 5000
ticket_rotation_s = 3600

[[certificate]]
names = ["a.example", "*.a.example"]
cert = "a.pem"
key = "a.key"

[[certificate]]
names = ["b.example"]
cert = "b.pem"
key = "b.key"
default = true
ocsp = "b.ocsp"
"#;

#[test]
fn certificates_and_settings_compile() {
    let c = ok(TLS);
    assert_eq!(c.runtime.tls, vec![1], "the second listener");
    let t = c.snapshot.tls.as_ref().unwrap();
    assert_eq!(t.min_version, TlsVersion::V13);
    assert_eq!(t.handshake_timeout_ms, 5_000);
    assert_eq!(t.ticket_rotation_s, 3_600);
    assert_eq!(t.ticket_secret.0, vec![7; 32]);
    assert_eq!(t.certificates.len(), 2);
    assert_eq!(t.certificates[0].chain, vec![b"a.pem".to_vec()]);
    assert_eq!(t.certificates[1].ocsp.as_deref(), Some(&b"b.ocsp"[..]));
    assert_eq!(t.certificate_for(Some("a.example")), 0);
    assert_eq!(t.certificate_for(Some("x.a.example")), 0);
    // `default = true` on the second: unknown names and no SNI get it.
    assert_eq!(t.certificate_for(Some("c.example")), 1);
    assert_eq!(t.certificate_for(None), 1);
}

#[test]
fn defaults_apply_and_the_first_certificate_is_the_default() {
    let c = ok(r#"
[server]
listen = [{ addr = "127.0.0.1:8443", tls = true }]
[[certificate]]
names = ["a.example"]
cert = "a.pem"
key = "a.key"
[[certificate]]
names = ["b.example"]
cert = "b.pem"
key = "b.key"
"#);
    let t = c.snapshot.tls.as_ref().unwrap();
    assert_eq!(t.min_version, TlsVersion::V12);
    assert_eq!(t.handshake_timeout_ms, 10_000);
    assert_eq!(t.ticket_rotation_s, 12 * 3600);
    assert_eq!(t.certificate_for(Some("zzz.example")), 0);
}

#[test]
fn tickets_can_be_turned_off() {
    let c = ok(r#"
[server]
listen = [{ addr = "127.0.0.1:8443", tls = true }]
[tls]
session_tickets = false
[[certificate]]
names = ["a.example"]
cert = "a.pem"
key = "a.key"
"#);
    assert!(c.snapshot.tls.unwrap().ticket_secret.0.is_empty());
}

#[test]
fn a_plain_profile_has_no_tls_and_unused_certificates_warn() {
    let c = ok("");
    assert!(c.snapshot.tls.is_none());
    assert!(c.runtime.tls.is_empty());
    let c = ok(r#"
[[certificate]]
names = ["a.example"]
cert = "a.pem"
key = "a.key"
"#);
    assert!(c.snapshot.tls.is_none());
    assert_eq!(
        key(&c.warnings[0]),
        at("certificate.unused", "certificate[0]", 2, 1)
    );
}

#[test]
fn a_tls_listener_without_a_certificate_is_an_error_at_its_flag() {
    assert_eq!(
        one(r#"
[server]
listen = ["127.0.0.1:8080", { addr = "127.0.0.1:8443", tls = true }]
"#),
        at(
            "server.listen.tls.no_certificate",
            "server.listen[1].tls",
            3,
            62
        )
    );
}

const LISTEN: &str = "[server]\nlisten = [{ addr = \"127.0.0.1:8443\", tls = true }]\n";

#[test]
fn file_errors_name_the_file_at_fault() {
    let cases = [
        (
            "names = [\"a.example\"]\ncert = \"missing.pem\"\nkey = \"a.key\"\n",
            at("certificate.cert.unreadable", "certificate[0].cert", 5, 8),
        ),
        (
            "names = [\"a.example\"]\ncert = \"a.pem\"\nkey = \"missing.key\"\n",
            at("certificate.key.unreadable", "certificate[0].key", 6, 7),
        ),
        (
            "names = [\"a.example\"]\ncert = \"a.pem\"\nkey = \"other.key\"\n",
            at("certificate.key.mismatch", "certificate[0].key", 6, 7),
        ),
        (
            "names = [\"a.example\"]\ncert = \"a.pem\"\nkey = \"a.key\"\nocsp = \"missing.der\"\n",
            at("certificate.ocsp.unreadable", "certificate[0].ocsp", 7, 8),
        ),
        (
            "names = [\"a.example\"]\nkey = \"a.key\"\n",
            at("certificate.file.missing", "certificate[0].cert", 3, 1),
        ),
    ];
    for (body, want) in cases {
        let src = format!("{LISTEN}[[certificate]]\n{body}");
        assert_eq!(one(&src), want, "{src}");
    }
}

#[test]
fn names_and_defaults_are_checked() {
    let cases = [
        (
            "[[certificate]]\nnames = []\ncert = \"a.pem\"\nkey = \"a.key\"\n",
            vec![at("certificate.names.empty", "certificate[0].names", 4, 9)],
        ),
        (
            "[[certificate]]\nnames = [\"bad name\"]\ncert = \"a.pem\"\nkey = \"a.key\"\n",
            vec![at("certificate.names.invalid", "certificate[0].names[0]", 4, 10)],
        ),
        (
            "[[certificate]]\nnames = [\"a.example\"]\ncert = \"a.pem\"\nkey = \"a.key\"\ndefault = true\n\
             [[certificate]]\nnames = [\"A.example\"]\ncert = \"b.pem\"\nkey = \"b.key\"\ndefault = true\n",
            vec![
                at("certificate.names.duplicate", "certificate[1].names[0]", 9, 10),
                at("certificate.default.duplicate", "certificate[1].default", 12, 11),
            ],
        ),
    ];
    for (body, want) in cases {
        let src = format!("{LISTEN}{body}");
        let got: Vec<_> = errors(&src).iter().map(key).collect();
        assert_eq!(got, want, "{src}");
    }
}

#[test]
fn tls_settings_are_checked() {
    let cert = "[[certificate]]\nnames = [\"a.example\"]\ncert = \"a.pem\"\nkey = \"a.key\"\n";
    let cases = [
        (
            "[tls]\nmin_version = \"1.1\"\n",
            at("tls.min_version.invalid", "tls.min_version", 4, 15),
        ),
        (
            "[tls]\nhandshake_timeout_ms = 10\n",
            at(
                "tls.handshake_timeout_ms.range",
                "tls.handshake_timeout_ms",
                4,
                24,
            ),
        ),
        (
            "[tls]\nticket_rotation_s = 1\n",
            at(
                "tls.ticket_rotation_s.range",
                "tls.ticket_rotation_s",
                4,
                21,
            ),
        ),
    ];
    for (body, want) in cases {
        let src = format!("{LISTEN}{body}{cert}");
        assert_eq!(one(&src), want, "{src}");
    }
}

#[test]
fn the_example_profile_sends_its_site_to_https() {
    let c = ok(include_str!("../../../profiles/example.toml"));
    let s = &c.snapshot;
    let site = &s.entries[s.hosts.lookup(Some(b"example.com")).unwrap() as usize];
    assert_eq!(site.extras.https.redirect_port, Some(443));
    assert_eq!(
        site.extras.https.hsts.h1(),
        b"Strict-Transport-Security: max-age=63072000\r\n"
    );
    assert_eq!(
        s.server.http2,
        gapura_gate::snapshot::Http2Settings::default()
    );
}

const CREDENTIAL_HOSTS: &str = r#"
[[access_list]]
name = "office"
users = [
  { name = "alice", password_hash = "$pbkdf2-sha256$i=100000$4oIHnorXlottSFKouWKuKg$tDCbfNfDmlED4CXmuasw/mB3qPueQOt0glrBdB1jrCk" },
]

[[auth_provider]]
name = "sso"
url = "http://127.0.0.1:9091/verify"

[[upstream]]
name = "app"
servers = ["127.0.0.1:9001"]

[[host]]
names = ["pw.example"]
access_list = "office"
body = "hi"

[[host]]
names = ["sso.example"]
kind = "proxy"
auth = "sso"
  [[host.route]]
  path = "/"
  upstream = "app"

[[host]]
names = ["pow.example"]
kind = "proxy"
proof_of_work = { enabled = true }
  [[host.route]]
  path = "/"
  upstream = "app"

[[host]]
names = ["safe.example"]
access_list = "office"
https_redirect = true
body = "hi"
"#;

#[test]
fn credentials_over_plain_http_without_a_redirect_warn() {
    let with_key = |tls: &str| tls.replace("[tls]", "pow_key_file = \"pow.key\"\n\n[tls]");
    let c = ok(&format!("{}{CREDENTIAL_HOSTS}", with_key(TLS)));
    let warned: Vec<(&str, String)> = c
        .warnings
        .iter()
        .map(|w| (w.code, w.path.clone()))
        .collect();
    assert_eq!(
        warned,
        [
            ("host.insecure_credentials", "host[0]".to_string()),
            ("host.insecure_credentials", "host[1]".to_string()),
            ("host.insecure_session", "host[2]".to_string()),
        ]
    );
    assert!(c.warnings[0]
        .message
        .contains("pw.example asks for a password"));
    // Served over TLS only: nothing travels in cleartext.
    let tls_only = TLS.replace("\"127.0.0.1:8080\", ", "");
    let c = ok(&format!("{}{CREDENTIAL_HOSTS}", with_key(&tls_only)));
    assert!(c.warnings.is_empty(), "{:?}", c.warnings);
}
