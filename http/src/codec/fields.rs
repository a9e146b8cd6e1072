//! A request head that arrived as fields (an HTTP/2 stream's
//! pseudo-headers and field lines) rather than as text: read for the same
//! facts as a parsed head (the target's form, Host, the body's framing,
//! `Expect`, the counts the limits judge), with the same refusals, and
//! never written or parsed as an HTTP/1.1 head.
//!
//! The values a [`ParsedHead`](super::head::ParsedHead)'s ranges point to
//! lie in the caller's buffer, side by side: the method, one space and the
//! target (what the upstream request line and the access log read), then
//! whatever else the lines need to point into the buffer (the authority as
//! the Host line's value, the cookies joined). The other lines point into
//! the stream's own fields.

use super::head::{complete, HeadBounds, HeadError, HeaderBuf, Method, Parse};

/// Bytes a request line adds around its method and target
/// (` HTTP/1.1\r\n`): the head's size is judged as the same request's
/// HTTP/1.1 head would be.
const LINE_BYTES: usize = 11;
/// Bytes a header line adds around its name and value (`: `, `\r\n`).
const FIELD_BYTES: usize = 4;

/// Where a fields head's values begin in its buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FieldsLayout {
    /// Bytes of the method (from the buffer's start; a space follows).
    pub method_len: usize,
    /// Bytes of the target (after the method's space).
    pub target_len: usize,
    /// Bytes of the head in the buffer: method, space, target and every
    /// value the lines point to there. The body's bytes follow.
    pub head_len: usize,
}

/// The head laid out in `buf` by `layout`, its lines being `lines` (each
/// pointing into `buf` or into the fields). The Host line, when there is
/// one, must be the first and point into `buf`. More lines than `N`, or a
/// head larger than the bounds allow as text, is 431.
pub fn fields_head<'h, 'b, const N: usize>(
    buf: &'b [u8],
    layout: FieldsLayout,
    lines: impl Iterator<Item = httparse::Header<'b>>,
    headers: &'h mut HeaderBuf<'b, N>,
    bounds: &HeadBounds,
) -> Parse<'h, 'b> {
    if buf.len() < layout.head_len {
        return Parse::Partial;
    }
    let target_start = layout.method_len + 1;
    let target_end = target_start + layout.target_len;
    if target_end > layout.head_len {
        return Parse::Error(HeadError::Malformed("malformed request"));
    }
    if std::str::from_utf8(&buf[..layout.method_len]).is_err() {
        return Parse::Error(HeadError::Malformed("invalid token"));
    }
    let method = Method::from_bytes(&buf[..layout.method_len]);
    let Some(lines) = fill_lines(headers, lines) else {
        return Parse::Error(HeadError::TooLarge);
    };
    let text_bytes = target_end
        + LINE_BYTES
        + lines
            .iter()
            .map(|h| h.name.len() + h.value.len() + FIELD_BYTES)
            .sum::<usize>()
        + 2;
    if text_bytes > bounds.max_head_bytes {
        return Parse::Error(HeadError::TooLarge);
    }
    complete(
        buf,
        method,
        &buf[target_start..target_end],
        1,
        lines,
        layout.head_len,
        &mut super::KnownHost::default(),
    )
}

/// Writes `lines` into the header array in order: the lines written, or
/// `None` when there are more than `N`.
fn fill_lines<'h, 'b, const N: usize>(
    headers: &'h mut HeaderBuf<'b, N>,
    lines: impl Iterator<Item = httparse::Header<'b>>,
) -> Option<&'h [httparse::Header<'b>]> {
    let mut n = 0;
    for line in lines {
        let slot = headers.get_mut(n)?;
        slot.write(line);
        n += 1;
    }
    // SAFETY: the first `n` elements were written above, in order, and the
    // array outlives the returned slice ('h).
    Some(unsafe { std::slice::from_raw_parts(headers.as_ptr().cast(), n) })
}

/// Connection-specific fields, which HTTP/2 and HTTP/3 forbid (RFC 9113 §8.2.2,
/// RFC 9114 §4.2).
pub const CONNECTION_SPECIFIC: [&str; 6] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "upgrade",
    "te",
];

/// Whether `name` is one of [`CONNECTION_SPECIFIC`].
pub fn connection_specific(name: &[u8]) -> bool {
    CONNECTION_SPECIFIC
        .iter()
        .any(|n| n.as_bytes().eq_ignore_ascii_case(name))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::head::{header_buf, BodyFraming, Method};

    const BOUNDS: HeadBounds = HeadBounds {
        max_head_bytes: 1024,
        max_request_line_bytes: 512,
    };

    fn line<'b>(name: &'b str, value: &'b [u8]) -> httparse::Header<'b> {
        httparse::Header { name, value }
    }

    /// `METHOD SP target` then `authority` in one buffer, and its layout.
    fn laid(method: &str, target: &str, authority: &str) -> (Vec<u8>, FieldsLayout) {
        let mut buf = Vec::new();
        buf.extend_from_slice(method.as_bytes());
        buf.push(b' ');
        buf.extend_from_slice(target.as_bytes());
        buf.extend_from_slice(authority.as_bytes());
        let layout = FieldsLayout {
            method_len: method.len(),
            target_len: target.len(),
            head_len: buf.len(),
        };
        (buf, layout)
    }

    #[test]
    fn a_get_has_its_target_path_and_host_in_the_buffer() {
        let (buf, layout) = laid("GET", "/a?b=1", "app.test");
        let host = &buf[layout.head_len - 8..];
        let fields = [line("host", host), line("accept", b"text/html")];
        let mut headers = header_buf::<8>();
        let Parse::Complete(head, lines) =
            fields_head(&buf, layout, fields.into_iter(), &mut headers, &BOUNDS)
        else {
            panic!("not complete");
        };
        assert_eq!(head.method, Method::Get);
        assert_eq!(&buf[head.target.clone()], b"/a?b=1");
        assert_eq!(&buf[head.path.clone()], b"/a?b=1");
        assert_eq!(head.host.map(|h| &buf[h]), Some(&b"app.test"[..]));
        assert_eq!(head.framing, BodyFraming::None);
        assert!(head.wants_html && !head.close && !head.upgrade);
        assert_eq!(head.version, 1);
        assert_eq!((head.header_count, head.header_bytes), (2, 4 + 8 + 6 + 9));
        assert_eq!(head.head_len, buf.len());
        assert_eq!(lines.len(), 2);
    }

    #[test]
    fn the_body_framing_comes_from_the_lines() {
        let (buf, layout) = laid("POST", "/up", "a");
        let host = &buf[layout.head_len - 1..];
        let mut headers = header_buf::<8>();
        let fields = [line("host", host), line("content-length", b"12")];
        let Parse::Complete(head, _) =
            fields_head(&buf, layout, fields.into_iter(), &mut headers, &BOUNDS)
        else {
            panic!("not complete");
        };
        assert_eq!(head.framing, BodyFraming::Length(12));
        let mut headers = header_buf::<8>();
        let fields = [line("host", host), line("transfer-encoding", b"chunked")];
        let Parse::Complete(head, _) =
            fields_head(&buf, layout, fields.into_iter(), &mut headers, &BOUNDS)
        else {
            panic!("not complete");
        };
        assert_eq!(head.framing, BodyFraming::Chunked);
    }

    #[test]
    fn refusals_are_those_of_a_parsed_head() {
        let refused = |method: &str, target: &str, extra: &[(&str, &[u8])]| {
            let (buf, layout) = laid(method, target, "a");
            let host = &buf[layout.head_len - 1..];
            let mut fields = vec![line("host", host)];
            fields.extend(extra.iter().map(|(n, v)| line(n, v)));
            let mut headers = header_buf::<4>();
            match fields_head(&buf, layout, fields.into_iter(), &mut headers, &BOUNDS) {
                Parse::Error(e) => Some(e),
                _ => None,
            }
        };
        let malformed = |why| Some(HeadError::Malformed(why));
        assert_eq!(
            refused("CONNECT", "a:443", &[]),
            malformed("CONNECT is not served")
        );
        assert_eq!(
            refused("GET", "/#f", &[]),
            malformed("a fragment in the request target")
        );
        assert_eq!(
            refused("GET", "/", &[("host", b"b")]),
            malformed("duplicate Host")
        );
        assert_eq!(
            refused(
                "POST",
                "/",
                &[("content-length", b"1"), ("content-length", b"2")]
            ),
            malformed("differing Content-Length")
        );
        // More lines than the array holds, or more bytes than the head may.
        let many: Vec<(&str, &[u8])> = vec![("x", b"1"); 4];
        assert_eq!(refused("GET", "/", &many), Some(HeadError::TooLarge));
        let big = vec![b'v'; 1000];
        assert_eq!(
            refused("GET", "/", &[("x", &big)]),
            Some(HeadError::TooLarge)
        );
    }

    #[test]
    fn no_host_is_refused_and_a_short_buffer_waits() {
        let (buf, layout) = laid("GET", "/", "");
        let mut headers = header_buf::<4>();
        assert!(matches!(
            fields_head(&buf, layout, std::iter::empty(), &mut headers, &BOUNDS),
            Parse::Error(HeadError::Malformed("missing Host"))
        ));
        let mut headers = header_buf::<4>();
        assert!(matches!(
            fields_head(&buf[..2], layout, std::iter::empty(), &mut headers, &BOUNDS),
            Parse::Partial
        ));
    }
}
