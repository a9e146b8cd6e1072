//! A forward-auth call: the request Gapura sends a provider, the exchange
//! on a pooled or new connection, and what its answer means.
//!
//! The request is a `GET` with no body: the provider's path, `Host` of the
//! endpoint, `X-Forwarded-Method`, `-Proto`, `-Host` (as received), `-Uri`
//! (the raw target as sent) and `-For` (the resolved client), and the
//! client's lines of the headers the provider is sent, nothing else.
//!
//! The answer ([`interpret`]): 2xx allows, with the identity headers the
//! provider owns (at most 64; values pass as sent, UTF-8 included; an
//! answer whose head does not parse, a control character in a value for
//! one, is a failure); 401, 403, 407 and redirects are relayed: the status, the
//! body (at most 64 KiB) with its content type, `Location`, every
//! `Set-Cookie`, `WWW-Authenticate` and `Proxy-Authenticate`, and
//! `Cache-Control: no-store`; a redirect without `Location`, a relayed
//! value that is not printable ASCII, any other status or a broken
//! answer is a failure (502).

use super::response::{parse_response, resp_header_buf, RespFraming, RespParse};
use crate::codec::chunked::ChunkedDecoder;
use crate::transport::tls::HandshakeFail;
use crate::transport::{ReadSpare, WriteAll};
use gapura_gate::auth::{AuthProvider, MAX_COPIED, MAX_RELAY_BODY};
use std::net::IpAddr;

/// Writes the call's request head into `out`. `lines` are the client's
/// parsed header lines; `tls`: the client's request came over TLS
/// (`X-Forwarded-Proto: https`).
#[allow(clippy::too_many_arguments)]
pub fn write_call(
    p: &AuthProvider,
    method: &[u8],
    host: &[u8],
    target: &[u8],
    client: IpAddr,
    lines: &[httparse::Header<'_>],
    tls: bool,
    out: &mut Vec<u8>,
) {
    out.extend_from_slice(b"GET ");
    out.extend_from_slice(p.path.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\nHost: ");
    out.extend_from_slice(p.authority.as_bytes());
    out.extend_from_slice(b"\r\nX-Forwarded-Method: ");
    out.extend_from_slice(method);
    out.extend_from_slice(if tls {
        b"\r\nX-Forwarded-Proto: https\r\nX-Forwarded-Host: ".as_slice()
    } else {
        b"\r\nX-Forwarded-Proto: http\r\nX-Forwarded-Host: ".as_slice()
    });
    out.extend_from_slice(host);
    out.extend_from_slice(b"\r\nX-Forwarded-Uri: ");
    out.extend_from_slice(target);
    out.extend_from_slice(b"\r\nX-Forwarded-For: ");
    out.extend_from_slice(client.to_string().as_bytes());
    out.extend_from_slice(b"\r\n");
    for h in lines {
        if p.send.iter().any(|s| h.name.eq_ignore_ascii_case(s)) {
            out.extend_from_slice(h.name.as_bytes());
            out.extend_from_slice(b": ");
            out.extend_from_slice(h.value);
            out.extend_from_slice(b"\r\n");
        }
    }
    out.extend_from_slice(b"\r\n");
}

/// What a provider answered.
#[derive(Debug, PartialEq, Eq)]
pub enum Answer {
    /// 2xx: the identity lines to add upstream (`Name: value\r\n`).
    Allow(Vec<u8>),
    /// A refusal or redirect to relay: the whole response but its Date
    /// and connection lines (written when it is sent).
    Relay(gapura_gate::auth::Relay),
    /// Anything else: 502. The provider's status, for the log.
    Fail(u16),
}

fn printable(v: &[u8]) -> bool {
    v.iter().all(|&b| b == b'\t' || (0x20..0x7f).contains(&b))
}

/// What the provider's `status`, header `lines` and `body` mean.
pub fn interpret(
    p: &AuthProvider,
    status: u16,
    lines: &[httparse::Header<'_>],
    body: &[u8],
) -> Answer {
    if (200..300).contains(&status) {
        let mut identity = Vec::new();
        let mut owned = 0;
        for h in lines {
            if !p.copy.iter().any(|m| m.matches(h.name.as_bytes())) {
                continue;
            }
            owned += 1;
            if owned > MAX_COPIED {
                return Answer::Fail(status);
            }
            // Any text but control characters: a bad value costs its header.
            if h.value
                .iter()
                .any(|&b| (b < 0x20 && b != b'\t') || b == 0x7f)
            {
                continue;
            }
            identity.extend_from_slice(h.name.as_bytes());
            identity.extend_from_slice(b": ");
            identity.extend_from_slice(h.value);
            identity.extend_from_slice(b"\r\n");
        }
        return Answer::Allow(identity);
    }
    let redirect = matches!(status, 301 | 302 | 303 | 307 | 308);
    if !(redirect || matches!(status, 401 | 403 | 407)) || body.len() > MAX_RELAY_BODY {
        return Answer::Fail(status);
    }
    let mut relayed: Vec<(&[u8], &[u8])> = Vec::with_capacity(8);
    let mut location = false;
    for h in lines {
        let name = h.name.as_bytes();
        let kept = [
            "location",
            "set-cookie",
            "www-authenticate",
            "proxy-authenticate",
            "content-type",
        ]
        .iter()
        .any(|n| name.eq_ignore_ascii_case(n.as_bytes()));
        if !kept {
            continue;
        }
        if !printable(h.value) {
            return Answer::Fail(status);
        }
        location |= name.eq_ignore_ascii_case(b"location");
        relayed.push((name, h.value));
    }
    if redirect && !location {
        return Answer::Fail(status);
    }
    Answer::Relay(gapura_gate::auth::Relay::new(status, &relayed, body))
}

/// Why a call failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CallError {
    /// Cannot connect, reset, a broken answer: 502.
    Failed,
    /// The TLS handshake with an `https` provider failed (its certificate
    /// did not verify, say): 502, and no byte of the call was sent.
    Tls(HandshakeFail),
}

/// Sends `request` on `stream` (plaintext or TLS) and reads the answer;
/// the answer and whether the connection can be used again. Bounded: a head of 64 KiB and
/// a body of 64 KiB (a longer declared body is not read: the connection
/// is closed, and the answer fails unless it is an allow; a longer chunked
/// or close-delimited one fails).
pub async fn exchange<S: ReadSpare + WriteAll>(
    p: &AuthProvider,
    stream: &mut S,
    request: Vec<u8>,
) -> Result<(Answer, bool), CallError> {
    let (r, _) = stream.write_all_of(request).await;
    r.map_err(|_| CallError::Failed)?;
    let mut buf: Vec<u8> = Vec::with_capacity(4096);
    loop {
        // The header array in a scope without an await: it is not part of
        // the calling connection's task state.
        let parsed = {
            let mut headers = resp_header_buf();
            match parse_response(&buf, &mut headers, false) {
                RespParse::Malformed => None,
                RespParse::Partial => Some(None),
                RespParse::Complete(head, _, _) => Some(Some(head)),
            }
        };
        match parsed {
            None => return Err(CallError::Failed),
            Some(None) => {
                if !read_more(stream, &mut buf).await? {
                    return Err(CallError::Failed);
                }
            }
            Some(Some(head)) => {
                let (body, reusable) =
                    read_body(stream, &mut buf, head.head_len, head.framing).await?;
                let mut headers = resp_header_buf();
                let RespParse::Complete(_, _, lines) =
                    parse_response(&buf[..head.head_len], &mut headers, false)
                else {
                    return Err(CallError::Failed);
                };
                let answer = interpret(p, head.status, lines, &body);
                return Ok((answer, reusable && head.keep_alive));
            }
        }
    }
}

/// Reads more into `buf`'s spare room, after what it holds; false at the
/// end of the stream.
async fn read_more<S: ReadSpare>(stream: &mut S, buf: &mut Vec<u8>) -> Result<bool, CallError> {
    if buf.capacity() - buf.len() < 1024 {
        buf.reserve(4096);
    }
    // Into the spare room, after what it holds, so an answer that comes in
    // several writes is whole.
    let (r, b) = stream.read_spare(std::mem::take(buf)).await;
    *buf = b;
    match r {
        Ok(0) => Ok(false),
        Ok(_) => Ok(true),
        Err(_) => Err(CallError::Failed),
    }
}

/// The body after the head (kept up to [`MAX_RELAY_BODY`] + 1 bytes, so an
/// over-long one is known), and whether the connection ends cleanly.
async fn read_body<S: ReadSpare>(
    stream: &mut S,
    buf: &mut Vec<u8>,
    head_len: usize,
    framing: RespFraming,
) -> Result<(Vec<u8>, bool), CallError> {
    // Past the largest body relayed (and chunk framing around it), an
    // answer is not read further: memory per call stays bounded.
    const READ_CAP: usize = 2 * MAX_RELAY_BODY;
    let mut body = Vec::new();
    let keep = |body: &mut Vec<u8>, data: &[u8]| {
        let room = (MAX_RELAY_BODY + 1).saturating_sub(body.len());
        body.extend_from_slice(&data[..data.len().min(room)]);
    };
    match framing {
        RespFraming::None => Ok((body, true)),
        RespFraming::Length(n) => {
            let n = usize::try_from(n).unwrap_or(usize::MAX);
            if n > MAX_RELAY_BODY {
                // Not read: too long to relay, and the connection is not
                // used again (`body` says over-long by its length).
                return Ok((vec![0; MAX_RELAY_BODY + 1], false));
            }
            while buf.len() < head_len + n {
                if !read_more(stream, buf).await? {
                    return Err(CallError::Failed);
                }
            }
            keep(&mut body, &buf[head_len..head_len + n]);
            Ok((body, buf.len() == head_len + n))
        }
        RespFraming::Chunked => {
            let mut decoder = ChunkedDecoder::new();
            let mut at = head_len;
            loop {
                while at < buf.len() {
                    let step = decoder.step(&buf[at..]).map_err(|_| CallError::Failed)?;
                    keep(&mut body, &buf[at..][step.data.clone()]);
                    at += step.consumed;
                    if step.done {
                        return Ok((body, at == buf.len()));
                    }
                }
                if buf.len() > READ_CAP || !read_more(stream, buf).await? {
                    return Err(CallError::Failed);
                }
            }
        }
        RespFraming::Close => {
            while buf.len() <= READ_CAP && read_more(stream, buf).await? {}
            keep(&mut body, &buf[head_len..]);
            Ok((body, false))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gapura_gate::auth::{HeaderMatch, Scope, STANDARD_HEADERS};

    fn provider() -> AuthProvider {
        AuthProvider {
            name: "sso".into(),
            addr: "127.0.0.1:9091".parse().unwrap(),
            authority: "127.0.0.1:9091".into(),
            path: "/api/verify".into(),
            send: STANDARD_HEADERS.iter().map(|s| (*s).into()).collect(),
            copy: vec![
                HeaderMatch::parse("Remote-User"),
                HeaderMatch::parse("X-Id-*"),
            ],
            scope: Scope::Request,
            ttl_ms: 1000,
            negative_ttl_ms: 0,
            entries: 16,
            timeout_ms: 1000,
            sign_in: None,
            tls: None,
            identity: 1,
        }
    }

    fn h<'a>(name: &'a str, value: &'a [u8]) -> httparse::Header<'a> {
        httparse::Header { name, value }
    }

    #[test]
    fn the_call_carries_the_original_request_and_only_the_allowed_headers() {
        let mut out = Vec::new();
        let lines = [
            h("Cookie", b"s=1"),
            h("X-Forwarded-For", b"6.6.6.6"),
            h("X-Api-Key", b"k"),
            h("Accept", b"*/*"),
        ];
        write_call(
            &provider(),
            b"POST",
            b"a.test",
            b"/x%2Fy?z",
            "203.0.113.5".parse().unwrap(),
            &lines,
            false,
            &mut out,
        );
        let text = String::from_utf8(out).unwrap();
        assert_eq!(
            text,
            "GET /api/verify HTTP/1.1\r\nHost: 127.0.0.1:9091\r\nX-Forwarded-Method: POST\r\nX-Forwarded-Proto: http\r\nX-Forwarded-Host: a.test\r\nX-Forwarded-Uri: /x%2Fy?z\r\nX-Forwarded-For: 203.0.113.5\r\nCookie: s=1\r\nAccept: */*\r\n\r\n"
        );
    }

    #[test]
    fn the_call_tells_the_provider_the_request_came_over_tls() {
        let mut out = Vec::new();
        write_call(
            &provider(),
            b"GET",
            b"a.test",
            b"/",
            "203.0.113.5".parse().unwrap(),
            &[],
            true,
            &mut out,
        );
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("\r\nX-Forwarded-Proto: https\r\n"), "{text}");
    }

    #[test]
    fn an_allow_copies_the_identity_headers_and_skips_bad_values() {
        let lines = [
            h("Remote-User", b"ana"),
            h("X-Id-Group", b"ops"),
            h("X-Id-Bad", b"a\x01b"),
            h("Other", b"no"),
            h("Set-Cookie", b"s=2"),
        ];
        assert_eq!(
            interpret(&provider(), 200, &lines, b""),
            Answer::Allow(b"Remote-User: ana\r\nX-Id-Group: ops\r\n".to_vec())
        );
    }

    #[test]
    fn refusals_are_relayed_and_anything_else_fails() {
        let lines = [
            h("WWW-Authenticate", b"Bearer"),
            h("Set-Cookie", b"a=1"),
            h("X-Other", b"x"),
            h("Content-Type", b"text/plain"),
        ];
        let Answer::Relay(relay) = interpret(&provider(), 401, &lines, b"who?") else {
            panic!()
        };
        let head = String::from_utf8(relay.head.h1().to_vec()).unwrap();
        assert_eq!(relay.status, 401);
        assert!(head.starts_with("HTTP/1.1 401 Unauthorized\r\n"));
        assert!(
            head.contains("WWW-Authenticate: Bearer\r\n") && head.contains("Set-Cookie: a=1\r\n")
        );
        assert!(
            !head.contains("X-Other")
                && head.contains("Cache-Control: no-store\r\nContent-Length: 4\r\n")
        );
        assert_eq!(&relay.body[..], b"who?");
        let to = [h("Location", b"https://sso.test/login?rd=x")];
        assert!(matches!(
            interpret(&provider(), 302, &to, b""),
            Answer::Relay(r) if r.status == 302
        ));
        assert_eq!(
            interpret(&provider(), 302, &[], b""),
            Answer::Fail(302),
            "a redirect needs Location"
        );
        assert_eq!(interpret(&provider(), 500, &[], b""), Answer::Fail(500));
        assert_eq!(interpret(&provider(), 404, &[], b""), Answer::Fail(404));
        let bad = [h("Location", b"/a\xffb")];
        assert_eq!(interpret(&provider(), 302, &bad, b""), Answer::Fail(302));
        assert_eq!(
            interpret(&provider(), 403, &[], &vec![b'x'; MAX_RELAY_BODY + 1]),
            Answer::Fail(403)
        );
        let many: Vec<_> = (0..65).map(|_| h("X-Id-A", b"v")).collect();
        assert_eq!(interpret(&provider(), 200, &many, b""), Answer::Fail(200));
    }
}
