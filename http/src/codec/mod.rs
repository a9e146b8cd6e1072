//! The HTTP/1.1 codec: request heads and chunked bodies.
//!
//! Parsing and framing are separate from the connection loop so each can be
//! tested and fuzzed alone. Nothing here does I/O or allocates: the head
//! parser fills a caller's header array and reports offsets into the
//! caller's buffer; the chunked decoder is a small state machine fed slices.

//!
//! The codec stands alone: it knows HTTP/1.1 and nothing of the gate's
//! policy. Its bounds (header lines, head bytes, request line) are the
//! caller's, passed in ([`HeadBounds`] and the header array's length).
//!
//! Modules: `head` (request heads and their framing), `scan` (the plain
//! head read in one pass, before httparse), `bytes` (the byte rules of a
//! head's parts: a `Host` value's, and the connection's last valid one),
//! `h3` (HTTP/3's frames and QPACK without a dynamic table), `fields` (a
//! head that arrived as an HTTP/2 or HTTP/3 stream's fields, read for
//! the same facts), `listed` (the names a `Connection` field lists),
//! `chunked` (the chunked body decoder), `proxyproto`
//! (the PROXY protocol header read at accept), `accept` (whether an
//! `Accept` value asks for HTML), `websocket` (the frames a client sends
//! through a tunnel, read from their headers).

pub mod accept;
pub mod bytes;
pub mod chunked;
pub mod fields;
pub mod h3;
pub mod head;
pub mod listed;
pub mod proxyproto;
pub mod scan;
pub mod websocket;

pub use bytes::KnownHost;
pub use chunked::{ChunkError, ChunkedDecoder, Step};
pub use fields::{fields_head, FieldsLayout};
pub use head::{
    header_buf, parse_head, parse_head_known, BodyFraming, HeadBounds, HeadError, HeaderBuf,
    Method, ParsedHead,
};
