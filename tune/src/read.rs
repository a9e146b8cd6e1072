//! Lines of the log, one at a time into one reused buffer, each bounded.

use std::io::{BufRead, ErrorKind};

/// The longest line kept; longer lines are read past and reported as too
/// long (an access-log line is at most a few KiB: its host and path are cut
/// at 255 and 1024 bytes before escaping).
pub const MAX_LINE_BYTES: usize = 64 * 1024;

/// One line read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Line {
    /// Bytes consumed from the input, newline included.
    pub consumed: u64,
    /// The line was longer than [`MAX_LINE_BYTES`]; `buf` holds its start.
    pub too_long: bool,
}

/// Reads the next line into `buf` (cleared first, without its newline).
/// `None` at the end of the input. Memory: `buf` never grows past
/// [`MAX_LINE_BYTES`] plus one read buffer.
pub fn next_line(input: &mut dyn BufRead, buf: &mut Vec<u8>) -> std::io::Result<Option<Line>> {
    buf.clear();
    let mut line = Line {
        consumed: 0,
        too_long: false,
    };
    loop {
        let chunk = match input.fill_buf() {
            Ok(c) => c,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if chunk.is_empty() {
            return Ok((line.consumed > 0).then_some(line));
        }
        let (part, done) = match chunk.iter().position(|&b| b == b'\n') {
            Some(i) => (&chunk[..i], i + 1),
            None => (chunk, chunk.len()),
        };
        let room = MAX_LINE_BYTES.saturating_sub(buf.len());
        if part.len() > room {
            line.too_long = true;
        }
        buf.extend_from_slice(&part[..part.len().min(room)]);
        let ended = done > part.len();
        input.consume(done);
        line.consumed += done as u64;
        if ended {
            return Ok(Some(line));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_come_one_at_a_time_and_stay_bounded() {
        let long = vec![b'a'; MAX_LINE_BYTES + 10];
        let mut data = b"one\ntwo\n".to_vec();
        data.extend_from_slice(&long);
        data.extend_from_slice(b"\nlast");
        let mut input = std::io::BufReader::with_capacity(16, &data[..]);
        let mut buf = Vec::new();
        let l = next_line(&mut input, &mut buf).unwrap().unwrap();
        assert_eq!(
            (buf.as_slice(), l.consumed, l.too_long),
            (&b"one"[..], 4, false)
        );
        next_line(&mut input, &mut buf).unwrap().unwrap();
        assert_eq!(buf, b"two");
        let l = next_line(&mut input, &mut buf).unwrap().unwrap();
        assert!(l.too_long);
        assert_eq!(buf.len(), MAX_LINE_BYTES);
        next_line(&mut input, &mut buf).unwrap().unwrap();
        assert_eq!(buf, b"last");
        assert!(next_line(&mut input, &mut buf).unwrap().is_none());
    }
}
