//! The WebSocket frame scanner of a tunnel (`codec::websocket`): arbitrary
//! client bytes, fed whole and fed in pieces of every size the input
//! picks, judged by a judge the input drives (pass, drop or close each new
//! message; a size limit for fragmented ones). What must hold: never a
//! panic; what is kept is a prefix of what was scanned and the pending
//! bytes are its end; and the bytes relayed, the messages dropped and the
//! close are the same however the stream is cut into reads.

use gapura_http::codec::websocket::{Judge, Scanner, Verdict};

/// A judge whose answers come from a fixed list (cycled), with a size
/// limit for a message that grows over its frames.
#[derive(Clone)]
struct Scripted {
    answers: Vec<u8>,
    next: usize,
    limit: u64,
}

impl Judge for Scripted {
    fn message(&mut self, declared: u64, _control: bool) -> Verdict {
        let a = self
            .answers
            .get(self.next % self.answers.len().max(1))
            .copied()
            .unwrap_or(0);
        self.next += 1;
        match a % 8 {
            0..=4 if declared <= self.limit => Verdict::Pass,
            0..=4 => Verdict::Close(1009),
            5 | 6 => Verdict::Drop,
            _ => Verdict::Close(1008),
        }
    }
    fn fits(&mut self, total: u64) -> bool {
        total <= self.limit
    }
}

/// What a whole stream came to: the bytes relayed, messages dropped, and
/// the close (with how many bytes had been read when it came).
#[derive(Debug, PartialEq, Eq)]
struct Outcome {
    relayed: Vec<u8>,
    dropped: u32,
    close: Option<u16>,
}

/// Scans `stream` in reads of the sizes `pieces` gives (cycled, at least
/// 1), as a tunnel does: pending header bytes kept at the front of the
/// next read.
fn run(stream: &[u8], pieces: &[u8], judge: &mut Scripted) -> Outcome {
    let mut scanner = Scanner::default();
    let mut out = Outcome {
        relayed: Vec::new(),
        dropped: 0,
        close: None,
    };
    let mut buf: Vec<u8> = Vec::new();
    let mut at = 0;
    let mut i = 0;
    while at < stream.len() {
        let size = pieces
            .get(i % pieces.len().max(1))
            .map_or(stream.len(), |&p| usize::from(p).max(1));
        i += 1;
        let take = size.min(stream.len() - at);
        buf.extend_from_slice(&stream[at..at + take]);
        at += take;
        let n = buf.len();
        let s = scanner.scan(&mut buf, judge);
        assert!(s.keep + s.pending <= n, "{s:?} of {n}");
        out.relayed.extend_from_slice(&buf[..s.keep]);
        out.dropped += s.dropped;
        if s.close.is_some() {
            out.close = s.close;
            return out;
        }
        // The pending bytes are the buffer's end: they start the next read.
        let pending = buf[n - s.pending..].to_vec();
        buf.clear();
        buf.extend_from_slice(&pending);
    }
    out
}

/// The target: the first bytes pick the judge (its limit and answers) and
/// the read sizes, the rest is the client's stream.
pub fn websocket(data: &[u8]) {
    let (Some(&limit), Some(&answers), Some(&cuts)) = (data.first(), data.get(1), data.get(2))
    else {
        return;
    };
    let (answers, cuts) = (usize::from(answers % 8) + 1, usize::from(cuts % 8) + 1);
    if data.len() < 3 + answers + cuts {
        return;
    }
    let judge = Scripted {
        answers: data[3..3 + answers].to_vec(),
        next: 0,
        limit: u64::from(limit) * 64,
    };
    let pieces = &data[3 + answers..3 + answers + cuts];
    let stream = &data[3 + answers + cuts..];
    let whole = run(stream, &[], &mut judge.clone());
    let cut = run(stream, pieces, &mut judge.clone());
    assert_eq!(whole, cut, "the same stream in reads of {pieces:?}");
    // One byte at a time: the hardest cut.
    let bytes = run(stream, &[1], &mut judge.clone());
    assert_eq!(whole, bytes);
}

#[cfg(test)]
mod tests {
    /// A masked client frame.
    fn frame(fin: bool, opcode: u8, payload: &[u8]) -> Vec<u8> {
        let mut v = vec![(if fin { 0x80 } else { 0 }) | opcode];
        let n = payload.len();
        if n < 126 {
            v.push(0x80 | n as u8);
        } else {
            v.push(0x80 | 126);
            v.extend_from_slice(&(n as u16).to_be_bytes());
        }
        v.extend_from_slice(&[1, 2, 3, 4]);
        v.extend_from_slice(payload);
        v
    }

    #[test]
    fn streams_of_frames_scan_the_same_in_any_reads() {
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for _ in 0..300 {
            let mut data = vec![next() as u8, next() as u8, next() as u8];
            data.extend((0..16).map(|_| next() as u8));
            for _ in 0..(next() % 12) {
                let op = [0x1, 0x2, 0x0, 0x9, 0xa, 0x8][(next() % 6) as usize];
                let len = (next() % 300) as usize;
                data.extend(frame(next() % 3 != 0, op, &vec![b'm'; len]));
            }
            super::websocket(&data);
            // Random bytes too.
            let noise: Vec<u8> = (0..(next() % 200)).map(|_| next() as u8).collect();
            super::websocket(&noise);
        }
    }
}
