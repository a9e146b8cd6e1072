use super::*;

const CTX: WriteCtx<'static> = WriteCtx {
    date_line: b"Date: x\r\n",
    head_only: false,
    close: false,
    keep_alive_10: false,
};

fn page(status: u16, spec: PageEntrySpec) -> CustomPage {
    CustomPage::compile(status, &spec, &[]).unwrap()
}

fn body(p: &CustomPage, vars: &PageVars<'_>) -> String {
    let mut out = Vec::new();
    p.write_body(&mut out, vars);
    assert_eq!(out.len(), p.body_len(vars));
    String::from_utf8(out).unwrap()
}

#[test]
fn document_variables_fold_status_and_fill_slots() {
    let p = page(
        404,
        PageEntrySpec::document(
            "<p>{status} {statusText} at {host}, id {requestId}, ray {cfRay}</p>",
        ),
    );
    let vars = PageVars {
        request_id: b"r-1",
        host: b"example.com",
        cf_ray: b"8a1b2c3d4e5f-AMS",
    };
    assert_eq!(
        body(&p, &vars),
        "<p>404 Not Found at example.com, id r-1, ray 8a1b2c3d4e5f-AMS</p>"
    );
    assert_eq!(
        body(&p, &PageVars::default()),
        "<p>404 Not Found at , id , ray </p>"
    );
}

#[test]
fn double_brace_is_a_literal_brace_and_css_needs_no_escaping() {
    let p = page(
        403,
        PageEntrySpec::document("<style>a{color:red} b{ x }</style>{{status} {{{status}"),
    );
    assert_eq!(
        body(&p, &PageVars::default()),
        "<style>a{color:red} b{ x }</style>{status} {403"
    );
}

#[test]
fn hostile_slot_values_are_html_encoded() {
    let p = page(
        502,
        PageEntrySpec::document("<a title=\"{host}\">{host}</a><i>{cfRay}</i>"),
    );
    let vars = PageVars {
        host: b"<script>alert('x')</script>\"&",
        cf_ray: "\u{e9}\u{1F600}<".as_bytes(),
        request_id: b"",
    };
    assert_eq!(
        body(&p, &vars),
        "<a title=\"&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;&quot;&amp;\">&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;&quot;&amp;</a><i>&#xe9;&#x1f600;&lt;</i>"
    );
}

#[test]
fn slots_are_cut_host_at_253_and_ray_at_64() {
    let p = page(404, PageEntrySpec::document("{host}|{cfRay}|{requestId}"));
    let host = "h".repeat(300);
    let ray = "r".repeat(100);
    let id = "i".repeat(100);
    let got = body(
        &p,
        &PageVars {
            host: host.as_bytes(),
            cf_ray: ray.as_bytes(),
            request_id: id.as_bytes(),
        },
    );
    assert_eq!(
        got,
        format!("{}|{}|{}", "h".repeat(253), "r".repeat(64), "i".repeat(64))
    );
}

#[test]
fn message_is_the_built_in_layout_with_encoded_text() {
    let p = page(
        429,
        PageEntrySpec::message(
            "Slow <down>",
            "You & {host} sent too many ({status} {statusText}).",
        ),
    );
    let vars = PageVars {
        host: b"a.test",
        ..PageVars::default()
    };
    let b = body(&p, &vars);
    assert!(b.contains("<title>429 Slow &lt;down&gt;</title>"), "{b}");
    assert!(b.contains("<p class=\"s\">429</p><h1>Slow &lt;down&gt;</h1>"));
    assert!(b.contains("<p>You &amp; a.test sent too many (429 Too Many Requests).</p><footer>"));
    let head = std::str::from_utf8(p.head()).unwrap();
    assert!(head.contains(&format!(
        "Content-Security-Policy: {}\r\n",
        crate::pages::builtin_csp()
    )));
    assert!(!b.contains("Request ID"), "no ID, no line");
    let with_id = body(
        &p,
        &PageVars {
            request_id: b"<id>",
            ..vars
        },
    );
    assert!(with_id.contains("<p class=\"s\">Request ID: <code>&lt;id&gt;</code></p><footer>"));
}

#[test]
fn built_in_message_without_an_id_is_the_static_built_in_page() {
    let builtin = ErrorPages::builtin();
    for status in CUSTOMIZABLE {
        let p = CustomPage::builtin_message(status);
        // The same page but the footer, where the built-in one keeps the
        // request id's slot.
        assert_eq!(
            body(&p, &PageVars::default()).replace(
                "<footer>gapura</footer>",
                "<footer>gapura - request ------------------------</footer>"
            ),
            std::str::from_utf8(builtin.get(status, true).body()).unwrap(),
            "{status:?}"
        );
    }
}

#[test]
fn document_gets_the_document_csp_and_security_headers() {
    let p = page(503, PageEntrySpec::document("<h1>Down</h1>"));
    let mut out = Vec::new();
    p.write_into(&mut out, &PageVars::default(), Some(3), &CTX);
    assert_eq!(
        String::from_utf8(out).unwrap(),
        format!(
            "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/html; charset=utf-8\r\nCache-Control: no-store\r\nReferrer-Policy: no-referrer\r\nX-Content-Type-Options: nosniff\r\nContent-Security-Policy: {DOCUMENT_CSP}\r\nRetry-After: 3\r\nContent-Length: 13\r\nDate: x\r\n\r\n<h1>Down</h1>"
        )
    );
    let mut out = Vec::new();
    let ctx = WriteCtx {
        head_only: true,
        close: true,
        ..CTX
    };
    p.write_into(&mut out, &PageVars::default(), None, &ctx);
    let s = String::from_utf8(out).unwrap();
    assert!(
        s.ends_with("Content-Length: 13\r\nDate: x\r\nConnection: close\r\n\r\n"),
        "{s}"
    );
}

#[test]
fn content_length_counts_encoded_slots() {
    let p = page(404, PageEntrySpec::document("[{host}]"));
    let mut out = Vec::new();
    let vars = PageVars {
        host: "<\u{e9}>".as_bytes(),
        ..PageVars::default()
    };
    p.write_into(&mut out, &vars, None, &CTX);
    let s = String::from_utf8(out).unwrap();
    assert!(
        s.ends_with("Content-Length: 16\r\nDate: x\r\n\r\n[&lt;&#xe9;&gt;]"),
        "{s}"
    );
}

#[test]
fn only_the_seed_statuses_are_customizable() {
    let codes: Vec<u16> = CUSTOMIZABLE.iter().map(|s| s.code()).collect();
    assert_eq!(
        codes,
        vec![403, 404, 413, 414, 421, 429, 431, 502, 503, 504]
    );
    assert!(!is_customizable(ErrorStatus::BadRequest));
    assert_eq!(
        PageKey::parse("404"),
        Some(PageKey::Status(ErrorStatus::NotFound))
    );
    assert_eq!(PageKey::parse("maintenance"), Some(PageKey::Maintenance));
    for k in ["400", "401", "500", "abc", ""] {
        assert_eq!(PageKey::parse(k), None, "{k}");
    }
    let err = CustomPages::compile(&[(ErrorStatus::BadRequest, PageEntrySpec::document("x"))])
        .unwrap_err();
    assert_eq!(err[0].error, None, "the status cannot be customized");
}

#[test]
fn host_pages_serve_html_clients_and_leave_plain_text_built_in() {
    let pages = CustomPages::compile(&[
        (
            ErrorStatus::Forbidden,
            PageEntrySpec::document("<p>no, {host}</p>"),
        ),
        (
            ErrorStatus::NotFound,
            PageEntrySpec::message("Lost", "Nothing here."),
        ),
    ])
    .unwrap();
    assert!(pages.get(ErrorStatus::TooManyRequests).is_none());
    let builtin = ErrorPages::builtin();
    let vars = PageVars {
        host: b"a.test",
        ..PageVars::default()
    };
    let write = |status, html, custom: Option<&CustomPages>| {
        let mut out = Vec::new();
        write_error_page(&mut out, &builtin, custom, status, html, &vars, None, &CTX);
        String::from_utf8(out).unwrap()
    };
    assert!(
        write(ErrorStatus::Forbidden, true, Some(&pages)).ends_with("\r\n\r\n<p>no, a.test</p>")
    );
    let plain = write(ErrorStatus::Forbidden, false, Some(&pages));
    assert!(
        plain.ends_with(
            "403 Forbidden\nYou are not allowed to reach this page.\nrequest ------------------------\n"
        ),
        "{plain}"
    );
    let mut builtin_only = Vec::new();
    builtin
        .get(ErrorStatus::TooManyRequests, true)
        .write_into(&mut builtin_only, &CTX);
    assert_eq!(
        write(ErrorStatus::TooManyRequests, true, Some(&pages)).as_bytes(),
        &builtin_only[..]
    );
    assert_eq!(
        write(ErrorStatus::TooManyRequests, true, None).as_bytes(),
        &builtin_only[..]
    );
    // A Retry-After line goes in the head of the built-in page too.
    let mut out = Vec::new();
    write_error_page(
        &mut out,
        &builtin,
        None,
        ErrorStatus::TooManyRequests,
        false,
        &vars,
        Some(7),
        &CTX,
    );
    let s = String::from_utf8(out).unwrap();
    assert!(
        s.contains("\r\nRetry-After: 7\r\nDate: x\r\n\r\n429 Too Many Requests\n"),
        "{s}"
    );
}

#[test]
fn decimal_lengths() {
    for n in [0u64, 7, 10, 13, 65_536, u64::MAX] {
        let mut out = Vec::new();
        crate::pages::push_decimal(&mut out, n);
        assert_eq!(out, n.to_string().as_bytes());
    }
}
