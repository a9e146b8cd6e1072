//! Precomputed answers and the one function that writes them.
//!
//! An [`Answer`] is a complete response built when the snapshot is compiled:
//! the status line and fixed headers (as HTTP/1.1 bytes and as fields,
//! [`crate::sink::Lines`]), then the body. It is written through a
//! [`crate::sink::Sink`]; as HTTP/1.1 bytes writing it costs
//! three `memcpy`s into the caller's buffer: the head, the shard's cached
//! `Date` line, then the blank line and the body together (precomputed), or
//! four or five when a connection line is needed or the answer is to a
//! `HEAD`. The
//! buffer is the connection's own and keeps its capacity between requests, so
//! a warmed-up connection allocates nothing here.
//!
//! The body is shared bytes (reference-counted, one copy per snapshot): a
//! large one ([`Answer::shared_body`]) is handed to the connection as it is
//! and never copied per request, per stream or per frame.

use crate::sink::{Lines, Sink};
use bytes::Bytes;

/// Bodies from this size on are sent as the snapshot's shared bytes
/// rather than copied into a connection's buffer.
pub const SHARED_BODY_BYTES: usize = 16 * 1024;

/// What the connection adds to a precomputed answer.
#[derive(Clone, Copy, Debug)]
pub struct WriteCtx<'a> {
    /// The shard's cached `Date: ...\r\n` line.
    pub date_line: &'a [u8],
    /// `HEAD` request: write the headers only (Content-Length stays).
    pub head_only: bool,
    /// The connection closes after this response: add `Connection: close`.
    pub close: bool,
    /// HTTP/1.0 client that asked for keep-alive and keeps it: say so.
    pub keep_alive_10: bool,
}

/// A complete response, precomputed. `head` is the status line and every
/// fixed header, each ending in CRLF, without the blank line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Answer {
    pub status: u16,
    head: Lines,
    body: Bytes,
    /// The blank line and the body, one copy for a keep-alive answer with
    /// its body; empty for a body sent as shared bytes.
    rest: Box<[u8]>,
    /// Where the body holds [`REQUEST_ID_SLOT`] (built-in pages only).
    id_at: Option<u32>,
}

/// The place a built-in page keeps for its request id: 24 characters, the
/// length of every request id, so the page's length never changes.
pub const REQUEST_ID_SLOT: &str = "------------------------";

/// Overwrites the request-id slot of a body that ends `out` and holds the
/// slot `at` bytes from its start.
#[inline]
pub(crate) fn stamp_at(out: &mut [u8], body_len: usize, at: usize, id: &[u8; 24]) {
    let start = out.len() - body_len + at;
    if let Some(slot) = out.get_mut(start..start + 24) {
        slot.copy_from_slice(id);
    }
}

impl Answer {
    /// Builds an answer. `headers` are (name, value) pairs written in order
    /// after the status line; `Content-Length` is added from the body.
    /// Allocates (compile time only).
    pub fn new(status: u16, headers: &[(&str, &str)], body: &[u8]) -> Answer {
        let length = body.len().to_string();
        let mut all = headers.to_vec();
        // 204 and 304 carry no body and no Content-Length; 1xx never come here.
        if status != 204 && status != 304 {
            all.push(("Content-Length", &length));
        }
        let head = Lines::new(Some(status), &all);
        let rest = if body.len() < SHARED_BODY_BYTES {
            [b"\r\n".as_slice(), body].concat().into_boxed_slice()
        } else {
            Box::default()
        };
        Answer {
            status,
            head,
            body: Bytes::copy_from_slice(body),
            rest,
            id_at: None,
        }
    }

    /// This answer with its body's [`REQUEST_ID_SLOT`] marked, to be filled
    /// by [`Answer::stamp`] (built-in pages).
    pub fn with_request_id_slot(mut self) -> Answer {
        let slot = REQUEST_ID_SLOT.as_bytes();
        self.id_at = self
            .body
            .windows(slot.len())
            .position(|w| w == slot)
            .map(|p| p as u32);
        self
    }

    /// Writes the request id into the answer just written at the end of
    /// `out` (nothing for a head-only answer or one without a slot; `id`
    /// is asked for only when needed). O(1).
    #[inline]
    pub fn stamp(&self, out: &mut [u8], head_only: bool, id: impl FnOnce() -> [u8; 24]) {
        if let (Some(at), false) = (self.id_at, head_only) {
            if out.len() >= self.body.len() {
                stamp_at(out, self.body.len(), at as usize, &id());
            }
        }
    }

    pub fn body(&self) -> &[u8] {
        &self.body
    }

    /// The body as the snapshot's shared bytes, when it is large
    /// ([`SHARED_BODY_BYTES`]) and has no request-id slot: the connection
    /// sends it after the head ([`end_head`]) without copying it. O(1).
    #[inline]
    pub fn shared_body(&self) -> Option<&Bytes> {
        (self.id_at.is_none() && self.body.len() >= SHARED_BODY_BYTES).then_some(&self.body)
    }

    /// The status line and fixed lines as HTTP/1.1 writes them.
    pub fn head(&self) -> &[u8] {
        self.head.h1()
    }

    /// The status line and fixed lines in both forms.
    pub fn head_lines(&self) -> &Lines {
        &self.head
    }

    /// Appends the response to `out`. O(len), no allocation once `out` has
    /// the capacity.
    #[inline]
    pub fn write_into<O: Sink>(&self, out: &mut O, ctx: &WriteCtx<'_>) {
        self.write_start(out, ctx.date_line);
        self.write_end(out, ctx);
    }

    /// The first part: status line, fixed headers and Date. A connection
    /// that must read the request body first writes this, reads the body,
    /// and only then decides whether it closes ([`Answer::write_end`]).
    #[inline]
    pub fn write_start<O: Sink>(&self, out: &mut O, date_line: &[u8]) {
        out.head(self.status, &self.head);
        out.date(date_line);
    }

    /// What [`Answer::write_end`] writes for an HTTP/1.1 keep-alive answer
    /// to a request other than `HEAD`, when that is one copy (its body is
    /// not sent as shared bytes) and nothing is stamped on it afterwards
    /// (no request-id slot). O(1).
    #[inline]
    pub fn keep_alive_rest(&self) -> Option<&[u8]> {
        (!self.rest.is_empty() && self.id_at.is_none()).then_some(&self.rest)
    }

    /// The rest: the connection line, the blank line, the body.
    #[inline]
    pub fn write_end<O: Sink>(&self, out: &mut O, ctx: &WriteCtx<'_>) {
        if !(ctx.close || ctx.keep_alive_10 || ctx.head_only || self.rest.is_empty()) {
            out.rest(&self.rest);
            return;
        }
        end_head(out, ctx);
        if !ctx.head_only {
            out.body(&self.body);
        }
    }
}

/// Ends a head whose Date line is written: the connection line, the blank line.
#[inline]
pub fn end_head<O: Sink>(out: &mut O, ctx: &WriteCtx<'_>) {
    out.end(ctx.close, ctx.keep_alive_10);
}

/// The reason phrase of a status code ("" for one we do not name).
pub fn reason_phrase(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        101 => "Switching Protocols",
        200 => "OK",
        201 => "Created",
        202 => "Accepted",
        204 => "No Content",
        206 => "Partial Content",
        301 => "Moved Permanently",
        302 => "Found",
        303 => "See Other",
        304 => "Not Modified",
        307 => "Temporary Redirect",
        308 => "Permanent Redirect",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        410 => "Gone",
        413 => "Content Too Large",
        414 => "URI Too Long",
        421 => "Misdirected Request",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        505 => "HTTP Version Not Supported",
        _ => "",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DATE: &[u8] = b"Date: Mon, 30 Nov 2026 05:00:00 GMT\r\n";

    fn ctx(head_only: bool, close: bool) -> WriteCtx<'static> {
        WriteCtx {
            date_line: DATE,
            head_only,
            close,
            keep_alive_10: false,
        }
    }

    #[test]
    fn answer_writes_head_date_and_body() {
        let a = Answer::new(200, &[("Content-Type", "text/plain")], b"hi");
        let mut out = Vec::new();
        a.write_into(&mut out, &ctx(false, false));
        assert_eq!(
            out,
            b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\nDate: Mon, 30 Nov 2026 05:00:00 GMT\r\n\r\nhi"
        );
    }

    #[test]
    fn head_request_keeps_length_and_drops_body() {
        let a = Answer::new(404, &[], b"gone");
        let mut out = Vec::new();
        a.write_into(&mut out, &ctx(true, true));
        assert_eq!(
            out,
            b"HTTP/1.1 404 Not Found\r\nContent-Length: 4\r\nDate: Mon, 30 Nov 2026 05:00:00 GMT\r\nConnection: close\r\n\r\n"
        );
    }

    #[test]
    fn the_end_is_the_connection_line_the_blank_line_and_the_body_in_every_case() {
        for len in [0, 5, SHARED_BODY_BYTES - 1, SHARED_BODY_BYTES] {
            let body = vec![b'x'; len];
            let a = Answer::new(200, &[], &body);
            for bits in 0..8u8 {
                let ctx = WriteCtx {
                    date_line: DATE,
                    head_only: bits & 1 != 0,
                    close: bits & 2 != 0,
                    keep_alive_10: bits & 4 != 0,
                };
                let mut want = b"head".to_vec();
                end_head(&mut want, &ctx);
                if !ctx.head_only {
                    want.extend_from_slice(&body);
                }
                let mut out = b"head".to_vec();
                a.write_end(&mut out, &ctx);
                assert_eq!(out, want, "body of {len} bytes, case {bits}");
            }
        }
    }

    #[test]
    fn the_keep_alive_rest_is_what_the_end_writes_when_offered() {
        let ctx = WriteCtx {
            date_line: DATE,
            head_only: false,
            close: false,
            keep_alive_10: false,
        };
        for len in [0, 5, SHARED_BODY_BYTES - 1, SHARED_BODY_BYTES] {
            for stamped in [false, true] {
                let mut body = vec![b'x'; len];
                let a = if stamped {
                    body.extend_from_slice(REQUEST_ID_SLOT.as_bytes());
                    Answer::new(200, &[], &body).with_request_id_slot()
                } else {
                    Answer::new(200, &[], &body)
                };
                let mut end = Vec::new();
                a.write_end(&mut end, &ctx);
                match a.keep_alive_rest() {
                    // One copy, nothing stamped after it, the same bytes.
                    Some(rest) => {
                        assert!(!stamped && a.shared_body().is_none(), "{len}");
                        assert_eq!(rest, &end[..], "{len}");
                    }
                    // A shared body or a request-id slot: the general path.
                    None => assert!(stamped || a.shared_body().is_some(), "{len}"),
                }
            }
        }
    }

    #[test]
    fn no_content_has_no_length() {
        let a = Answer::new(204, &[], b"");
        assert_eq!(a.head(), b"HTTP/1.1 204 No Content\r\n");
    }
}
