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

/// Connection-specific fields, which HTTP/2 forbids (RFC 9113 §8.2.2).
pub fn connection_specific(name: &[u8]) -> bool {
    const NAMES: [&[u8]; 6] = [
        b"connection",
        b"keep-alive",
        b"proxy-connection",
        b"transfer-encoding",
        b"upgrade",
        b"te",
    ];
    NAMES.iter().any(|n| n.eq_ignore_ascii_case(name))
}
