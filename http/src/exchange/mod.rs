//! The exchange: a request and its answer as typed parts (a head of
//! status or request line and fields, body pieces, trailers, the end),
//! whatever protocol carries them. HTTP/1.1 writes parts as bytes where
//! it meets the wire; HTTP/2 sends them as frames straight from the parts,
//! never from HTTP/1.1 text.
//!
//! - `uphead`: the head of a request sent to an upstream over HTTP/2,
//!   built by the same writer that writes an HTTP/1.1 upstream's head
//!   (`crate::upstream::request`), field by field.
//! - `stream`: a client's HTTP/2 stream answered as parts: HEADERS, DATA
//!   and trailers sent as the client's window allows, its request body
//!   taken frame by frame.
//! - this module: DATA frames sent within a peer's window
//!   ([`send_in_window`]), and the fields HTTP/2 forbids
//!   ([`connection_specific`]).

pub mod stream;
pub mod uphead;

use crate::codec::listed::Listed;
use bytes::Bytes;
use h2::SendStream;

/// Body bytes reserved per flow-control wait.
const SEND_CHUNK: usize = 16 * 1024;

/// Sends `len` bytes on `send` as DATA frames, `piece(at, n)` giving the
/// frame of bytes `at..at + n` once the peer's window (and h2's send
/// buffer) has room for `n`: what is held for a peer is bounded by its
/// window. `end` ends the stream with the last frame (an empty one when
/// `len` is 0). `Err(None)`: the stream is gone.
pub async fn send_in_window(
    send: &mut SendStream<Bytes>,
    len: usize,
    end: bool,
    piece: impl Fn(usize, usize) -> Bytes,
) -> Result<(), Option<h2::Error>> {
    let mut at = 0;
    while at < len {
        send.reserve_capacity((len - at).min(SEND_CHUNK));
        let n = match std::future::poll_fn(|cx| send.poll_capacity(cx)).await {
            Some(Ok(n)) => n.min(len - at),
            Some(Err(e)) => return Err(Some(e)),
            None => return Err(None),
        };
        if n == 0 {
            continue;
        }
        send.send_data(piece(at, n), end && at + n == len)
            .map_err(Some)?;
        at += n;
    }
    if end && len == 0 {
        send.send_data(Bytes::new(), true).map_err(Some)?;
    }
    Ok(())
}

/// Sends shared bytes as DATA frames, each a slice of `bytes` (nothing
/// copied), as the peer's window allows.
pub async fn send_bytes(
    send: &mut SendStream<Bytes>,
    bytes: Bytes,
    end: bool,
) -> Result<(), Option<h2::Error>> {
    send_in_window(send, bytes.len(), end, |at, n| bytes.slice(at..at + n)).await
}

pub use crate::codec::fields::{connection_specific, CONNECTION_SPECIFIC};

/// An HTTP/1.1 answer's fields as an HTTP/2 answer's: those HTTP/2
/// forbids left out, with `Trailer` and every name the `Connection` field
/// lists (hop-by-hop), and any that is not a valid field.
pub fn fields_of(lines: &[httparse::Header<'_>]) -> http::HeaderMap {
    let listed = Listed::of(lines);
    let mut fields = http::HeaderMap::with_capacity(lines.len());
    for h in lines.iter() {
        let name = h.name.as_bytes();
        if connection_specific(name)
            || name.eq_ignore_ascii_case(b"trailer")
            || listed.contains(name)
        {
            continue;
        }
        let (Ok(n), Ok(v)) = (
            http::HeaderName::from_bytes(name),
            http::HeaderValue::from_bytes(h.value),
        ) else {
            continue;
        };
        fields.append(n, v);
    }
    fields
}

/// A chunked body's trailer section (its `name: value` lines, as an
/// upstream sent them) as trailers: the valid fields HTTP/2 allows.
pub fn trailers_of(section: &[u8]) -> http::HeaderMap {
    let mut fields = http::HeaderMap::new();
    for line in section.split(|&b| b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            continue;
        };
        let value = line[colon + 1..].trim_ascii();
        let (Ok(n), Ok(v)) = (
            http::HeaderName::from_bytes(&line[..colon]),
            http::HeaderValue::from_bytes(value),
        ) else {
            continue;
        };
        if !connection_specific(n.as_str().as_bytes()) {
            fields.append(n, v);
        }
    }
    fields
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_http1_answers_fields_lose_what_http2_forbids() {
        let lines = [
            httparse::Header {
                name: "Content-Type",
                value: b"text/plain",
            },
            httparse::Header {
                name: "Connection",
                value: b"keep-alive, X-Hop",
            },
            httparse::Header {
                name: "X-Hop",
                value: b"1",
            },
            httparse::Header {
                name: "Transfer-Encoding",
                value: b"chunked",
            },
            httparse::Header {
                name: "Trailer",
                value: b"grpc-status",
            },
            httparse::Header {
                name: "Set-Cookie",
                value: b"a=1",
            },
            httparse::Header {
                name: "Set-Cookie",
                value: b"b=2",
            },
            httparse::Header {
                name: "X-Bad",
                value: b"a\x01",
            },
        ];
        let f = fields_of(&lines);
        let names: Vec<&str> = f.keys().map(|k| k.as_str()).collect();
        assert_eq!(names, ["content-type", "set-cookie"]);
        assert_eq!(f.get_all("set-cookie").iter().count(), 2);
        let t =
            trailers_of(b"grpc-status: 0\r\ngrpc-message: fine \r\nconnection: x\r\nbroken\r\n");
        assert_eq!(t.len(), 2);
        assert_eq!(t["grpc-message"], "fine");
    }
}
