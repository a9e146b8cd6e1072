//! Custom error pages: an operator's page per status, precomputed as byte
//! segments with a few runtime slots.
//!
//! An entry is a *message* (a heading of at most 120 characters and a
//! sentence of at most 500, one line each, rendered into the built-in layout
//! so it keeps the built-in page's hashed CSP) or a *document* (the
//! operator's whole HTML, at most 64 KiB of UTF-8 without control characters,
//! served with [`DOCUMENT_CSP`]: its own inline style and `data:` images and
//! fonts work, nothing runs or loads from elsewhere). Only HTML clients get
//! a custom page; anything else keeps the built-in plain text.
//!
//! Variables (`{status}`, `{statusText}`, `{requestId}`, `{host}`, `{cfRay}`;
//! syntax in `template.rs`): a page belongs to one status, so `{status}` and
//! `{statusText}` are folded into its bytes when it is compiled. The other
//! three are runtime slots, HTML-encoded as they are written (every
//! non-ASCII character becomes an entity), the host cut at
//! [`MAX_HOST_BYTES`], the ray and the request ID at [`MAX_CF_RAY_BYTES`].
//!
//! Writing a page is measuring the slots (to state `Content-Length` first),
//! then copying the head, the segments and the encoded slots into the
//! caller's buffer: O(page + slots), no allocation once the buffer has the
//! capacity.
//!
//! Customizable statuses: those the gate has built-in pages for except 400
//! (403, 404, 413, 414, 421, 429, 431, 502, 503, 504), and the maintenance
//! page (see [`crate::maintenance`]). A proof-of-work step's own refusals
//! and a basic-auth 401 are not: they say what the visitor must do.

mod template;
#[cfg(test)]
mod tests;
mod upstream;

pub use template::Var;
pub use upstream::{replace_upstream, ReplaceUpstream, UpstreamHead, REPLACED_RESPONSE_HEADERS};

use crate::answer::{end_head, reason_phrase, WriteCtx};
use crate::pages::{builtin_csp, ErrorPages, ErrorStatus, STYLE};
use crate::sink::{Lines, Sink};
use template::{encode_html, encode_html_string, Piece};

/// Longest heading, in characters.
pub const MAX_HEADING_CHARS: usize = 120;
/// Longest sentence, in characters.
pub const MAX_TEXT_CHARS: usize = 500;
/// Largest document, in bytes of UTF-8.
pub const MAX_HTML_BYTES: usize = 64 * 1024;
/// The `{host}` value is cut here (the longest DNS name).
pub const MAX_HOST_BYTES: usize = 253;
/// The `{cfRay}` and `{requestId}` values are cut here.
pub const MAX_CF_RAY_BYTES: usize = 64;

/// The CSP of a document page.
pub const DOCUMENT_CSP: &str = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; font-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// The statuses a host may give its own page.
pub const CUSTOMIZABLE: [ErrorStatus; 10] = [
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

/// Whether a host may give `status` its own page.
pub fn is_customizable(status: ErrorStatus) -> bool {
    CUSTOMIZABLE.contains(&status)
}

/// An entry's key in the profile: `error_pages.<status>` or
/// `error_pages.maintenance`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PageKey {
    Status(ErrorStatus),
    Maintenance,
}

impl PageKey {
    /// Parses `"404"` or `"maintenance"`; a status without a customizable
    /// page is `None`.
    pub fn parse(s: &str) -> Option<PageKey> {
        if s == "maintenance" {
            return Some(PageKey::Maintenance);
        }
        let status = ErrorStatus::from_code(s.parse().ok()?)?;
        is_customizable(status).then_some(PageKey::Status(status))
    }
}

/// Which form an entry takes. Profile key `error_pages.<key>.mode`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PageForm {
    /// Heading and sentence in the built-in layout.
    #[default]
    Message,
    /// The operator's whole HTML.
    Document,
}

impl PageForm {
    pub fn parse(s: &str) -> Option<PageForm> {
        match s {
            "message" => Some(PageForm::Message),
            "document" => Some(PageForm::Document),
            _ => None,
        }
    }
}

/// One entry as the profile states it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PageEntrySpec {
    pub form: PageForm,
    pub heading: Option<String>,
    pub text: Option<String>,
    pub html: Option<String>,
}

impl PageEntrySpec {
    pub fn message(heading: &str, text: &str) -> PageEntrySpec {
        PageEntrySpec {
            form: PageForm::Message,
            heading: Some(heading.to_owned()),
            text: Some(text.to_owned()),
            html: None,
        }
    }

    pub fn document(html: &str) -> PageEntrySpec {
        PageEntrySpec {
            form: PageForm::Document,
            html: Some(html.to_owned()),
            ..PageEntrySpec::default()
        }
    }
}

/// The field an error is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PageField {
    Heading,
    Text,
    Html,
}

impl PageField {
    pub fn name(self) -> &'static str {
        match self {
            PageField::Heading => "heading",
            PageField::Text => "text",
            PageField::Html => "html",
        }
    }
}

/// What is wrong with a field.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PageProblem {
    /// Missing or blank in the form that needs it.
    Required,
    TooLong,
    /// A control character (a line break, in a message), or for a document
    /// any control character but tab and line breaks.
    Invalid,
    /// Given in the form that does not use it.
    Unexpected,
    /// `{name}` that is not a variable (`errorPages.variable.unknown`).
    UnknownVariable(String),
}

/// Why an entry was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PageError {
    pub field: PageField,
    pub problem: PageProblem,
}

impl std::fmt::Display for PageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let field = self.field.name();
        match &self.problem {
            PageProblem::Required => write!(f, "{field} is required in this form"),
            PageProblem::TooLong => match self.field {
                PageField::Heading => {
                    write!(f, "heading is at most {MAX_HEADING_CHARS} characters")
                }
                PageField::Text => write!(f, "text is at most {MAX_TEXT_CHARS} characters"),
                PageField::Html => write!(f, "html is at most 64 KiB"),
            },
            PageProblem::Invalid => match self.field {
                PageField::Html => {
                    f.write_str("html holds no control characters but tab and line breaks")
                }
                _ => write!(f, "{field} is one line without control characters"),
            },
            PageProblem::Unexpected => write!(f, "{field} is not used in this form"),
            PageProblem::UnknownVariable(name) => {
                let allowed: Vec<String> = Var::ALL
                    .iter()
                    .map(|v| format!("{{{}}}", v.name()))
                    .collect();
                write!(
                    f,
                    "{{{name}}} is not a variable; the variables are {}",
                    allowed.join(", ")
                )
            }
        }
    }
}

impl std::error::Error for PageError {}

/// Checks an entry, returning every error. Allocates; compile time only.
pub fn validate_entry(spec: &PageEntrySpec) -> Vec<PageError> {
    let mut errors = Vec::new();
    let mut err = |field, problem| errors.push(PageError { field, problem });
    let present = |v: &Option<String>| v.as_deref().is_some_and(|s| !s.trim().is_empty());
    match spec.form {
        PageForm::Message => {
            for (field, value, max) in [
                (PageField::Heading, &spec.heading, MAX_HEADING_CHARS),
                (PageField::Text, &spec.text, MAX_TEXT_CHARS),
            ] {
                let Some(v) = value.as_deref().filter(|_| present(value)) else {
                    err(field, PageProblem::Required);
                    continue;
                };
                if v.chars().count() > max {
                    err(field, PageProblem::TooLong);
                } else if v.chars().any(char::is_control) {
                    err(field, PageProblem::Invalid);
                } else if let Err(name) = template::parse(v) {
                    err(field, PageProblem::UnknownVariable(name));
                }
            }
            if spec.html.is_some() {
                err(PageField::Html, PageProblem::Unexpected);
            }
        }
        PageForm::Document => {
            match spec.html.as_deref().filter(|_| present(&spec.html)) {
                None => err(PageField::Html, PageProblem::Required),
                Some(v) if v.len() > MAX_HTML_BYTES => err(PageField::Html, PageProblem::TooLong),
                Some(v)
                    if v.chars()
                        .any(|c| c.is_control() && !matches!(c, '\t' | '\n' | '\r')) =>
                {
                    err(PageField::Html, PageProblem::Invalid)
                }
                Some(v) => {
                    if let Err(name) = template::parse(v) {
                        err(PageField::Html, PageProblem::UnknownVariable(name));
                    }
                }
            }
            if spec.heading.is_some() {
                err(PageField::Heading, PageProblem::Unexpected);
            }
            if spec.text.is_some() {
                err(PageField::Text, PageProblem::Unexpected);
            }
        }
    }
    errors
}

/// A runtime slot of a compiled page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Segment {
    /// `bytes[start..end]`.
    Literal {
        start: u32,
        end: u32,
    },
    RequestId,
    Host,
    CfRay,
    /// `<p class="s">Request ID: <code>…</code></p>`, only when there is an
    /// ID (message pages).
    RequestIdLine,
}

/// The values of a page's runtime slots, raw; they are cut and encoded as
/// they are written.
#[derive(Clone, Copy, Debug, Default)]
pub struct PageVars<'a> {
    pub request_id: &'a [u8],
    pub host: &'a [u8],
    /// Empty unless Cloudflare's headers are trusted.
    pub cf_ray: &'a [u8],
}

const ID_LINE_OPEN: &[u8] = b"<p class=\"s\">Request ID: <code>";
const ID_LINE_CLOSE: &[u8] = b"</code></p>";

/// A compiled page for one status. Immutable; lives in the snapshot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CustomPage {
    status: u16,
    /// Status line and fixed headers, each ending in CRLF; no
    /// Content-Length (it depends on the slots).
    head: Lines,
    bytes: Box<[u8]>,
    segments: Box<[Segment]>,
}

/// Pieces to segments: literal text through `literal` (encoded for a
/// message, kept for a document), status and reason folded in.
struct Assembler {
    status: u16,
    bytes: Vec<u8>,
    segments: Vec<Segment>,
}

impl Assembler {
    fn raw(&mut self, s: &[u8]) {
        if s.is_empty() {
            return;
        }
        let start = self.bytes.len();
        self.bytes.extend_from_slice(s);
        let end = self.bytes.len();
        if let Some(Segment::Literal { end: last, .. }) = self.segments.last_mut() {
            if *last as usize == start {
                *last = end as u32;
                return;
            }
        }
        self.segments.push(Segment::Literal {
            start: start as u32,
            end: end as u32,
        });
    }

    fn pieces(&mut self, pieces: &[Piece], encode: bool) {
        for piece in pieces {
            match piece {
                Piece::Text(t) if encode => self.raw(encode_html_string(t).as_bytes()),
                Piece::Text(t) => self.raw(t.as_bytes()),
                Piece::Var(Var::Status) => self.raw(self.status.to_string().as_bytes()),
                Piece::Var(Var::StatusText) => {
                    self.raw(encode_html_string(reason_phrase(self.status)).as_bytes())
                }
                Piece::Var(Var::RequestId) => self.segments.push(Segment::RequestId),
                Piece::Var(Var::Host) => self.segments.push(Segment::Host),
                Piece::Var(Var::CfRay) => self.segments.push(Segment::CfRay),
            }
        }
    }
}

fn page_head(status: u16, csp: &str, extra_headers: &[(&str, &str)]) -> Lines {
    let mut pairs = vec![
        ("Content-Type", "text/html; charset=utf-8"),
        ("Cache-Control", "no-store"),
        ("Referrer-Policy", "no-referrer"),
        ("X-Content-Type-Options", "nosniff"),
        ("Content-Security-Policy", csp),
    ];
    pairs.extend_from_slice(extra_headers);
    Lines::new(Some(status), &pairs)
}

impl CustomPage {
    /// Compiles an entry for `status` (the code is any the answer may carry,
    /// e.g. a maintenance status). `extra_headers` are fixed headers written
    /// after the built-in ones (a maintenance `Retry-After`). Allocates;
    /// compile time only.
    pub fn compile(
        status: u16,
        spec: &PageEntrySpec,
        extra_headers: &[(&str, &str)],
    ) -> Result<CustomPage, Vec<PageError>> {
        let errors = validate_entry(spec);
        if !errors.is_empty() {
            return Err(errors);
        }
        let parse =
            |v: &Option<String>| template::parse(v.as_deref().unwrap_or("")).expect("validated");
        let mut a = Assembler {
            status,
            bytes: Vec::new(),
            segments: Vec::new(),
        };
        let csp = match spec.form {
            PageForm::Message => {
                let heading = parse(&spec.heading);
                let text = parse(&spec.text);
                a.raw(format!("<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width,initial-scale=1\"><title>{status} ").as_bytes());
                a.pieces(&heading, true);
                a.raw(format!("</title><style>{STYLE}</style></head><body><main><p class=\"s\">{status}</p><h1>").as_bytes());
                a.pieces(&heading, true);
                a.raw(b"</h1><p>");
                a.pieces(&text, true);
                a.raw(b"</p>");
                a.segments.push(Segment::RequestIdLine);
                a.raw(b"<footer>gapura</footer></main></body></html>\n");
                builtin_csp()
            }
            PageForm::Document => {
                a.pieces(&parse(&spec.html), false);
                DOCUMENT_CSP.to_owned()
            }
        };
        Ok(CustomPage {
            status,
            head: page_head(status, &csp, extra_headers),
            bytes: a.bytes.into_boxed_slice(),
            segments: a.segments.into_boxed_slice(),
        })
    }

    /// The built-in message for `status` as a page with slots (it carries the
    /// request-ID line the static built-in page has no room for).
    pub fn builtin_message(status: ErrorStatus) -> CustomPage {
        let reason = reason_phrase(status.code());
        let spec = PageEntrySpec::message(reason, status.sentence());
        CustomPage::compile(status.code(), &spec, &[]).expect("built-in messages are valid")
    }

    pub fn status(&self) -> u16 {
        self.status
    }

    /// The fixed head (status line and headers, no Content-Length).
    pub fn head(&self) -> &[u8] {
        self.head.h1()
    }

    /// Feeds the body to `sink`, slots cut and encoded.
    #[inline]
    fn body(&self, vars: &PageVars<'_>, mut sink: impl FnMut(&[u8])) {
        for seg in self.segments.iter() {
            match *seg {
                Segment::Literal { start, end } => sink(&self.bytes[start as usize..end as usize]),
                Segment::RequestId => {
                    encode_html(cut(vars.request_id, MAX_CF_RAY_BYTES), &mut sink)
                }
                Segment::Host => encode_html(cut(vars.host, MAX_HOST_BYTES), &mut sink),
                Segment::CfRay => encode_html(cut(vars.cf_ray, MAX_CF_RAY_BYTES), &mut sink),
                Segment::RequestIdLine => {
                    if !vars.request_id.is_empty() {
                        sink(ID_LINE_OPEN);
                        encode_html(cut(vars.request_id, MAX_CF_RAY_BYTES), &mut sink);
                        sink(ID_LINE_CLOSE);
                    }
                }
            }
        }
    }

    /// The body's length with these values. O(page segments + slots).
    #[inline]
    pub fn body_len(&self, vars: &PageVars<'_>) -> usize {
        let mut len = 0;
        self.body(vars, |b| len += b.len());
        len
    }

    /// Appends the body alone.
    #[inline]
    pub fn write_body<O: Sink>(&self, out: &mut O, vars: &PageVars<'_>) {
        self.body(vars, |b| out.body(b));
    }

    /// Appends the whole response: head, `Retry-After` when given,
    /// `Content-Length`, the Date line, the connection line, and the body
    /// unless `ctx.head_only`. O(page + slots), no allocation once `out`
    /// has the capacity.
    #[inline]
    pub fn write_into<O: Sink>(
        &self,
        out: &mut O,
        vars: &PageVars<'_>,
        retry_after_s: Option<u32>,
        ctx: &WriteCtx<'_>,
    ) {
        out.head(self.status, &self.head);
        write_retry_after(out, retry_after_s);
        let mut digits = [0u8; 20];
        let len = crate::pages::decimal(self.body_len(vars) as u64, &mut digits);
        out.field(b"Content-Length", http::header::CONTENT_LENGTH, &[len]);
        out.date(ctx.date_line);
        end_head(out, ctx);
        if !ctx.head_only {
            self.write_body(out, vars);
        }
    }
}

/// `Retry-After: N`, when there is one.
#[inline]
pub fn write_retry_after<O: Sink>(out: &mut O, seconds: Option<u32>) {
    if let Some(n) = seconds {
        let mut digits = [0u8; 20];
        let n = crate::pages::decimal(u64::from(n), &mut digits);
        out.field(b"Retry-After", http::header::RETRY_AFTER, &[n]);
    }
}

#[inline]
fn cut(v: &[u8], max: usize) -> &[u8] {
    &v[..v.len().min(max)]
}

/// A host's custom pages, by status. Immutable; lives in the snapshot.
#[derive(Clone, Debug, Default)]
pub struct CustomPages {
    pages: Vec<Option<CustomPage>>,
}

/// An entry refused, with its key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PagesError {
    pub status: ErrorStatus,
    /// `None`: the status cannot be customized
    /// (`errorPages.status.unsupported`).
    pub error: Option<PageError>,
}

impl CustomPages {
    /// Compiles a host's entries (merged already: each entry is replaced
    /// whole by the layer that sets it), collecting every error. Allocates;
    /// compile time only.
    pub fn compile(
        entries: &[(ErrorStatus, PageEntrySpec)],
    ) -> Result<CustomPages, Vec<PagesError>> {
        let mut pages = vec![None; ErrorStatus::ALL.len()];
        let mut errors = Vec::new();
        for (status, spec) in entries {
            if !is_customizable(*status) {
                errors.push(PagesError {
                    status: *status,
                    error: None,
                });
                continue;
            }
            match CustomPage::compile(status.code(), spec, &[]) {
                Ok(page) => pages[*status as usize] = Some(page),
                Err(es) => errors.extend(es.into_iter().map(|e| PagesError {
                    status: *status,
                    error: Some(e),
                })),
            }
        }
        if errors.is_empty() {
            Ok(CustomPages { pages })
        } else {
            Err(errors)
        }
    }

    /// The host's own page for `status`, if it has one. O(1).
    #[inline]
    pub fn get(&self, status: ErrorStatus) -> Option<&CustomPage> {
        self.pages.get(status as usize)?.as_ref()
    }
}

/// Writes the error answer for `status`: the host's custom page when it has
/// one and the client asked for HTML, else the built-in page in the form the
/// client asked for, with `Retry-After` when given. O(page), no allocation
/// once `out` has the capacity.
#[allow(clippy::too_many_arguments)]
#[inline]
pub fn write_error_page<O: Sink>(
    out: &mut O,
    builtin: &ErrorPages,
    custom: Option<&CustomPages>,
    status: ErrorStatus,
    wants_html: bool,
    vars: &PageVars<'_>,
    retry_after_s: Option<u32>,
    ctx: &WriteCtx<'_>,
) {
    let page = builtin.get(status, wants_html);
    write_page_or_custom(
        out,
        page,
        custom,
        status,
        wants_html,
        vars,
        retry_after_s,
        ctx,
    );
}

/// Gapura's own 502, 503 or 504 for an upstream that did not answer, in
/// the words of `why` ([`ErrorPages::upstream`]), or the host's own page
/// for its status when it has one.
pub fn write_upstream_error_page<O: Sink>(
    out: &mut O,
    builtin: &ErrorPages,
    custom: Option<&CustomPages>,
    why: crate::pages::UpstreamWhy,
    wants_html: bool,
    vars: &PageVars<'_>,
    ctx: &WriteCtx<'_>,
) {
    let page = builtin.upstream(why, wants_html);
    write_page_or_custom(out, page, custom, why.status(), wants_html, vars, None, ctx);
}

#[allow(clippy::too_many_arguments)]
fn write_page_or_custom<O: Sink>(
    out: &mut O,
    answer: &crate::answer::Answer,
    custom: Option<&CustomPages>,
    status: ErrorStatus,
    wants_html: bool,
    vars: &PageVars<'_>,
    retry_after_s: Option<u32>,
    ctx: &WriteCtx<'_>,
) {
    if wants_html {
        if let Some(page) = custom.and_then(|c| c.get(status)) {
            page.write_into(out, vars, retry_after_s, ctx);
            return;
        }
    }
    out.head(answer.status, answer.head_lines());
    write_retry_after(out, retry_after_s);
    out.date(ctx.date_line);
    end_head(out, ctx);
    if !ctx.head_only {
        out.body(answer.body());
        // The built-in page's request id: the one the custom page would show.
        if let Ok(id) = <&[u8; 24]>::try_from(vars.request_id) {
            answer.stamp(out.written_mut(), false, || *id);
        }
    }
}
