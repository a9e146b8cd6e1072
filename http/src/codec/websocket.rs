//! WebSocket frames a client sends through a tunnel, read from their headers
//! only: where each frame starts and ends, which message it belongs to and
//! how large that message is. Payloads are never unmasked or copied to be
//! read; a message dropped whole is cut out of the buffer (its frames
//! removed in place), the only time bytes move.
//!
//! [`Scanner::scan`] is fed the client's bytes as they arrive and asks a
//! [`Judge`] about each new message (a data frame that starts one, or a
//! ping or pong): pass it, drop it, or close the tunnel. A close frame
//! always passes. A fragmented message that grows past the size limit
//! after its first frames have passed cannot be dropped whole any more: it
//! closes the tunnel. O(bytes scanned), no allocation.

/// What the judge says of a new message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Pass,
    /// Not relayed; the tunnel goes on.
    Drop,
    /// Close the tunnel with this status (1008 policy, 1009 too big).
    Close(u16),
}

/// Decides new messages: `declared` is the first frame's payload length,
/// `control` a ping or pong.
pub trait Judge {
    fn message(&mut self, declared: u64, control: bool) -> Verdict;
    /// A message that grew to `total` bytes over its frames: `false` when
    /// that is over the size limit.
    fn fits(&mut self, total: u64) -> bool;
}

/// What a scan did to the buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Scanned {
    /// Bytes at the buffer's front to relay (frames dropped were cut).
    pub keep: usize,
    /// Bytes at the buffer's end that begin a frame header not yet whole:
    /// keep them at the front of the next read.
    pub pending: usize,
    /// Messages dropped whole in this scan.
    pub dropped: u32,
    /// Close the tunnel with this status after relaying `keep` bytes.
    pub close: Option<u16>,
}

/// Status of a message too big (RFC 6455 7.4.1).
pub const CLOSE_TOO_BIG: u16 = 1009;
/// Status of a policy violation.
pub const CLOSE_POLICY: u16 = 1008;
/// The longest frame header: 2 bytes, 8 of length, 4 of mask.
pub const MAX_HEADER: usize = 14;

/// The frame scanner of one direction of one tunnel.
#[derive(Debug, Default)]
pub struct Scanner {
    /// Payload bytes of the current frame still to come.
    remaining: u64,
    /// The current frame is cut out.
    dropping: bool,
    /// The open data message is dropped whole.
    message_dropped: bool,
    /// Bytes of the open data message so far.
    message_bytes: u64,
}

/// The header's full length once its second byte is known.
fn header_len(b1: u8) -> usize {
    let ext = match b1 & 0x7f {
        126 => 2,
        127 => 8,
        _ => 0,
    };
    2 + ext + if b1 & 0x80 != 0 { 4 } else { 0 }
}

fn payload_len(head: &[u8]) -> u64 {
    match head[1] & 0x7f {
        126 => u64::from(u16::from_be_bytes([head[2], head[3]])),
        127 => u64::from_be_bytes(head[2..10].try_into().unwrap_or([0xff; 8])),
        n => u64::from(n),
    }
}

impl Scanner {
    /// Scans `buf` (the bytes read, after any pending header bytes kept
    /// from the last scan), cutting dropped frames out in place. The caller
    /// relays `buf[..keep]`, moves the last `pending` bytes to the front,
    /// and closes if told to.
    pub fn scan<J: Judge>(&mut self, buf: &mut [u8], judge: &mut J) -> Scanned {
        let n = buf.len();
        let (mut r, mut w, mut dropped) = (0, 0, 0);
        while r < n {
            if self.remaining > 0 {
                let take = self.remaining.min((n - r) as u64) as usize;
                if !self.dropping {
                    if w != r {
                        buf.copy_within(r..r + take, w);
                    }
                    w += take;
                }
                r += take;
                self.remaining -= take as u64;
                continue;
            }
            if n - r < 2 || n - r < header_len(buf[r + 1]) {
                return Scanned {
                    keep: w,
                    pending: n - r,
                    dropped,
                    close: None,
                };
            }
            let hlen = header_len(buf[r + 1]);
            let len = payload_len(&buf[r..r + hlen]);
            let fin = buf[r] & 0x80 != 0;
            let opcode = buf[r] & 0x0f;
            let verdict = match opcode {
                // Close: always relayed.
                0x8 => Verdict::Pass,
                // Ping, pong: messages of their own.
                0x9 | 0xa => judge.message(len, true),
                // The next frame of the open data message.
                0x0 => {
                    self.message_bytes = self.message_bytes.saturating_add(len);
                    if self.message_dropped {
                        Verdict::Drop
                    } else if judge.fits(self.message_bytes) {
                        Verdict::Pass
                    } else {
                        // Its first frames passed: it cannot be dropped whole.
                        Verdict::Close(CLOSE_TOO_BIG)
                    }
                }
                // A new data message (text, binary, or reserved).
                _ => {
                    self.message_bytes = len;
                    let v = judge.message(len, false);
                    self.message_dropped = v == Verdict::Drop;
                    v
                }
            };
            if let Verdict::Close(code) = verdict {
                return Scanned {
                    keep: w,
                    pending: 0,
                    dropped,
                    close: Some(code),
                };
            }
            let first_frame_dropped = verdict == Verdict::Drop && (opcode != 0x0);
            if first_frame_dropped {
                dropped += 1;
            }
            if opcode == 0x0 && fin {
                self.message_dropped = false;
            }
            self.dropping = verdict == Verdict::Drop;
            if !self.dropping {
                if w != r {
                    buf.copy_within(r..r + hlen, w);
                }
                w += hlen;
            }
            r += hlen;
            self.remaining = len;
        }
        Scanned {
            keep: w,
            pending: 0,
            dropped,
            close: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A masked client frame.
    fn frame(fin: bool, opcode: u8, payload: &[u8]) -> Vec<u8> {
        let mut v = vec![(if fin { 0x80 } else { 0 }) | opcode];
        let n = payload.len();
        if n < 126 {
            v.push(0x80 | n as u8);
        } else if n < 65536 {
            v.push(0x80 | 126);
            v.extend_from_slice(&(n as u16).to_be_bytes());
        } else {
            v.push(0x80 | 127);
            v.extend_from_slice(&(n as u64).to_be_bytes());
        }
        let key = [1, 2, 3, 4];
        v.extend_from_slice(&key);
        v.extend(payload.iter().enumerate().map(|(i, b)| b ^ key[i % 4]));
        v
    }

    /// Passes messages while `budget` lasts, then drops (or closes);
    /// messages over `max` bytes are refused.
    struct Budget {
        budget: u32,
        max: u64,
        close: bool,
        seen: u32,
    }

    impl Judge for Budget {
        fn message(&mut self, declared: u64, _control: bool) -> Verdict {
            self.seen += 1;
            if declared > self.max {
                return if self.close {
                    Verdict::Close(CLOSE_TOO_BIG)
                } else {
                    Verdict::Drop
                };
            }
            if self.budget == 0 {
                return if self.close {
                    Verdict::Close(CLOSE_POLICY)
                } else {
                    Verdict::Drop
                };
            }
            self.budget -= 1;
            Verdict::Pass
        }
        fn fits(&mut self, total: u64) -> bool {
            total <= self.max
        }
    }

    fn judge(budget: u32, max: u64, close: bool) -> Budget {
        Budget {
            budget,
            max,
            close,
            seen: 0,
        }
    }

    /// Feeds `input` in reads of `chunk` bytes as a tunnel does (pending
    /// header bytes kept in front) and returns what is relayed.
    fn relay(input: &[u8], chunk: usize, j: &mut Budget) -> (Vec<u8>, u32, Option<u16>) {
        let mut s = Scanner::default();
        let mut out = Vec::new();
        let mut buf: Vec<u8> = Vec::new();
        let mut dropped = 0;
        for part in input.chunks(chunk) {
            buf.extend_from_slice(part);
            let got = s.scan(&mut buf, j);
            out.extend_from_slice(&buf[..got.keep]);
            dropped += got.dropped;
            if got.close.is_some() {
                return (out, dropped, got.close);
            }
            let len = buf.len();
            buf.copy_within(len - got.pending..len, 0);
            buf.truncate(got.pending);
        }
        (out, dropped, None)
    }

    #[test]
    fn messages_within_the_limits_pass_unchanged() {
        let input = [
            frame(true, 1, b"hello"),
            frame(false, 2, &[7; 200]),
            frame(true, 0, &[8; 70_000]),
            frame(true, 9, b"ping"),
            frame(true, 8, &[3, 232]),
        ]
        .concat();
        for chunk in [1, 2, 3, 7, 13, 64, 4096, input.len()] {
            let (out, dropped, close) = relay(&input, chunk, &mut judge(10, 1 << 20, false));
            assert_eq!(out, input, "chunk {chunk}");
            assert_eq!((dropped, close), (0, None));
        }
    }

    #[test]
    fn messages_over_the_rate_are_dropped_whole_and_the_rest_pass() {
        let a = frame(true, 1, b"one");
        let b1 = frame(false, 1, b"two-");
        let ping = frame(true, 9, b"p");
        let b2 = frame(true, 0, b"parts");
        let c = frame(true, 2, b"three");
        let close = frame(true, 8, &[3, 232]);
        let input = [a.clone(), b1, ping, b2, c, close.clone()].concat();
        for chunk in [1, 5, 11, input.len()] {
            // One message passes; the fragmented one, the ping and the
            // binary one are dropped; the close frame always passes.
            let (out, dropped, end) = relay(&input, chunk, &mut judge(1, 1 << 20, false));
            assert_eq!(out, [a.clone(), close.clone()].concat(), "chunk {chunk}");
            assert_eq!((dropped, end), (3, None));
        }
    }

    #[test]
    fn a_message_over_the_size_is_dropped_or_closes() {
        let small = frame(true, 2, &[1; 10]);
        let big = frame(true, 2, &[1; 100]);
        let input = [small.clone(), big, small.clone()].concat();
        let (out, dropped, end) = relay(&input, 4096, &mut judge(10, 50, false));
        assert_eq!(out, [small.clone(), small.clone()].concat());
        assert_eq!((dropped, end), (1, None));
        let (out, _, end) = relay(&input, 4096, &mut judge(10, 50, true));
        assert_eq!(out, small);
        assert_eq!(end, Some(CLOSE_TOO_BIG));
    }

    #[test]
    fn a_fragmented_message_growing_past_the_size_closes() {
        let first = frame(false, 1, &[1; 40]);
        let input = [first.clone(), frame(true, 0, &[1; 40])].concat();
        let (out, _, end) = relay(&input, 4096, &mut judge(10, 50, false));
        assert_eq!(out, first);
        assert_eq!(end, Some(CLOSE_TOO_BIG));
    }

    #[test]
    fn over_the_rate_in_close_mode_closes_with_1008() {
        let a = frame(true, 1, b"a");
        let input = [a.clone(), frame(true, 1, b"b")].concat();
        let (out, _, end) = relay(&input, 4096, &mut judge(1, 1 << 20, true));
        assert_eq!(out, a);
        assert_eq!(end, Some(CLOSE_POLICY));
    }

    #[test]
    fn any_bytes_scan_without_panic_and_never_grow() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..2000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let len = (x % 300) as usize;
            let bytes: Vec<u8> = (0..len).map(|i| (x >> (i % 56)) as u8).collect();
            let (out, _, _) = relay(&bytes, 1 + (x % 17) as usize, &mut judge(3, 64, false));
            assert!(out.len() <= bytes.len());
        }
    }
}
