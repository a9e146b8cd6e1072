//! A watch on an HTTP/2 connection's incoming frames, below the codec:
//! frame headers are read as the bytes pass (nothing is buffered or
//! copied), and frames that cost the server work without carrying a
//! request are budgeted per connection: SETTINGS and PING (not their
//! acknowledgements), PRIORITY, and DATA frames that are empty and do not
//! end their stream. Past `limit` of them in 10 seconds the connection is
//! flagged: its reads stop (the codec sees no more frames) and the
//! connection's driver closes it with GOAWAY `ENHANCE_YOUR_CALM`.
//!
//! It also tells how long a request head has been arriving: from the
//! first byte of a frame header, or of a HEADERS or CONTINUATION frame,
//! until the header block's END_HEADERS has arrived whole. The driver
//! closes a connection whose head takes longer than the header timeout (a
//! trickled header block opens no stream the codec could time out).

use crate::transport::ReadSpare;
use std::cell::Cell;
use std::io;
use std::rc::Rc;

/// The connection preface a client with prior knowledge opens with.
pub const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// The window of the budget.
const WINDOW_MS: u64 = 10_000;
const HEADER: usize = 9;

/// Wraps a connection's read half.
pub(super) struct Scanned<R> {
    inner: R,
    /// Raised once the budget is spent; the driver reads it.
    pub flooded: Rc<Cell<bool>>,
    /// Since when (coarse ms) a frame header or header block has been
    /// arriving; `None` between them.
    pub head_since: Rc<Cell<Option<u64>>>,
    /// A header block without END_HEADERS so far.
    block_open: bool,
    /// The frame whose payload is arriving is HEADERS or CONTINUATION.
    in_header_frame: bool,
    limit: u32,
    seen: u32,
    window_start_ms: u64,
    /// Preface bytes still to pass.
    skip: usize,
    head: [u8; HEADER],
    have: usize,
    payload_left: usize,
}

impl<R> Scanned<R> {
    /// `limit`: control frames per 10 s. The connection's first bytes are
    /// the 24-byte preface.
    pub(super) fn new(inner: R, limit: u32) -> Scanned<R> {
        Scanned {
            inner,
            flooded: Rc::new(Cell::new(false)),
            head_since: Rc::new(Cell::new(None)),
            block_open: false,
            in_header_frame: false,
            limit,
            seen: 0,
            window_start_ms: 0,
            skip: PREFACE.len(),
            head: [0; HEADER],
            have: 0,
            payload_left: 0,
        }
    }

    /// Reads frame headers out of `bytes`, the connection's next bytes.
    /// Where the frame past the budget begins in them, once it is seen:
    /// the codec gets nothing from there on.
    pub(super) fn scan(&mut self, bytes: &[u8]) -> Option<usize> {
        if self.flooded.get() {
            return Some(0);
        }
        let mut i = 0;
        while i < bytes.len() {
            if self.skip > 0 || self.payload_left > 0 {
                let left = if self.skip > 0 {
                    &mut self.skip
                } else {
                    &mut self.payload_left
                };
                let k = (*left).min(bytes.len() - i);
                *left -= k;
                i += k;
                if self.payload_left == 0 && self.in_header_frame {
                    self.in_header_frame = false;
                    self.note_head();
                }
                continue;
            }
            if self.have == 0 {
                self.note_head_start();
            }
            let k = (HEADER - self.have).min(bytes.len() - i);
            self.head[self.have..self.have + k].copy_from_slice(&bytes[i..i + k]);
            self.have += k;
            i += k;
            if self.have == HEADER {
                self.have = 0;
                self.header_frame();
                if self.frame() {
                    self.flooded.set(true);
                    return Some(i.saturating_sub(HEADER));
                }
            }
        }
        None
    }

    /// A frame header's first byte: a head may be starting.
    fn note_head_start(&mut self) {
        if self.head_since.get().is_none() {
            self.head_since.set(Some(crate::clock::now_ms()));
        }
    }

    /// Whether a head is still arriving, once a frame or its header ended.
    fn note_head(&mut self) {
        let arriving = self.have > 0 || self.in_header_frame || self.block_open;
        if !arriving {
            self.head_since.set(None);
        }
    }

    /// Follows header blocks: HEADERS opens one unless it has
    /// END_HEADERS, CONTINUATION with END_HEADERS closes it.
    fn header_frame(&mut self) {
        let h = self.head;
        let len = (usize::from(h[0]) << 16) | (usize::from(h[1]) << 8) | usize::from(h[2]);
        let end_headers = h[4] & 0x4 != 0;
        match h[3] {
            0x1 => self.block_open = !end_headers,
            0x9 if end_headers => self.block_open = false,
            _ => {}
        }
        self.in_header_frame = matches!(h[3], 0x1 | 0x9) && len > 0;
        self.note_head();
    }

    /// Takes the frame whose header was read; true when it is one past the
    /// budget.
    fn frame(&mut self) -> bool {
        let h = self.head;
        let len = (usize::from(h[0]) << 16) | (usize::from(h[1]) << 8) | usize::from(h[2]);
        let (kind, flags) = (h[3], h[4]);
        self.payload_left = len;
        // ACK (SETTINGS, PING) and END_STREAM (DATA) are both bit 0.
        let flag0 = flags & 1 != 0;
        let costly = match kind {
            0x0 => len == 0 && !flag0,
            0x2 => true,
            0x4 | 0x6 => !flag0,
            _ => false,
        };
        if !costly {
            return false;
        }
        let now = crate::clock::now_ms();
        if now.saturating_sub(self.window_start_ms) >= WINDOW_MS {
            self.window_start_ms = now;
            self.seen = 0;
        }
        self.seen += 1;
        self.seen > self.limit
    }
}

impl<R: ReadSpare> ReadSpare for Scanned<R> {
    async fn read_spare(&mut self, buf: Vec<u8>) -> (io::Result<usize>, Vec<u8>) {
        if self.flooded.get() {
            // No more frames for the codec; the driver closes the connection.
            return std::future::pending().await;
        }
        let start = buf.len();
        let (res, mut buf) = self.inner.read_spare(buf).await;
        if let Ok(n) = res {
            match self.scan(&buf[start..start + n]) {
                None => {}
                // Nothing for the codec at all: wait for the close.
                Some(0) => return std::future::pending().await,
                Some(cut) => {
                    buf.truncate(start + cut);
                    return (Ok(cut), buf);
                }
            }
        }
        (res, buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(kind: u8, flags: u8, payload: usize) -> Vec<u8> {
        let mut f = vec![
            (payload >> 16) as u8,
            (payload >> 8) as u8,
            payload as u8,
            kind,
            flags,
        ];
        f.extend_from_slice(&1u32.to_be_bytes());
        f.resize(HEADER + payload, 0xaa);
        f
    }

    #[test]
    fn a_head_is_timed_from_its_first_byte_to_the_end_of_its_block() {
        let mut s = Scanned::new((), 100);
        s.scan(super::PREFACE);
        assert_eq!(s.head_since.get(), None);
        // A complete SETTINGS frame: nothing is arriving after it.
        s.scan(&frame(4, 0, 6));
        assert_eq!(s.head_since.get(), None);
        // Half a frame header.
        let headers = frame(1, 0, 4);
        s.scan(&headers[..5]);
        assert!(s.head_since.get().is_some());
        // The rest of HEADERS without END_HEADERS: the block is open.
        s.scan(&headers[5..]);
        assert!(s.head_since.get().is_some());
        // DATA of another stream between does not close it...
        s.scan(&frame(0, 0, 3));
        assert!(s.head_since.get().is_some());
        // ...CONTINUATION with END_HEADERS does, once its payload is in.
        let end = frame(9, 0x4, 10);
        s.scan(&end[..12]);
        assert!(s.head_since.get().is_some());
        s.scan(&end[12..]);
        assert_eq!(s.head_since.get(), None);
        // HEADERS with END_HEADERS, whole: nothing arriving.
        s.scan(&frame(1, 0x4, 7));
        assert_eq!(s.head_since.get(), None);
    }

    #[test]
    fn control_frames_are_counted_across_any_split_of_the_bytes() {
        let mut bytes = super::PREFACE.to_vec();
        // Counted: SETTINGS, PING, PRIORITY, empty DATA without END_STREAM.
        for f in [
            frame(4, 0, 6),
            frame(6, 0, 8),
            frame(2, 0, 5),
            frame(0, 0, 0),
        ] {
            bytes.extend_from_slice(&f);
        }
        // Not counted: acknowledgements, a request, data, the end of a stream.
        for f in [
            frame(4, 1, 0),
            frame(6, 1, 8),
            frame(1, 4, 20),
            frame(0, 0, 100),
            frame(0, 1, 0),
        ] {
            bytes.extend_from_slice(&f);
        }
        // The fourth counted frame (empty DATA) starts here.
        let fourth = 24 + (9 + 6) + (9 + 8) + (9 + 5);
        for piece in [1, 2, 7, 9, 10, 64, bytes.len()] {
            let mut s = Scanned::new((), 3);
            let mut at = 0;
            let mut cut = None;
            for chunk in bytes.chunks(piece) {
                if let Some(c) = s.scan(chunk) {
                    cut = Some(at + c);
                    break;
                }
                at += chunk.len();
            }
            assert!(s.flooded.get(), "4 is past a limit of 3");
            // Cut where that frame begins, or, when its header came in
            // pieces, where the piece that completed it begins.
            let cut = cut.unwrap();
            assert!(
                (fourth..fourth + 9).contains(&cut),
                "pieces of {piece}: cut at {cut}"
            );
            if piece >= 64 {
                assert_eq!(cut, fourth);
            }
            let mut s = Scanned::new((), 4);
            assert_eq!(s.scan(&bytes), None);
            assert_eq!(s.seen, 4);
            assert!(!s.flooded.get());
        }
    }
}
