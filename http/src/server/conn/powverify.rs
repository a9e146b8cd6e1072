//! Proof of work's verify endpoint on a connection: `POST
//! /.well-known/gapura/pow` with its form (at most
//! [`MAX_FORM_BYTES`](gapura_gate::pow::MAX_FORM_BYTES), read into a
//! buffer of that size), answered 303 (with the cookie when solved) or 403, by the
//! gate's pure check (`gapura_gate::pow::verify_form`).

use super::BodyEnd;
use super::{Conn, End};
use crate::codec::chunked::ChunkedDecoder;
use crate::codec::head::{BodyFraming, Method, ParsedHead};
use crate::server::leases::Leases;
use crate::transport::Transport;
use gapura_gate::answer::WriteCtx;
use gapura_gate::pow::{
    verify_form, write_verified, ProofOfWork, ReturnTarget, Verified, MAX_FORM_BYTES,
};
use gapura_gate::sink::Sink;
use gapura_gate::{ErrorStatus, Snapshot};
use std::net::IpAddr;

impl<S: Transport> Conn<S> {
    /// Reads the verify form, checks it and writes the answer; its leases
    /// are held until it is sent.
    pub(super) async fn answer_pow_verify(
        &mut self,
        snap: &Snapshot,
        head: &ParsedHead,
        pow: &ProofOfWork,
        client: IpAddr,
        leases: Option<Leases>,
    ) -> Result<(), End> {
        // On the heap: this path is rare, and a stack array would sit in
        // every connection's task state.
        let mut form = vec![0u8; MAX_FORM_BYTES];
        let n = match self.read_form(head, &mut form).await {
            Ok(n) => n,
            Err(BodyEnd::Refuse(s)) => {
                return Err(self.refuse_body(snap, s, head.wants_html, false).await);
            }
            Err(BodyEnd::End(end)) => return Err(end),
            Err(BodyEnd::Ok | BodyEnd::Unread) => 0,
        };
        let close = self.closes_after(snap, head);
        let status = self.write_verify_answer(snap, head, pow, client, &form[..n], close);
        self.shard.stats.response(status);
        self.log_status(status);
        self.after_local_answer(close, leases).await
    }

    /// Checks the form and writes the answer: 303 (the cookie when
    /// solved), 403 for anything else, 503 without a key. Counts it.
    fn write_verify_answer(
        &mut self,
        snap: &Snapshot,
        head: &ParsedHead,
        pow: &ProofOfWork,
        client: IpAddr,
        form: &[u8],
        close: bool,
    ) -> u16 {
        let date = self.shard.date.line();
        let ctx = WriteCtx {
            date_line: &date,
            head_only: head.method == Method::Head,
            close,
            keep_alive_10: head.keep_alive_10 && !close,
        };
        let mut gate = self.shard.gate_mut();
        let now_s = gate.unix_s(self.shard.now_ms());
        let counters = &mut gate.counters.pow;
        let refusal = match &snap.gate.pow_key {
            None => {
                counters.no_key += 1;
                ErrorStatus::ServiceUnavailable
            }
            Some(key) => {
                let mut ret = ReturnTarget::new();
                match verify_form(key, pow, client, now_s, form, &mut ret) {
                    Ok(v) => {
                        if matches!(v, Verified::Cookie { .. }) {
                            counters.solved += 1;
                        }
                        drop(gate);
                        // Over TLS the cookie is `Secure`.
                        write_verified(self.io.answer(), &v, ret.as_bytes(), S::TLS, &ctx);
                        return 303;
                    }
                    Err(r) => {
                        counters.rejected[r as usize] += 1;
                        ErrorStatus::Forbidden
                    }
                }
            }
        };
        drop(gate);
        let answer = snap.pages.get(refusal, head.wants_html);
        let id = || super::request_id(&self.log, &self.shard);
        let out = self.io.answer();
        answer.write_into(out, &ctx);
        answer.stamp(out.written_mut(), ctx.head_only, id);
        refusal.code()
    }

    /// Reads a request body of at most `out.len()` bytes into `out`: its
    /// length, or 413 past it, 400 for a broken chunked body.
    async fn read_form(&mut self, head: &ParsedHead, out: &mut [u8]) -> Result<usize, BodyEnd> {
        let expect = head.expect_continue;
        let mut n = 0;
        match head.framing {
            BodyFraming::None => Ok(0),
            BodyFraming::Length(len) if len > out.len() as u64 => {
                Err(BodyEnd::Refuse(ErrorStatus::PayloadTooLarge))
            }
            BodyFraming::Length(len) => {
                let len = len as usize;
                if self.io.drained() && expect && len > 0 {
                    self.send_continue(self.io.out_len())
                        .await
                        .map_err(BodyEnd::End)?;
                }
                while n < len {
                    let take = self.io.unread().len().min(len - n);
                    out[n..n + take].copy_from_slice(&self.io.unread()[..take]);
                    self.io.consume(take);
                    n += take;
                    if n < len {
                        self.read_body().await.map_err(BodyEnd::End)?;
                    }
                }
                Ok(n)
            }
            BodyFraming::Chunked => {
                if self.io.drained() && expect {
                    self.send_continue(self.io.out_len())
                        .await
                        .map_err(BodyEnd::End)?;
                }
                let mut decoder = ChunkedDecoder::new();
                loop {
                    while !self.io.drained() {
                        let step = decoder
                            .step(self.io.unread())
                            .map_err(|_| BodyEnd::Refuse(ErrorStatus::BadRequest))?;
                        let data = &self.io.unread()[step.data.clone()];
                        let Some(dst) = out.get_mut(n..n + data.len()) else {
                            return Err(BodyEnd::Refuse(ErrorStatus::PayloadTooLarge));
                        };
                        dst.copy_from_slice(data);
                        n += data.len();
                        self.io.consume(step.consumed);
                        if step.done {
                            return Ok(n);
                        }
                    }
                    self.read_body().await.map_err(BodyEnd::End)?;
                }
            }
        }
    }
}
