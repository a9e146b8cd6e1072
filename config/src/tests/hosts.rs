use super::*;
use gapura_gate::{HostAction, WriteCtx};

const CTX: WriteCtx<'static> = WriteCtx {
    date_line: b"Date: x\r\n",
    head_only: false,
    close: false,
    keep_alive_10: false,
};

fn respond_bytes(c: &Compiled, host: &[u8]) -> String {
    let id = c.snapshot.hosts.lookup(Some(host)).expect("host matches");
    let HostAction::Respond(a) = &c.snapshot.entries[id as usize].action else {
        panic!("not a respond host");
    };
    let mut out = Vec::new();
    a.write_into(&mut out, &CTX);
    String::from_utf8(out).unwrap()
}

fn redirect_bytes(c: &Compiled, host: &[u8], target: &[u8]) -> String {
    let id = c.snapshot.hosts.lookup(Some(host)).expect("host matches");
    let HostAction::Redirect(r) = &c.snapshot.entries[id as usize].action else {
        panic!("not a redirect host");
    };
    let mut out = Vec::new();
    r.write_into(&mut out, target, &CTX);
    String::from_utf8(out).unwrap()
}

#[test]
fn respond_host_compiles_to_its_exact_answer() {
    let c = ok(r#"
[[host]]
names = ["a.test"]
status = 201
body = "made\n"
headers = { "X-Frame-Options" = "DENY", "Cache-Control" = "no-store" }
"#);
    assert_eq!(
        respond_bytes(&c, b"a.test"),
        "HTTP/1.1 201 Created\r\nContent-Type: text/plain; charset=utf-8\r\nX-Frame-Options: DENY\r\n\
         Cache-Control: no-store\r\nContent-Length: 5\r\nDate: x\r\n\r\nmade\n"
    );
    assert_eq!(c.snapshot.entries[0].label, "a.test");
}

#[test]
fn redirect_host_compiles_with_defaults_302_and_path_and_query() {
    let c = ok(r#"
[[host]]
names = ["old.test"]
kind = "redirect"
target = "https://new.test"
headers = { "Cache-Control" = "max-age=60" }
"#);
    assert_eq!(
        redirect_bytes(&c, b"old.test", b"/a?b=1"),
        "HTTP/1.1 302 Found\r\nLocation: https://new.test/a?b=1\r\nCache-Control: max-age=60\r\n\
         Content-Length: 0\r\nDate: x\r\n\r\n"
    );
    let c = ok("[[host]]\nnames = [\"o.test\"]\nkind = \"redirect\"\nstatus = 301\ntarget = \"/x\"\nkeep = \"nothing\"\n");
    assert!(redirect_bytes(&c, b"o.test", b"/a")
        .starts_with("HTTP/1.1 301 Moved Permanently\r\nLocation: /x\r\n"));
}

#[test]
fn names_wildcards_and_the_default_host_reach_the_table() {
    let c = ok(r#"
[[host]]
names = ["Example.com", "*.example.com"]
[[host]]
names = ["other.test"]
default = true
"#);
    let hosts = &c.snapshot.hosts;
    assert_eq!(hosts.lookup(Some(b"example.com")), Some(0));
    assert_eq!(hosts.lookup(Some(b"www.example.com")), Some(0));
    assert_eq!(hosts.lookup(Some(b"unknown.org")), Some(1));
    assert_eq!(hosts.lookup(None), Some(1));
    assert_eq!(c.snapshot.entries[0].label, "Example.com");
}

#[test]
fn a_host_needs_names() {
    assert_eq!(
        one("[[host]]\nbody = \"x\"\n"),
        at("host.names.required", "host[0].names", 1, 1)
    );
    assert_eq!(
        one("[[host]]\nnames = []\n"),
        at("host.names.required", "host[0].names", 2, 9)
    );
}

#[test]
fn invalid_names_are_refused_at_their_position() {
    assert_eq!(
        one("[[host]]\nnames = [\"ok.test\", \"bad name\"]\n"),
        at("host.name.invalid", "host[0].names[1]", 2, 21)
    );
    for bad in ["a..b", "*", "a.*.b", "[zz]", "é.test", ""] {
        let src = format!("[[host]]\nnames = [{bad:?}]\n");
        assert_eq!(one(&src).0, "host.name.invalid", "{bad:?}");
    }
}

#[test]
fn duplicate_names_are_refused_within_and_across_hosts() {
    assert_eq!(
        one("[[host]]\nnames = [\"a.test\", \"A.test.\"]\n"),
        at("host.name.duplicate", "host[0].names[1]", 2, 20)
    );
    let src = "[[host]]\nnames = [\"*.a.test\"]\n[[host]]\nnames = [\"b.test\", \"*.a.test\"]\n";
    assert_eq!(
        one(src),
        at("host.name.duplicate", "host[1].names[1]", 4, 20)
    );
    assert_eq!(
        errors(src)[0].message,
        "\"*.a.test\" is already listed at host[0].names[0]"
    );
}

#[test]
fn only_one_host_may_be_the_default() {
    let src = "[[host]]\nnames = [\"a.test\"]\ndefault = true\n[[host]]\nnames = [\"b.test\"]\ndefault = true\n";
    assert_eq!(
        one(src),
        at("host.default.duplicate", "host[1].default", 6, 11)
    );
    ok("[[host]]\nnames = [\"a.test\"]\ndefault = false\n[[host]]\nnames = [\"b.test\"]\ndefault = true\n");
}

#[test]
fn kind_is_respond_redirect_or_proxy() {
    assert_eq!(
        one("[[host]]\nnames = [\"a.test\"]\nkind = \"forward\"\n"),
        at("host.kind.invalid", "host[0].kind", 3, 8)
    );
}

#[test]
fn status_ranges_depend_on_the_kind() {
    assert_eq!(
        one("[[host]]\nnames = [\"a.test\"]\nstatus = 199\n"),
        at("host.status.invalid", "host[0].status", 3, 10)
    );
    assert_eq!(
        one("[[host]]\nnames = [\"a.test\"]\nstatus = 600\n").0,
        "host.status.invalid"
    );
    assert_eq!(
        one("[[host]]\nnames = [\"a.test\"]\nkind = \"redirect\"\ntarget = \"/\"\nstatus = 200\n"),
        at("host.status.invalid", "host[0].status", 5, 10)
    );
    ok("[[host]]\nnames = [\"a.test\"]\nstatus = 599\n");
}

#[test]
fn respond_body_is_at_most_one_mebibyte() {
    let big = "x".repeat((1 << 20) + 1);
    let src = format!("[[host]]\nnames = [\"a.test\"]\nbody = \"{big}\"\n");
    assert_eq!(one(&src), at("host.body.too_large", "host[0].body", 3, 8));
    let exact = "x".repeat(1 << 20);
    ok(&format!(
        "[[host]]\nnames = [\"a.test\"]\nbody = \"{exact}\"\n"
    ));
}

#[test]
fn no_content_statuses_take_no_body() {
    assert_eq!(
        one("[[host]]\nnames = [\"a.test\"]\nstatus = 204\nbody = \"x\"\n"),
        at("host.body.unexpected", "host[0].body", 4, 8)
    );
    ok("[[host]]\nnames = [\"a.test\"]\nstatus = 204\n");
}

#[test]
fn redirect_fields_on_a_respond_host_are_unexpected() {
    let src = "[[host]]\nnames = [\"a.test\"]\ntarget = \"/x\"\nkeep = \"path\"\n";
    let e = errors(src);
    assert_eq!(
        e.iter().map(key).collect::<Vec<_>>(),
        vec![
            at("host.target.unexpected", "host[0].target", 3, 10),
            at("host.keep.unexpected", "host[0].keep", 4, 8),
        ]
    );
}

#[test]
fn respond_fields_on_a_redirect_host_are_unexpected() {
    let src = "[[host]]\nnames = [\"a.test\"]\nkind = \"redirect\"\ntarget = \"/x\"\nbody = \"b\"\ncontent_type = \"text/html\"\n";
    let e = errors(src);
    assert_eq!(
        e.iter().map(key).collect::<Vec<_>>(),
        vec![
            at("host.body.unexpected", "host[0].body", 5, 8),
            at(
                "host.content_type.unexpected",
                "host[0].content_type",
                6,
                16
            ),
        ]
    );
}

#[test]
fn redirect_needs_a_valid_target() {
    assert_eq!(
        one("\n[[host]]\nnames = [\"a.test\"]\nkind = \"redirect\"\n"),
        at("host.target.required", "host[0].target", 2, 1)
    );
    assert_eq!(
        one("[[host]]\nnames = [\"a.test\"]\nkind = \"redirect\"\ntarget = \"example.com\"\n"),
        at("host.target.invalid", "host[0].target", 4, 10)
    );
    assert_eq!(
        one("[[host]]\nnames = [\"a.test\"]\nkind = \"redirect\"\ntarget = \"https://x.test/?a=1\"\n").0,
        "host.target.invalid"
    );
    ok("[[host]]\nnames = [\"a.test\"]\nkind = \"redirect\"\ntarget = \"https://x.test/?a=1\"\nkeep = \"nothing\"\n");
}

#[test]
fn keep_is_one_of_three_words() {
    assert_eq!(
        one(
            "[[host]]\nnames = [\"a.test\"]\nkind = \"redirect\"\ntarget = \"/\"\nkeep = \"all\"\n"
        ),
        at("host.keep.invalid", "host[0].keep", 5, 8)
    );
}

#[test]
fn header_names_must_be_tokens_and_values_clean() {
    assert_eq!(
        one("[[host]]\nnames = [\"a.test\"]\nheaders = { \"X Bad\" = \"v\" }\n"),
        at("host.header.invalid", "host[0].headers.\"X Bad\"", 3, 13)
    );
    assert_eq!(
        one("[[host]]\nnames = [\"a.test\"]\nheaders = { X-Ok = \"a\\r\\nSet-Cookie: x\" }\n"),
        at("host.header.invalid", "host[0].headers.X-Ok", 3, 20)
    );
}

#[test]
fn framing_headers_are_reserved() {
    for name in [
        "Content-Length",
        "transfer-encoding",
        "Connection",
        "Date",
        "Keep-Alive",
        "Upgrade",
    ] {
        let src = format!("[[host]]\nnames = [\"a.test\"]\nheaders = {{ {name} = \"x\" }}\n");
        assert_eq!(
            one(&src),
            at(
                "host.header.reserved",
                &format!("host[0].headers.{name}"),
                3,
                13
            ),
            "{name}"
        );
    }
    assert_eq!(
        one("[[host]]\nnames = [\"a.test\"]\nheaders.Content-Type = \"text/html\"\n"),
        at("host.header.reserved", "host[0].headers.Content-Type", 3, 9)
    );
    assert_eq!(
        one("[[host]]\nnames = [\"a.test\"]\nkind = \"redirect\"\ntarget = \"/\"\nheaders = { Location = \"/y\" }\n").0,
        "host.header.reserved"
    );
}

#[test]
fn content_type_must_be_a_clean_value() {
    assert_eq!(
        one("[[host]]\nnames = [\"a.test\"]\ncontent_type = \"text/html\\n\"\n"),
        at("host.content_type.invalid", "host[0].content_type", 3, 16)
    );
    assert_eq!(
        one("[[host]]\nnames = [\"a.test\"]\ncontent_type = \" \"\n").0,
        "host.content_type.invalid"
    );
}

#[test]
fn every_error_of_a_profile_is_reported_in_source_order() {
    let src = r#"
[server]
shards = 0
listen = ["nowhere", "127.0.0.1:8080", "127.0.0.1:8080"]
unknown_host = 500

[defaults.limits]
max_url_bytes = "lots"

[[host]]
names = ["a.test", "bad name"]
default = true
status = 100

[[host]]
names = ["a.test"]
default = true
kind = "redirect"
limits = { max_header_count = 1 }
"#;
    assert_eq!(
        codes(src),
        vec![
            ("server.shards.range", "server.shards".to_string()),
            ("server.listen.invalid", "server.listen[0]".to_string()),
            ("server.listen.duplicate", "server.listen[2]".to_string()),
            (
                "server.unknown_host.invalid",
                "server.unknown_host".to_string()
            ),
            (
                "limits.max_url_bytes.invalid",
                "defaults.limits.max_url_bytes".to_string()
            ),
            ("host.name.invalid", "host[0].names[1]".to_string()),
            ("host.status.invalid", "host[0].status".to_string()),
            ("host.target.required", "host[1].target".to_string()),
            ("host.name.duplicate", "host[1].names[0]".to_string()),
            ("host.default.duplicate", "host[1].default".to_string()),
            (
                "limits.max_header_count.range",
                "host[1].limits.max_header_count".to_string()
            ),
        ]
    );
}
