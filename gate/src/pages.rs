//! Built-in error pages, precomputed per snapshot.
//!
//! Every refusal the gate or the server can give has a page here: HTML for a
//! client whose `Accept` includes `text/html`, plain text otherwise, both with
//! `Cache-Control: no-store` and the security headers. The HTML page has one
//! inline style and no script; its CSP allows exactly that style by hash.
//! Choosing and writing a page is an index and a copy: no allocation.

use crate::answer::{reason_phrase, Answer, REQUEST_ID_SLOT};
use crate::sink::{Lines, Sink};
use base64::Engine;
use sha2::{Digest, Sha256};

/// Every status the gate answers with a page.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum ErrorStatus {
    BadRequest = 0,
    Forbidden,
    NotFound,
    PayloadTooLarge,
    UriTooLong,
    MisdirectedRequest,
    TooManyRequests,
    HeaderFieldsTooLarge,
    BadGateway,
    ServiceUnavailable,
    GatewayTimeout,
}

impl ErrorStatus {
    pub const ALL: [ErrorStatus; 11] = [
        ErrorStatus::BadRequest,
        ErrorStatus::Forbidden,
        ErrorStatus::NotFound,
        ErrorStatus::PayloadTooLarge,
        ErrorStatus::UriTooLong,
        ErrorStatus::MisdirectedRequest,
        ErrorStatus::TooManyRequests,
        ErrorStatus::HeaderFieldsTooLarge,
        ErrorStatus::BadGateway,
        ErrorStatus::ServiceUnavailable,
        ErrorStatus::GatewayTimeout,
    ];

    pub fn code(self) -> u16 {
        match self {
            ErrorStatus::BadRequest => 400,
            ErrorStatus::Forbidden => 403,
            ErrorStatus::NotFound => 404,
            ErrorStatus::PayloadTooLarge => 413,
            ErrorStatus::UriTooLong => 414,
            ErrorStatus::MisdirectedRequest => 421,
            ErrorStatus::TooManyRequests => 429,
            ErrorStatus::HeaderFieldsTooLarge => 431,
            ErrorStatus::BadGateway => 502,
            ErrorStatus::ServiceUnavailable => 503,
            ErrorStatus::GatewayTimeout => 504,
        }
    }

    pub fn from_code(code: u16) -> Option<ErrorStatus> {
        ErrorStatus::ALL.into_iter().find(|s| s.code() == code)
    }

    /// The one sentence the page says.
    pub fn sentence(self) -> &'static str {
        match self {
            ErrorStatus::BadRequest => "The request could not be understood.",
            ErrorStatus::Forbidden => "You are not allowed to reach this page.",
            ErrorStatus::NotFound => "There is nothing at this address.",
            ErrorStatus::PayloadTooLarge => {
                "The request body is larger than this site accepts (its limits.max_body_bytes)."
            }
            ErrorStatus::UriTooLong => "The address is longer than this site accepts.",
            ErrorStatus::MisdirectedRequest => "This server does not serve the requested host.",
            ErrorStatus::TooManyRequests => "Too many requests. Please slow down and try again.",
            ErrorStatus::HeaderFieldsTooLarge => {
                "The request headers are larger than this site accepts."
            }
            ErrorStatus::BadGateway => "The upstream server sent no valid answer.",
            ErrorStatus::ServiceUnavailable => "The service is unavailable right now.",
            ErrorStatus::GatewayTimeout => "The upstream server did not answer in time.",
        }
    }
}

/// Why no upstream answer reached the client: each gets its own words on
/// Gapura's 502, 503 or 504 page ([`ErrorPages::upstream`]) and in the
/// log line that names the upstream and server.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum UpstreamWhy {
    /// The server refused the TCP connection.
    Refused = 0,
    /// No connection within `connect_timeout_ms` (TCP or the TLS handshake).
    ConnectTimeout,
    /// The server's certificate did not verify.
    Certificate,
    /// The TLS handshake failed otherwise (the server refused it, no
    /// version or suite in common, a client certificate it wanted).
    Handshake,
    /// The server closed or reset the connection before its answer.
    Reset,
    /// No answer (or not all of the request taken) within the group's
    /// timeouts.
    AnswerTimeout,
    /// The answer was not valid HTTP.
    Malformed,
    /// Every server of the group was out (health) or failed.
    NoServer,
    /// Every connection to the server stayed busy past `queue_timeout_ms`.
    QueueTimeout,
}

impl UpstreamWhy {
    pub const ALL: [UpstreamWhy; 9] = [
        UpstreamWhy::Refused,
        UpstreamWhy::ConnectTimeout,
        UpstreamWhy::Certificate,
        UpstreamWhy::Handshake,
        UpstreamWhy::Reset,
        UpstreamWhy::AnswerTimeout,
        UpstreamWhy::Malformed,
        UpstreamWhy::NoServer,
        UpstreamWhy::QueueTimeout,
    ];

    /// The status Gapura answers with.
    pub fn status(self) -> ErrorStatus {
        match self {
            UpstreamWhy::ConnectTimeout | UpstreamWhy::AnswerTimeout => ErrorStatus::GatewayTimeout,
            UpstreamWhy::NoServer | UpstreamWhy::QueueTimeout => ErrorStatus::ServiceUnavailable,
            _ => ErrorStatus::BadGateway,
        }
    }

    /// What the page says.
    pub fn sentence(self) -> &'static str {
        match self {
            UpstreamWhy::Refused => "The upstream server refused the connection.",
            UpstreamWhy::ConnectTimeout => "The upstream server could not be reached in time.",
            UpstreamWhy::Certificate => "The upstream server's certificate was not accepted.",
            UpstreamWhy::Handshake => "The secure connection to the upstream server failed.",
            UpstreamWhy::Reset => "The upstream server closed the connection without an answer.",
            UpstreamWhy::AnswerTimeout => "The upstream server did not answer in time.",
            UpstreamWhy::Malformed => "The upstream server sent an answer that is not valid HTTP.",
            UpstreamWhy::NoServer => "No upstream server is available right now.",
            UpstreamWhy::QueueTimeout => "The upstream servers stayed busy; try again shortly.",
        }
    }

    /// The log line's words.
    pub fn words(self) -> &'static str {
        match self {
            UpstreamWhy::Refused => "connection refused",
            UpstreamWhy::ConnectTimeout => "no connection within connect_timeout_ms",
            UpstreamWhy::Certificate => "certificate not valid",
            UpstreamWhy::Handshake => "TLS handshake failed",
            UpstreamWhy::Reset => "connection closed before the answer",
            UpstreamWhy::AnswerTimeout => "no answer within the group's timeouts",
            UpstreamWhy::Malformed => "the answer is not valid HTTP",
            UpstreamWhy::NoServer => "every server out",
            UpstreamWhy::QueueTimeout => "queued past queue_timeout_ms",
        }
    }
}

pub(crate) const STYLE: &str = "body{margin:0;font:16px/1.5 system-ui,sans-serif;background:#f4f1ea;color:#2b2620;display:flex;min-height:100vh;align-items:center;justify-content:center}main{background:#fff;border:1px solid #ddd3c0;border-radius:8px;padding:2rem 2.5rem;max-width:32rem}p.s{color:#8a7f6d;margin:0}h1{margin:.25rem 0 1rem;font-size:1.6rem}footer{margin-top:1.5rem;color:#8a7f6d;font-size:.8rem}";

/// The CSP of a built-in page: nothing loads, only the one hashed style applies.
pub fn builtin_csp() -> String {
    let digest = Sha256::digest(STYLE.as_bytes());
    let hash = base64::engine::general_purpose::STANDARD.encode(digest);
    format!("default-src 'none'; style-src 'sha256-{hash}'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
}

fn builtin_html(status: ErrorStatus) -> String {
    builtin_html_for(status.code(), status.sentence())
}

fn builtin_html_for(code: u16, sentence: &str) -> String {
    let reason = reason_phrase(code);
    format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width,initial-scale=1\"><title>{code} {reason}</title><style>{STYLE}</style></head><body><main><p class=\"s\">{code}</p><h1>{reason}</h1><p>{sentence}</p><footer>gapura - request {REQUEST_ID_SLOT}</footer></main></body></html>\n"
    )
}

/// A built-in page for a status [`ErrorStatus`] does not list (401, a 429
/// with `Retry-After`): the same HTML and CSP, `text` as the plain-text
/// body, `extra` headers before the common ones. `sentence` must be plain
/// text without markup. Allocates (compile time only).
pub fn builtin_page(code: u16, sentence: &str, text: &str, extra: &[(&str, &str)]) -> Page {
    let csp = builtin_csp();
    let common: [(&str, &str); 3] = [
        ("Cache-Control", "no-store"),
        ("Referrer-Policy", "no-referrer"),
        ("X-Content-Type-Options", "nosniff"),
    ];
    let mut html_headers = extra.to_vec();
    html_headers.push(("Content-Type", "text/html; charset=utf-8"));
    html_headers.extend_from_slice(&common);
    html_headers.push(("Content-Security-Policy", csp.as_str()));
    let mut text_headers = extra.to_vec();
    text_headers.push(("Content-Type", "text/plain; charset=utf-8"));
    text_headers.extend_from_slice(&common);
    let text = format!("{text}request {REQUEST_ID_SLOT}\n");
    Page {
        html: Answer::new(
            code,
            &html_headers,
            builtin_html_for(code, sentence).as_bytes(),
        )
        .with_request_id_slot(),
        text: Answer::new(code, &text_headers, text.as_bytes()).with_request_id_slot(),
    }
}

/// A page in its two forms.
#[derive(Clone, Debug)]
pub struct Page {
    pub html: Answer,
    pub text: Answer,
}

impl Page {
    /// The form a client gets: HTML when it accepts it, else text.
    #[inline]
    pub fn for_client(&self, wants_html: bool) -> &Answer {
        if wants_html {
            &self.html
        } else {
            &self.text
        }
    }
}

/// The pages of one snapshot, indexed by [`ErrorStatus`].
#[derive(Clone, Debug)]
pub struct ErrorPages {
    pages: Vec<Page>,
    /// Gapura's 502, 503 and 504 in their own words, by [`UpstreamWhy`].
    upstream: Vec<Page>,
    /// The 429 with its `Retry-After` value in header and body: text, html.
    rate_limited: [RetryPage; 2],
}

/// A page whose body carries a number (the 429's `Retry-After` seconds):
/// the head without `Content-Length`, and the body split around the number.
#[derive(Clone, Debug)]
pub struct RetryPage {
    head: Lines,
    body_pre: Box<[u8]>,
    /// What follows the number: " seconds." and the rest of the page.
    body_post: Box<[u8]>,
    /// The same after 1: " second." and the rest (the request-id slot
    /// lies as far from the page's end in both).
    body_post_one: Box<[u8]>,
    /// Where `body_post` holds the request-id slot.
    id_at: Option<usize>,
}

/// `n` in decimal, written at the end of `digits`: the slice it fills.
pub fn decimal(mut n: u64, digits: &mut [u8; 20]) -> &[u8] {
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    &digits[i..]
}

/// Appends `n` in decimal. No allocation once `out` has capacity.
pub fn push_decimal(out: &mut Vec<u8>, n: u64) {
    out.extend_from_slice(decimal(n, &mut [0u8; 20]));
}

fn decimal_len(mut n: u64) -> u64 {
    let mut len = 1;
    while n >= 10 {
        n /= 10;
        len += 1;
    }
    len
}

impl RetryPage {
    fn new(headers: &[(&str, &str)], body_pre: &str, body_post: &str) -> RetryPage {
        RetryPage {
            head: Lines::new(Some(429), headers),
            body_pre: body_pre.as_bytes().into(),
            body_post: body_post.as_bytes().into(),
            body_post_one: body_post
                .replacen(" seconds.", " second.", 1)
                .as_bytes()
                .into(),
            id_at: body_post.find(REQUEST_ID_SLOT),
        }
    }

    /// Writes the request id into the page just written at the end of
    /// `out`, as [`Answer::stamp`] does.
    #[inline]
    pub fn stamp(&self, out: &mut [u8], head_only: bool, id: impl FnOnce() -> [u8; 24]) {
        if let (Some(at), false) = (self.id_at, head_only) {
            if out.len() >= self.body_post.len() {
                crate::answer::stamp_at(out, self.body_post.len(), at, &id());
            }
        }
    }

    /// Writes the 429 with `retry_after_s` in `Retry-After` and the body.
    /// No allocation once `out` has capacity.
    pub fn write_into<O: Sink>(
        &self,
        out: &mut O,
        retry_after_s: u32,
        ctx: &crate::answer::WriteCtx<'_>,
    ) {
        let n = u64::from(retry_after_s);
        let post = if n == 1 {
            &self.body_post_one
        } else {
            &self.body_post
        };
        out.head(429, &self.head);
        let len = self.body_pre.len() as u64 + decimal_len(n) + post.len() as u64;
        let mut digits = [0u8; 20];
        out.field(
            b"Content-Length",
            http::header::CONTENT_LENGTH,
            &[decimal(len, &mut digits)],
        );
        let mut digits = [0u8; 20];
        let n = decimal(n, &mut digits);
        out.field(b"Retry-After", http::header::RETRY_AFTER, &[n]);
        out.date(ctx.date_line);
        crate::answer::end_head(out, ctx);
        if !ctx.head_only {
            out.body(&self.body_pre);
            out.body(n);
            out.body(post);
        }
    }
}

impl ErrorPages {
    /// The built-in set. Allocates (compile time only).
    pub fn builtin() -> ErrorPages {
        let csp = builtin_csp();
        let pages = ErrorStatus::ALL
            .iter()
            .map(|&s| {
                let common: [(&str, &str); 3] = [
                    ("Cache-Control", "no-store"),
                    ("Referrer-Policy", "no-referrer"),
                    ("X-Content-Type-Options", "nosniff"),
                ];
                let mut html_headers = vec![("Content-Type", "text/html; charset=utf-8")];
                html_headers.extend_from_slice(&common);
                html_headers.push(("Content-Security-Policy", csp.as_str()));
                let mut text_headers = vec![("Content-Type", "text/plain; charset=utf-8")];
                text_headers.extend_from_slice(&common);
                let text = format!(
                    "{} {}\n{}\nrequest {REQUEST_ID_SLOT}\n",
                    s.code(),
                    reason_phrase(s.code()),
                    s.sentence()
                );
                Page {
                    html: Answer::new(s.code(), &html_headers, builtin_html(s).as_bytes())
                        .with_request_id_slot(),
                    text: Answer::new(s.code(), &text_headers, text.as_bytes())
                        .with_request_id_slot(),
                }
            })
            .collect();
        let common: [(&str, &str); 3] = [
            ("Cache-Control", "no-store"),
            ("Referrer-Policy", "no-referrer"),
            ("X-Content-Type-Options", "nosniff"),
        ];
        let mut text_headers = vec![("Content-Type", "text/plain; charset=utf-8")];
        text_headers.extend_from_slice(&common);
        let mut html_headers = vec![("Content-Type", "text/html; charset=utf-8")];
        html_headers.extend_from_slice(&common);
        html_headers.push(("Content-Security-Policy", csp.as_str()));
        let html = builtin_html(ErrorStatus::TooManyRequests);
        let marker = "</p><footer>";
        let at = html.find(marker).unwrap_or(html.len());
        let html_pre = format!("{} Retry after ", &html[..at]);
        let html_post = format!(" seconds.{}", &html[at..]);
        let rate_limited = [
            RetryPage::new(
                &text_headers,
                "429 Too Many Requests\nToo many requests. Retry after ",
                &format!(" seconds.\nrequest {REQUEST_ID_SLOT}\n"),
            ),
            RetryPage::new(&html_headers, &html_pre, &html_post),
        ];
        let upstream = UpstreamWhy::ALL
            .iter()
            .map(|&w| {
                let code = w.status().code();
                let text = format!("{code} {}\n{}\n", reason_phrase(code), w.sentence());
                builtin_page(code, w.sentence(), &text, &[])
            })
            .collect();
        ErrorPages {
            pages,
            upstream,
            rate_limited,
        }
    }

    /// Gapura's own page for an upstream that did not answer, saying why,
    /// in the client's form. O(1).
    #[inline]
    pub fn upstream(&self, why: UpstreamWhy, wants_html: bool) -> &Answer {
        self.upstream[why as usize].for_client(wants_html)
    }

    /// The 429 page with a `Retry-After` value, in the client's form. O(1).
    #[inline]
    pub fn rate_limited(&self, wants_html: bool) -> &RetryPage {
        &self.rate_limited[usize::from(wants_html)]
    }

    /// The page for `status` in the form the client asked for. O(1).
    #[inline]
    pub fn get(&self, status: ErrorStatus, wants_html: bool) -> &Answer {
        self.pages[status as usize].for_client(wants_html)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_status_has_both_forms_with_no_store() {
        let pages = ErrorPages::builtin();
        for s in ErrorStatus::ALL {
            for html in [false, true] {
                let a = pages.get(s, html);
                assert_eq!(a.status, s.code());
                let head = String::from_utf8(a.head().to_vec()).unwrap();
                assert!(head.starts_with(&format!("HTTP/1.1 {} ", s.code())));
                assert!(head.contains("Cache-Control: no-store\r\n"));
                assert!(head.contains("X-Content-Type-Options: nosniff\r\n"));
                assert!(head.contains("Referrer-Policy: no-referrer\r\n"));
                assert_eq!(head.contains("Content-Security-Policy"), html);
                assert_eq!(head.contains("text/html"), html);
            }
        }
    }

    #[test]
    fn html_page_is_ascii_and_scriptless() {
        let pages = ErrorPages::builtin();
        let body = pages.get(ErrorStatus::NotFound, true).body();
        assert!(body.is_ascii());
        let s = std::str::from_utf8(body).unwrap();
        assert!(!s.contains("<script"));
        assert!(s.contains("<h1>Not Found</h1>"));
    }

    #[test]
    fn rate_limited_page_carries_retry_after_in_header_and_body() {
        let pages = ErrorPages::builtin();
        let ctx = crate::answer::WriteCtx {
            date_line: b"Date: x\r\n",
            head_only: false,
            close: false,
            keep_alive_10: false,
        };
        let mut out = Vec::new();
        pages.rate_limited(false).write_into(&mut out, 17, &ctx);
        let text = String::from_utf8(out).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 429 Too Many Requests\r\n"));
        assert!(head.contains("\r\nRetry-After: 17\r\n"));
        assert!(head.contains(&format!("\r\nContent-Length: {}\r\n", body.len())));
        assert!(
            body.starts_with("429 Too Many Requests\nToo many requests. Retry after 17 seconds.")
        );
        assert!(
            !body.contains("RateLimited"),
            "no code names in what a person reads"
        );
        let mut out = Vec::new();
        pages.rate_limited(true).write_into(&mut out, 3600, &ctx);
        let text = String::from_utf8(out).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(head.contains(&format!("\r\nContent-Length: {}\r\n", body.len())));
        assert!(body.contains("Retry after 3600 seconds.</p>"));
        // One second is one, and the request id still lands in its slot.
        for wants_html in [false, true] {
            let page = pages.rate_limited(wants_html);
            let mut out = Vec::new();
            page.write_into(&mut out, 1, &ctx);
            page.stamp(&mut out, false, || *b"abcdefghijklmnopqrstuvwx");
            let text = String::from_utf8(out).unwrap();
            let (head, body) = text.split_once("\r\n\r\n").unwrap();
            assert!(body.contains("Retry after 1 second."), "{body}");
            assert!(!body.contains("1 seconds"), "{body}");
            assert!(body.contains("abcdefghijklmnopqrstuvwx"), "{body}");
            assert!(head.contains(&format!("\r\nContent-Length: {}\r\n", body.len())));
        }
    }

    #[test]
    fn each_upstream_failure_has_its_own_words_and_status() {
        let pages = ErrorPages::builtin();
        let mut seen = std::collections::HashSet::new();
        for w in UpstreamWhy::ALL {
            let text = pages.upstream(w, false);
            assert_eq!(text.status, w.status().code());
            let body = String::from_utf8(text.body().to_vec()).unwrap();
            assert!(body.contains(w.sentence()), "{body}");
            assert!(seen.insert(w.sentence()), "{w:?} shares its words");
            let html = String::from_utf8(pages.upstream(w, true).body().to_vec()).unwrap();
            assert!(html.contains(w.sentence()), "{html}");
        }
        assert_eq!(UpstreamWhy::Certificate.status(), ErrorStatus::BadGateway);
        assert_eq!(
            UpstreamWhy::AnswerTimeout.status(),
            ErrorStatus::GatewayTimeout
        );
    }

    #[test]
    fn status_codes_round_trip() {
        for s in ErrorStatus::ALL {
            assert_eq!(ErrorStatus::from_code(s.code()), Some(s));
        }
        assert_eq!(ErrorStatus::from_code(200), None);
    }
}
