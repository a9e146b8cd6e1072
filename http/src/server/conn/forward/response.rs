//! Phase 2 of an attempt: the response head (interim answers passed on,
//! the host's page in place of an upstream error), read while the client is
//! watched for going away.

use super::{peer_closed, Attempt, Exchange, UPSTREAM_BUF_BYTES, WATCH_AFTER_MS};
use crate::clock;
use crate::codec::head::{Method, ParsedHead};
use crate::exchange::fields_of;
use crate::exchange::stream::ClientStream;
use crate::server::conn::Conn;
use crate::transport::tls::HandshakeFail;
use crate::transport::upstream::UpstreamConn;
use crate::transport::ReadSpare;
use crate::transport::Transport;
use crate::upstream::response::MAX_RESPONSE_HEAD_BYTES;
use crate::upstream::response::{
    parse_response, resp_header_buf, write_client_head, RespFraming, RespHead, RespParse,
};
use gapura_gate::custom_pages::{
    replace_upstream, write_error_page, PageVars, ReplaceUpstream, UpstreamHead,
};
use gapura_gate::policy::HostExtras;
use gapura_gate::sink::Wide;
use gapura_gate::upstream::UpstreamGroup;
use gapura_gate::{ErrorStatus, UpstreamWhy};
use monoio::time::Instant;
use std::os::fd::AsRawFd;

impl<S: Transport> Conn<S> {
    /// Phase 2: reads the response head, passing interim answers (100,
    /// 103) on, and writes the client's head (with the host's HSTS line
    /// over TLS), or the host's page in place of an upstream error. The
    /// head and whether the client connection closes after it.
    pub(super) async fn read_response_head(
        &mut self,
        up: &mut UpstreamConn,
        head: &ParsedHead,
        group: &UpstreamGroup,
        x: &Exchange,
        replace: &Replace<'_>,
    ) -> Result<(RespHead, bool), Attempt> {
        if self.urbuf.capacity() == 0 {
            self.urbuf = Vec::with_capacity(UPSTREAM_BUF_BYTES);
        }
        self.urbuf.clear();
        let deadline = clock::deadline(group.response_header_timeout_ms);
        let snap = self.shard.snapshot();
        let close_anyway = self.closes_after(&snap, head);
        let wide = self.wide(&snap);
        loop {
            match self.take_response_head(x, replace, close_anyway, wide) {
                HeadStep::Partial => {}
                HeadStep::Fail(a) => return Err(a),
                HeadStep::Replace(status, upstream_status, close) => {
                    let a = self.replace_answer(head, replace, status, upstream_status, close);
                    return Err(a.await);
                }
                HeadStep::Answered(status, close) => {
                    self.shard.stats.response(status);
                    self.log_status(status);
                    return Err(Attempt::Done {
                        reusable: false,
                        close,
                    });
                }
                HeadStep::Head(r, close, interim) => {
                    self.shard.stats.response(r.status);
                    if !interim {
                        self.log_status(r.status);
                        return Ok((r, close));
                    }
                    // Interim (100, 103): passed on; read on.
                    self.urbuf.drain(..r.head_len);
                    if self.flush().await.is_err() {
                        return Err(Attempt::ClientGone);
                    }
                    continue;
                }
            }
            let got_nothing = self.urbuf.is_empty();
            match self.read_upstream(up, deadline).await {
                Ok(0) | Err(UpRead::Io) => {
                    self.upstream_why = Some(if self.urbuf.len() >= MAX_RESPONSE_HEAD_BYTES {
                        UpstreamWhy::Malformed
                    } else if self.upstream_why == Some(UpstreamWhy::Handshake) {
                        UpstreamWhy::Handshake
                    } else {
                        UpstreamWhy::Reset
                    });
                    return Err(x.bad_gateway(got_nothing));
                }
                Ok(_) => {}
                Err(UpRead::Timeout) => {
                    self.upstream_why = Some(UpstreamWhy::AnswerTimeout);
                    return Err(Attempt::Fail {
                        status: ErrorStatus::GatewayTimeout,
                        count_failure: true,
                    });
                }
                Err(UpRead::ClientGone) => return Err(Attempt::ClientGone),
            }
        }
    }

    /// Parses the response head buffered so far and, when it is complete,
    /// writes the client's head (with the HSTS line over TLS) while its
    /// lines are borrowed. Not async: the header array (4 KiB) lives on
    /// this call's stack, not in the connection task's state.
    fn take_response_head(
        &mut self,
        x: &Exchange,
        replace: &Replace<'_>,
        close_anyway: bool,
        wide: Wide<'_>,
    ) -> HeadStep {
        let mut lines = resp_header_buf();
        match parse_response(&self.urbuf, &mut lines, x.head_only) {
            RespParse::Complete(r, reason, lines) => {
                let close = close_anyway || r.framing == RespFraming::Close;
                let interim = r.status / 100 == 1 && r.status != 101;
                if r.status == 101 && !x.upgrade {
                    self.upstream_why = Some(UpstreamWhy::Malformed);
                    return HeadStep::Fail(Attempt::Fail {
                        status: ErrorStatus::BadGateway,
                        count_failure: true,
                    });
                }
                if let Some(status) = replace.status(&r, lines, x.upgrade) {
                    return HeadStep::Replace(status, r.status, close);
                }
                let grpc = self.io.stream().request_id();
                if let Some(client) = self.io.stream_mut().exchange() {
                    return answer_head(client, r, lines, (wide, grpc), (close, interim));
                }
                let wbuf = self.io.out();
                write_client_head(r.status, reason, lines, wbuf, close && !interim);
                if !interim && !wide.is_empty() {
                    // Before the blank line that ends the head.
                    wbuf.truncate(wbuf.len() - 2);
                    wide.write_h1(wbuf);
                    wbuf.extend_from_slice(b"\r\n");
                }
                HeadStep::Head(r, close, interim)
            }
            RespParse::Malformed => {
                self.upstream_why = Some(UpstreamWhy::Malformed);
                HeadStep::Fail(Attempt::Fail {
                    status: ErrorStatus::BadGateway,
                    count_failure: true,
                })
            }
            RespParse::Partial => HeadStep::Partial,
        }
    }

    /// The host's page in place of an upstream error (`replace_upstream`):
    /// its body is dropped unread, so the connection is not pooled.
    pub(super) async fn replace_answer(
        &mut self,
        head: &ParsedHead,
        replace: &Replace<'_>,
        status: ErrorStatus,
        upstream_status: u16,
        close: bool,
    ) -> Attempt {
        let date = self.shard.date.line();
        let id = self.shard.request_id();
        let ctx = gapura_gate::WriteCtx {
            date_line: &date,
            head_only: head.method == Method::Head,
            close,
            keep_alive_10: head.keep_alive_10 && !close,
        };
        let copy = self.page_vars.as_deref().copied().unwrap_or_default();
        let vars = PageVars {
            request_id: &id,
            host: copy.host(),
            cf_ray: copy.ray(),
        };
        write_error_page(
            self.io.answer(),
            replace.pages,
            replace.extras.and_then(|x| x.pages.as_ref()),
            status,
            head.wants_html,
            &vars,
            None,
            &ctx,
        );
        self.shard.stats.response(upstream_status);
        self.log_status(upstream_status);
        if self.flush().await.is_err() {
            return Attempt::ClientGone;
        }
        Attempt::Done {
            reusable: false,
            close,
        }
    }

    /// Reads from the upstream into `urbuf`'s spare room under `deadline`,
    /// watching the client for an abort once the answer takes a while.
    async fn read_upstream(
        &mut self,
        up: &mut UpstreamConn,
        deadline: Instant,
    ) -> Result<usize, UpRead> {
        if self.urbuf.len() == self.urbuf.capacity() {
            if self.urbuf.len() >= crate::upstream::response::MAX_RESPONSE_HEAD_BYTES {
                return Err(UpRead::Io);
            }
            self.urbuf.reserve(self.urbuf.len());
        }
        let buf = std::mem::take(&mut self.urbuf);
        let read = std::pin::pin!(up.read_spare(buf));
        let (res, buf) = self.watched(read, deadline).await?;
        self.urbuf = buf;
        res.map_err(|e| {
            // A TLS 1.3 server's refusal of our certificate (or of none)
            // comes after the handshake: counted with the handshakes'.
            if HandshakeFail::is_alert(&e) {
                self.shard.stats.upstream_tls_failures[HandshakeFail::ClientAlert as usize].inc();
                self.upstream_why = Some(UpstreamWhy::Handshake);
            }
            UpRead::Io
        })
    }

    /// Waits for `wait` (an upstream's answer) under `deadline`, watching
    /// the client for an abort once it takes a while (a closed connection,
    /// or an HTTP/2 stream's reset). Pinned where the caller made it (not
    /// moved into this wait's state).
    pub(super) async fn watched<F: std::future::Future>(
        &mut self,
        mut wait: std::pin::Pin<&mut F>,
        deadline: Instant,
    ) -> Result<F::Output, UpRead> {
        let quick = clock::deadline(WATCH_AFTER_MS);
        let first = self
            .io
            .deadline()
            .within(quick.min(deadline), &mut wait)
            .await;
        match first {
            Ok(r) => Ok(r),
            Err(_) if quick >= deadline => Err(UpRead::Timeout),
            Err(_) => {
                let (stream, conn_deadline) = self.io.stream_and_deadline();
                let watch = async {
                    if let Some(socket) = stream.socket() {
                        monoio::select! {
                            r = &mut wait => return Ok(r),
                            _ = socket.readable(false) => {
                                // Bytes the ring received are pipelined
                                // requests, not an end.
                                if peer_closed(socket.as_raw_fd()) && !stream.buffered() {
                                    return Err(UpRead::ClientGone);
                                }
                                // Pipelined bytes: stop watching, they wait in the socket.
                            }
                        }
                    } else {
                        // An HTTP/2 stream has no socket of its own: its
                        // reset is the client going away.
                        monoio::select! {
                            r = &mut wait => return Ok(r),
                            _ = stream.until_abandoned() => return Err(UpRead::ClientGone),
                        }
                    }
                    Ok(wait.await)
                };
                match conn_deadline.within(deadline, watch).await {
                    Ok(r) => r,
                    Err(_) => Err(UpRead::Timeout),
                }
            }
        }
    }
}

/// An upstream's answer head to an HTTP/2 client, sent as its HEADERS
/// (ending the stream when no body follows): its fields without those
/// HTTP/2 forbids, the host's HSTS field over TLS. A gRPC call's refusal
/// (400 or more without `grpc-status`) is the trailers-only answer
/// instead, and its body is not relayed. An interim answer is not passed
/// on.
fn answer_head(
    client: &mut ClientStream,
    r: RespHead,
    lines: &[httparse::Header<'_>],
    (wide, grpc): (Wide<'_>, Option<[u8; 24]>),
    (close, interim): (bool, bool),
) -> HeadStep {
    if interim {
        return HeadStep::Head(r, close, true);
    }
    let mut fields = fields_of(lines);
    if let Some(id) = grpc.filter(|_| r.status >= 400) {
        if !fields.contains_key("grpc-status") {
            let retry = fields.get(http::header::RETRY_AFTER);
            let refusal = crate::server::grpc::trailers_only(r.status, &id, retry);
            return match client.send_head(refusal, true) {
                Ok(()) => HeadStep::Answered(r.status, close),
                Err(_) => HeadStep::Fail(Attempt::ClientGone),
            };
        }
    }
    wide.add_to(&mut fields);
    let Ok(status) = http::StatusCode::from_u16(r.status) else {
        return HeadStep::Fail(Attempt::Fail {
            status: ErrorStatus::BadGateway,
            count_failure: true,
        });
    };
    let mut answer = http::Response::new(());
    *answer.status_mut() = status;
    *answer.headers_mut() = fields;
    let end = matches!(r.framing, RespFraming::None | RespFraming::Length(0));
    match client.send_head(answer, end) {
        Ok(()) => HeadStep::Head(r, close, false),
        Err(_) => HeadStep::Fail(Attempt::ClientGone),
    }
}

/// What the buffered response bytes make of its head.
enum HeadStep {
    Partial,
    Fail(Attempt),
    /// The whole answer went out with its head (a gRPC call's refusal):
    /// (the upstream's status, close).
    Answered(u16, bool),
    /// The host's page instead: (its status, the upstream's, close).
    Replace(ErrorStatus, u16, bool),
    /// The head, written for the client: (head, close, interim).
    Head(RespHead, bool, bool),
}

/// The host's upstream error replacement, when it has one.
pub(super) struct Replace<'a> {
    extras: Option<&'a HostExtras>,
    pages: &'a gapura_gate::ErrorPages,
    /// The host's own error pages, for Gapura's own 502, 503 and 504
    /// (whether or not it replaces the upstream's).
    custom: Option<&'a gapura_gate::custom_pages::CustomPages>,
}

impl<'a> Replace<'a> {
    /// The snapshot's pages and the host's extras (their replacement only
    /// when it is on).
    pub(super) fn new(snap: &'a gapura_gate::Snapshot, extras: Option<&'a HostExtras>) -> Self {
        Replace {
            extras: extras.filter(|x| x.replace_upstream != ReplaceUpstream::Off),
            pages: &snap.pages,
            custom: extras.and_then(|x| x.pages.as_ref()),
        }
    }

    /// The host's own error pages, if it has any.
    pub(super) fn custom(&self) -> Option<&'a gapura_gate::custom_pages::CustomPages> {
        self.custom
    }

    /// The page that replaces this response, if any. O(headers) only when
    /// replacement is on; the plain path is one `None` check.
    fn status(
        &self,
        r: &crate::upstream::response::RespHead,
        lines: &[httparse::Header<'_>],
        upgrade: bool,
    ) -> Option<ErrorStatus> {
        if self.extras.is_none() || r.status < 400 {
            return None;
        }
        let content_type = lines
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case("content-type"))
            .map(|h| h.value);
        self.status_of(r.status, content_type, upgrade)
    }

    /// The page that replaces an answer of `status` with `content_type`.
    pub(super) fn status_of(
        &self,
        status: u16,
        content_type: Option<&[u8]>,
        upgrade: bool,
    ) -> Option<ErrorStatus> {
        let x = self.extras?;
        if status < 400 {
            return None;
        }
        replace_upstream(
            x.replace_upstream,
            &UpstreamHead {
                status,
                content_type,
                is_upgrade: upgrade,
            },
        )
    }
}

pub(super) enum UpRead {
    Io,
    Timeout,
    ClientGone,
}
