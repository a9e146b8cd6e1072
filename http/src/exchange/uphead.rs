//! A request head written field by field ([`HeadOut`]): as HTTP/1.1 text
//! into a `Vec<u8>` for an HTTP/1.1 upstream, or as the fields of an
//! HTTP/2 request ([`UpHead`]) for an HTTP/2 one. One writer
//! (`crate::upstream::request::write_request_head`) decides what the head
//! holds; the two only differ in how they write it, and an HTTP/2
//! upstream's head is never written as text and read back.

use super::connection_specific;
use http::{HeaderMap, HeaderName, HeaderValue};
use std::time::Duration;

/// Where a request head is written.
pub trait HeadOut {
    /// The request line (the method and the origin-form target), and the
    /// `Host` field begun: its value is appended to what this returns.
    fn request_line(&mut self, method: &[u8], target: &[u8]) -> &mut Vec<u8>;
    /// Begins a field: `name_colon` is its name and `": "`, as HTTP/1.1
    /// writes it; its value is appended to what this returns, and
    /// [`HeadOut::end_field`] ends it.
    fn field(&mut self, name_colon: &'static [u8]) -> &mut Vec<u8>;
    /// Begins a field whose name came with the request.
    fn field_named(&mut self, name: &[u8]) -> &mut Vec<u8>;
    fn end_field(&mut self);
    /// Fields already written as `Name: value\r\n` lines (a forward-auth
    /// provider's identity lines, built when its answer was read).
    fn lines(&mut self, lines: &[u8]);
    /// Ends the head.
    fn end(&mut self);
}

/// HTTP/1.1 text.
impl HeadOut for Vec<u8> {
    #[inline]
    fn request_line(&mut self, method: &[u8], target: &[u8]) -> &mut Vec<u8> {
        self.extend_from_slice(method);
        self.push(b' ');
        self.extend_from_slice(target);
        self.extend_from_slice(b" HTTP/1.1\r\nHost: ");
        self
    }
    #[inline]
    fn field(&mut self, name_colon: &'static [u8]) -> &mut Vec<u8> {
        self.extend_from_slice(name_colon);
        self
    }
    #[inline]
    fn field_named(&mut self, name: &[u8]) -> &mut Vec<u8> {
        self.extend_from_slice(name);
        self.extend_from_slice(b": ");
        self
    }
    #[inline]
    fn end_field(&mut self) {
        self.extend_from_slice(b"\r\n");
    }
    #[inline]
    fn lines(&mut self, lines: &[u8]) {
        self.extend_from_slice(lines);
    }
    #[inline]
    fn end(&mut self) {
        self.extend_from_slice(b"\r\n");
    }
}

/// What the field being written becomes.
enum Current {
    /// `Host`: the request's `:authority`.
    Authority,
    Field(HeaderName),
    /// A field HTTP/2 forbids, or one that is not a valid field.
    LeftOut,
}

/// An HTTP/2 request's head: its method, target, authority and fields.
/// Reused from request to request (its buffers keep their capacity).
pub struct UpHead {
    method: http::Method,
    target: Vec<u8>,
    authority: Vec<u8>,
    fields: HeaderMap,
    current: Current,
    value: Vec<u8>,
    /// A field that HTTP/2 cannot carry (a name or value it refuses).
    bad: bool,
    grpc: bool,
    /// A gRPC call's `grpc-timeout`.
    timeout: Option<Duration>,
}

impl Default for UpHead {
    fn default() -> Self {
        UpHead {
            method: http::Method::GET,
            target: Vec::new(),
            authority: Vec::new(),
            fields: HeaderMap::new(),
            current: Current::LeftOut,
            value: Vec::new(),
            bad: false,
            grpc: false,
            timeout: None,
        }
    }
}

impl UpHead {
    /// Empties the head for the next request.
    pub fn clear(&mut self) {
        self.target.clear();
        self.authority.clear();
        self.fields.clear();
        self.bad = false;
        self.grpc = false;
        self.timeout = None;
    }

    /// The call's `grpc-timeout`, when it has one.
    pub fn grpc_timeout(&self) -> Option<Duration> {
        self.timeout
    }

    /// The request as h2 sends it (`https`: the URI's scheme), with `te:
    /// trailers` for a gRPC call; `None` when a part of the head cannot be
    /// carried by HTTP/2 (no authority, a field it refuses).
    pub fn request(&self, https: bool) -> Option<http::Request<()>> {
        if self.bad || self.authority.is_empty() {
            return None;
        }
        let uri = http::Uri::builder()
            .scheme(if https { "https" } else { "http" })
            .authority(self.authority.as_slice())
            .path_and_query(self.target.as_slice())
            .build()
            .ok()?;
        let mut request = http::Request::new(());
        *request.method_mut() = self.method.clone();
        *request.uri_mut() = uri;
        let mut fields = self.fields.clone();
        if self.grpc {
            fields.insert(http::header::TE, HeaderValue::from_static("trailers"));
        }
        *request.headers_mut() = fields;
        Some(request)
    }
}

impl HeadOut for UpHead {
    fn request_line(&mut self, method: &[u8], target: &[u8]) -> &mut Vec<u8> {
        match http::Method::from_bytes(method) {
            Ok(m) => self.method = m,
            Err(_) => self.bad = true,
        }
        self.target.extend_from_slice(target);
        self.field_named(b"host")
    }
    fn field(&mut self, name_colon: &'static [u8]) -> &mut Vec<u8> {
        self.field_named(name_colon.strip_suffix(b": ").unwrap_or(name_colon))
    }
    fn field_named(&mut self, name: &[u8]) -> &mut Vec<u8> {
        self.current = if name.eq_ignore_ascii_case(b"host") {
            Current::Authority
        } else if connection_specific(name) {
            Current::LeftOut
        } else {
            match HeaderName::from_bytes(name) {
                Ok(n) => Current::Field(n),
                Err(_) => {
                    self.bad = true;
                    Current::LeftOut
                }
            }
        };
        self.value.clear();
        &mut self.value
    }
    fn end_field(&mut self) {
        match std::mem::replace(&mut self.current, Current::LeftOut) {
            Current::Authority => {
                self.authority.clear();
                self.authority.extend_from_slice(&self.value);
            }
            Current::Field(name) => {
                let Ok(value) = HeaderValue::from_bytes(&self.value) else {
                    self.bad = true;
                    return;
                };
                if name == http::header::CONTENT_TYPE {
                    self.grpc = value.as_bytes().starts_with(b"application/grpc");
                } else if name.as_str() == "grpc-timeout" {
                    self.timeout = grpc_timeout(value.as_bytes());
                }
                self.fields.append(name, value);
            }
            Current::LeftOut => {}
        }
    }
    fn lines(&mut self, lines: &[u8]) {
        for line in lines.split(|&b| b == b'\n') {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            let Some(colon) = line.iter().position(|&b| b == b':') else {
                continue;
            };
            let value = line[colon + 1..].trim_ascii();
            self.field_named(&line[..colon]).extend_from_slice(value);
            self.end_field();
        }
    }
    fn end(&mut self) {}
}

/// A gRPC `grpc-timeout` value (1 to 8 digits and a unit: `H`, `M`, `S`,
/// `m`, `u`, `n`) as a duration.
pub fn grpc_timeout(v: &[u8]) -> Option<Duration> {
    let (digits, unit) = v.split_at(v.len().checked_sub(1)?);
    if digits.is_empty() || digits.len() > 8 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let n: u64 = std::str::from_utf8(digits).ok()?.parse().ok()?;
    Some(match unit {
        b"H" => Duration::from_secs(n * 3600),
        b"M" => Duration::from_secs(n * 60),
        b"S" => Duration::from_secs(n),
        b"m" => Duration::from_millis(n),
        b"u" => Duration::from_micros(n),
        b"n" => Duration::from_nanos(n),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_timeouts_are_digits_and_a_unit() {
        assert_eq!(grpc_timeout(b"5S"), Some(Duration::from_secs(5)));
        assert_eq!(grpc_timeout(b"100m"), Some(Duration::from_millis(100)));
        assert_eq!(grpc_timeout(b"2H"), Some(Duration::from_secs(7200)));
        assert_eq!(
            grpc_timeout(b"99999999n"),
            Some(Duration::from_nanos(99_999_999))
        );
        for bad in [&b""[..], b"S", b"5", b"5s", b"123456789S", b"-1S", b"1.5S"] {
            assert_eq!(
                grpc_timeout(bad),
                None,
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    fn write(out: &mut impl HeadOut) {
        out.request_line(b"POST", b"/pkg.Svc/Call")
            .extend_from_slice(b"api.internal:8443");
        out.end_field();
        for (n, v) in [
            (&b"connection"[..], &b"keep-alive"[..]),
            (b"content-type", b"application/grpc"),
            (b"grpc-timeout", b"2S"),
            (b"transfer-encoding", b"chunked"),
        ] {
            out.field_named(n).extend_from_slice(v);
            out.end_field();
        }
        out.lines(b"Remote-User: ana\r\n");
        out.field(b"X-Request-Id: ").extend_from_slice(b"abc");
        out.end_field();
        out.end();
    }

    #[test]
    fn one_writer_makes_text_or_fields() {
        let mut text = Vec::new();
        write(&mut text);
        assert_eq!(
            text,
            b"POST /pkg.Svc/Call HTTP/1.1\r\nHost: api.internal:8443\r\nconnection: keep-alive\r\ncontent-type: application/grpc\r\ngrpc-timeout: 2S\r\ntransfer-encoding: chunked\r\nRemote-User: ana\r\nX-Request-Id: abc\r\n\r\n"
        );
        let mut head = UpHead::default();
        write(&mut head);
        assert_eq!(head.grpc_timeout(), Some(Duration::from_secs(2)));
        let r = head.request(true).unwrap();
        assert_eq!(r.method(), http::Method::POST);
        assert_eq!(
            r.uri().to_string(),
            "https://api.internal:8443/pkg.Svc/Call"
        );
        let names: Vec<&str> = r.headers().keys().map(|k| k.as_str()).collect();
        assert_eq!(
            names,
            [
                "content-type",
                "grpc-timeout",
                "remote-user",
                "x-request-id",
                "te"
            ]
        );
        assert_eq!(r.headers()["te"], "trailers");
        head.clear();
        head.request_line(b"GET", b"/x?y").extend_from_slice(b"a");
        head.end_field();
        let get = head.request(false).unwrap();
        assert_eq!(get.uri().to_string(), "http://a/x?y");
        assert!(!get.headers().contains_key("te"));
        // No authority, or a value HTTP/2 refuses: nothing to send.
        head.clear();
        head.request_line(b"GET", b"/");
        head.end_field();
        assert!(head.request(false).is_none());
        head.field(b"Host: ").extend_from_slice(b"a");
        head.end_field();
        head.field_named(b"x").extend_from_slice(b"a\x01b");
        head.end_field();
        assert!(head.request(false).is_none());
    }
}
