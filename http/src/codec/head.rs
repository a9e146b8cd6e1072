//! Request head parsing and framing decisions.
//!
//! `parse_head` reads a plain head in one pass (`super::scan`), else runs
//! httparse over the buffer, with the caller's fixed array of header
//! lines, within the caller's [`HeadBounds`], then derives the facts the server needs in
//! one pass: Host, the body framing, the connection tokens, `Expect`, whether
//! the client wants HTML, and the header count and bytes the limits judge.
//! Every ambiguity that could let two parsers disagree about where a request
//! ends is an error: Content-Length with Transfer-Encoding, differing
//! Content-Length values, a Transfer-Encoding that is anything but exactly
//! `chunked` once (`gzip, chunked`, `identity, chunked`, `chunked` twice),
//! duplicate Host, obs-fold, bare CR, invalid header names; so is a target
//! with a `#fragment`, which a client never sends and two parsers may cut
//! differently. O(head length), no allocation.

use super::accept::accepts_html;
use super::bytes::KnownHost;
use super::scan;
use std::mem::MaybeUninit;
use std::ops::Range;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    Get,
    Head,
    Post,
    Put,
    Delete,
    Options,
    Patch,
    Connect,
    Other,
}

impl Method {
    pub(super) fn from_bytes(m: &[u8]) -> Method {
        match m {
            b"GET" => Method::Get,
            b"HEAD" => Method::Head,
            b"POST" => Method::Post,
            b"PUT" => Method::Put,
            b"DELETE" => Method::Delete,
            b"OPTIONS" => Method::Options,
            b"PATCH" => Method::Patch,
            b"CONNECT" => Method::Connect,
            _ => Method::Other,
        }
    }

    /// The request line's method token, for a method named here (`None`:
    /// another, read from the line).
    #[inline]
    pub fn token(self) -> Option<&'static [u8]> {
        Some(match self {
            Method::Get => b"GET",
            Method::Head => b"HEAD",
            Method::Post => b"POST",
            Method::Put => b"PUT",
            Method::Delete => b"DELETE",
            Method::Options => b"OPTIONS",
            Method::Patch => b"PATCH",
            Method::Connect => b"CONNECT",
            Method::Other => return None,
        })
    }
}

/// How the request body is delimited.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyFraming {
    None,
    Length(u64),
    Chunked,
}

/// Why a head was refused before any policy saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeadError {
    /// Malformed or ambiguous: 400 and close.
    Malformed(&'static str),
    /// The request line alone is longer than any host allows: 414.
    UrlTooLong,
    /// The head is larger than the outer bound, or has more lines: 431.
    TooLarge,
}

/// A complete request head. Ranges index the buffer given to `parse_head`.
#[derive(Clone, Debug)]
pub struct ParsedHead {
    pub method: Method,
    /// 0 for HTTP/1.0, 1 for HTTP/1.1.
    pub version: u8,
    /// The raw target as sent.
    pub target: Range<usize>,
    /// Path and query of the target (origin form; the path of an absolute form).
    pub path: Range<usize>,
    /// Host from an absolute-form target, else the Host header.
    pub host: Option<Range<usize>>,
    pub framing: BodyFraming,
    /// `Connection: close` (1.1) or no `keep-alive` (1.0).
    pub close: bool,
    /// 1.0 client that asked for keep-alive.
    pub keep_alive_10: bool,
    pub upgrade: bool,
    pub expect_continue: bool,
    pub wants_html: bool,
    /// `Sec-Fetch-Mode` said something other than `navigate`: a script's
    /// fetch, not a page the user opens.
    pub not_navigation: bool,
    pub header_count: usize,
    pub header_bytes: usize,
    /// Bytes of the head including the final blank line.
    pub head_len: usize,
}

/// The header array a parse fills: its length `N` is the most header lines
/// a head may have (more is [`HeadError::TooLarge`]).
pub type HeaderBuf<'b, const N: usize> = [MaybeUninit<httparse::Header<'b>>; N];

/// A fresh, uninitialised header array (no cost to create).
pub fn header_buf<'b, const N: usize>() -> HeaderBuf<'b, N> {
    [const { MaybeUninit::uninit() }; N]
}

/// The outer bounds of a head, fixed by the caller: past them a head is
/// refused whatever the host's own limits say, and a partial head is
/// refused as soon as it passes them rather than buffered further.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeadBounds {
    /// Most bytes of a head, the blank line included (more: 431).
    pub max_head_bytes: usize,
    /// Most bytes of the request line, its line break included (more: 414).
    pub max_request_line_bytes: usize,
}

/// Outcome of one parse attempt. A complete head comes with its header
/// lines, borrowed from the caller's array and buffer. An explicit
/// one-byte tag: the caller reads it straight after the parser wrote it,
/// as a load of the width it was stored with.
#[derive(Debug)]
#[repr(u8)]
pub enum Parse<'h, 'b> {
    Complete(ParsedHead, &'h [httparse::Header<'b>]),
    /// Need more bytes; nothing is wrong so far.
    Partial,
    Error(HeadError),
}

fn offset(buf: &[u8], part: &[u8]) -> Range<usize> {
    let start = part.as_ptr() as usize - buf.as_ptr() as usize;
    start..start + part.len()
}

/// Whether a header name is `lower` in any case, a word at a time:
/// `lower` holds only lowercase letters and `-`, and `name` only token
/// bytes (httparse and h2 refuse other names), so setting bit 5 of each
/// byte of `name` gives `lower` exactly when the names are equal ignoring
/// case (a token byte that bit 5 makes a lowercase letter is that letter,
/// and the only one it makes `-` is `-`).
#[inline(always)]
fn name_is(name: &[u8], lower: &[u8]) -> bool {
    let n = lower.len();
    if name.len() != n {
        return false;
    }
    if n < 4 {
        return name.eq_ignore_ascii_case(lower);
    }
    if n < 8 {
        let w = |s: &[u8], i: usize| u32::from_le_bytes([s[i], s[i + 1], s[i + 2], s[i + 3]]);
        const BIT5: u32 = 0x2020_2020;
        return w(name, 0) | BIT5 == w(lower, 0) && w(name, n - 4) | BIT5 == w(lower, n - 4);
    }
    let w = |s: &[u8], i: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&s[i..i + 8]);
        u64::from_le_bytes(b)
    };
    const BIT5: u64 = 0x2020_2020_2020_2020;
    let mut i = 0;
    while i + 8 < n {
        if w(name, i) | BIT5 != w(lower, i) {
            return false;
        }
        i += 8;
    }
    w(name, n - 8) | BIT5 == w(lower, n - 8)
}

fn has_token(value: &[u8], token: &[u8]) -> bool {
    value
        .split(|&b| b == b',')
        .any(|t| t.trim_ascii().eq_ignore_ascii_case(token))
}

fn parse_length(value: &[u8]) -> Option<u64> {
    // A list of identical values ("5, 5") is one value; anything else fails.
    let mut found: Option<u64> = None;
    for part in value.split(|&b| b == b',') {
        let part = part.trim_ascii();
        if part.is_empty() || part.len() > 19 || !part.iter().all(u8::is_ascii_digit) {
            return None;
        }
        let n = part
            .iter()
            .fold(0u64, |acc, &d| acc * 10 + u64::from(d - b'0'));
        match found {
            Some(prev) if prev != n => return None,
            _ => found = Some(n),
        }
    }
    found
}

/// Parses a request head at the start of `buf` into `headers`. O(n), no
/// allocation. The steps: the plain head is read in one pass
/// (`scan::scan_into`; a plain head not complete yet waits as httparse's
/// would), any other by httparse; the request line's
/// target is split into its form (`request_target`); the header lines the
/// server reads are gathered (`HeaderFacts::read`); the body's framing is
/// decided (`HeaderFacts::framing`).
pub fn parse_head<'h, 'b, const N: usize>(
    buf: &'b [u8],
    headers: &'h mut HeaderBuf<'b, N>,
    bounds: &HeadBounds,
) -> Parse<'h, 'b> {
    parse_head_known(buf, headers, bounds, &mut KnownHost::default())
}

/// [`parse_head`] for a connection's next head: a `Host` value byte for
/// byte the one `known` last found valid is not checked again. Inlined
/// into the connection's decision, so the head is written where it is
/// read rather than returned through memory.
#[inline(always)]
pub fn parse_head_known<'h, 'b, const N: usize>(
    buf: &'b [u8],
    headers: &'h mut HeaderBuf<'b, N>,
    bounds: &HeadBounds,
    known: &mut KnownHost,
) -> Parse<'h, 'b> {
    match scan::scan_into(buf, headers) {
        Ok(plain) => {
            if plain.head_len > bounds.max_head_bytes {
                return Parse::Error(HeadError::TooLarge);
            }
            // SAFETY: `scan_into` wrote the first `line_count` lines.
            let lines = unsafe { scan::written(headers, plain.line_count) };
            return complete(
                buf,
                plain.method,
                plain.target,
                plain.version,
                lines,
                plain.head_len,
                known,
            );
        }
        Err(scan::Declined::Partial) => return Parse::Partial.bounded(buf, bounds),
        Err(scan::Declined::Other) => {}
    }
    let mut req = httparse::Request::new(&mut []);
    let head_len = match req.parse_with_uninit_headers(buf, headers) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => {
            return Parse::Partial.bounded(buf, bounds);
        }
        Err(httparse::Error::TooManyHeaders) => return Parse::Error(HeadError::TooLarge),
        Err(e) => return Parse::Error(HeadError::Malformed(parse_error(e))),
    };
    if head_len > bounds.max_head_bytes {
        return Parse::Error(HeadError::TooLarge);
    }
    let (Some(method), Some(path), Some(version)) = (req.method, req.path, req.version) else {
        return Parse::Error(HeadError::Malformed("incomplete request line"));
    };
    let lines: &'h [httparse::Header<'b>] = req.headers;
    let method = Method::from_bytes(method.as_bytes());
    complete(
        buf,
        method,
        path.as_bytes(),
        version,
        lines,
        head_len,
        known,
    )
}

/// The facts of a complete head from its request line's parts and its
/// lines, whichever way they arrived (parsed text, or an HTTP/2 stream's
/// fields in `fields`): the target's form, the lines the server reads, the
/// body's framing. `raw_target` and the Host line's value lie in `buf`.
/// Inlined into its caller, so the head is written where the caller
/// reads it rather than returned through a copy.
#[inline(always)]
pub(super) fn complete<'h, 'b>(
    buf: &'b [u8],
    method: Method,
    raw_target: &[u8],
    version: u8,
    lines: &'h [httparse::Header<'b>],
    head_len: usize,
    known: &mut KnownHost,
) -> Parse<'h, 'b> {
    if method == Method::Connect {
        return Parse::Error(HeadError::Malformed("CONNECT is not served"));
    }
    let (target, path_range, host_from_target) = match request_target(buf, raw_target) {
        Ok(t) => t,
        Err(e) => return Parse::Error(e),
    };
    let facts = match HeaderFacts::read(buf, lines, known) {
        Ok(f) => f,
        Err(e) => return Parse::Error(e),
    };
    let framing = match facts.framing(version) {
        Ok(f) => f,
        Err(e) => return Parse::Error(e),
    };
    if version == 1 && facts.host.is_none() && host_from_target.is_none() {
        return Parse::Error(HeadError::Malformed("missing Host"));
    }
    let close = if version == 0 {
        !facts.keep_alive
    } else {
        facts.close
    };
    Parse::Complete(
        ParsedHead {
            method,
            version,
            target,
            path: path_range,
            host: host_from_target.or(facts.host),
            framing,
            close,
            keep_alive_10: version == 0 && facts.keep_alive && !facts.close,
            upgrade: facts.upgrade,
            expect_continue: facts.expect_continue && version == 1,
            wants_html: facts.wants_html,
            not_navigation: facts.not_navigation,
            header_count: lines.len(),
            header_bytes: facts.header_bytes,
            head_len,
        },
        lines,
    )
}

/// The answer's words for an error httparse found.
fn parse_error(e: httparse::Error) -> &'static str {
    match e {
        httparse::Error::HeaderName => "invalid header name",
        httparse::Error::HeaderValue => "invalid header value",
        httparse::Error::NewLine => "invalid line ending",
        httparse::Error::Token => "invalid token",
        httparse::Error::Version => "invalid version",
        _ => "malformed request",
    }
}

/// The request target's range in `buf`, the path's (origin and asterisk
/// forms: the whole target; absolute form: after the authority) and the
/// authority's (absolute form only).
#[inline]
#[allow(clippy::type_complexity)]
fn request_target(
    buf: &[u8],
    raw_target: &[u8],
) -> Result<(Range<usize>, Range<usize>, Option<Range<usize>>), HeadError> {
    let target = offset(buf, raw_target);
    if raw_target.contains(&b'#') {
        return Err(HeadError::Malformed("a fragment in the request target"));
    }
    if raw_target.first() == Some(&b'/') || raw_target == b"*" {
        return Ok((target.clone(), target, None));
    }
    let Some(rest) = strip_scheme(raw_target) else {
        return Err(HeadError::Malformed("unsupported request target"));
    };
    let auth_start = raw_target.len() - rest.len();
    let auth_end = rest
        .iter()
        .position(|&b| b == b'/' || b == b'?')
        .unwrap_or(rest.len());
    if auth_end == 0 {
        return Err(HeadError::Malformed("empty authority"));
    }
    let host = target.start + auth_start..target.start + auth_start + auth_end;
    let path = target.start + auth_start + auth_end..target.end;
    Ok((target, path, Some(host)))
}

/// What the server reads of the header lines.
#[derive(Default)]
struct HeaderFacts {
    host: Option<Range<usize>>,
    content_length: Option<u64>,
    te_seen: bool,
    chunked_last: bool,
    chunked_count: u32,
    /// A coding other than `chunked` (never forwarded: 400).
    other_coding: bool,
    close: bool,
    keep_alive: bool,
    upgrade: bool,
    expect_continue: bool,
    wants_html: bool,
    not_navigation: bool,
    header_bytes: usize,
}

impl HeaderFacts {
    /// Reads the lines: one pass, the name's length first. Inlined into
    /// its one caller, so the facts are built where they are read.
    #[inline(always)]
    fn read(
        buf: &[u8],
        headers: &[httparse::Header<'_>],
        known: &mut KnownHost,
    ) -> Result<HeaderFacts, HeadError> {
        let mut f = HeaderFacts::default();
        for h in headers {
            let name = h.name.as_bytes();
            let value = h.value;
            f.header_bytes += name.len() + value.len();
            match name.len() {
                4 if name_is(name, b"host") => {
                    if f.host.is_some() {
                        return Err(HeadError::Malformed("duplicate Host"));
                    }
                    let host = value.trim_ascii();
                    if !known.valid(host) {
                        return Err(HeadError::Malformed("invalid Host"));
                    }
                    f.host = Some(offset(buf, host));
                }
                14 if name_is(name, b"content-length") => {
                    let Some(n) = parse_length(value) else {
                        return Err(HeadError::Malformed("invalid Content-Length"));
                    };
                    if f.content_length.is_some_and(|prev| prev != n) {
                        return Err(HeadError::Malformed("differing Content-Length"));
                    }
                    f.content_length = Some(n);
                }
                14 if name_is(name, b"sec-fetch-mode") => {
                    f.not_navigation |= !value.trim_ascii().eq_ignore_ascii_case(b"navigate");
                }
                17 if name_is(name, b"transfer-encoding") => {
                    f.te_seen = true;
                    for coding in value.split(|&b| b == b',') {
                        let coding = coding.trim_ascii();
                        if coding.is_empty() {
                            continue;
                        }
                        f.chunked_last = coding.eq_ignore_ascii_case(b"chunked");
                        if f.chunked_last {
                            f.chunked_count += 1;
                        } else {
                            f.other_coding = true;
                        }
                    }
                }
                10 if name_is(name, b"connection") => {
                    f.close |= has_token(value, b"close");
                    f.keep_alive |= has_token(value, b"keep-alive");
                    f.upgrade |= has_token(value, b"upgrade");
                }
                6 if name_is(name, b"expect") => {
                    f.expect_continue |= value.trim_ascii().eq_ignore_ascii_case(b"100-continue");
                }
                6 if name_is(name, b"accept") => {
                    f.wants_html |= accepts_html(value);
                }
                _ => {}
            }
        }
        Ok(f)
    }

    /// The body's framing: chunked (the only coding, once, never beside a
    /// length, never in HTTP/1.0), a length, or none.
    #[inline]
    fn framing(&self, version: u8) -> Result<BodyFraming, HeadError> {
        if !self.te_seen {
            return Ok(match self.content_length {
                Some(0) | None => BodyFraming::None,
                Some(n) => BodyFraming::Length(n),
            });
        }
        if self.content_length.is_some() {
            return Err(HeadError::Malformed(
                "Content-Length with Transfer-Encoding",
            ));
        }
        if version == 0 {
            return Err(HeadError::Malformed("Transfer-Encoding in HTTP/1.0"));
        }
        if !self.chunked_last || self.chunked_count != 1 || self.other_coding {
            return Err(HeadError::Malformed(
                "Transfer-Encoding must be exactly chunked",
            ));
        }
        Ok(BodyFraming::Chunked)
    }
}

fn strip_scheme(target: &[u8]) -> Option<&[u8]> {
    let lower_eq = |p: &[u8]| target.len() >= p.len() && target[..p.len()].eq_ignore_ascii_case(p);
    if lower_eq(b"http://") {
        Some(&target[7..])
    } else if lower_eq(b"https://") {
        Some(&target[8..])
    } else {
        None
    }
}

impl Parse<'_, '_> {
    /// A partial head that already exceeds the outer bounds is refused now
    /// rather than buffered further: a request line longer than the bound
    /// is 414, a head past the outer bound 431.
    fn bounded(self, buf: &[u8], bounds: &HeadBounds) -> Self {
        let line_end = memchr::memchr(b'\n', buf);
        let max_line = bounds.max_request_line_bytes;
        match line_end {
            None if buf.len() > max_line => Parse::Error(HeadError::UrlTooLong),
            Some(n) if n > max_line => Parse::Error(HeadError::UrlTooLong),
            _ if buf.len() >= bounds.max_head_bytes => Parse::Error(HeadError::TooLarge),
            _ => self,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A token byte (RFC 9110 `tchar`): what a header name may hold.
    fn is_tchar(b: u8) -> bool {
        b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
    }

    #[test]
    fn a_name_compares_as_eq_ignore_ascii_case_for_every_token_byte() {
        let names: [&[u8]; 6] = [
            b"host",
            b"content-length",
            b"transfer-encoding",
            b"connection",
            b"expect",
            b"accept",
        ];
        for lower in names {
            let upper = lower.to_ascii_uppercase();
            assert!(name_is(lower, lower) && name_is(&upper, lower));
            assert!(!name_is(&lower[1..], lower));
            for at in 0..lower.len() {
                for b in (0..=255u8).filter(|&b| is_tchar(b)) {
                    let mut name = upper.clone();
                    name[at] = b;
                    assert_eq!(
                        name_is(&name, lower),
                        name.eq_ignore_ascii_case(lower),
                        "{:?} against {:?}",
                        String::from_utf8_lossy(&name),
                        String::from_utf8_lossy(lower)
                    );
                }
            }
        }
    }

    #[test]
    fn a_named_method_token_is_the_one_it_was_read_from() {
        for m in [
            "GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "PATCH", "CONNECT",
        ] {
            assert_eq!(Method::from_bytes(m.as_bytes()).token(), Some(m.as_bytes()));
        }
        assert_eq!(Method::from_bytes(b"get").token(), None);
        assert_eq!(Method::from_bytes(b"PROPFIND").token(), None);
    }

    /// The bounds the tests parse within: 128 lines, a 64 KiB head, a
    /// request line of 16 KiB and 64 bytes.
    const LINES: usize = 128;
    const BOUNDS: HeadBounds = HeadBounds {
        max_head_bytes: 64 * 1024,
        max_request_line_bytes: 16 * 1024 + 64,
    };

    fn parse<'b>(req: &'b [u8]) -> Parse<'b, 'b> {
        let headers: &'b mut HeaderBuf<'b, LINES> = Box::leak(Box::new(header_buf()));
        parse_head(req, headers, &BOUNDS)
    }

    fn ok(req: &[u8]) -> ParsedHead {
        match parse(req) {
            Parse::Complete(h, _) => h,
            other => panic!("expected a head, got {other:?}"),
        }
    }

    fn malformed(req: &[u8]) {
        match parse(req) {
            Parse::Error(HeadError::Malformed(_)) => {}
            other => panic!(
                "expected malformed for {:?}, got {other:?}",
                String::from_utf8_lossy(req)
            ),
        }
    }

    #[test]
    fn simple_get_has_host_and_no_body() {
        let req = b"GET /a?b HTTP/1.1\r\nHost: example.com\r\nAccept: text/html\r\n\r\nrest";
        let h = ok(req);
        assert_eq!(h.method, Method::Get);
        assert_eq!(&req[h.target.clone()], b"/a?b");
        assert_eq!(&req[h.host.clone().unwrap()], b"example.com");
        assert_eq!(h.framing, BodyFraming::None);
        assert!(h.wants_html);
        assert!(!h.close);
        assert_eq!(h.head_len, req.len() - 4);
        assert_eq!(h.header_count, 2);
        assert_eq!(h.header_bytes, 4 + 11 + 6 + 9);
    }

    #[test]
    fn partial_head_asks_for_more() {
        assert!(matches!(parse(b"GET / HTTP/1.1\r\nHo"), Parse::Partial));
    }

    #[test]
    fn http10_closes_unless_keep_alive() {
        assert!(ok(b"GET / HTTP/1.0\r\n\r\n").close);
        let h = ok(b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
        assert!(!h.close);
        assert!(h.keep_alive_10);
        assert!(ok(b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n").close);
    }

    #[test]
    fn body_framing_is_derived() {
        let h = ok(b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\n");
        assert_eq!(h.framing, BodyFraming::Length(5));
        let h =
            ok(b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5, 5\r\nContent-Length: 5\r\n\r\n");
        assert_eq!(h.framing, BodyFraming::Length(5));
        let h = ok(b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding:  Chunked \r\n\r\n");
        assert_eq!(h.framing, BodyFraming::Chunked);
        let h = ok(b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n");
        assert_eq!(h.framing, BodyFraming::None);
    }

    #[test]
    fn ambiguous_framing_is_malformed() {
        malformed(b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n");
        malformed(b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n");
        malformed(b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5, 6\r\n\r\n");
        malformed(b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: -1\r\n\r\n");
        malformed(b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 0x10\r\n\r\n");
        malformed(b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 99999999999999999999\r\n\r\n");
        malformed(b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, gzip\r\n\r\n");
        malformed(b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n");
        malformed(b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: identity\r\n\r\n");
        malformed(b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n");
        malformed(b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: identity, chunked\r\n\r\n");
        malformed(b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n");
        malformed(b"GET /a#b HTTP/1.1\r\nHost: a\r\n\r\n");
        malformed(b"GET / HTTP/1.1\r\nHost: a b\r\n\r\n");
        malformed(b"GET / HTTP/1.1\r\nHost: a/b\r\n\r\n");
        malformed(b"GET / HTTP/1.1\r\nHost: a@b\r\n\r\n");
        assert!(ok(b"GET / HTTP/1.1\r\nHost: [::1]:8080\r\n\r\n")
            .host
            .is_some());
        malformed(b"GET http://a/x#y HTTP/1.1\r\nHost: a\r\n\r\n");
        malformed(b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n");
    }

    #[test]
    fn obs_fold_bare_cr_and_bad_names_are_malformed() {
        malformed(b"GET / HTTP/1.1\r\nHost: a\r\nX-A: b\r\n  folded\r\n\r\n");
        malformed(b"GET / HTTP/1.1\r\nHost: a\r\nX-A: b\rc\r\n\r\n");
        malformed(b"GET / HTTP/1.1\r\nHost: a\r\nBad Name: b\r\n\r\n");
        malformed(b"GET / HTTP/1.1\r\nHost: a\r\nX-A : b\r\n\r\n");
        malformed(b"GET / HTTP/1.1\r\nHost: a\r\n(x): b\r\n\r\n");
    }

    #[test]
    fn host_rules() {
        malformed(b"GET / HTTP/1.1\r\n\r\n");
        malformed(b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n");
        let req = b"GET http://Other.example:81/p?q HTTP/1.1\r\nHost: a\r\n\r\n";
        let h = ok(req);
        assert_eq!(&req[h.host.clone().unwrap()], b"Other.example:81");
        assert_eq!(&req[h.path.clone()], b"/p?q");
        malformed(b"CONNECT a:443 HTTP/1.1\r\nHost: a\r\n\r\n");
        malformed(b"GET ftp://a/ HTTP/1.1\r\nHost: a\r\n\r\n");
    }

    #[test]
    fn oversized_heads_are_refused_early() {
        let mut long = b"GET /".to_vec();
        long.extend(std::iter::repeat_n(b'a', 20_000));
        assert!(matches!(parse(&long), Parse::Error(HeadError::UrlTooLong)));
        let mut many = b"GET / HTTP/1.1\r\nHost: a\r\n".to_vec();
        for i in 0..200 {
            many.extend_from_slice(format!("X-{i}: v\r\n").as_bytes());
        }
        many.extend_from_slice(b"\r\n");
        assert!(matches!(parse(&many), Parse::Error(HeadError::TooLarge)));
        let mut big = b"GET / HTTP/1.1\r\nHost: a\r\n".to_vec();
        while big.len() < BOUNDS.max_head_bytes {
            big.extend_from_slice(b"X-Long: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n");
        }
        assert!(matches!(parse(&big), Parse::Error(HeadError::TooLarge)));
    }

    #[test]
    fn expect_continue_only_on_http11() {
        assert!(
            ok(b"POST / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\n")
                .expect_continue
        );
        assert!(
            !ok(b"POST / HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\n")
                .expect_continue
        );
    }
}
