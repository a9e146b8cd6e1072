//! Incremental HTTP/1.1 response framing: head by httparse, then the body by
//! Content-Length, chunked coding, or until close.
//!
//! The parser never copies body bytes and never allocates: it only counts them.
//! It is fed whatever the socket produced and says how much it consumed and
//! whether a response ended, so one read can end many pipelined responses.

/// Largest response head accepted.
pub const MAX_HEAD_BYTES: usize = 64 * 1024;
const MAX_HEADERS: usize = 64;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Head,
    Body(u64),
    ChunkSize,
    ChunkData(u64),
    ChunkDataEnd,
    Trailer,
    UntilClose,
}

/// One complete response.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Done {
    pub status: u16,
    /// The server will close after this response.
    pub close: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParseError {
    BadHead,
    HeadTooLarge,
    BadChunk,
    BadLength,
}

pub struct ResponseParser {
    state: State,
    status: u16,
    close: bool,
    head_only: bool,
    line_len: usize,
}

impl ResponseParser {
    /// `head_only`: the requests are HEAD, so responses carry no body.
    pub fn new(head_only: bool) -> ResponseParser {
        ResponseParser {
            state: State::Head,
            status: 0,
            close: false,
            head_only,
            line_len: 0,
        }
    }

    /// Back to the start (a new connection).
    pub fn reset(&mut self) {
        self.state = State::Head;
        self.line_len = 0;
    }

    /// True while a close-delimited body is being read: EOF ends it.
    pub fn reading_until_close(&self) -> bool {
        self.state == State::UntilClose
    }

    /// Ends a close-delimited response at EOF.
    pub fn finish_at_eof(&mut self) -> Option<Done> {
        if self.state == State::UntilClose {
            self.state = State::Head;
            Some(Done {
                status: self.status,
                close: true,
            })
        } else {
            None
        }
    }

    /// Consumes from `buf`. Returns bytes consumed and a response if one ended;
    /// call again with the rest while it returns one. `Ok((n, None))` means all
    /// of `buf[..n]` was used and more input is needed (for a head, `n` is 0
    /// until the head is complete: keep the bytes).
    pub fn advance(&mut self, buf: &[u8]) -> Result<(usize, Option<Done>), ParseError> {
        let mut pos = 0;
        loop {
            let rest = &buf[pos..];
            match self.state {
                State::Head => {
                    if rest.is_empty() {
                        return Ok((pos, None));
                    }
                    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
                    let mut resp = httparse::Response::new(&mut headers);
                    let n = match resp.parse(rest) {
                        Ok(httparse::Status::Complete(n)) => n,
                        Ok(httparse::Status::Partial) => {
                            if rest.len() > MAX_HEAD_BYTES {
                                return Err(ParseError::HeadTooLarge);
                            }
                            return Ok((pos, None));
                        }
                        Err(_) => return Err(ParseError::BadHead),
                    };
                    let status = resp.code.unwrap_or(0);
                    let mut close = resp.version == Some(0);
                    let mut length = None;
                    let mut chunked = false;
                    for h in resp.headers.iter() {
                        if h.name.eq_ignore_ascii_case("content-length") {
                            let v = std::str::from_utf8(h.value)
                                .ok()
                                .and_then(|s| s.trim().parse::<u64>().ok());
                            match (v, length) {
                                (None, _) => return Err(ParseError::BadLength),
                                (Some(a), Some(b)) if a != b => return Err(ParseError::BadLength),
                                (Some(a), _) => length = Some(a),
                            }
                        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
                            chunked = h
                                .value
                                .rsplit(|&b| b == b',')
                                .next()
                                .is_some_and(|v| trim(v).eq_ignore_ascii_case(b"chunked"));
                        } else if h.name.eq_ignore_ascii_case("connection") {
                            for tok in h.value.split(|&b| b == b',') {
                                let tok = trim(tok);
                                if tok.eq_ignore_ascii_case(b"close") {
                                    close = true;
                                } else if tok.eq_ignore_ascii_case(b"keep-alive") {
                                    close = false;
                                }
                            }
                        }
                    }
                    pos += n;
                    if (100..200).contains(&status) {
                        if status == 101 {
                            return Err(ParseError::BadHead);
                        }
                        continue; // interim response: the final one follows
                    }
                    self.status = status;
                    self.close = close;
                    let no_body = self.head_only || status == 204 || status == 304;
                    if no_body {
                        return Ok((pos, Some(Done { status, close })));
                    }
                    if chunked {
                        self.state = State::ChunkSize;
                        self.line_len = 0;
                    } else if let Some(len) = length {
                        if len == 0 {
                            return Ok((pos, Some(Done { status, close })));
                        }
                        self.state = State::Body(len);
                    } else {
                        self.close = true;
                        self.state = State::UntilClose;
                    }
                }
                State::Body(left) => {
                    let take = left.min(rest.len() as u64);
                    pos += take as usize;
                    if take == left {
                        self.state = State::Head;
                        return Ok((pos, Some(self.done())));
                    }
                    self.state = State::Body(left - take);
                    return Ok((pos, None));
                }
                State::UntilClose => return Ok((buf.len(), None)),
                State::ChunkSize => {
                    let Some(nl) = rest.iter().position(|&b| b == b'\n') else {
                        self.line_len += rest.len();
                        if self.line_len > 4096 {
                            return Err(ParseError::BadChunk);
                        }
                        // Keep the partial size line: consume nothing of it.
                        return Ok((pos, None));
                    };
                    let line = &rest[..nl];
                    let line = line.strip_suffix(b"\r").unwrap_or(line);
                    let hex = line.split(|&b| b == b';').next().unwrap_or(b"");
                    let hex = trim(hex);
                    if hex.is_empty() || hex.len() > 15 {
                        return Err(ParseError::BadChunk);
                    }
                    let mut size = 0u64;
                    for &b in hex {
                        let d = (b as char).to_digit(16).ok_or(ParseError::BadChunk)?;
                        size = size * 16 + d as u64;
                    }
                    pos += nl + 1;
                    self.line_len = 0;
                    self.state = if size == 0 {
                        State::Trailer
                    } else {
                        State::ChunkData(size)
                    };
                }
                State::ChunkData(left) => {
                    let take = left.min(rest.len() as u64);
                    pos += take as usize;
                    if take < left {
                        self.state = State::ChunkData(left - take);
                        return Ok((pos, None));
                    }
                    self.state = State::ChunkDataEnd;
                }
                State::ChunkDataEnd => {
                    let Some(nl) = rest.iter().position(|&b| b == b'\n') else {
                        if rest.len() > 2 {
                            return Err(ParseError::BadChunk);
                        }
                        return Ok((pos, None));
                    };
                    if nl > 1 || (nl == 1 && rest[0] != b'\r') {
                        return Err(ParseError::BadChunk);
                    }
                    pos += nl + 1;
                    self.state = State::ChunkSize;
                }
                State::Trailer => {
                    let Some(nl) = rest.iter().position(|&b| b == b'\n') else {
                        self.line_len += rest.len();
                        if self.line_len > MAX_HEAD_BYTES {
                            return Err(ParseError::HeadTooLarge);
                        }
                        return Ok((pos, None));
                    };
                    let empty = nl == 0 || (nl == 1 && rest[0] == b'\r');
                    pos += nl + 1;
                    self.line_len = 0;
                    if empty {
                        self.state = State::Head;
                        return Ok((pos, Some(self.done())));
                    }
                }
            }
        }
    }

    fn done(&self) -> Done {
        Done {
            status: self.status,
            close: self.close,
        }
    }
}

fn trim(mut v: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', r @ ..] = v {
        v = r;
    }
    while let [r @ .., b' ' | b'\t'] = v {
        v = r;
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(p: &mut ResponseParser, input: &[u8], step: usize) -> Vec<Done> {
        // Feed `step` bytes at a time, keeping unconsumed bytes as a socket loop would.
        let mut out = Vec::new();
        let mut buf: Vec<u8> = Vec::new();
        for chunk in input.chunks(step) {
            buf.extend_from_slice(chunk);
            let mut pos = 0;
            loop {
                let (n, done) = p.advance(&buf[pos..]).unwrap();
                pos += n;
                match done {
                    Some(d) => out.push(d),
                    None => break,
                }
            }
            buf.drain(..pos);
        }
        out
    }

    #[test]
    fn pipelined_responses_end_in_order_whatever_the_read_sizes() {
        let input = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhelloHTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 404 Not Found\r\nTransfer-Encoding: chunked\r\n\r\n3;x=y\r\nabc\r\n0\r\nT: 1\r\n\r\nHTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n";
        for step in [1, 2, 7, 1000] {
            let mut p = ResponseParser::new(false);
            let got = all(&mut p, input, step);
            assert_eq!(
                got,
                vec![
                    Done {
                        status: 200,
                        close: false
                    },
                    Done {
                        status: 404,
                        close: false
                    },
                    Done {
                        status: 204,
                        close: true
                    }
                ],
                "step {step}"
            );
        }
    }

    #[test]
    fn garbage_and_conflicting_lengths_are_parse_errors() {
        let mut p = ResponseParser::new(false);
        assert_eq!(
            p.advance(b"garbage\r\n\r\n").unwrap_err(),
            ParseError::BadHead
        );
        let mut p = ResponseParser::new(false);
        let r = p.advance(b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n");
        assert_eq!(r.unwrap_err(), ParseError::BadLength);
        let mut p = ResponseParser::new(false);
        let r = p.advance(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n");
        assert_eq!(r.unwrap_err(), ParseError::BadChunk);
    }

    #[test]
    fn body_without_length_ends_at_eof() {
        let mut p = ResponseParser::new(false);
        let (n, d) = p.advance(b"HTTP/1.0 200 OK\r\n\r\nabc").unwrap();
        assert_eq!((n, d), (22, None));
        assert!(p.reading_until_close());
        assert_eq!(
            p.finish_at_eof(),
            Some(Done {
                status: 200,
                close: true
            })
        );
    }

    #[test]
    fn head_responses_carry_no_body() {
        let mut p = ResponseParser::new(true);
        let (_, d) = p
            .advance(b"HTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\n")
            .unwrap();
        assert_eq!(
            d,
            Some(Done {
                status: 200,
                close: false
            })
        );
    }
}
