//! An attempt on a stream of a server's HTTP/2 connection, the request
//! and its answer as parts: the head's fields (`uhead`, written by the
//! same writer as an HTTP/1.1 upstream's head), the body as DATA frames
//! (`h2body`), the answer's head, DATA and trailers relayed to an HTTP/2
//! client as frames straight from the upstream's (the same bytes, never
//! copied), or written once as HTTP/1.1 bytes for an HTTP/1.1 client.
//! Nothing is written as HTTP/1.1 text and read back.
//!
//! An HTTP/2 client's body and the answer travel at once (full duplex: a
//! bidirectional gRPC call's replies reach the client while it still
//! sends); an HTTP/1.1 client's body is sent whole before the answer is
//! read. A gRPC call's `grpc-timeout` bounds the wait for the answer's
//! head; its refusal (an answer of 400 or more without `grpc-status`)
//! becomes a trailers-only answer.

use super::carrier::H2Call;
use super::h2body::{pump, Fail, Framed};
use super::response::{Replace, UpRead};
use super::{Attempt, Body, Exchange};
use crate::clock;
use crate::codec::head::{Method, ParsedHead};
use crate::exchange::{connection_specific, CONNECTION_SPECIFIC};
use crate::server::conn::Conn;
use crate::transport::Transport;
use bytes::Bytes;
use gapura_gate::limits::RequestLimits;
use gapura_gate::sink::Wide;
use gapura_gate::upstream::UpstreamGroup;
use gapura_gate::{ErrorStatus, UpstreamWhy};
use h2::client::ResponseFuture;
use h2::{Reason, RecvStream};
use std::io::Write as _;

/// How an HTTP/1.1 client's copy of the answer's body is framed.
#[derive(Clone, Copy, PartialEq)]
enum H1Body {
    /// No body follows the head.
    None,
    /// As the upstream sent it (it gave the length).
    Raw,
    /// Chunked, the upstream's trailers in the last chunk.
    Chunked,
}

/// What a failed HTTP/2 exchange with the upstream means for the attempt.
fn stream_failed(e: &h2::Error, x: &Exchange) -> Attempt {
    // Refused before the server did anything with it: another try is safe.
    x.bad_gateway(e.reason() == Some(Reason::REFUSED_STREAM) || e.is_go_away())
}

impl<S: Transport> Conn<S> {
    /// One try on a stream of `call`'s connection: the head and the body
    /// the pipeline buffered (`ubuf[body_at..]`), then the rest of the body
    /// and the answer.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn attempt_h2(
        &mut self,
        call: &mut H2Call,
        reused: bool,
        head: &ParsedHead,
        group: &UpstreamGroup,
        (body, body_at): (&mut Body, usize),
        limits: &RequestLimits,
        replace: &Replace<'_>,
    ) -> Attempt {
        if self.io.stream_mut().abandoned() {
            // An HTTP/2 stream the client reset: nothing is sent upstream.
            return Attempt::ClientGone;
        }
        if body.streamed {
            // The body is gone: a new attempt cannot resend it.
            return Attempt::Fail {
                status: ErrorStatus::BadGateway,
                count_failure: false,
            };
        }
        let Some(uhead) = self.uhead.as_deref() else {
            return Attempt::Fail {
                status: ErrorStatus::BadGateway,
                count_failure: false,
            };
        };
        let call_deadline = uhead
            .grpc_timeout()
            .map(|d| monoio::time::Instant::now() + d);
        // A head HTTP/2 cannot carry (a field it refuses): Gapura's 502,
        // not the server's failure.
        let Some(request) = uhead.request(call.https) else {
            return Attempt::Fail {
                status: ErrorStatus::BadGateway,
                count_failure: false,
            };
        };
        let x = Exchange {
            reused,
            upgrade: false,
            head_only: head.method == Method::Head,
            body_streamed: false,
        };
        let timeout_ms = group.read_timeout_ms;
        let end = body.done && self.ubuf.len() <= body_at;
        let (response, mut send) = match self.open_stream(call, request, end, &x, timeout_ms).await
        {
            Ok(r) => r,
            Err(a) => return a,
        };
        let mut framed = Framed::new(body.framing);
        if !end {
            let prefix = std::mem::take(&mut self.ubuf);
            let at = clock::deadline(timeout_ms);
            let sent = self
                .io
                .deadline()
                .within(at, framed.send(&mut send, &prefix[body_at..], body.done))
                .await;
            self.ubuf = prefix;
            match sent {
                Ok(Ok(_)) => {}
                Ok(Err(Fail::Client(status))) => return Attempt::BadBody(status),
                Ok(Err(Fail::ClientGone)) => return Attempt::ClientGone,
                Ok(Err(Fail::Upstream)) | Err(_) => {
                    return Attempt::Fail {
                        status: ErrorStatus::BadGateway,
                        count_failure: true,
                    }
                }
            }
        }
        if body.done {
            return self
                .answer_h2(response, head, group, &x, replace, call_deadline)
                .await;
        }
        let handed_over = self
            .io
            .stream_mut()
            .exchange()
            .filter(|c| c.hands_over_body());
        if let Some(client) = handed_over {
            // Full duplex: the body's frames go on while the answer comes
            // (an HTTP/2 client's; an HTTP/3 client's body is read through
            // the pipeline, below).
            let (recv, rest) = client.take_body();
            body.streamed = true;
            let body_ms = self.shard.snapshot().server.body_timeout_ms;
            let pumping = pump(send, framed, rest, recv, *limits, body_ms);
            let x = Exchange {
                body_streamed: true,
                ..x
            };
            return self
                .duplex(pumping, response, head, group, &x, replace, call_deadline)
                .await;
        }
        let at = self.io.out_len();
        if head.expect_continue && self.send_continue(at).await.is_err() {
            return Attempt::ClientGone;
        }
        if let Err(a) = self
            .send_h1_body(&mut send, &mut framed, body, limits, timeout_ms)
            .await
        {
            return a;
        }
        let x = Exchange {
            body_streamed: true,
            ..x
        };
        self.answer_h2(response, head, group, &x, replace, call_deadline)
            .await
    }

    /// A stream on `call`'s connection with the request's head sent (`end`:
    /// the head is the whole request), once the connection takes one more
    /// stream (within `timeout_ms`).
    async fn open_stream(
        &mut self,
        call: &mut H2Call,
        request: http::Request<()>,
        end: bool,
        x: &Exchange,
        timeout_ms: u64,
    ) -> Result<(ResponseFuture, h2::SendStream<Bytes>), Attempt> {
        let conn = &mut call.conn;
        let ready = std::future::poll_fn(|cx| conn.send.poll_ready(cx));
        let at = clock::deadline(timeout_ms);
        // A connection that cannot take a stream is done; a request the
        // codec refused (its head) leaves it to the others.
        let (failed, closed) = match self.io.deadline().within(at, ready).await {
            Ok(Ok(())) => match conn.send.send_request(request, end) {
                Ok(r) => return Ok(r),
                Err(e) => {
                    let closed = e.is_go_away() || e.is_io();
                    (e, closed)
                }
            },
            Ok(Err(e)) => (e, true),
            Err(_) => {
                self.upstream_why = Some(UpstreamWhy::AnswerTimeout);
                return Err(Attempt::Retry {
                    status: ErrorStatus::GatewayTimeout,
                    count_failure: true,
                });
            }
        };
        if closed {
            conn.live.close();
        }
        self.upstream_why = Some(UpstreamWhy::Reset);
        Err(stream_failed(&failed, x))
    }

    /// The answer relayed while an HTTP/2 client's body is pumped. A body
    /// the gate refuses midway (over the limit) ends the exchange: 413 when
    /// nothing of the answer went out yet, else the client's stream reset.
    #[allow(clippy::too_many_arguments)]
    async fn duplex(
        &mut self,
        pumping: impl std::future::Future<Output = Result<(), Fail>>,
        response: ResponseFuture,
        head: &ParsedHead,
        group: &UpstreamGroup,
        x: &Exchange,
        replace: &Replace<'_>,
        call_deadline: Option<monoio::time::Instant>,
    ) -> Attempt {
        let status = {
            let mut pumping = std::pin::pin!(pumping);
            let answer = self.answer_h2(response, head, group, x, replace, call_deadline);
            let mut answer = std::pin::pin!(answer);
            let refused = monoio::select! {
                a = &mut answer => return a,
                p = &mut pumping => match p {
                    // Sent whole, or the upstream's stream failed: its
                    // answer (or its failure) still comes.
                    Ok(()) | Err(Fail::Upstream) => None,
                    Err(Fail::Client(status)) => Some(status),
                    Err(Fail::ClientGone) => return Attempt::ClientGone,
                },
            };
            match refused {
                None => return answer.await,
                Some(status) => status,
            }
        };
        match self.io.stream_mut().exchange() {
            Some(c) if c.head_sent() => {
                c.reset_stream(Reason::CANCEL);
                Attempt::Broken {
                    count_failure: false,
                }
            }
            _ => Attempt::BadBody(status),
        }
    }

    /// The answer's head, then its body and trailers, for the client.
    async fn answer_h2(
        &mut self,
        response: ResponseFuture,
        head: &ParsedHead,
        group: &UpstreamGroup,
        x: &Exchange,
        replace: &Replace<'_>,
        call_deadline: Option<monoio::time::Instant>,
    ) -> Attempt {
        let mut deadline = clock::deadline(group.response_header_timeout_ms);
        let call_deadline = call_deadline.filter(|&d| d < deadline);
        if let Some(d) = call_deadline {
            deadline = d;
        }
        let response = match self.watched(std::pin::pin!(response), deadline).await {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => {
                self.upstream_why = Some(UpstreamWhy::Reset);
                return stream_failed(&e, x);
            }
            Err(UpRead::Timeout) => {
                self.upstream_why = Some(UpstreamWhy::AnswerTimeout);
                return Attempt::Fail {
                    status: ErrorStatus::GatewayTimeout,
                    count_failure: call_deadline.is_none(),
                };
            }
            Err(UpRead::ClientGone) => return Attempt::ClientGone,
            Err(UpRead::Io) => {
                self.upstream_why = Some(UpstreamWhy::Reset);
                return Attempt::Fail {
                    status: ErrorStatus::BadGateway,
                    count_failure: true,
                };
            }
        };
        let (mut parts, recv) = response.into_parts();
        let status = parts.status.as_u16();
        let snap = self.shard.snapshot();
        let close = self.closes_after(&snap, head);
        let content_type = parts.headers.get(http::header::CONTENT_TYPE);
        let page = replace.status_of(status, content_type.map(|v| v.as_bytes()), false);
        if let Some(page) = page {
            // The upstream's body is dropped unread (its stream reset).
            drop(recv);
            return self
                .replace_answer(head, replace, page, status, close)
                .await;
        }
        self.shard.stats.response(status);
        self.log_status(status);
        parts.headers.retain_connection_free();
        let wide = self.wide(&snap);
        let end = recv.is_end_stream();
        let grpc = self.io.stream().request_id();
        if let Some(client) = self.io.stream_mut().exchange() {
            if let Some(id) = grpc.filter(|_| status >= 400) {
                if !parts.headers.contains_key("grpc-status") {
                    let retry = parts.headers.get(http::header::RETRY_AFTER);
                    let refusal = crate::server::grpc::trailers_only(status, &id, retry);
                    return match client.send_head(refusal, true) {
                        Ok(()) => Attempt::Done {
                            reusable: false,
                            close,
                        },
                        Err(_) => Attempt::ClientGone,
                    };
                }
            }
            wide.add_to(&mut parts.headers);
            let answer = http::Response::from_parts(parts, ());
            if client.send_head(answer, end).is_err() {
                return Attempt::ClientGone;
            }
            if end {
                return Attempt::Done {
                    reusable: false,
                    close,
                };
            }
            return self.relay_frames(recv, group.read_timeout_ms, close).await;
        }
        let framing = write_h1_head(self.io.out(), &parts, (end, x.head_only), close, wide);
        if framing == H1Body::None {
            if self.flush().await.is_err() {
                return Attempt::ClientGone;
            }
            return Attempt::Done {
                reusable: false,
                close,
            };
        }
        self.relay_as_h1(recv, framing, group.read_timeout_ms, close)
            .await
    }

    /// The answer's DATA frames and trailers to an HTTP/2 client, each
    /// frame's bytes passed on as they are; an upstream frame is given
    /// back to its window once the client's took it.
    async fn relay_frames(&mut self, mut recv: RecvStream, read_ms: u64, close: bool) -> Attempt {
        let write_ms = self.shard.snapshot().server.write_timeout_ms;
        loop {
            let next = match self
                .watched(std::pin::pin!(recv.data()), clock::deadline(read_ms))
                .await
            {
                Ok(n) => n,
                Err(UpRead::ClientGone) => return Attempt::ClientGone,
                Err(_) => return self.broken_h2(),
            };
            let bytes = match next {
                Some(Ok(b)) => b,
                Some(Err(_)) => return self.broken_h2(),
                None => break,
            };
            let n = bytes.len();
            let end = recv.is_end_stream();
            let (stream, deadline) = self.io.stream_and_deadline();
            let Some(client) = stream.exchange() else {
                return Attempt::ClientGone;
            };
            let at = clock::deadline(write_ms);
            match deadline.within(at, client.send_bytes(bytes, end)).await {
                Ok(Ok(())) => {}
                _ => return Attempt::ClientGone,
            }
            self.io.count_sent(n as u64);
            let _ = recv.flow_control().release_capacity(n);
            if end {
                return Attempt::Done {
                    reusable: false,
                    close,
                };
            }
        }
        let trailers = match self
            .watched(std::pin::pin!(recv.trailers()), clock::deadline(read_ms))
            .await
        {
            Ok(Ok(t)) => t,
            Ok(Err(_)) | Err(UpRead::Io | UpRead::Timeout) => return self.broken_h2(),
            Err(UpRead::ClientGone) => return Attempt::ClientGone,
        };
        let Some(client) = self.io.stream_mut().exchange() else {
            return Attempt::ClientGone;
        };
        let ended = match trailers {
            Some(mut t) => {
                t.retain_connection_free();
                client.send_trailers(t)
            }
            None => client.send_bytes(Bytes::new(), true).await,
        };
        match ended {
            Ok(()) => Attempt::Done {
                reusable: false,
                close,
            },
            Err(_) => Attempt::ClientGone,
        }
    }

    /// The upstream's stream broke after the answer began: the client's
    /// stream is reset (never a second status).
    fn broken_h2(&mut self) -> Attempt {
        if let Some(c) = self.io.stream_mut().exchange() {
            c.reset_stream(Reason::INTERNAL_ERROR);
        }
        Attempt::Broken {
            count_failure: true,
        }
    }

    /// The answer's body for an HTTP/1.1 client, framed as its head said.
    async fn relay_as_h1(
        &mut self,
        mut recv: RecvStream,
        framing: H1Body,
        read_ms: u64,
        close: bool,
    ) -> Attempt {
        loop {
            let next = match self
                .watched(std::pin::pin!(recv.data()), clock::deadline(read_ms))
                .await
            {
                Ok(n) => n,
                Err(UpRead::ClientGone) => return Attempt::ClientGone,
                Err(_) => {
                    return Attempt::Broken {
                        count_failure: true,
                    }
                }
            };
            let bytes = match next {
                Some(Ok(b)) => b,
                Some(Err(_)) => {
                    return Attempt::Broken {
                        count_failure: true,
                    }
                }
                None => break,
            };
            let n = bytes.len();
            if framing == H1Body::Chunked && n > 0 {
                let out = self.io.out();
                let _ = write!(out, "{n:x}\r\n");
                out.extend_from_slice(&bytes);
                out.extend_from_slice(b"\r\n");
            } else {
                self.io.out().extend_from_slice(&bytes);
            }
            if self.flush().await.is_err() {
                return Attempt::ClientGone;
            }
            let _ = recv.flow_control().release_capacity(n);
        }
        if framing == H1Body::Chunked {
            let trailers = match self
                .watched(std::pin::pin!(recv.trailers()), clock::deadline(read_ms))
                .await
            {
                Ok(Ok(t)) => t,
                Err(UpRead::ClientGone) => return Attempt::ClientGone,
                _ => {
                    return Attempt::Broken {
                        count_failure: true,
                    }
                }
            };
            let out = self.io.out();
            out.extend_from_slice(b"0\r\n");
            for (name, value) in trailers.iter().flatten() {
                if !connection_specific(name.as_str().as_bytes()) {
                    push_field(out, name.as_str().as_bytes(), value.as_bytes());
                }
            }
            out.extend_from_slice(b"\r\n");
            if self.flush().await.is_err() {
                return Attempt::ClientGone;
            }
        }
        Attempt::Done {
            reusable: false,
            close,
        }
    }
}

/// Fields HTTP/2 forbids, left out of what goes on.
trait ConnectionFree {
    fn retain_connection_free(&mut self);
}

impl ConnectionFree for http::HeaderMap {
    fn retain_connection_free(&mut self) {
        for name in CONNECTION_SPECIFIC {
            self.remove(name);
        }
    }
}

fn push_field(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// The answer's head as HTTP/1.1 bytes for an HTTP/1.1 client, and how its
/// body follows: as it is when the upstream gave its length, else chunked
/// (its trailers can follow); nothing when the answer ended with its head
/// (`ended`), which then says `content-length: 0` unless it has a length
/// of its own or its status has no body, or when it answers a `HEAD`.
fn write_h1_head(
    out: &mut Vec<u8>,
    parts: &http::response::Parts,
    (ended, head_only): (bool, bool),
    close: bool,
    wide: Wide<'_>,
) -> H1Body {
    let status = parts.status.as_u16();
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(parts.status.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(parts.status.canonical_reason().unwrap_or("").as_bytes());
    out.extend_from_slice(b"\r\n");
    for (name, value) in parts.headers.iter() {
        push_field(out, name.as_str().as_bytes(), value.as_bytes());
    }
    let length = parts.headers.contains_key(http::header::CONTENT_LENGTH);
    let bodiless = status == 204 || status == 304 || status / 100 == 1;
    let framing = if ended || head_only {
        if !length && !bodiless && !head_only {
            out.extend_from_slice(b"content-length: 0\r\n");
        }
        H1Body::None
    } else if length {
        H1Body::Raw
    } else {
        out.extend_from_slice(b"transfer-encoding: chunked\r\n");
        H1Body::Chunked
    };
    wide.write_h1(out);
    if close {
        out.extend_from_slice(b"Connection: close\r\n");
    }
    out.extend_from_slice(b"\r\n");
    framing
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head_of(status: u16, fields: &[(&str, &str)], ended: bool, close: bool) -> (H1Body, String) {
        let mut b = http::Response::builder().status(status);
        for (n, v) in fields {
            b = b.header(*n, *v);
        }
        let (parts, ()) = b.body(()).unwrap().into_parts();
        let mut out = Vec::new();
        let f = write_h1_head(&mut out, &parts, (ended, false), close, Wide::default());
        (f, String::from_utf8(out).unwrap())
    }

    #[test]
    fn an_h2_answer_is_written_once_as_http1_with_its_framing() {
        let (f, text) = head_of(200, &[("content-type", "application/grpc")], false, false);
        assert!(f == H1Body::Chunked);
        assert_eq!(
            text,
            "HTTP/1.1 200 OK\r\ncontent-type: application/grpc\r\ntransfer-encoding: chunked\r\n\r\n"
        );
        let (f, text) = head_of(404, &[("content-length", "3")], false, true);
        assert!(f == H1Body::Raw);
        assert_eq!(
            text,
            "HTTP/1.1 404 Not Found\r\ncontent-length: 3\r\nConnection: close\r\n\r\n"
        );
        let (f, text) = head_of(200, &[], true, false);
        assert!(f == H1Body::None);
        assert!(text.ends_with("content-length: 0\r\n\r\n"), "{text}");
        let (_, text) = head_of(204, &[], true, false);
        assert_eq!(text, "HTTP/1.1 204 No Content\r\n\r\n");
    }
}
