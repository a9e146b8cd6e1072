//! Content negotiation as far as answers need it: whether a client asked
//! for HTML, which picks an error page's HTML or text form.

/// Whether an `Accept` value includes `text/html` (any case). O(n), no
/// allocation.
#[inline]
pub fn accepts_html(accept: &[u8]) -> bool {
    accept
        .windows(9)
        .any(|w| w.eq_ignore_ascii_case(b"text/html"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_detection_is_case_insensitive() {
        assert!(accepts_html(b"text/html,application/xhtml+xml"));
        assert!(accepts_html(b"TEXT/HTML"));
        assert!(!accepts_html(b"*/*"));
        assert!(!accepts_html(b"application/json"));
    }
}
