//! Entry points for the fuzz targets (`fuzz/`): pieces of the HTTP/2 front
//! that are otherwise private to the connection loop, driven in memory.
//! The server never calls these; they wrap the code it runs, unchanged.

/// What a stream's pipeline reads of an HTTP/2 request's head: the input
/// its values are laid out in (the head's ranges point into it), and the
/// head built from its fields with the server's bounds, or its refusal.
/// `chunked`: the request has a body without a length.
pub fn h2_head(
    parts: http::request::Parts,
    chunked: bool,
) -> (
    Vec<u8>,
    Result<crate::codec::ParsedHead, crate::codec::HeadError>,
) {
    use crate::codec::head::{header_buf, Parse};
    let mut input = Vec::new();
    let head = super::muxstream::StreamHead::lay_out(parts, chunked, &mut input);
    let mut lines = header_buf::<{ super::bounds::REQUEST_LINES }>();
    let parsed = match head.head(&input, &mut lines, &super::bounds::HEAD_BOUNDS) {
        Parse::Complete(h, _) => Ok(h),
        Parse::Error(e) => Err(e),
        Parse::Partial => panic!("a stream's head is partial with its whole input"),
    };
    (input, parsed)
}

/// The frame watch below the HTTP/2 codec, without a transport.
pub struct FrameScan(super::h2scan::Scanned<()>);

impl FrameScan {
    /// `limit`: control frames per 10 s; the first 24 bytes are the preface.
    pub fn new(limit: u32) -> FrameScan {
        FrameScan(super::h2scan::Scanned::new((), limit))
    }

    /// Reads the connection's next bytes: where the frame past the budget
    /// begins in them, once it is seen.
    pub fn scan(&mut self, bytes: &[u8]) -> Option<usize> {
        self.0.scan(bytes)
    }

    /// The budget is spent.
    pub fn flooded(&self) -> bool {
        self.0.flooded.get()
    }
}
