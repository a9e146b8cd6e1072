//! robots.txt, maintenance, error pages and upstream replacement in each
//! host's extras, layered, and their codes.

use super::*;
use gapura_gate::answer::WriteCtx;
use gapura_gate::custom_pages::{PageVars, ReplaceUpstream};
use gapura_gate::mode::Mode;
use gapura_gate::robots::RobotsMode;
use gapura_gate::ErrorStatus;

fn robots_body(c: &Compiled, host: usize) -> Option<String> {
    let r = c.snapshot.entries[host].extras.robots.as_ref()?;
    let a = r.answer(b"GET", b"/robots.txt")?;
    Some(String::from_utf8(a.body().to_vec()).unwrap())
}

#[test]
fn robots_modes_and_custom_text_layer_field_by_field() {
    let c = ok(r#"
[defaults]
robots = "disallow_all"

[[bundle]]
name = "text"
robots_text = "User-agent: *\r\nDisallow: /cart/"

[[host]]
names = ["a.test"]

[[host]]
names = ["b.test"]
robots = "passthrough"

[[host]]
names = ["c.test"]
use = "text"
robots = "custom"

[[host]]
names = ["d.test"]
robots = "block_ai_crawlers"
"#);
    assert_eq!(
        robots_body(&c, 0).as_deref(),
        Some("User-agent: *\nDisallow: /\n")
    );
    assert!(c.snapshot.entries[1].extras.robots.is_none());
    // The text from the bundle, the mode from the host; CRLF normalised.
    assert_eq!(
        robots_body(&c, 2).as_deref(),
        Some("User-agent: *\nDisallow: /cart/\n")
    );
    let d = c.snapshot.entries[3].extras.robots.as_ref().unwrap();
    assert_eq!(d.mode(), RobotsMode::BlockAiCrawlers);
    assert!(robots_body(&c, 3).unwrap().contains("User-agent: GPTBot\n"));
}

#[test]
fn maintenance_merges_field_by_field_and_uses_the_maintenance_page() {
    let c = ok(r#"
[[access_list]]
name = "office"
allow = ["192.0.2.0/24"]

[defaults.maintenance]
status = 503
retry_after_seconds = 600
bypass = "office"

[defaults.error_pages.maintenance]
heading = "Back soon"
text = "{host} is being upgraded."

[[host]]
names = ["a.test"]
maintenance = { enabled = true, mode = "shadow" }

[[host]]
names = ["b.test"]
[host.maintenance]
enabled = true
status = 410
retry_after_seconds = 0

[[host]]
names = ["c.test"]
"#);
    let a = c.snapshot.entries[0].extras.maintenance.as_ref().unwrap();
    assert_eq!((a.page.status(), a.page.retry_after_seconds()), (503, 600));
    assert_eq!((a.mode, a.bypass), (Mode::Shadow, Some(0)));
    let mut out = Vec::new();
    let ctx = WriteCtx {
        date_line: b"Date: x\r\n",
        head_only: false,
        close: false,
        keep_alive_10: false,
    };
    let vars = PageVars {
        host: b"a.test",
        ..PageVars::default()
    };
    a.page.write_into(&mut out, true, &vars, &ctx);
    let text = String::from_utf8(out).unwrap();
    assert!(
        text.starts_with("HTTP/1.1 503 Service Unavailable\r\n"),
        "{text}"
    );
    assert!(text.contains("Retry-After: 600\r\n"), "{text}");
    assert!(text.contains("<h1>Back soon</h1><p>a.test is being upgraded.</p>"));
    let b = c.snapshot.entries[1].extras.maintenance.as_ref().unwrap();
    assert_eq!((b.page.status(), b.page.retry_after_seconds()), (410, 0));
    assert_eq!((b.mode, b.bypass), (Mode::Enforce, Some(0)));
    assert!(c.snapshot.entries[2].extras.maintenance.is_none());
}

#[test]
fn error_pages_are_replaced_entry_by_entry() {
    let c = ok(r#"
[defaults]
replace_upstream = "html"

[defaults.error_pages."404"]
heading = "Not here"
text = "Nothing at this address."

[defaults.error_pages."503"]
heading = "Down"
text = "Try again."

[[bundle]]
name = "doc"
[bundle.error_pages."404"]
html = "<!doctype html><h1>{status} {statusText}</h1>"

[[host]]
names = ["a.test"]
use = "doc"
replace_upstream = "any"

[[host]]
names = ["b.test"]
"#);
    let a = &c.snapshot.entries[0].extras;
    assert_eq!(a.replace_upstream, ReplaceUpstream::Any);
    let pages = a.pages.as_ref().unwrap();
    let mut body = Vec::new();
    let p404 = pages.get(ErrorStatus::NotFound).unwrap();
    p404.write_body(&mut body, &PageVars::default());
    // The bundle's document replaced the defaults' message whole.
    assert_eq!(body, b"<!doctype html><h1>404 Not Found</h1>");
    assert!(String::from_utf8_lossy(p404.head()).contains("style-src 'unsafe-inline'"));
    assert!(pages.get(ErrorStatus::ServiceUnavailable).is_some());
    assert!(pages.get(ErrorStatus::Forbidden).is_none());
    let b = &c.snapshot.entries[1].extras;
    assert_eq!(b.replace_upstream, ReplaceUpstream::Html);
    let mut body = Vec::new();
    b.pages
        .as_ref()
        .unwrap()
        .get(ErrorStatus::NotFound)
        .unwrap()
        .write_body(&mut body, &PageVars::default());
    assert!(String::from_utf8(body)
        .unwrap()
        .contains("<h1>Not here</h1>"));
}

#[test]
fn hosts_without_extras_carry_none() {
    let c = ok("[[host]]\nnames = [\"a.test\"]\n");
    let x = &c.snapshot.entries[0].extras;
    assert!(x.robots.is_none() && x.maintenance.is_none() && x.pages.is_none());
    assert_eq!(x.replace_upstream, ReplaceUpstream::Off);
}

const HOST: &str = "[[host]]\nnames = [\"a.test\"]\n";

#[test]
fn extras_codes_have_their_key_path_and_position() {
    let h = |body: &str| format!("{HOST}{body}\n");
    let cases: Vec<(String, &str, &str, u32, u32)> = vec![
        (
            h("robots = \"allow_all\""),
            "host.robots.invalid",
            "host[0].robots",
            3,
            10,
        ),
        (
            h("robots = \"custom\""),
            "robots.custom_text.required",
            "host[0].robots",
            3,
            10,
        ),
        (
            h("robots = \"custom\"\nrobots_text = \" \""),
            "robots.custom_text.required",
            "host[0].robots_text",
            4,
            15,
        ),
        (
            h("robots_text = \"a\\u0000b\""),
            "robots.custom_text.invalid",
            "host[0].robots_text",
            3,
            15,
        ),
        (
            h(&format!("robots_text = \"{}\"", "x".repeat(65 * 1024))),
            "robots.custom_text.too_long",
            "host[0].robots_text",
            3,
            15,
        ),
        (
            h("robots = \"disallow_all\"\nrobots_text = \"x\""),
            "robots.custom_text.unexpected",
            "host[0].robots_text",
            4,
            15,
        ),
        (
            h("maintenance = { status = 418 }"),
            "maintenance.status.invalid",
            "host[0].maintenance.status",
            3,
            26,
        ),
        (
            h("maintenance = { retry_after_seconds = 604801 }"),
            "maintenance.retry_after_seconds.invalid",
            "host[0].maintenance.retry_after_seconds",
            3,
            39,
        ),
        (
            h("maintenance = { mode = \"dry\" }"),
            "maintenance.mode.invalid",
            "host[0].maintenance.mode",
            3,
            24,
        ),
        (
            h("maintenance = { bypass = \"office\" }"),
            "host.maintenance.bypassUnknown",
            "host[0].maintenance.bypass",
            3,
            26,
        ),
        (
            h("[host.error_pages.\"400\"]\nheading = \"a\"\ntext = \"b\""),
            "errorPages.status.unsupported",
            "host[0].error_pages.400",
            3,
            19,
        ),
        (
            h("[host.error_pages.\"404\"]\ntext = \"b\""),
            "errorPages.heading.required",
            "host[0].error_pages.404.heading",
            3,
            19,
        ),
        (
            h(&format!(
                "error_pages.\"404\" = {{ heading = \"{}\", text = \"b\" }}",
                "h".repeat(121)
            )),
            "errorPages.heading.tooLong",
            "host[0].error_pages.404.heading",
            3,
            33,
        ),
        (
            h("error_pages.\"404\" = { heading = \"a\", text = \"b\\nc\" }"),
            "errorPages.text.invalid",
            "host[0].error_pages.404.text",
            3,
            45,
        ),
        (
            h("error_pages.\"404\" = { heading = \"a\", html = \"<p>x</p>\" }"),
            "errorPages.heading.unexpected",
            "host[0].error_pages.404.heading",
            3,
            33,
        ),
        (
            h("error_pages.maintenance = { html = \"{nope}\" }"),
            "errorPages.variable.unknown",
            "host[0].error_pages.maintenance.html",
            3,
            36,
        ),
        (
            h("replace_upstream = \"json\""),
            "host.replace_upstream.invalid",
            "host[0].replace_upstream",
            3,
            20,
        ),
    ];
    for (src, code, path, line, column) in cases {
        assert_eq!(
            one(&src),
            at(code, path, line, column),
            "{}",
            &src[..src.len().min(200)]
        );
    }
}

#[test]
fn a_custom_robots_without_text_in_a_shared_layer_is_reported_once() {
    let e = errors(&format!(
        "[defaults]\nrobots = \"custom\"\n{HOST}[[host]]\nnames = [\"b.test\"]\n"
    ));
    assert_eq!(e.len(), 1, "{e:#?}");
    assert_eq!(
        key(&e[0]),
        at("robots.custom_text.required", "defaults.robots", 2, 10)
    );
    // A host that gives the text is fine.
    ok(&format!(
        "[defaults]\nrobots = \"custom\"\nrobots_text = \"User-agent: *\"\n{HOST}"
    ));
}

#[test]
fn a_bypass_list_without_allow_rules_is_a_warning() {
    let with = |list: &str| {
        ok(&format!(
            "[[access_list]]\nname = \"office\"\n{list}\n\
             [[host]]\nnames = [\"a.test\"]\nbody = \"x\"\nmaintenance = {{ bypass = \"office\" }}\n"
        ))
    };
    let warned = |c: &Compiled| -> Vec<(&str, String, u32)> {
        c.warnings
            .iter()
            .filter(|w| w.code.starts_with("host.maintenance"))
            .map(|w| (w.code, w.path.clone(), w.line))
            .collect()
    };
    // Deny rules alone admit no one past the page.
    let c = with("deny = [\"192.0.2.0/24\"]");
    assert_eq!(
        warned(&c),
        [(
            "host.maintenance.bypass_no_allow",
            "host[0].maintenance.bypass".to_string(),
            7
        )]
    );
    // Allowed addresses, or allowed countries, do.
    assert!(warned(&with("allow = [\"192.0.2.0/24\"]")).is_empty());
    let cloudflare = ok(
        "[client]\nmode = \"cloudflare\"\n[[access_list]]\nname = \"office\"\ncountries = { allow = [\"DE\"] }\n\
         [[host]]\nnames = [\"a.test\"]\nbody = \"x\"\nmaintenance = { bypass = \"office\" }\n",
    );
    assert!(warned(&cloudflare).is_empty());
}
