//! QPACK (RFC 9204) without a dynamic table: Gapura advertises a table
//! capacity of 0, so a field section may use only the static table and
//! literals, and nothing a peer sends can grow a table. A reference to a
//! dynamic table is a decompression failure, which ends the connection.
//!
//! Decoding yields a request's parts, checked as RFC 9114 §4.3 asks
//! (lowercase names, pseudo-fields first and once each, no
//! connection-specific fields), and bounded: the decoded section's size
//! (names, values and 32 bytes a field, as §4.2.2 counts it) may not pass
//! the bound the caller advertised. Encoding writes an answer's fields as
//! literals, with a static name or a whole static field where one fits.

use super::huffman;

/// The static table (RFC 9204 Appendix A).
pub const STATIC: [(&str, &str); 99] = [
    (":authority", ""),
    (":path", "/"),
    ("age", "0"),
    ("content-disposition", ""),
    ("content-length", "0"),
    ("cookie", ""),
    ("date", ""),
    ("etag", ""),
    ("if-modified-since", ""),
    ("if-none-match", ""),
    ("last-modified", ""),
    ("link", ""),
    ("location", ""),
    ("referer", ""),
    ("set-cookie", ""),
    (":method", "CONNECT"),
    (":method", "DELETE"),
    (":method", "GET"),
    (":method", "HEAD"),
    (":method", "OPTIONS"),
    (":method", "POST"),
    (":method", "PUT"),
    (":scheme", "http"),
    (":scheme", "https"),
    (":status", "103"),
    (":status", "200"),
    (":status", "304"),
    (":status", "404"),
    (":status", "503"),
    ("accept", "*/*"),
    ("accept", "application/dns-message"),
    ("accept-encoding", "gzip, deflate, br"),
    ("accept-ranges", "bytes"),
    ("access-control-allow-headers", "cache-control"),
    ("access-control-allow-headers", "content-type"),
    ("access-control-allow-origin", "*"),
    ("cache-control", "max-age=0"),
    ("cache-control", "max-age=2592000"),
    ("cache-control", "max-age=604800"),
    ("cache-control", "no-cache"),
    ("cache-control", "no-store"),
    ("cache-control", "public, max-age=31536000"),
    ("content-encoding", "br"),
    ("content-encoding", "gzip"),
    ("content-type", "application/dns-message"),
    ("content-type", "application/javascript"),
    ("content-type", "application/json"),
    ("content-type", "application/x-www-form-urlencoded"),
    ("content-type", "image/gif"),
    ("content-type", "image/jpeg"),
    ("content-type", "image/png"),
    ("content-type", "text/css"),
    ("content-type", "text/html; charset=utf-8"),
    ("content-type", "text/plain"),
    ("content-type", "text/plain;charset=utf-8"),
    ("range", "bytes=0-"),
    ("strict-transport-security", "max-age=31536000"),
    (
        "strict-transport-security",
        "max-age=31536000; includesubdomains",
    ),
    (
        "strict-transport-security",
        "max-age=31536000; includesubdomains; preload",
    ),
    ("vary", "accept-encoding"),
    ("vary", "origin"),
    ("x-content-type-options", "nosniff"),
    ("x-xss-protection", "1; mode=block"),
    (":status", "100"),
    (":status", "204"),
    (":status", "206"),
    (":status", "302"),
    (":status", "400"),
    (":status", "403"),
    (":status", "421"),
    (":status", "425"),
    (":status", "500"),
    ("accept-language", ""),
    ("access-control-allow-credentials", "FALSE"),
    ("access-control-allow-credentials", "TRUE"),
    ("access-control-allow-headers", "*"),
    ("access-control-allow-methods", "get"),
    ("access-control-allow-methods", "get, post, options"),
    ("access-control-allow-methods", "options"),
    ("access-control-expose-headers", "content-length"),
    ("access-control-request-headers", "content-type"),
    ("access-control-request-method", "get"),
    ("access-control-request-method", "post"),
    ("alt-svc", "clear"),
    ("authorization", ""),
    (
        "content-security-policy",
        "script-src 'none'; object-src 'none'; base-uri 'none'",
    ),
    ("early-data", "1"),
    ("expect-ct", ""),
    ("forwarded", ""),
    ("if-range", ""),
    ("origin", ""),
    ("purpose", "prefetch"),
    ("server", ""),
    ("timing-allow-origin", "*"),
    ("upgrade-insecure-requests", "1"),
    ("user-agent", ""),
    ("x-forwarded-for", ""),
    ("x-frame-options", "deny"),
    ("x-frame-options", "sameorigin"),
];

/// Why a field section was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FieldError {
    /// Not QPACK, or a reference to a dynamic table this decoder never
    /// allowed: the connection ends (QPACK_DECOMPRESSION_FAILED).
    Decompression,
    /// Valid QPACK, but not a well-formed request: the stream is refused
    /// (H3_MESSAGE_ERROR).
    Malformed,
    /// Larger than the advertised bound: the stream is refused.
    TooLarge,
}

/// Reads a prefixed integer (RFC 7541 §5.1) whose first byte's low
/// `bits` bits start it; `None` when cut short or past 2^32.
fn read_int(b: &[u8], at: &mut usize, bits: u8) -> Option<u64> {
    let mask = ((1u16 << bits) - 1) as u8;
    let first = b.get(*at)? & mask;
    *at += 1;
    if first < mask {
        return Some(first as u64);
    }
    let mut v = mask as u64;
    let mut shift = 0;
    loop {
        let byte = *b.get(*at)?;
        *at += 1;
        v += ((byte & 0x7f) as u64) << shift;
        if v > u32::MAX as u64 {
            return None;
        }
        if byte & 0x80 == 0 {
            return Some(v);
        }
        shift += 7;
    }
}

/// Appends a prefixed integer whose first byte carries `flags` above its
/// low `bits` bits.
fn write_int(out: &mut Vec<u8>, flags: u8, bits: u8, v: u64) {
    let mask = ((1u16 << bits) - 1) as u64;
    if v < mask {
        out.push(flags | v as u8);
        return;
    }
    out.push(flags | mask as u8);
    let mut rest = v - mask;
    while rest >= 0x80 {
        out.push((rest as u8 & 0x7f) | 0x80);
        rest >>= 7;
    }
    out.push(rest as u8);
}

/// Reads a string literal whose length has a `bits`-bit prefix, the
/// Huffman flag the bit above it; appends its bytes to `out`, at most
/// `room` of them.
fn read_string(
    b: &[u8],
    at: &mut usize,
    bits: u8,
    out: &mut Vec<u8>,
    room: usize,
) -> Result<(), FieldError> {
    let huffman = b.get(*at).ok_or(FieldError::Decompression)? & (1 << bits) != 0;
    let len = read_int(b, at, bits).ok_or(FieldError::Decompression)? as usize;
    let end = at.checked_add(len).ok_or(FieldError::Decompression)?;
    let raw = b.get(*at..end).ok_or(FieldError::Decompression)?;
    *at = end;
    let before = out.len();
    if huffman {
        // At most 8/5 of the section's own bytes, which are bounded.
        huffman::decode(raw, out).map_err(|_| FieldError::Decompression)?;
    } else {
        out.extend_from_slice(raw);
    }
    if out.len() - before > room {
        return Err(FieldError::TooLarge);
    }
    Ok(())
}

/// One field line as decoded: its name and value in `buf`.
struct Line {
    name: std::ops::Range<usize>,
    value: std::ops::Range<usize>,
}

/// Decodes a field section into its lines, every name and value laid
/// side by side in `buf`; at most `max_size` as RFC 9114 §4.2.2 counts.
fn decode_lines(
    b: &[u8],
    max_size: usize,
    buf: &mut Vec<u8>,
    lines: &mut Vec<Line>,
) -> Result<(), FieldError> {
    let mut at = 0;
    // The prefix: Required Insert Count 0 (no dynamic table), then the
    // sign and Delta Base, which mean nothing without one.
    let required = read_int(b, &mut at, 8).ok_or(FieldError::Decompression)?;
    if required != 0 {
        return Err(FieldError::Decompression);
    }
    read_int(b, &mut at, 7).ok_or(FieldError::Decompression)?;
    let mut size = 0usize;
    while at < b.len() {
        let first = b[at];
        let room = max_size.saturating_sub(size);
        let start = buf.len();
        let line = if first & 0x80 != 0 {
            // Indexed field line; T (0x40) must name the static table.
            if first & 0x40 == 0 {
                return Err(FieldError::Decompression);
            }
            let i = read_int(b, &mut at, 6).ok_or(FieldError::Decompression)? as usize;
            let (n, v) = STATIC.get(i).ok_or(FieldError::Decompression)?;
            buf.extend_from_slice(n.as_bytes());
            buf.extend_from_slice(v.as_bytes());
            Line {
                name: start..start + n.len(),
                value: start + n.len()..buf.len(),
            }
        } else if first & 0x40 != 0 {
            // Literal with a name reference; T (0x10) must be static.
            if first & 0x10 == 0 {
                return Err(FieldError::Decompression);
            }
            let i = read_int(b, &mut at, 4).ok_or(FieldError::Decompression)? as usize;
            let (n, _) = STATIC.get(i).ok_or(FieldError::Decompression)?;
            buf.extend_from_slice(n.as_bytes());
            let name = start..buf.len();
            read_string(b, &mut at, 7, buf, room)?;
            Line {
                name,
                value: start + n.len()..buf.len(),
            }
        } else if first & 0x20 != 0 {
            // Literal with a literal name (Huffman flag 0x08, 3-bit length).
            read_string(b, &mut at, 3, buf, room)?;
            let name = start..buf.len();
            read_string(b, &mut at, 7, buf, room)?;
            Line {
                value: name.end..buf.len(),
                name,
            }
        } else {
            // Post-base forms reference the dynamic table.
            return Err(FieldError::Decompression);
        };
        size += line.name.len() + line.value.len() + 32;
        if size > max_size {
            return Err(FieldError::TooLarge);
        }
        lines.push(line);
    }
    Ok(())
}

/// Decodes a request's field section (a HEADERS frame's payload) into its
/// parts: method, URI (scheme, authority, path) and fields.
pub fn decode_request(section: &[u8], max_size: usize) -> Result<http::request::Parts, FieldError> {
    let mut buf = Vec::with_capacity(section.len() * 2);
    let mut lines = Vec::with_capacity(16);
    decode_lines(section, max_size, &mut buf, &mut lines)?;
    let mut method = None;
    let mut scheme = None;
    let mut authority = None;
    let mut path = None;
    let mut fields = http::HeaderMap::with_capacity(lines.len());
    let mut regular = false;
    for line in &lines {
        let name = &buf[line.name.clone()];
        let value = &buf[line.value.clone()];
        if let Some(pseudo) = name.strip_prefix(b":") {
            let slot = match pseudo {
                b"method" => &mut method,
                b"scheme" => &mut scheme,
                b"authority" => &mut authority,
                b"path" => &mut path,
                _ => return Err(FieldError::Malformed),
            };
            if regular || slot.is_some() {
                return Err(FieldError::Malformed);
            }
            *slot = Some(value);
            continue;
        }
        regular = true;
        if name.iter().any(u8::is_ascii_uppercase)
            || crate::codec::fields::connection_specific(name)
            || (name == b"te" && value != b"trailers")
        {
            return Err(FieldError::Malformed);
        }
        let name = http::HeaderName::from_bytes(name).map_err(|_| FieldError::Malformed)?;
        let value = http::HeaderValue::from_bytes(value).map_err(|_| FieldError::Malformed)?;
        fields.append(name, value);
    }
    let method = http::Method::from_bytes(method.ok_or(FieldError::Malformed)?)
        .map_err(|_| FieldError::Malformed)?;
    let mut uri = http::Uri::builder();
    if method == http::Method::CONNECT {
        // CONNECT names an authority alone (the pipeline refuses it).
        if scheme.is_some() || path.is_some() {
            return Err(FieldError::Malformed);
        }
        uri = uri.authority(authority.ok_or(FieldError::Malformed)?);
    } else {
        let path = path
            .filter(|p| !p.is_empty())
            .ok_or(FieldError::Malformed)?;
        let scheme = scheme.ok_or(FieldError::Malformed)?;
        uri = uri.path_and_query(path);
        // Without `:authority` the target is the path alone (a `host`
        // field may name the host).
        if let Some(a) = authority {
            uri = uri.scheme(scheme).authority(a);
        }
    }
    let uri = uri.build().map_err(|_| FieldError::Malformed)?;
    let (mut parts, ()) = http::Request::new(()).into_parts();
    parts.method = method;
    parts.uri = uri;
    parts.version = http::Version::HTTP_3;
    parts.headers = fields;
    Ok(parts)
}

/// The `:status` of an answer's field section (a client reading it: the
/// load tester), decoded within `max_size`.
pub fn decode_status(section: &[u8], max_size: usize) -> Result<u16, FieldError> {
    let mut buf = Vec::with_capacity(section.len() * 2);
    let mut lines = Vec::with_capacity(8);
    decode_lines(section, max_size, &mut buf, &mut lines)?;
    let first = lines.first().ok_or(FieldError::Malformed)?;
    if &buf[first.name.clone()] != b":status" {
        return Err(FieldError::Malformed);
    }
    std::str::from_utf8(&buf[first.value.clone()])
        .ok()
        .and_then(|v| v.parse().ok())
        .ok_or(FieldError::Malformed)
}

/// Appends a request's field section: its pseudo-fields, then `fields`
/// (lowercase names; a client's: the load tester).
pub fn encode_request<'a>(
    out: &mut Vec<u8>,
    (method, scheme, authority, path): (&str, &str, &str, &str),
    fields: impl Iterator<Item = (&'a str, &'a [u8])>,
) {
    out.extend_from_slice(&[0, 0]);
    let pseudo = [
        (":method", method),
        (":scheme", scheme),
        (":authority", authority),
        (":path", path),
    ];
    for (name, value) in pseudo {
        let whole = STATIC.iter().position(|&(n, v)| n == name && v == value);
        match (whole, STATIC.iter().position(|&(n, _)| n == name)) {
            (Some(i), _) => write_int(out, 0xc0, 6, i as u64),
            (None, Some(i)) => {
                write_int(out, 0x50, 4, i as u64);
                write_int(out, 0, 7, value.len() as u64);
                out.extend_from_slice(value.as_bytes());
            }
            (None, None) => encode_field(out, name, value.as_bytes()),
        }
    }
    for (name, value) in fields {
        encode_field(out, name, value);
    }
}

/// Where `name` is in the static table, as a name.
fn static_name(name: &str) -> Option<usize> {
    Some(match name {
        "age" => 2,
        "content-disposition" => 3,
        "content-length" => 4,
        "cookie" => 5,
        "date" => 6,
        "etag" => 7,
        "last-modified" => 10,
        "link" => 11,
        "location" => 12,
        "set-cookie" => 14,
        "accept-ranges" => 32,
        "access-control-allow-origin" => 35,
        "cache-control" => 36,
        "content-encoding" => 42,
        "content-type" => 44,
        "strict-transport-security" => 56,
        "vary" => 59,
        "x-content-type-options" => 61,
        "alt-svc" => 83,
        "content-security-policy" => 85,
        "server" => 92,
        "x-frame-options" => 97,
        _ => return None,
    })
}

/// Appends the field section of an answer: the prefix (no dynamic table),
/// `:status`, then each field.
pub fn encode_response<'a>(
    out: &mut Vec<u8>,
    status: u16,
    fields: impl Iterator<Item = (&'a str, &'a [u8])>,
) {
    out.extend_from_slice(&[0, 0]);
    let code = status.to_string();
    match STATIC
        .iter()
        .position(|&(n, v)| n == ":status" && v == code)
    {
        Some(i) => write_int(out, 0xc0, 6, i as u64),
        None => {
            // `:status` by name (index 24), its value a literal.
            write_int(out, 0x50, 4, 24);
            write_int(out, 0, 7, code.len() as u64);
            out.extend_from_slice(code.as_bytes());
        }
    }
    for (name, value) in fields {
        encode_field(out, name, value);
    }
}

/// Appends the field section of trailers: the prefix, then each field.
pub fn encode_trailers<'a>(out: &mut Vec<u8>, fields: impl Iterator<Item = (&'a str, &'a [u8])>) {
    out.extend_from_slice(&[0, 0]);
    for (name, value) in fields {
        encode_field(out, name, value);
    }
}

/// Appends one field line: a whole static entry, a static name with a
/// literal value, or both literal (never Huffman-coded).
pub fn encode_field(out: &mut Vec<u8>, name: &str, value: &[u8]) {
    if let Some(i) = static_name(name) {
        let whole = STATIC[i..]
            .iter()
            .take_while(|(n, _)| *n == name)
            .position(|(_, v)| v.as_bytes() == value);
        if let Some(k) = whole {
            write_int(out, 0xc0, 6, (i + k) as u64);
            return;
        }
        write_int(out, 0x50, 4, i as u64);
    } else {
        write_int(out, 0x20, 3, name.len() as u64);
        out.extend_from_slice(name.as_bytes());
    }
    write_int(out, 0, 7, value.len() as u64);
    out.extend_from_slice(value);
}

#[cfg(test)]
mod tests;
