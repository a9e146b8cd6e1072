//! Reading an upstream's response head and writing the client's copy.
//!
//! The framing of the body follows RFC 9112 §6.3 strictly: no body for a
//! `HEAD` request, 1xx, 204 and 304; `Transfer-Encoding` with `chunked` last
//! means chunked; any other `Transfer-Encoding` means read until close;
//! otherwise `Content-Length`, else until close. A response with both
//! `Content-Length` and `Transfer-Encoding`, differing lengths, or a head
//! that does not parse is malformed: 502. O(head), no allocation.

use crate::codec::listed::Listed;
use gapura_gate::limits::OUTER_MAX_HEADERS;
use std::mem::MaybeUninit;

/// Largest response head read before answering 502.
pub const MAX_RESPONSE_HEAD_BYTES: usize = 64 * 1024;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RespFraming {
    None,
    Length(u64),
    Chunked,
    /// Delimited by the upstream closing the connection.
    Close,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RespHead {
    pub status: u16,
    pub head_len: usize,
    pub framing: RespFraming,
    /// The upstream keeps the connection open after this response.
    pub keep_alive: bool,
}

#[derive(Debug, PartialEq, Eq)]
pub enum RespParse<'h, 'b> {
    /// The head, its reason phrase and its header lines (borrowed).
    Complete(RespHead, &'b [u8], &'h [httparse::Header<'b>]),
    Partial,
    Malformed,
}

/// The header array a response parse fills.
pub type RespHeaderBuf<'b> = [MaybeUninit<httparse::Header<'b>>; OUTER_MAX_HEADERS];

/// A fresh, uninitialised array (no cost to create).
pub fn resp_header_buf<'b>() -> RespHeaderBuf<'b> {
    [const { MaybeUninit::uninit() }; OUTER_MAX_HEADERS]
}

fn parse_length(v: &[u8]) -> Option<u64> {
    let v = v.trim_ascii();
    if v.is_empty() || v.len() > 19 || !v.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(v.iter().fold(0u64, |a, &d| a * 10 + u64::from(d - b'0')))
}

/// Parses a response head at the start of `buf` into `headers`.
pub fn parse_response<'h, 'b>(
    buf: &'b [u8],
    headers: &'h mut RespHeaderBuf<'b>,
    request_was_head: bool,
) -> RespParse<'h, 'b> {
    let mut resp = httparse::Response::new(&mut []);
    let head_len = match httparse::ParserConfig::default()
        .parse_response_with_uninit_headers(&mut resp, buf, headers)
    {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => {
            return if buf.len() >= MAX_RESPONSE_HEAD_BYTES {
                RespParse::Malformed
            } else {
                RespParse::Partial
            }
        }
        Err(_) => return RespParse::Malformed,
    };
    let (Some(status), Some(version)) = (resp.code, resp.version) else {
        return RespParse::Malformed;
    };
    // Three digits are not enough: a status is 1xx to 5xx (RFC 9110 §15).
    if !(100..=599).contains(&status) {
        return RespParse::Malformed;
    }
    let mut length: Option<u64> = None;
    let mut te = false;
    let mut chunked_last = false;
    let mut close = version == 0;
    for h in resp.headers.iter() {
        let name = h.name.as_bytes();
        if name.eq_ignore_ascii_case(b"content-length") {
            let Some(n) = parse_length(h.value) else {
                return RespParse::Malformed;
            };
            if length.is_some_and(|l| l != n) {
                return RespParse::Malformed;
            }
            length = Some(n);
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            te = true;
            for c in h.value.split(|&b| b == b',') {
                let c = c.trim_ascii();
                if !c.is_empty() {
                    chunked_last = c.eq_ignore_ascii_case(b"chunked");
                }
            }
        } else if name.eq_ignore_ascii_case(b"connection") {
            for t in h.value.split(|&b| b == b',') {
                let t = t.trim_ascii();
                if t.eq_ignore_ascii_case(b"close") {
                    close = true;
                } else if version == 0 && t.eq_ignore_ascii_case(b"keep-alive") {
                    close = false;
                }
            }
        }
    }
    if te && length.is_some() {
        return RespParse::Malformed;
    }
    let framing = if request_was_head || status / 100 == 1 || status == 204 || status == 304 {
        RespFraming::None
    } else if te {
        if chunked_last {
            RespFraming::Chunked
        } else {
            RespFraming::Close
        }
    } else {
        match length {
            Some(n) => RespFraming::Length(n),
            None => RespFraming::Close,
        }
    };
    let reason: &'b [u8] = resp.reason.unwrap_or("").as_bytes();
    let lines: &'h [httparse::Header<'b>] = resp.headers;
    RespParse::Complete(
        RespHead {
            status,
            head_len,
            keep_alive: !close && framing != RespFraming::Close,
            framing,
        },
        reason,
        lines,
    )
}

/// Writes the client's copy of a response head (`status`, `reason`, its
/// parsed `lines`): the status line as HTTP/1.1, headers without the
/// hop-by-hop ones, `Connection: close` when the client connection ends
/// after it, `Connection: upgrade` and `Upgrade` for a 101. O(head).
pub fn write_client_head(
    status: u16,
    reason: &[u8],
    lines: &[httparse::Header<'_>],
    out: &mut Vec<u8>,
    close: bool,
) {
    let upgrade = status == 101;
    let listed = Listed::of(lines);
    out.extend_from_slice(b"HTTP/1.1 ");
    let code = [
        b'0' + (status / 100 % 10) as u8,
        b'0' + (status / 10 % 10) as u8,
        b'0' + (status % 10) as u8,
    ];
    out.extend_from_slice(&code);
    out.push(b' ');
    out.extend_from_slice(reason);
    out.extend_from_slice(b"\r\n");
    for h in lines.iter() {
        let name = h.name.as_bytes();
        let hop = name.eq_ignore_ascii_case(b"connection")
            || name.eq_ignore_ascii_case(b"keep-alive")
            || name.eq_ignore_ascii_case(b"proxy-connection")
            || name.eq_ignore_ascii_case(b"te")
            || name.eq_ignore_ascii_case(b"trailer")
            || (name.eq_ignore_ascii_case(b"upgrade") && !upgrade)
            || listed.names().iter().any(|t| {
                t.eq_ignore_ascii_case(name) && !(upgrade && t.eq_ignore_ascii_case(b"upgrade"))
            });
        if hop {
            continue;
        }
        out.extend_from_slice(name);
        out.extend_from_slice(b": ");
        out.extend_from_slice(h.value);
        out.extend_from_slice(b"\r\n");
    }
    if upgrade {
        out.extend_from_slice(b"Connection: upgrade\r\n");
    } else if close {
        out.extend_from_slice(b"Connection: close\r\n");
    }
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn complete(buf: &[u8], head: bool) -> RespHead {
        let mut lines = resp_header_buf();
        match parse_response(buf, &mut lines, head) {
            RespParse::Complete(h, _, _) => h,
            other => panic!("{other:?}"),
        }
    }

    fn client_head(raw: &[u8], close: bool) -> Vec<u8> {
        let mut lines = resp_header_buf();
        let RespParse::Complete(h, reason, lines) = parse_response(raw, &mut lines, false) else {
            panic!("parses");
        };
        let mut out = Vec::new();
        write_client_head(h.status, reason, lines, &mut out, close);
        out
    }

    #[test]
    fn framing_follows_the_rules() {
        let h = complete(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", false);
        assert_eq!((h.framing, h.keep_alive), (RespFraming::Length(5), true));
        assert_eq!(h.head_len, 38);
        let h = complete(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
            false,
        );
        assert_eq!(h.framing, RespFraming::Chunked);
        let h = complete(b"HTTP/1.1 200 OK\r\n\r\n", false);
        assert_eq!((h.framing, h.keep_alive), (RespFraming::Close, false));
        let h = complete(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", true);
        assert_eq!(h.framing, RespFraming::None);
        for s in [
            "204 No Content",
            "304 Not Modified",
            "100 Continue",
            "103 Early Hints",
        ] {
            let h = complete(format!("HTTP/1.1 {s}\r\n\r\n").as_bytes(), false);
            assert_eq!(h.framing, RespFraming::None);
        }
        let h = complete(b"HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\n", false);
        assert!(!h.keep_alive);
        let h = complete(
            b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 1\r\n\r\n",
            false,
        );
        assert!(h.keep_alive);
        let h = complete(
            b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 1\r\n\r\n",
            false,
        );
        assert!(!h.keep_alive);
    }

    #[test]
    fn malformed_heads_are_refused() {
        for bad in [
            &b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"[..],
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n",
            b"NOT HTTP\r\n\r\n",
            b"HTTP/1.1 2000 OK\r\n\r\n",
            // Statuses outside 1xx to 5xx.
            b"HTTP/1.1 002 OK\r\nContent-Length: 0\r\n\r\n",
            b"HTTP/1.1 099 X\r\n\r\n",
            b"HTTP/1.1 600 X\r\n\r\n",
            b"HTTP/1.1 999 X\r\n\r\n",
        ] {
            let mut lines = resp_header_buf();
            assert_eq!(
                parse_response(bad, &mut lines, false),
                RespParse::Malformed,
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        let mut lines = resp_header_buf();
        assert_eq!(
            parse_response(b"HTTP/1.1 200 OK\r\nX: y", &mut lines, false),
            RespParse::Partial
        );
    }

    #[test]
    fn client_head_drops_hop_by_hop() {
        let raw = b"HTTP/1.1 200 OK\r\nConnection: keep-alive, X-Hop\r\nX-Hop: 1\r\nKeep-Alive: timeout=5\r\nContent-Length: 2\r\nServer: up\r\n\r\n";
        let out = client_head(raw, true);
        assert_eq!(
            out,
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nServer: up\r\nConnection: close\r\n\r\n"
        );
        let raw = b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Accept: a\r\n\r\n";
        let out = client_head(raw, false);
        assert_eq!(
            out,
            b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nSec-WebSocket-Accept: a\r\nConnection: upgrade\r\n\r\n"
        );
    }
}
