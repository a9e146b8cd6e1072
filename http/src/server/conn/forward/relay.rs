//! Phase 3 of an attempt: the response body, by its framing, relayed with
//! backpressure (each piece written before the next is read).

use super::response::UpRead;
use super::Attempt;
use crate::clock;
use crate::codec::chunked::ChunkedDecoder;
use crate::server::conn::Conn;
use crate::transport::upstream::UpstreamConn;
use crate::transport::ReadSpare;
use crate::transport::Transport;
use crate::upstream::response::{RespFraming, RespHead};

impl<S: Transport> Conn<S> {
    /// Phase 3: the response body after its head, by its framing.
    pub(super) async fn relay_body(
        &mut self,
        up: &mut UpstreamConn,
        resp: &RespHead,
        mut reusable: bool,
        close: bool,
        read_timeout: u64,
    ) -> Attempt {
        let start = resp.head_len;
        let relayed = match resp.framing {
            RespFraming::None => {
                reusable &= self.urbuf.len() == start;
                if self.flush().await.is_err() {
                    Err(Attempt::ClientGone)
                } else {
                    Ok(())
                }
            }
            RespFraming::Length(n) => {
                self.relay_length(up, start, n, &mut reusable, read_timeout)
                    .await
            }
            RespFraming::Chunked => {
                self.relay_chunked(up, start, &mut reusable, read_timeout)
                    .await
            }
            RespFraming::Close => {
                reusable = false;
                self.relay_to_close(up, start, read_timeout).await
            }
        };
        match relayed {
            Ok(()) => Attempt::Done { reusable, close },
            Err(a) => a,
        }
    }

    /// A body of `n` bytes, from `urbuf[start..]` on.
    async fn relay_length(
        &mut self,
        up: &mut UpstreamConn,
        start: usize,
        n: u64,
        reusable: &mut bool,
        read_timeout: u64,
    ) -> Result<(), Attempt> {
        let have = (self.urbuf.len() - start) as u64;
        let take = have.min(n) as usize;
        self.io
            .out()
            .extend_from_slice(&self.urbuf[start..start + take]);
        *reusable &= have <= n;
        if self.flush().await.is_err() {
            return Err(Attempt::ClientGone);
        }
        let mut remaining = n - take as u64;
        while remaining > 0 {
            self.urbuf.clear();
            match self.read_upstream_plain(up, read_timeout).await {
                Ok(0) | Err(_) => {
                    return Err(Attempt::Broken {
                        count_failure: true,
                    })
                }
                Ok(_) => {}
            }
            let have = self.urbuf.len() as u64;
            if have > remaining {
                self.urbuf.truncate(remaining as usize);
                *reusable = false;
            }
            remaining -= self.urbuf.len() as u64;
            if !self.relay_urbuf().await {
                return Err(Attempt::ClientGone);
            }
        }
        Ok(())
    }

    /// A chunked body, relayed as is once each piece is checked.
    async fn relay_chunked(
        &mut self,
        up: &mut UpstreamConn,
        start: usize,
        reusable: &mut bool,
        read_timeout: u64,
    ) -> Result<(), Attempt> {
        let mut decoder = ChunkedDecoder::new();
        let mut off = start;
        // Where the body begins in `urbuf`: after the head in the first
        // read, at 0 in every later one.
        let mut from = start;
        loop {
            let mut done = false;
            while off < self.urbuf.len() {
                match decoder.step(&self.urbuf[off..]) {
                    Ok(step) => {
                        off += step.consumed;
                        if step.done {
                            done = true;
                            break;
                        }
                    }
                    Err(_) => {
                        // Forward what was valid, then cut the client off.
                        self.urbuf.truncate(off);
                        let _ = self.flush_with_urbuf(from).await;
                        return Err(Attempt::Broken {
                            count_failure: true,
                        });
                    }
                }
            }
            *reusable &= !done || off == self.urbuf.len();
            self.urbuf.truncate(off);
            if !self.flush_with_urbuf(from).await {
                return Err(Attempt::ClientGone);
            }
            if done {
                return Ok(());
            }
            self.urbuf.clear();
            off = 0;
            from = 0;
            match self.read_upstream_plain(up, read_timeout).await {
                Ok(0) | Err(_) => {
                    return Err(Attempt::Broken {
                        count_failure: true,
                    })
                }
                Ok(_) => {}
            }
        }
    }

    /// A body that ends when the upstream closes.
    async fn relay_to_close(
        &mut self,
        up: &mut UpstreamConn,
        start: usize,
        read_timeout: u64,
    ) -> Result<(), Attempt> {
        self.io.out().extend_from_slice(&self.urbuf[start..]);
        if self.flush().await.is_err() {
            return Err(Attempt::ClientGone);
        }
        loop {
            self.urbuf.clear();
            match self.read_upstream_plain(up, read_timeout).await {
                Ok(0) => return Ok(()),
                Err(_) => {
                    return Err(Attempt::Broken {
                        count_failure: true,
                    })
                }
                Ok(_) => {}
            }
            if !self.relay_urbuf().await {
                return Err(Attempt::ClientGone);
            }
        }
    }

    /// Appends `urbuf[from..]` to the pending answer and flushes both.
    async fn flush_with_urbuf(&mut self, from: usize) -> bool {
        if from == 0 && self.io.out_len() == 0 {
            return self.relay_urbuf().await;
        }
        self.io.out().extend_from_slice(&self.urbuf[from..]);
        self.flush().await.is_ok()
    }

    /// Writes `urbuf` to the client as is.
    async fn relay_urbuf(&mut self) -> bool {
        if self.urbuf.is_empty() {
            return true;
        }
        let buf = std::mem::take(&mut self.urbuf);
        let ms = self.shard.snapshot().server.write_timeout_ms;
        match self.io.send(buf, ms).await {
            Some(buf) => {
                self.urbuf = buf;
                true
            }
            None => false,
        }
    }

    /// Reads a body chunk from the upstream into the empty `urbuf`.
    pub(super) async fn read_upstream_plain(
        &mut self,
        up: &mut UpstreamConn,
        timeout_ms: u64,
    ) -> Result<usize, UpRead> {
        let mut buf = std::mem::take(&mut self.urbuf);
        buf.clear();
        match self
            .io
            .deadline()
            .within(clock::deadline(timeout_ms), up.read_spare(buf))
            .await
        {
            Ok((res, buf)) => {
                self.urbuf = buf;
                res.map_err(|_| UpRead::Io)
            }
            Err(_) => Err(UpRead::Timeout),
        }
    }
}
