//! Where Gapura's own answers are written: [`Sink`], the one interface
//! every writer of a refusal, a page, a redirect or a host's answer writes
//! through, as parts (a status, fields, the end of the head, body bytes).
//!
//! HTTP/1.1 is `Vec<u8>`: each part is its bytes, appended; what was built
//! at compile time stays one copy (a head's status line and fixed lines
//! are written from their precomputed bytes). Another protocol (an HTTP/2
//! stream) keeps the parts as parts and writes its frames from them:
//! nothing is written as HTTP/1.1 text and read back. Every precomputed
//! head therefore carries both forms ([`Lines`]), built together once.

use http::{HeaderName, HeaderValue};

/// A field as HTTP/2 and what comes next send it.
pub type Field = (HeaderName, HeaderValue);

/// Header lines built once: their HTTP/1.1 bytes (each line ending in
/// CRLF; a head's begin with its status line) and the same lines as
/// fields.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Lines {
    h1: Box<[u8]>,
    fields: Box<[Field]>,
}

impl Lines {
    /// The lines of `pairs`, in order, after `status`'s status line when
    /// there is one. A pair that is no valid field (names and values from a
    /// profile are validated before they come here) is left out of both
    /// forms. Allocates (compile time only).
    pub fn new<N: AsRef<[u8]>, V: AsRef<[u8]>>(status: Option<u16>, pairs: &[(N, V)]) -> Lines {
        let mut h1 = Vec::with_capacity(128);
        if let Some(status) = status {
            h1.extend_from_slice(b"HTTP/1.1 ");
            h1.extend_from_slice(status.to_string().as_bytes());
            h1.push(b' ');
            h1.extend_from_slice(crate::answer::reason_phrase(status).as_bytes());
            h1.extend_from_slice(b"\r\n");
        }
        let mut fields = Vec::with_capacity(pairs.len());
        for (name, value) in pairs {
            let (name, value) = (name.as_ref(), value.as_ref());
            let (Ok(n), Ok(v)) = (HeaderName::from_bytes(name), HeaderValue::from_bytes(value))
            else {
                continue;
            };
            h1.extend_from_slice(name);
            h1.extend_from_slice(b": ");
            h1.extend_from_slice(value);
            h1.extend_from_slice(b"\r\n");
            fields.push((n, v));
        }
        Lines {
            h1: h1.into_boxed_slice(),
            fields: fields.into_boxed_slice(),
        }
    }

    /// A status line alone.
    pub fn status(status: u16) -> Lines {
        Lines::new::<&str, &str>(Some(status), &[])
    }

    /// The HTTP/1.1 bytes.
    #[inline]
    pub fn h1(&self) -> &[u8] {
        &self.h1
    }

    /// The fields.
    #[inline]
    pub fn fields(&self) -> &[Field] {
        &self.fields
    }

    pub fn is_empty(&self) -> bool {
        self.h1.is_empty()
    }
}

/// Where an answer is written, part by part, in this order: its head
/// ([`Sink::head`], then any of [`Sink::lines`], [`Sink::field`],
/// [`Sink::date`]), [`Sink::end`], then the body ([`Sink::body`]). Every
/// method is O(its bytes); the HTTP/1.1 one allocates nothing once its
/// buffer has the capacity.
pub trait Sink {
    /// The status and the lines built with it (`lines` begins with the
    /// status line).
    fn head(&mut self, status: u16, lines: &Lines);
    /// More lines built once.
    fn lines(&mut self, lines: &Lines);
    /// One field made for this answer: `h1` is its name as HTTP/1.1 writes
    /// it, `name` the same, and its value is `value`'s pieces joined.
    fn field(&mut self, h1: &[u8], name: HeaderName, value: &[&[u8]]);
    /// The shard's cached `Date: ...\r\n` line (empty: none).
    fn date(&mut self, line: &[u8]);
    /// The head ends; the connection closes after this answer (`close`),
    /// or an HTTP/1.0 client keeps it (`keep_alive_10`).
    fn end(&mut self, close: bool, keep_alive_10: bool);
    /// The end of a keep-alive head and the body, as one copy built once:
    /// `rest` is the blank line, then the body.
    fn rest(&mut self, rest: &[u8]);
    /// Body bytes.
    fn body(&mut self, bytes: &[u8]);
    /// What was written so far, ending with the body written last: a
    /// slot in it is filled in place (a request id, a challenge).
    fn written_mut(&mut self) -> &mut [u8];
    /// How much this sink holds: where the next answer starts.
    fn mark(&self) -> usize;
    /// Forgets what was written from `mark` on (an answer begun, then
    /// replaced by a refusal).
    fn truncate(&mut self, mark: usize);
    /// The HTTP/1.1 buffer itself, for the writers that copy precomputed
    /// bytes in one step; `None` for a sink of parts.
    fn h1(&mut self) -> Option<&mut Vec<u8>>;
}

impl Sink for Vec<u8> {
    #[inline]
    fn head(&mut self, _status: u16, lines: &Lines) {
        self.extend_from_slice(&lines.h1);
    }

    #[inline]
    fn lines(&mut self, lines: &Lines) {
        self.extend_from_slice(&lines.h1);
    }

    #[inline]
    fn field(&mut self, h1: &[u8], _name: HeaderName, value: &[&[u8]]) {
        self.extend_from_slice(h1);
        self.extend_from_slice(b": ");
        for piece in value {
            self.extend_from_slice(piece);
        }
        self.extend_from_slice(b"\r\n");
    }

    #[inline]
    fn date(&mut self, line: &[u8]) {
        self.extend_from_slice(line);
    }

    #[inline]
    fn end(&mut self, close: bool, keep_alive_10: bool) {
        if close {
            self.extend_from_slice(b"Connection: close\r\n");
        } else if keep_alive_10 {
            self.extend_from_slice(b"Connection: keep-alive\r\n");
        }
        self.extend_from_slice(b"\r\n");
    }

    #[inline]
    fn rest(&mut self, rest: &[u8]) {
        self.extend_from_slice(rest);
    }

    #[inline]
    fn body(&mut self, bytes: &[u8]) {
        self.extend_from_slice(bytes);
    }

    #[inline]
    fn written_mut(&mut self) -> &mut [u8] {
        self
    }

    #[inline]
    fn mark(&self) -> usize {
        self.len()
    }

    #[inline]
    fn truncate(&mut self, mark: usize) {
        Vec::truncate(self, mark);
    }

    #[inline]
    fn h1(&mut self) -> Option<&mut Vec<u8>> {
        Some(self)
    }
}

/// The fields every answer of a request carries, whoever wrote it (Gapura
/// itself, or an upstream whose answer is relayed) and whatever protocol
/// carries it: the host's `Strict-Transport-Security` over TLS, and the
/// listener's `Alt-Svc` where it also serves HTTP/3. The one place an
/// answer-wide field is added; each writer asks it for the form it writes.
#[derive(Clone, Copy, Debug, Default)]
pub struct Wide<'a> {
    hsts: Option<&'a Lines>,
    alt_svc: Option<&'a Lines>,
}

impl<'a> Wide<'a> {
    /// The fields of a host's answers: `hsts` when it has one (empty lines
    /// are none), and the listener's `alt_svc`.
    #[inline]
    pub fn new(hsts: Option<&'a Lines>, alt_svc: Option<&'a Lines>) -> Wide<'a> {
        Wide {
            hsts: hsts.filter(|l| !l.is_empty()),
            alt_svc: alt_svc.filter(|l| !l.is_empty()),
        }
    }

    /// Whether it adds nothing.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.hsts.is_none() && self.alt_svc.is_none()
    }

    /// Into an answer being written, before its head ends.
    #[inline]
    pub fn write<O: Sink>(&self, out: &mut O) {
        for l in [self.hsts, self.alt_svc].into_iter().flatten() {
            out.lines(l);
        }
    }

    /// As HTTP/1.1 lines (an upstream's head relayed as bytes).
    #[inline]
    pub fn write_h1(&self, out: &mut Vec<u8>) {
        for l in [self.hsts, self.alt_svc].into_iter().flatten() {
            out.extend_from_slice(l.h1());
        }
    }

    /// Into a relayed answer's fields (each replacing the upstream's own).
    pub fn add_to(&self, fields: &mut http::HeaderMap) {
        for l in [self.hsts, self.alt_svc].into_iter().flatten() {
            for (name, value) in l.fields() {
                fields.insert(name.clone(), value.clone());
            }
        }
    }
}

/// The `Alt-Svc` lines of a TLS listener that serves HTTP/3 on `port`
/// too: clients may use it for a day.
pub fn alt_svc(port: u16) -> Lines {
    let value = format!("h3=\":{port}\"; ma=86400");
    Lines::new(None, &[("Alt-Svc", value.as_str())])
}

/// The value of a `Date: ...\r\n` line.
#[inline]
pub fn date_value(line: &[u8]) -> &[u8] {
    line.strip_prefix(b"Date: ")
        .and_then(|v| v.strip_suffix(b"\r\n"))
        .unwrap_or(b"")
}

/// An answer written as parts, for a protocol that frames them itself:
/// its status, its fields and its body, each as given (the connection's
/// own lines, which such a protocol has no use for, are not kept).
#[derive(Debug, Default)]
pub struct Parts {
    pub status: u16,
    pub fields: Vec<Field>,
    /// The head is whole.
    pub ended: bool,
    pub body: Vec<u8>,
}

impl Parts {
    /// Whether anything was written since the last [`Parts::clear`].
    pub fn is_empty(&self) -> bool {
        self.status == 0
    }

    /// Ready for the next answer, keeping the buffers' capacity.
    pub fn clear(&mut self) {
        self.status = 0;
        self.fields.clear();
        self.ended = false;
        self.body.clear();
    }
}

impl Sink for Parts {
    fn head(&mut self, status: u16, lines: &Lines) {
        self.status = status;
        self.fields.extend_from_slice(&lines.fields);
    }

    fn lines(&mut self, lines: &Lines) {
        self.fields.extend_from_slice(&lines.fields);
    }

    fn field(&mut self, _h1: &[u8], name: HeaderName, value: &[&[u8]]) {
        let joined: Vec<u8> = value.concat();
        if let Ok(v) = HeaderValue::from_maybe_shared(bytes::Bytes::from(joined)) {
            self.fields.push((name, v));
        }
    }

    fn date(&mut self, line: &[u8]) {
        let value = date_value(line);
        if let Ok(v) = HeaderValue::from_bytes(value) {
            if !value.is_empty() {
                self.fields.push((http::header::DATE, v));
            }
        }
    }

    fn end(&mut self, _close: bool, _keep_alive_10: bool) {
        self.ended = true;
    }

    fn rest(&mut self, rest: &[u8]) {
        self.ended = true;
        self.body
            .extend_from_slice(rest.strip_prefix(b"\r\n").unwrap_or(rest));
    }

    fn body(&mut self, bytes: &[u8]) {
        self.body.extend_from_slice(bytes);
    }

    fn written_mut(&mut self) -> &mut [u8] {
        &mut self.body
    }

    fn mark(&self) -> usize {
        0
    }

    fn truncate(&mut self, _mark: usize) {
        self.clear();
    }

    fn h1(&mut self) -> Option<&mut Vec<u8>> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_hold_both_forms_and_leave_out_what_is_no_field() {
        let l = Lines::new(Some(404), &[("X-A", "1"), ("Bad Name", "v"), ("Y", "2")]);
        assert_eq!(l.h1(), b"HTTP/1.1 404 Not Found\r\nX-A: 1\r\nY: 2\r\n");
        let names: Vec<&str> = l.fields().iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["x-a", "y"]);
    }

    fn write<S: Sink>(s: &mut S) {
        s.head(
            302,
            &Lines::new(Some(302), &[("Cache-Control", "no-store")]),
        );
        s.field(b"Location", http::header::LOCATION, &[b"/a", b"?b"]);
        s.date(b"Date: Mon, 30 Nov 2026 05:00:00 GMT\r\n");
        s.end(true, false);
        s.body(b"ab");
        s.written_mut()[0] = b'x';
    }

    #[test]
    fn one_writer_gives_http1_bytes_or_parts() {
        let mut bytes = Vec::new();
        write(&mut bytes);
        assert_eq!(
            bytes,
            b"xTTP/1.1 302 Found\r\nCache-Control: no-store\r\nLocation: /a?b\r\n\
              Date: Mon, 30 Nov 2026 05:00:00 GMT\r\nConnection: close\r\n\r\nab"
        );
        let mut parts = Parts::default();
        write(&mut parts);
        assert_eq!(parts.status, 302);
        assert!(parts.ended);
        assert_eq!(parts.body, b"xb");
        let fields: Vec<(&str, &[u8])> = parts
            .fields
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_bytes()))
            .collect();
        assert_eq!(
            fields,
            [
                ("cache-control", &b"no-store"[..]),
                ("location", b"/a?b"),
                ("date", b"Mon, 30 Nov 2026 05:00:00 GMT"),
            ]
        );
    }
}
