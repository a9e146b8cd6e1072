//! A request body the connection reads itself (a local answer's, which it
//! drains against the limits): `100 Continue`, reading more, and draining
//! a length-delimited or chunked body.

use super::{BodyEnd, Conn, End, ReadFail};
use crate::clock;
use crate::codec::chunked::ChunkedDecoder;
use crate::server::stats::ErrorKind;
use crate::transport::Transport;
use gapura_gate::limits::RequestLimits;
use gapura_gate::ErrorStatus;

const CONTINUE_100: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n";

impl<S: Transport> Conn<S> {
    /// Before reading a body the client holds back for `100 Continue`: write
    /// the answers queued before this request, then the interim response.
    /// A stream that answers as parts (HTTP/2) sends no interim answer:
    /// its client sends the body once its request is open.
    pub(super) async fn send_continue(&mut self, resp_start: usize) -> Result<(), End> {
        if S::PARTS {
            return Ok(());
        }
        let answer = self.io.out().split_off(resp_start);
        self.io.out().extend_from_slice(CONTINUE_100);
        self.shard.stats.response(100);
        self.flush().await?;
        // The flushed buffer keeps its capacity when nothing was held back.
        if !answer.is_empty() {
            self.io.set_out(answer);
        }
        Ok(())
    }

    /// A body refused while it was read (413 past the limit, else 400):
    /// its page, then the connection closes.
    pub(super) async fn refuse_body(
        &mut self,
        snap: &gapura_gate::Snapshot,
        status: ErrorStatus,
        wants_html: bool,
        head_only: bool,
    ) -> End {
        self.write_page(snap, status, wants_html, head_only);
        let kind = if status == ErrorStatus::PayloadTooLarge {
            ErrorKind::Limit
        } else {
            ErrorKind::BadRequest
        };
        self.close_after_refusal(kind).await
    }

    /// Makes room for body bytes: everything before `pos` is consumed.
    pub(super) fn recycle_for_body(&mut self) {
        self.io.rewind_if_drained();
    }

    pub(super) async fn read_body(&mut self) -> Result<usize, End> {
        self.recycle_for_body();
        let ms = self.shard.snapshot().server.body_timeout_ms;
        let deadline = clock::deadline(ms);
        match self.read_more(deadline).await {
            Ok(0) => Err(End::Error(ErrorKind::Io)),
            Ok(n) => Ok(n),
            Err(ReadFail::Timeout) => Err(End::Error(ErrorKind::BodyTimeout)),
            Err(ReadFail::Io) => Err(End::Error(ErrorKind::Io)),
        }
    }

    pub(super) async fn drain_length(
        &mut self,
        len: u64,
        expect: bool,
        resp_start: usize,
    ) -> BodyEnd {
        let mut remaining = len;
        let avail = self.io.unread().len() as u64;
        if avail == 0 && expect {
            if let Err(end) = self.send_continue(resp_start).await {
                return BodyEnd::End(end);
            }
        }
        loop {
            let avail = self.io.unread().len() as u64;
            let take = avail.min(remaining);
            self.io.consume(take as usize);
            remaining -= take;
            if remaining == 0 {
                return BodyEnd::Ok;
            }
            if let Err(end) = self.read_body().await {
                return BodyEnd::End(end);
            }
        }
    }

    pub(super) async fn drain_chunked(
        &mut self,
        limits: &RequestLimits,
        expect: bool,
        resp_start: usize,
    ) -> BodyEnd {
        let mut decoder = ChunkedDecoder::new();
        let mut total: u64 = 0;
        if self.io.drained() && expect {
            if let Err(end) = self.send_continue(resp_start).await {
                return BodyEnd::End(end);
            }
        }
        loop {
            while !self.io.drained() {
                match decoder.step(self.io.unread()) {
                    Ok(step) => {
                        total = total.saturating_add(step.data.len() as u64);
                        self.io.consume(step.consumed);
                        if !limits.body_allows(total) {
                            return BodyEnd::Refuse(ErrorStatus::PayloadTooLarge);
                        }
                        if step.done {
                            return BodyEnd::Ok;
                        }
                    }
                    Err(_) => return BodyEnd::Refuse(ErrorStatus::BadRequest),
                }
            }
            if let Err(end) = self.read_body().await {
                return BodyEnd::End(end);
            }
        }
    }
}
