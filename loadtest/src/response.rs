//! Incremental HTTP/1.1 response framing on the project's own parser: the
//! head by `gapura_http::upstream::response::parse_response` (the framing
//! rules of RFC 9112 §6.3 the proxy applies to its upstreams), then the body
//! by Content-Length, by `gapura_http::codec::chunked::ChunkedDecoder`, or
//! until close.
//!
//! This module is only the glue that makes those two pieces incremental
//! over a socket's reads: it skips interim (1xx) heads, keeps the body's
//! progress between calls, and says how much of each read it consumed and
//! whether a response ended, so one read can end many pipelined responses.
//! It never copies body bytes and never allocates: it only counts them.

use gapura_http::codec::chunked::{ChunkError, ChunkedDecoder};
use gapura_http::upstream::response::{
    parse_response, resp_header_buf, RespFraming, RespHead, RespParse, MAX_RESPONSE_HEAD_BYTES,
};

/// Largest response head accepted (the proxy's own limit for upstream heads).
pub const MAX_HEAD_BYTES: usize = MAX_RESPONSE_HEAD_BYTES;

/// Where the parser is in the current response.
#[derive(Clone, Debug)]
enum State {
    /// Waiting for a (final or interim) head.
    Head,
    /// A Content-Length body with this many bytes left.
    Length(u64),
    /// A chunked body, part way through.
    Chunked(ChunkedDecoder),
    /// A body delimited by the server closing the connection.
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
    /// A head that does not parse, breaks the framing rules (conflicting
    /// lengths, Content-Length with Transfer-Encoding, a status outside
    /// 1xx to 5xx) or switches protocols (101).
    BadHead,
    /// A head still unfinished after [`MAX_HEAD_BYTES`].
    HeadTooLarge,
    /// Chunked framing the decoder refused.
    BadChunk(ChunkError),
}

/// What one state's step did with the bytes it was given.
enum Progress {
    /// Consumed this many bytes; the response goes on in the next state.
    Moved(usize),
    /// Consumed this many bytes (possibly none) and needs more input.
    NeedMore(usize),
    /// Consumed this many bytes and the response ended.
    Ended(usize),
}

pub struct ResponseParser {
    state: State,
    status: u16,
    close: bool,
    head_only: bool,
}

impl ResponseParser {
    /// `head_only`: the requests are HEAD, so responses carry no body.
    pub fn new(head_only: bool) -> ResponseParser {
        ResponseParser {
            state: State::Head,
            status: 0,
            close: false,
            head_only,
        }
    }

    /// Back to the start (a new connection).
    pub fn reset(&mut self) {
        self.state = State::Head;
    }

    /// True while a close-delimited body is being read: EOF ends it.
    pub fn reading_until_close(&self) -> bool {
        matches!(self.state, State::UntilClose)
    }

    /// Ends a close-delimited response at EOF.
    pub fn finish_at_eof(&mut self) -> Option<Done> {
        if !self.reading_until_close() {
            return None;
        }
        self.state = State::Head;
        Some(Done {
            status: self.status,
            close: true,
        })
    }

    /// Consumes from `buf`. Returns bytes consumed and a response if one ended;
    /// call again with the rest while it returns one. `Ok((n, None))` means all
    /// of `buf[..n]` was used and more input is needed (for a head, `n` is 0
    /// until the head is complete: keep the bytes).
    pub fn advance(&mut self, buf: &[u8]) -> Result<(usize, Option<Done>), ParseError> {
        let mut pos = 0;
        loop {
            let rest = &buf[pos..];
            let progress = match &mut self.state {
                State::Head => self.head(rest)?,
                State::Length(left) => length_body(left, rest),
                State::Chunked(decoder) => chunked_body(decoder, rest)?,
                State::UntilClose => Progress::NeedMore(rest.len()),
            };
            match progress {
                Progress::Moved(n) => pos += n,
                Progress::NeedMore(n) => return Ok((pos + n, None)),
                Progress::Ended(n) => {
                    self.state = State::Head;
                    return Ok((pos + n, Some(self.done())));
                }
            }
        }
    }

    /// Parses a head at the start of `rest`: skips an interim one, ends a
    /// response without a body, or enters the body's state.
    fn head(&mut self, rest: &[u8]) -> Result<Progress, ParseError> {
        if rest.is_empty() {
            return Ok(Progress::NeedMore(0));
        }
        let mut lines = resp_header_buf();
        let head = match parse_response(rest, &mut lines, self.head_only) {
            RespParse::Complete(head, _, _) => head,
            RespParse::Partial => return Ok(Progress::NeedMore(0)),
            RespParse::Malformed => return Err(head_error(rest)),
        };
        if head.status / 100 == 1 {
            if head.status == 101 {
                return Err(ParseError::BadHead);
            }
            return Ok(Progress::Moved(head.head_len)); // the final head follows
        }
        Ok(self.begin_body(&head))
    }

    /// Takes a final head's status and persistence, and its body's framing.
    fn begin_body(&mut self, head: &RespHead) -> Progress {
        self.status = head.status;
        self.close = !head.keep_alive;
        self.state = match head.framing {
            RespFraming::None | RespFraming::Length(0) => return Progress::Ended(head.head_len),
            RespFraming::Length(n) => State::Length(n),
            RespFraming::Chunked => State::Chunked(ChunkedDecoder::new()),
            RespFraming::Close => State::UntilClose,
        };
        Progress::Moved(head.head_len)
    }

    fn done(&self) -> Done {
        Done {
            status: self.status,
            close: self.close,
        }
    }
}

/// Counts a Content-Length body's bytes off `rest`.
fn length_body(left: &mut u64, rest: &[u8]) -> Progress {
    let take = (*left).min(rest.len() as u64);
    *left -= take;
    if *left == 0 {
        Progress::Ended(take as usize)
    } else {
        Progress::NeedMore(take as usize)
    }
}

/// Runs the chunked decoder over `rest` until the body ends or the input does.
fn chunked_body(decoder: &mut ChunkedDecoder, rest: &[u8]) -> Result<Progress, ParseError> {
    let mut used = 0;
    loop {
        let step = decoder.step(&rest[used..]).map_err(ParseError::BadChunk)?;
        used += step.consumed;
        if step.done {
            return Ok(Progress::Ended(used));
        }
        if used == rest.len() || step.consumed == 0 {
            return Ok(Progress::NeedMore(used));
        }
    }
}

/// Tells a head that never ended within the limit from one that is wrong.
fn head_error(rest: &[u8]) -> ParseError {
    if rest.len() >= MAX_HEAD_BYTES {
        let mut lines = resp_header_buf();
        let within = &rest[..MAX_HEAD_BYTES - 1];
        if parse_response(within, &mut lines, false) == RespParse::Partial {
            return ParseError::HeadTooLarge;
        }
    }
    ParseError::BadHead
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `pieces` one after another as a socket loop would: unconsumed
    /// bytes are kept and offered again with the next piece. Returns the
    /// responses that ended and the bytes left unconsumed at the end.
    fn feed(p: &mut ResponseParser, pieces: &[&[u8]]) -> Result<(Vec<Done>, usize), ParseError> {
        let mut out = Vec::new();
        let mut buf: Vec<u8> = Vec::new();
        for piece in pieces {
            buf.extend_from_slice(piece);
            let mut pos = 0;
            loop {
                let (n, done) = p.advance(&buf[pos..])?;
                pos += n;
                match done {
                    Some(d) => out.push(d),
                    None => break,
                }
            }
            buf.drain(..pos);
        }
        Ok((out, buf.len()))
    }

    /// Every way to cut `input` in two, and every fixed read size.
    fn splits(input: &[u8]) -> Vec<Vec<&[u8]>> {
        let mut all: Vec<Vec<&[u8]>> = (0..=input.len())
            .map(|k| vec![&input[..k], &input[k..]])
            .collect();
        all.extend((1..=input.len()).map(|step| input.chunks(step).collect()));
        all
    }

    fn done(status: u16, close: bool) -> Done {
        Done { status, close }
    }

    const PIPELINED: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello\
HTTP/1.1 100 Continue\r\n\r\n\
HTTP/1.1 404 Not Found\r\nTransfer-Encoding: chunked\r\n\r\n3;x=y\r\nabc\r\n0\r\nT: 1\r\n\r\n\
HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n\
HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n";

    #[test]
    fn pipelined_responses_end_in_order_at_every_split() {
        let want = vec![
            done(200, false),
            done(404, false),
            done(200, false),
            done(204, true),
        ];
        for pieces in splits(PIPELINED) {
            let mut p = ResponseParser::new(false);
            let got = feed(&mut p, &pieces).unwrap();
            assert_eq!(got, (want.clone(), 0), "{:?}", pieces.len());
        }
    }

    #[test]
    fn chunked_body_with_trailers_ends_exactly_at_every_split() {
        let input = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n\
5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nX-T: 1\r\nY-T: 2\r\n\r\n\
HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok\
HTTP/1.1 503 Busy\r\nContent-Length: 1\r\n\r\n";
        for pieces in splits(input) {
            let mut p = ResponseParser::new(false);
            let got = feed(&mut p, &pieces).unwrap();
            // The third response's body has not arrived: its head was taken.
            assert_eq!(got, (vec![done(200, false), done(201, false)], 0));
            assert_eq!(p.advance(b"x").unwrap(), (1, Some(done(503, false))));
        }
    }

    #[test]
    fn one_read_reports_each_response_and_what_it_consumed() {
        let mut p = ResponseParser::new(false);
        assert_eq!(p.advance(PIPELINED).unwrap(), (43, Some(done(200, false))));
        let rest = &PIPELINED[43..];
        // The interim 100 is skipped inside the same call.
        assert_eq!(p.advance(rest).unwrap(), (102, Some(done(404, false))));
        let rest = &rest[102..];
        assert_eq!(p.advance(rest).unwrap(), (38, Some(done(200, false))));
        let rest = &rest[38..];
        assert_eq!(
            p.advance(rest).unwrap(),
            (rest.len(), Some(done(204, true)))
        );
        // A partial head consumes nothing: the caller keeps the bytes.
        assert_eq!(
            p.advance(b"HTTP/1.1 200 OK\r\nContent-").unwrap(),
            (0, None)
        );
        // A body part way consumes all it was given.
        assert_eq!(
            p.advance(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nabc")
                .unwrap(),
            (41, None)
        );
        assert_eq!(p.advance(b"defghiZ").unwrap(), (6, Some(done(200, false))));
    }

    #[test]
    fn body_without_length_ends_at_eof() {
        for input in [
            &b"HTTP/1.0 200 OK\r\n\r\nabc"[..],
            b"HTTP/1.1 200 OK\r\n\r\nabc",
            b"HTTP/1.1 200 OK\r\nConnection: keep-alive\r\n\r\nabc",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\nabc",
        ] {
            for pieces in splits(input) {
                let mut p = ResponseParser::new(false);
                assert_eq!(feed(&mut p, &pieces).unwrap(), (vec![], 0));
                assert!(p.reading_until_close());
                assert_eq!(p.finish_at_eof(), Some(done(200, true)));
                assert!(!p.reading_until_close());
                assert_eq!(p.finish_at_eof(), None);
            }
        }
        // EOF inside a Content-Length body or a head ends nothing.
        let mut p = ResponseParser::new(false);
        let input = b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nab";
        assert_eq!(p.advance(input).unwrap(), (input.len(), None));
        assert_eq!(p.finish_at_eof(), None);
        let mut p = ResponseParser::new(false);
        assert_eq!(p.advance(b"HTTP/1.1 200").unwrap(), (0, None));
        assert_eq!(p.finish_at_eof(), None);
    }

    #[test]
    fn persistence_follows_the_version_and_connection() {
        for (input, close) in [
            (&b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"[..], false),
            (
                b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n",
                true,
            ),
            (
                b"HTTP/1.1 200 OK\r\nConnection: x, Close\r\nContent-Length: 0\r\n\r\n",
                true,
            ),
            (b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n", true),
            (
                b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n",
                false,
            ),
        ] {
            let mut p = ResponseParser::new(false);
            assert_eq!(
                p.advance(input).unwrap(),
                (input.len(), Some(done(200, close))),
                "{:?}",
                String::from_utf8_lossy(input)
            );
        }
    }

    #[test]
    fn head_204_and_304_responses_carry_no_body() {
        let mut p = ResponseParser::new(true);
        let input = b"HTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\n\
HTTP/1.1 404 Not Found\r\nTransfer-Encoding: chunked\r\n\r\n\
HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n\
HTTP/1.0 200 OK\r\n\r\n";
        let got = feed(&mut p, &[input]).unwrap();
        assert_eq!(
            got,
            (vec![done(200, false), done(404, false), done(200, true)], 0)
        );
        for status in ["204 No Content", "304 Not Modified"] {
            let mut p = ResponseParser::new(false);
            let input = format!("HTTP/1.1 {status}\r\nContent-Length: 7\r\n\r\n");
            let (n, d) = p.advance(input.as_bytes()).unwrap();
            assert_eq!(n, input.len());
            assert_eq!(d.map(|d| d.close), Some(false));
        }
    }

    #[test]
    fn reset_starts_a_new_connection_at_a_head() {
        let mut p = ResponseParser::new(false);
        let input = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab";
        assert_eq!(p.advance(input).unwrap(), (input.len(), None));
        p.reset();
        let input = b"HTTP/1.1 302 Found\r\nContent-Length: 0\r\n\r\n";
        assert_eq!(
            p.advance(input).unwrap(),
            (input.len(), Some(done(302, false)))
        );
    }

    #[test]
    fn malformed_responses_are_parse_errors() {
        for (input, want) in [
            (&b"garbage\r\n\r\n"[..], ParseError::BadHead),
            (
                b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
                ParseError::BadHead,
            ),
            (
                b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
                ParseError::BadHead,
            ),
            (
                b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
                ParseError::BadHead,
            ),
            (b"HTTP/1.1 600 Nope\r\n\r\n", ParseError::BadHead),
            (
                b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\n\r\n",
                ParseError::BadHead,
            ),
            (
                b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\nnot a head\r\n\r\n",
                ParseError::BadHead,
            ),
            (
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
                ParseError::BadChunk(ChunkError::BadSize),
            ),
            (
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\nabc\r\n",
                ParseError::BadChunk(ChunkError::BadLineEnding),
            ),
            (
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcd\r\n",
                ParseError::BadChunk(ChunkError::BadLineEnding),
            ),
            (
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n folded\r\n\r\n",
                ParseError::BadChunk(ChunkError::BadTrailer),
            ),
        ] {
            for pieces in splits(input) {
                let mut p = ResponseParser::new(false);
                assert_eq!(
                    feed(&mut p, &pieces).unwrap_err(),
                    want,
                    "{:?}",
                    String::from_utf8_lossy(input)
                );
            }
        }
    }

    #[test]
    fn a_head_past_the_limit_is_too_large() {
        // Few headers (under the count limit), one of them very long.
        let mut big = b"HTTP/1.1 200 OK\r\nX-Filler: ".to_vec();
        big.resize(MAX_HEAD_BYTES + 10, b'a');
        let mut p = ResponseParser::new(false);
        assert_eq!(p.advance(&big).unwrap_err(), ParseError::HeadTooLarge);
        // Just under the limit and unfinished: more input is needed.
        let mut p = ResponseParser::new(false);
        assert_eq!(p.advance(&big[..MAX_HEAD_BYTES - 1]).unwrap(), (0, None));
    }
}
