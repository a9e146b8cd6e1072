//! Request limits: body size, header lines, header bytes, target length.
//!
//! Each host has a [`RequestLimits`] merged field by field from the layers of
//! the profile. The parser itself runs under the outer bounds below (the
//! largest any host may set, plus headroom) so that a host's own limit is
//! always answered by the gate with its precomputed page, never by a
//! transport error. What is counted: the raw request target in wire bytes;
//! header lines (a header sent twice is two); names plus values in bytes.

/// Built-in body limit: 1 MiB (nginx's `client_max_body_size`); a host
/// or route that takes more says so (`limits.max_body_bytes`).
pub const DEFAULT_MAX_BODY_BYTES: u64 = 1024 * 1024;
/// Built-in header line count.
pub const DEFAULT_MAX_HEADER_COUNT: u32 = 100;
/// Built-in header bytes (names plus values): 32 KiB.
pub const DEFAULT_MAX_HEADER_BYTES: u32 = 32 * 1024;
/// Built-in target length: 8 KiB.
pub const DEFAULT_MAX_URL_BYTES: u32 = 8 * 1024;

/// Largest body limit a profile may set: 1 TiB (0 means none).
pub const MAX_BODY_BYTES_BOUND: u64 = 1 << 40;
/// Bounds of the header line count.
pub const HEADER_COUNT_BOUNDS: (u32, u32) = (8, 128);
/// Bounds of the header bytes.
pub const HEADER_BYTES_BOUNDS: (u32, u32) = (1024, 64 * 1024);
/// Bounds of the target length.
pub const URL_BYTES_BOUNDS: (u32, u32) = (256, 16 * 1024);

/// Headroom the parser keeps above the largest host limit.
pub const OUTER_HEADROOM_BYTES: usize = 4 * 1024;
/// The parser's fixed header array: the largest line count a host may allow.
pub const OUTER_MAX_HEADERS: usize = HEADER_COUNT_BOUNDS.1 as usize;
/// The largest request head (request line plus header block) the parser reads
/// before answering 431: every header byte plus a target counted twice plus
/// per-line framing (": " and CRLF) and headroom.
pub const OUTER_MAX_HEAD_BYTES: usize = HEADER_BYTES_BOUNDS.1 as usize
    + 2 * URL_BYTES_BOUNDS.1 as usize
    + 4 * OUTER_MAX_HEADERS
    + OUTER_HEADROOM_BYTES;

/// One host's (or the defaults') request limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestLimits {
    /// 0 means no limit.
    pub max_body_bytes: u64,
    pub max_header_count: u32,
    pub max_header_bytes: u32,
    pub max_url_bytes: u32,
}

impl Default for RequestLimits {
    fn default() -> Self {
        RequestLimits {
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            max_header_count: DEFAULT_MAX_HEADER_COUNT,
            max_header_bytes: DEFAULT_MAX_HEADER_BYTES,
            max_url_bytes: DEFAULT_MAX_URL_BYTES,
        }
    }
}

/// Which limit refused a request; maps to 414, 431 or 413.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LimitRefusal {
    UrlTooLong,
    TooManyHeaders,
    HeadersTooLarge,
    BodyTooLarge,
}

impl RequestLimits {
    /// Checks the target and header sizes. O(1), no allocation.
    #[inline]
    pub fn check_head(
        &self,
        url_bytes: usize,
        header_count: usize,
        header_bytes: usize,
    ) -> Result<(), LimitRefusal> {
        if url_bytes > self.max_url_bytes as usize {
            return Err(LimitRefusal::UrlTooLong);
        }
        if header_count > self.max_header_count as usize {
            return Err(LimitRefusal::TooManyHeaders);
        }
        if header_bytes > self.max_header_bytes as usize {
            return Err(LimitRefusal::HeadersTooLarge);
        }
        Ok(())
    }

    /// Checks a declared body length. O(1).
    #[inline]
    pub fn check_declared_body(&self, content_length: u64) -> Result<(), LimitRefusal> {
        if self.body_allows(content_length) {
            Ok(())
        } else {
            Err(LimitRefusal::BodyTooLarge)
        }
    }

    /// Whether `bytes` of body so far are within the limit.
    #[inline]
    pub fn body_allows(&self, bytes: u64) -> bool {
        self.max_body_bytes == 0 || bytes <= self.max_body_bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtins_match_the_reference_table() {
        let l = RequestLimits::default();
        assert_eq!(l.max_body_bytes, 1_048_576);
        assert_eq!(l.max_header_count, 100);
        assert_eq!(l.max_header_bytes, 32_768);
        assert_eq!(l.max_url_bytes, 8_192);
    }

    #[test]
    fn each_limit_refuses_one_past_its_value() {
        let l = RequestLimits::default();
        assert_eq!(l.check_head(8192, 100, 32768), Ok(()));
        assert_eq!(l.check_head(8193, 1, 1), Err(LimitRefusal::UrlTooLong));
        assert_eq!(l.check_head(1, 101, 1), Err(LimitRefusal::TooManyHeaders));
        assert_eq!(
            l.check_head(1, 1, 32769),
            Err(LimitRefusal::HeadersTooLarge)
        );
        assert_eq!(l.check_declared_body(1_048_576), Ok(()));
        assert_eq!(
            l.check_declared_body(1_048_577),
            Err(LimitRefusal::BodyTooLarge)
        );
    }

    #[test]
    fn zero_body_limit_means_none() {
        let l = RequestLimits {
            max_body_bytes: 0,
            ..RequestLimits::default()
        };
        assert_eq!(l.check_declared_body(u64::MAX), Ok(()));
    }

    #[test]
    fn outer_head_bound_exceeds_every_host_limit() {
        assert!(
            OUTER_MAX_HEAD_BYTES
                > HEADER_BYTES_BOUNDS.1 as usize + URL_BYTES_BOUNDS.1 as usize + 4 * 128
        );
    }
}
