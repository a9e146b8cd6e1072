//! Entry points for the fuzz targets (`fuzz/`): pieces of the HTTP/2 front
//! that are otherwise private to the connection loop, driven in memory.
//! The server never calls these; they wrap the code it runs, unchanged.

/// The HTTP/1.1 head an HTTP/2 request is served as (what a stream's
/// pipeline parses).
pub fn h2_request_head(parts: &http::request::Parts, chunked: bool, out: &mut Vec<u8>) {
    super::h2::request_head(parts, chunked, out);
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
