//! A request's body sent on an HTTP/2 upstream stream, as DATA frames:
//! the bytes the pipeline buffered (in the client's framing: decoded
//! here), then, from an HTTP/2 client, its DATA frames passed on as the
//! same bytes and its trailers as trailers (`pump`, run beside the
//! answer: full duplex), or, from an HTTP/1.1 client, what it still sends
//! (`Conn::send_h1_body`, before the answer is read).
//!
//! Flow control carries through: a client's frame is given back to its
//! window only once the upstream's window took it, so what a stream holds
//! is bounded by the two windows.

use super::{Attempt, Body};
use crate::clock;
use crate::codec::chunked::ChunkedDecoder;
use crate::codec::head::BodyFraming;
use crate::exchange::send_in_window;
use crate::server::conn::Conn;
use crate::transport::Transport;
use bytes::Bytes;
use gapura_gate::limits::RequestLimits;
use gapura_gate::ErrorStatus;
use h2::{RecvStream, SendStream};
use monoio::time::Instant;

/// The client's framing of body bytes, decoded to their data.
pub(super) struct Framed {
    /// `None`: the bytes are the data (a body of known length).
    chunked: Option<ChunkedDecoder>,
    spans: Vec<(usize, usize)>,
    /// A chunked body's trailer section (not sent on: an HTTP/1.1
    /// client's trailers are not forwarded).
    dropped: Vec<u8>,
    /// Data bytes so far (the body limit counts them).
    pub(super) total: u64,
}

impl Framed {
    pub(super) fn new(framing: BodyFraming) -> Framed {
        Framed {
            chunked: (framing == BodyFraming::Chunked).then(ChunkedDecoder::new),
            spans: Vec::new(),
            dropped: Vec::new(),
            total: 0,
        }
    }

    /// Sends the data of `bytes` on `send`; `last`: for a body of known
    /// length, these are its last bytes. Whether the body ended (its
    /// end is then sent too).
    pub(super) async fn send(
        &mut self,
        send: &mut SendStream<Bytes>,
        bytes: &[u8],
        last: bool,
    ) -> Result<bool, Fail> {
        self.spans.clear();
        let end = match self.chunked.as_mut() {
            None => {
                self.spans.push((0, bytes.len()));
                last
            }
            Some(d) => d
                .spans(bytes, &mut self.spans, &mut self.dropped)
                .map_err(|_| Fail::Client(ErrorStatus::BadRequest))?,
        };
        self.dropped.clear();
        let n = self.spans.len();
        for i in 0..n {
            let (a, b) = self.spans[i];
            self.total += (b - a) as u64;
            let data = &bytes[a..b];
            let fin = end && i + 1 == n;
            send_in_window(send, data.len(), fin, |at, k| {
                Bytes::copy_from_slice(&data[at..at + k])
            })
            .await
            .map_err(|_| Fail::Upstream)?;
            if fin {
                return Ok(true);
            }
        }
        if end {
            send_in_window(send, 0, true, |_, _| Bytes::new())
                .await
                .map_err(|_| Fail::Upstream)?;
        }
        Ok(end)
    }
}

/// Why a request body stopped.
pub(super) enum Fail {
    /// The client's body is refused (413 over the limit, 400 broken).
    Client(ErrorStatus),
    /// The client went away (reset its stream, or its body timed out).
    ClientGone,
    /// The upstream's stream failed (its answer may still come).
    Upstream,
}

/// What an HTTP/2 client's body still has to send, run beside the
/// answer: its framed bytes the pipeline had not read (`rest`), then its
/// DATA frames passed on as they are, then its trailers. Each wait for the
/// client's next frame is bounded by the body timeout.
pub(super) async fn pump(
    mut send: SendStream<Bytes>,
    mut framed: Framed,
    rest: Vec<u8>,
    recv: Option<RecvStream>,
    limits: RequestLimits,
    body_ms: u64,
) -> Result<(), Fail> {
    // The whole body was framed already when the client had ended it.
    if framed.send(&mut send, &rest, recv.is_none()).await? || recv.is_none() {
        return Ok(());
    }
    if !limits.body_allows(framed.total) {
        return Err(Fail::Client(ErrorStatus::PayloadTooLarge));
    }
    let Some(mut recv) = recv else {
        return Ok(());
    };
    let mut total = framed.total;
    loop {
        let next = monoio::time::timeout_at(clock::deadline(body_ms), recv.data()).await;
        let bytes = match next {
            Err(_) | Ok(Some(Err(_))) => return Err(Fail::ClientGone),
            Ok(Some(Ok(bytes))) => bytes,
            Ok(None) => break,
        };
        let n = bytes.len();
        total += n as u64;
        if !limits.body_allows(total) {
            return Err(Fail::Client(ErrorStatus::PayloadTooLarge));
        }
        let end = recv.is_end_stream();
        send_in_window(&mut send, n, end, |at, k| bytes.slice(at..at + k))
            .await
            .map_err(|_| Fail::Upstream)?;
        // The upstream's window took it: the client may send as much again.
        let _ = recv.flow_control().release_capacity(n);
        if end {
            return Ok(());
        }
    }
    match recv.trailers().await {
        Ok(Some(t)) => send.send_trailers(t).map_err(|_| Fail::Upstream),
        Ok(None) => send_in_window(&mut send, 0, true, |_, _| Bytes::new())
            .await
            .map_err(|_| Fail::Upstream),
        Err(_) => Err(Fail::ClientGone),
    }
}

impl<S: Transport> Conn<S> {
    /// An HTTP/1.1 client's body still to come, read and sent on `send`
    /// before the answer is read (the buffered bytes went first).
    pub(super) async fn send_h1_body(
        &mut self,
        send: &mut SendStream<Bytes>,
        framed: &mut Framed,
        body: &mut Body,
        limits: &RequestLimits,
        write_timeout_ms: u64,
    ) -> Result<(), Attempt> {
        let body_ms = self.shard.snapshot().server.body_timeout_ms;
        while !body.done {
            self.io.rewind_if_drained();
            match self.read_client(clock::deadline(body_ms)).await {
                Ok(n) if n > 0 => {}
                _ => return Err(Attempt::ClientGone),
            }
            body.streamed = true;
            self.ubuf.clear();
            if let Err(status) = self.take_buffered_body(body, limits) {
                return Err(Attempt::BadBody(status));
            }
            let bytes = std::mem::take(&mut self.ubuf);
            let at: Instant = clock::deadline(write_timeout_ms);
            let sent = self
                .io
                .deadline()
                .within(at, framed.send(send, &bytes, body.done))
                .await;
            self.ubuf = bytes;
            match sent {
                Ok(Ok(_)) => {}
                Ok(Err(Fail::Client(status))) => return Err(Attempt::BadBody(status)),
                Ok(Err(Fail::ClientGone)) => return Err(Attempt::ClientGone),
                Ok(Err(Fail::Upstream)) => {
                    return Err(Attempt::Fail {
                        status: ErrorStatus::BadGateway,
                        count_failure: true,
                    })
                }
                Err(_) => {
                    return Err(Attempt::Fail {
                        status: ErrorStatus::GatewayTimeout,
                        count_failure: true,
                    })
                }
            }
        }
        Ok(())
    }
}
