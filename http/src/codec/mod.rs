//! The HTTP/1.1 codec: request heads and chunked bodies.
//!
//! Parsing and framing are separate from the connection loop so each can be
//! tested and fuzzed alone. Nothing here does I/O or allocates: the head
//! parser fills a caller's header array and reports offsets into the
//! caller's buffer; the chunked decoder is a small state machine fed slices.

pub mod chunked;
pub mod head;

pub use chunked::{ChunkError, ChunkedDecoder, Step};
pub use head::{header_buf, parse_head, BodyFraming, HeadError, HeaderBuf, Method, ParsedHead};
