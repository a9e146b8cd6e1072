//! Phase 3 for an HTTP/2 client: an HTTP/1.1 upstream's body sent as the
//! stream's DATA frames by its framing (a chunked body decoded, its
//! trailer section sent as trailers), as the client's window allows; each
//! piece sent before the next is read. Its head went out as HEADERS
//! (`response`); nothing is written as HTTP/1.1 text for the client.

use super::Attempt;
use crate::clock;
use crate::codec::chunked::ChunkedDecoder;
use crate::exchange::trailers_of;
use crate::server::conn::Conn;
use crate::transport::upstream::UpstreamConn;
use crate::transport::Transport;
use crate::upstream::response::{RespFraming, RespHead};
use bytes::Bytes;
use h2::Reason;

/// How a piece of the body went.
enum Sent {
    Ok,
    ClientGone,
}

impl<S: Transport> Conn<S> {
    /// The body after its head, by its framing, to an HTTP/2 client.
    pub(super) async fn relay_to_stream(
        &mut self,
        up: &mut UpstreamConn,
        resp: &RespHead,
        mut reusable: bool,
        close: bool,
        read_ms: u64,
    ) -> Attempt {
        let start = resp.head_len;
        let relayed = match resp.framing {
            // The head ended the stream.
            RespFraming::None | RespFraming::Length(0) => {
                reusable &= self.urbuf.len() == start;
                Ok(())
            }
            RespFraming::Length(n) => {
                self.stream_length(up, start, n, &mut reusable, read_ms)
                    .await
            }
            RespFraming::Chunked => self.stream_chunked(up, start, &mut reusable, read_ms).await,
            RespFraming::Close => {
                reusable = false;
                self.stream_to_close(up, start, read_ms).await
            }
        };
        match relayed {
            Ok(()) => Attempt::Done { reusable, close },
            Err(a) => a,
        }
    }

    /// `urbuf[a..b]` as DATA frames (copies of what the window takes),
    /// under the write timeout; `end` ends the stream.
    async fn send_urbuf(&mut self, (a, b): (usize, usize), end: bool) -> Sent {
        let write_ms = self.shard.snapshot().server.write_timeout_ms;
        let urbuf = &self.urbuf;
        let (stream, deadline) = self.io.stream_and_deadline();
        let Some(client) = stream.exchange() else {
            return Sent::ClientGone;
        };
        let send = client.send_frames(b - a, end, |at, k| {
            Bytes::copy_from_slice(&urbuf[a + at..a + at + k])
        });
        match deadline.within(clock::deadline(write_ms), send).await {
            Ok(Ok(())) => {
                self.io.count_sent((b - a) as u64);
                Sent::Ok
            }
            _ => Sent::ClientGone,
        }
    }

    /// The upstream broke the body: the client's stream is reset (no
    /// second status).
    fn broken_stream(&mut self) -> Attempt {
        if let Some(c) = self.io.stream_mut().exchange() {
            c.reset_stream(Reason::INTERNAL_ERROR);
        }
        Attempt::Broken {
            count_failure: true,
        }
    }

    /// Reads the body's next bytes into the empty `urbuf`; `Err` when the
    /// upstream broke it.
    async fn next_piece(&mut self, up: &mut UpstreamConn, read_ms: u64) -> Result<usize, ()> {
        self.urbuf.clear();
        self.read_upstream_plain(up, read_ms).await.map_err(|_| ())
    }

    /// A body of `n` bytes, from `urbuf[start..]` on.
    async fn stream_length(
        &mut self,
        up: &mut UpstreamConn,
        start: usize,
        n: u64,
        reusable: &mut bool,
        read_ms: u64,
    ) -> Result<(), Attempt> {
        let mut remaining = n;
        let mut from = start;
        loop {
            let have = (self.urbuf.len() - from) as u64;
            let take = have.min(remaining);
            *reusable &= have <= remaining;
            remaining -= take;
            let end = remaining == 0;
            if let Sent::ClientGone = self.send_urbuf((from, from + take as usize), end).await {
                return Err(Attempt::ClientGone);
            }
            if end {
                return Ok(());
            }
            from = 0;
            match self.next_piece(up, read_ms).await {
                Ok(0) | Err(()) => return Err(self.broken_stream()),
                Ok(_) => {}
            }
        }
    }

    /// A chunked body, decoded: its data as DATA frames, its trailer
    /// section as trailers.
    async fn stream_chunked(
        &mut self,
        up: &mut UpstreamConn,
        start: usize,
        reusable: &mut bool,
        read_ms: u64,
    ) -> Result<(), Attempt> {
        let mut decoder = ChunkedDecoder::new();
        let mut trailers = Vec::new();
        let mut off = start;
        loop {
            while off < self.urbuf.len() {
                let step = match decoder.step(&self.urbuf[off..]) {
                    Ok(step) => step,
                    Err(_) => return Err(self.broken_stream()),
                };
                trailers.extend_from_slice(&self.urbuf[off..][step.trailer.clone()]);
                let data = (off + step.data.start, off + step.data.end);
                off += step.consumed;
                if data.1 > data.0 {
                    if let Sent::ClientGone = self.send_urbuf(data, false).await {
                        return Err(Attempt::ClientGone);
                    }
                }
                if step.done {
                    *reusable &= off == self.urbuf.len();
                    return self.end_stream(&trailers).await;
                }
            }
            off = 0;
            match self.next_piece(up, read_ms).await {
                Ok(0) | Err(()) => return Err(self.broken_stream()),
                Ok(_) => {}
            }
        }
    }

    /// Ends the stream: with the trailer section's fields, else an empty
    /// DATA frame.
    async fn end_stream(&mut self, section: &[u8]) -> Result<(), Attempt> {
        let fields = trailers_of(section);
        if fields.is_empty() {
            return match self.send_urbuf((0, 0), true).await {
                Sent::Ok => Ok(()),
                Sent::ClientGone => Err(Attempt::ClientGone),
            };
        }
        let Some(client) = self.io.stream_mut().exchange() else {
            return Err(Attempt::ClientGone);
        };
        client
            .send_trailers(fields)
            .map_err(|_| Attempt::ClientGone)
    }

    /// A body that ends when the upstream closes.
    async fn stream_to_close(
        &mut self,
        up: &mut UpstreamConn,
        start: usize,
        read_ms: u64,
    ) -> Result<(), Attempt> {
        let mut from = start;
        loop {
            let to = self.urbuf.len();
            if let Sent::ClientGone = self.send_urbuf((from, to), false).await {
                return Err(Attempt::ClientGone);
            }
            from = 0;
            match self.next_piece(up, read_ms).await {
                Ok(0) => break,
                Err(()) => return Err(self.broken_stream()),
                Ok(_) => {}
            }
        }
        match self.send_urbuf((0, 0), true).await {
            Sent::Ok => Ok(()),
            Sent::ClientGone => Err(Attempt::ClientGone),
        }
    }
}
