//! Incremental decoder for `Transfer-Encoding: chunked`.
//!
//! Strict on purpose: a chunk size is 1 to 16 hex digits with nothing but an
//! extension after it, every line ends in CRLF (a bare CR or bare LF is an
//! error), extensions and trailers are bounded. Two parsers that disagree on
//! where a chunked body ends are how requests get smuggled, so anything
//! unusual is refused. The decoder keeps a few words of state, is fed any
//! split of the input, and reports each data span as a range of the slice it
//! was given. O(n), no allocation.

use std::ops::Range;

/// Longest chunk extension accepted, in bytes.
pub const MAX_EXTENSION_BYTES: u32 = 4096;
/// Longest trailer section accepted, in bytes.
pub const MAX_TRAILER_BYTES: u32 = 16 * 1024;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChunkError {
    BadSize,
    SizeOverflow,
    BadLineEnding,
    ExtensionTooLong,
    TrailerTooLong,
    BadTrailer,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Reading hex digits; `digits` so far.
    Size {
        digits: u8,
    },
    /// Inside a chunk extension.
    Extension {
        len: u32,
    },
    /// Saw CR after the size line; want LF.
    SizeLf,
    Data,
    /// After data: want CR then LF.
    DataCr,
    DataLf,
    /// At the start of a trailer line (or the final blank line).
    TrailerLineStart,
    /// Inside a trailer line.
    TrailerLine,
    /// CR seen at the end of a trailer line.
    TrailerLf {
        empty: bool,
    },
    Done,
}

/// The decoder. `remaining` is the data left in the current chunk.
#[derive(Clone, Debug)]
pub struct ChunkedDecoder {
    state: State,
    size: u64,
    remaining: u64,
    trailer_bytes: u32,
}

/// One step's result: `consumed` bytes of the input were used; `data` is the
/// span of body bytes among them (possibly empty); `trailer` the span of
/// trailer section bytes among them (field lines with their CRLFs, the
/// final empty line left out; possibly empty); `done` once the final chunk
/// and trailers ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Step {
    pub consumed: usize,
    pub data: Range<usize>,
    pub trailer: Range<usize>,
    pub done: bool,
}

impl Default for ChunkedDecoder {
    fn default() -> Self {
        Self::new()
    }
}

impl ChunkedDecoder {
    pub fn new() -> Self {
        ChunkedDecoder {
            state: State::Size { digits: 0 },
            size: 0,
            remaining: 0,
            trailer_bytes: 0,
        }
    }

    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// Consumes framing from `input` up to and including at most one data
    /// span. Call again with the rest while `consumed < input.len()`.
    pub fn step(&mut self, input: &[u8]) -> Result<Step, ChunkError> {
        let mut i = 0;
        // Where this step's trailer bytes begin, once in the trailer section.
        let mut trailer_at = match self.state {
            State::TrailerLine | State::TrailerLf { empty: false } => Some(0),
            _ => None,
        };
        while i < input.len() {
            let b = input[i];
            match self.state {
                State::Size { digits } => match b {
                    b'0'..=b'9' | b'a'..=b'f' | b'A'..=b'F' => {
                        if digits == 16 {
                            return Err(ChunkError::SizeOverflow);
                        }
                        let v = (b as char).to_digit(16).unwrap_or(0) as u64;
                        self.size = (self.size << 4) | v;
                        self.state = State::Size { digits: digits + 1 };
                    }
                    b';' if digits > 0 => self.state = State::Extension { len: 0 },
                    b'\r' if digits > 0 => self.state = State::SizeLf,
                    b'\n' if digits > 0 => return Err(ChunkError::BadLineEnding),
                    _ => return Err(ChunkError::BadSize),
                },
                State::Extension { len } => match b {
                    b'\r' => self.state = State::SizeLf,
                    b'\n' => return Err(ChunkError::BadLineEnding),
                    _ => {
                        if len >= MAX_EXTENSION_BYTES {
                            return Err(ChunkError::ExtensionTooLong);
                        }
                        if b < 0x20 && b != b'\t' || b == 0x7f {
                            return Err(ChunkError::BadSize);
                        }
                        self.state = State::Extension { len: len + 1 };
                    }
                },
                State::SizeLf => {
                    if b != b'\n' {
                        return Err(ChunkError::BadLineEnding);
                    }
                    if self.size == 0 {
                        self.state = State::TrailerLineStart;
                    } else {
                        self.remaining = self.size;
                        self.state = State::Data;
                    }
                    self.size = 0;
                }
                State::Data => {
                    let avail = (input.len() - i) as u64;
                    let take = avail.min(self.remaining) as usize;
                    self.remaining -= take as u64;
                    if self.remaining == 0 {
                        self.state = State::DataCr;
                    }
                    return Ok(Step {
                        consumed: i + take,
                        data: i..i + take,
                        trailer: i..i,
                        done: false,
                    });
                }
                State::DataCr => {
                    if b != b'\r' {
                        return Err(ChunkError::BadLineEnding);
                    }
                    self.state = State::DataLf;
                }
                State::DataLf => {
                    if b != b'\n' {
                        return Err(ChunkError::BadLineEnding);
                    }
                    self.state = State::Size { digits: 0 };
                }
                State::TrailerLineStart | State::TrailerLine | State::TrailerLf { .. } => {
                    if self.trailer_byte(b)? {
                        // The final empty line (CR, LF) is not a field line.
                        let end = i.saturating_sub(1);
                        return Ok(Step {
                            consumed: i + 1,
                            data: i + 1..i + 1,
                            trailer: trailer_at.map_or(end..end, |a| a.min(end)..end),
                            done: true,
                        });
                    }
                    if self.state == State::TrailerLine {
                        trailer_at.get_or_insert(i);
                    }
                }
                State::Done => {
                    return Ok(Step {
                        consumed: i,
                        data: i..i,
                        trailer: i..i,
                        done: true,
                    })
                }
            }
            i += 1;
        }
        // Input ran out: the trailer bytes so far, up to a CR that may
        // begin the final empty line (its bytes are never a field's).
        let end = match self.state {
            State::TrailerLf { empty: true } => i - 1,
            _ => i,
        };
        Ok(Step {
            consumed: i,
            data: i..i,
            trailer: trailer_at.map_or(end..end, |a| a.min(end)..end),
            done: self.state == State::Done,
        })
    }

    /// One byte of the trailer section; `true` once its final empty line
    /// ended (the decoder is done).
    fn trailer_byte(&mut self, b: u8) -> Result<bool, ChunkError> {
        match self.state {
            State::TrailerLineStart => match b {
                b'\r' => self.state = State::TrailerLf { empty: true },
                b'\n' => return Err(ChunkError::BadLineEnding),
                b' ' | b'\t' => return Err(ChunkError::BadTrailer),
                _ => {
                    self.count_trailer()?;
                    self.state = State::TrailerLine;
                }
            },
            State::TrailerLine => match b {
                b'\r' => self.state = State::TrailerLf { empty: false },
                b'\n' => return Err(ChunkError::BadLineEnding),
                _ => {
                    if b < 0x20 && b != b'\t' || b == 0x7f {
                        return Err(ChunkError::BadTrailer);
                    }
                    self.count_trailer()?;
                }
            },
            State::TrailerLf { empty } => {
                if b != b'\n' {
                    return Err(ChunkError::BadLineEnding);
                }
                if empty {
                    self.state = State::Done;
                    return Ok(true);
                }
                self.state = State::TrailerLineStart;
            }
            _ => {}
        }
        Ok(false)
    }

    /// Decodes `data` up to the body's end: the spans of body bytes
    /// (relative to `data`) into `spans`, the trailer section's bytes
    /// appended to `trailers`. Returns whether the body ended.
    pub fn spans(
        &mut self,
        data: &[u8],
        spans: &mut Vec<(usize, usize)>,
        trailers: &mut Vec<u8>,
    ) -> Result<bool, ChunkError> {
        let mut at = 0;
        while at < data.len() {
            let step = self.step(&data[at..])?;
            spans.push((at + step.data.start, at + step.data.end));
            trailers.extend_from_slice(&data[at..][step.trailer]);
            at += step.consumed;
            if step.done {
                return Ok(true);
            }
        }
        Ok(false)
    }

    fn count_trailer(&mut self) -> Result<(), ChunkError> {
        self.trailer_bytes += 1;
        if self.trailer_bytes > MAX_TRAILER_BYTES {
            return Err(ChunkError::TrailerTooLong);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Decodes `input` fed in pieces of `piece` bytes; returns the body.
    fn decode(input: &[u8], piece: usize) -> Result<(Vec<u8>, usize), ChunkError> {
        let mut d = ChunkedDecoder::new();
        let mut body = Vec::new();
        let mut fed = 0;
        for chunk in input.chunks(piece.max(1)) {
            let mut off = 0;
            while off < chunk.len() {
                let s = d.step(&chunk[off..])?;
                body.extend_from_slice(&chunk[off..][s.data.clone()]);
                off += s.consumed;
                fed += s.consumed;
                if s.done {
                    return Ok((body, fed));
                }
                if s.consumed == 0 {
                    break;
                }
            }
        }
        Err(ChunkError::BadSize)
    }

    /// Decodes `input` fed in pieces of `piece` bytes; returns the body
    /// and the trailer section's bytes as the steps gave them.
    fn decode_with_trailers(input: &[u8], piece: usize) -> (Vec<u8>, Vec<u8>) {
        let mut d = ChunkedDecoder::new();
        let (mut body, mut trailer) = (Vec::new(), Vec::new());
        for chunk in input.chunks(piece.max(1)) {
            let mut off = 0;
            while off < chunk.len() {
                let s = d.step(&chunk[off..]).unwrap();
                body.extend_from_slice(&chunk[off..][s.data.clone()]);
                trailer.extend_from_slice(&chunk[off..][s.trailer.clone()]);
                off += s.consumed;
                if s.done {
                    return (body, trailer);
                }
            }
        }
        panic!("not done");
    }

    #[test]
    fn trailer_sections_are_given_whole_in_any_split() {
        let with = b"3\r\nabc\r\n0\r\ngrpc-status: 0\r\ngrpc-message: ok\r\n\r\n";
        let without = b"3\r\nabc\r\n0\r\n\r\n";
        for piece in 1..with.len() {
            assert_eq!(
                decode_with_trailers(with, piece),
                (
                    b"abc".to_vec(),
                    b"grpc-status: 0\r\ngrpc-message: ok\r\n".to_vec()
                ),
                "piece {piece}"
            );
        }
        for piece in 1..without.len() {
            assert_eq!(
                decode_with_trailers(without, piece),
                (b"abc".to_vec(), Vec::new()),
                "piece {piece}"
            );
        }
    }

    #[test]
    fn decodes_chunks_extensions_and_trailers_in_any_split() {
        let input = b"5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nX-T: 1\r\n\r\nNEXT";
        for piece in 1..input.len() {
            let (body, used) = decode(input, piece).unwrap();
            assert_eq!(body, b"hello world");
            assert_eq!(used, input.len() - 4);
        }
    }

    #[test]
    fn strict_framing_errors() {
        assert_eq!(
            decode(b"5\nhello\r\n0\r\n\r\n", 64),
            Err(ChunkError::BadLineEnding)
        );
        assert_eq!(
            decode(b"5\r\nhello\n0\r\n\r\n", 64),
            Err(ChunkError::BadLineEnding)
        );
        assert_eq!(
            decode(b"5\r\nhelloX\r\n0\r\n\r\n", 64),
            Err(ChunkError::BadLineEnding)
        );
        assert_eq!(decode(b"x\r\n", 64), Err(ChunkError::BadSize));
        assert_eq!(decode(b" 5\r\n", 64), Err(ChunkError::BadSize));
        assert_eq!(decode(b"5 \r\n", 64), Err(ChunkError::BadSize));
        assert_eq!(decode(b"\r\n", 64), Err(ChunkError::BadSize));
        assert_eq!(decode(b"-1\r\n", 64), Err(ChunkError::BadSize));
        assert_eq!(
            decode(b"10000000000000000\r\n", 64),
            Err(ChunkError::SizeOverflow)
        );
        assert_eq!(
            decode(b"0\r\n folded\r\n\r\n", 64),
            Err(ChunkError::BadTrailer)
        );
        assert_eq!(
            decode(b"0\r\nX: a\rb\r\n\r\n", 64),
            Err(ChunkError::BadLineEnding)
        );
    }

    #[test]
    fn largest_size_is_accepted_and_counted() {
        let mut d = ChunkedDecoder::new();
        let s = d.step(b"ffffffffffffffff\r\nab").unwrap();
        assert_eq!(s.data, 18..20);
        assert_eq!(d.remaining, u64::MAX - 2);
    }

    #[test]
    fn long_extension_and_trailer_are_bounded() {
        let mut ext = b"1;".to_vec();
        ext.extend(std::iter::repeat_n(b'a', MAX_EXTENSION_BYTES as usize + 1));
        assert_eq!(decode(&ext, 4096), Err(ChunkError::ExtensionTooLong));
        let mut tr = b"0\r\n".to_vec();
        for _ in 0..2000 {
            tr.extend_from_slice(b"X-Trailer: 123\r\n");
        }
        assert_eq!(decode(&tr, 4096), Err(ChunkError::TrailerTooLong));
    }
}
