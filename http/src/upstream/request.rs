//! Writing the request head Gapura sends upstream.
//!
//! The client's head is parsed again (it was validated already) and copied
//! with the hop-by-hop headers removed: `Connection` and every name it
//! lists, `Keep-Alive`, `Proxy-*`, `TE`, `Trailer`, `Upgrade` unless the
//! request is upgraded, and `Expect` (Gapura answers `100-continue` itself).
//! The forwarding headers are then set: `X-Forwarded-For` (a trusted
//! proxy's list with the peer appended; from anyone else the peer alone,
//! and the client's own address claims removed), `X-Forwarded-Proto`,
//! `X-Forwarded-Host`, `X-Request-Id`, and `Host` passed through or
//! rewritten. O(head), no
//! allocation once `out` has capacity. The same writer makes an HTTP/2
//! upstream's fields (`crate::exchange::uphead`).

use crate::codec::listed::Listed;
use crate::exchange::uphead::HeadOut;
use gapura_gate::upstream::{HostHeader, RequestId};
use std::io::Write as _;
use std::net::IpAddr;

/// What the forwarding headers say.
pub struct Forwarding<'a> {
    pub client: IpAddr,
    /// The client's forwarding headers were believed (its peer is a
    /// trusted proxy or a Cloudflare range): the `X-Forwarded-For` chain
    /// is kept and appended to, `Forwarded`, `X-Real-IP` and
    /// `CF-Connecting-IP` pass. Otherwise the client wrote them, and none
    /// of them goes upstream: Gapura writes its own.
    pub trusted: bool,
    pub proto: &'static str,
    /// The request's host (from Host or an absolute-form target).
    pub host: Option<&'a [u8]>,
    /// Path and query to send (origin form).
    pub path: &'a [u8],
    pub host_header: &'a HostHeader,
    pub request_id: RequestId,
    /// Forward `Upgrade` and say `Connection: upgrade`.
    pub upgrade: bool,
    /// Remove `Authorization` (an access list took the credentials).
    pub strip_authorization: bool,
    /// Identity headers forward-auth owns on this host: removed from what
    /// the client sent (case and `_`/`-` folded).
    pub strip: &'a [gapura_gate::auth::HeaderMatch],
    /// A provider's identity lines (`Name: value\r\n`), added.
    pub identity: &'a [u8],
}

/// Writes an address as its text: an IPv4 one digit by digit (the common
/// case, without the formatting machinery), an IPv6 one by `Display`.
fn write_addr(out: &mut Vec<u8>, addr: IpAddr) {
    match addr {
        IpAddr::V4(v4) => {
            for (i, octet) in v4.octets().into_iter().enumerate() {
                if i > 0 {
                    out.push(b'.');
                }
                gapura_gate::pages::push_decimal(out, u64::from(octet));
            }
        }
        IpAddr::V6(_) => {
            let _ = write!(out, "{addr}");
        }
    }
}

/// Headers in which a client names an address for itself (besides
/// `X-Forwarded-For`, whose chain is handled apart).
fn is_claimed_client(name: &[u8]) -> bool {
    const NAMES: [&[u8]; 4] = [
        b"forwarded",
        b"x-real-ip",
        b"cf-connecting-ip",
        b"true-client-ip",
    ];
    NAMES.iter().any(|n| n.eq_ignore_ascii_case(name))
}

fn is_hop_by_hop(name: &[u8]) -> bool {
    const NAMES: [&[u8]; 5] = [b"connection", b"keep-alive", b"te", b"trailer", b"expect"];
    NAMES.iter().any(|n| n.eq_ignore_ascii_case(name))
        || (name.len() >= 6 && name[..6].eq_ignore_ascii_case(b"proxy-"))
}

/// Writes the upstream request head into `out` (HTTP/1.1 text, or an
/// HTTP/2 request's fields) for a client head `raw` (its request line
/// gives the method) whose parsed lines are `headers`. `new_id` writes a
/// fresh request id when one is needed.
pub fn write_request_head<O: HeadOut>(
    raw: &[u8],
    headers: &[httparse::Header<'_>],
    fwd: &Forwarding<'_>,
    out: &mut O,
    new_id: &mut dyn FnMut(&mut Vec<u8>),
) -> bool {
    let Some(space) = raw.iter().position(|&b| b == b' ') else {
        return false;
    };
    let method = &raw[..space];
    // Names the client's Connection header lists are hop-by-hop too.
    let listed = Listed::of(headers);

    let host = out.request_line(method, fwd.path);
    match fwd.host_header {
        HostHeader::PassThrough => host.extend_from_slice(fwd.host.unwrap_or(b"")),
        HostHeader::Rewrite(h) => host.extend_from_slice(h.as_bytes()),
    }
    out.end_field();

    let mut id_seen = false;
    let mut upgrade_value: Option<&[u8]> = None;
    for h in headers.iter() {
        let name = h.name.as_bytes();
        if name.eq_ignore_ascii_case(b"upgrade") {
            upgrade_value = Some(h.value);
            continue;
        }
        if name.eq_ignore_ascii_case(b"host")
            || name.eq_ignore_ascii_case(b"x-forwarded-proto")
            || name.eq_ignore_ascii_case(b"x-forwarded-host")
            || is_hop_by_hop(name)
            || listed.contains(name)
        {
            continue;
        }
        if name.eq_ignore_ascii_case(b"x-forwarded-for") {
            // Appended to below, after the entries of a trusted chain.
            continue;
        }
        if !fwd.trusted && is_claimed_client(name) {
            // What the client says of its own address: never passed on.
            continue;
        }
        if fwd.strip_authorization && name.eq_ignore_ascii_case(b"authorization") {
            continue;
        }
        if fwd.strip.iter().any(|m| m.matches(name)) {
            continue;
        }
        if name.eq_ignore_ascii_case(b"x-request-id") {
            if fwd.request_id == RequestId::Generate {
                continue;
            }
            id_seen = true;
        }
        out.field_named(name).extend_from_slice(h.value);
        out.end_field();
    }
    let xff = out.field(b"X-Forwarded-For: ");
    for h in headers.iter().filter(|_| fwd.trusted) {
        if h.name.eq_ignore_ascii_case("x-forwarded-for") {
            let v = h.value.trim_ascii();
            if !v.is_empty() {
                xff.extend_from_slice(v);
                xff.extend_from_slice(b", ");
            }
        }
    }
    write_addr(xff, fwd.client);
    out.end_field();
    out.field(b"X-Forwarded-Proto: ")
        .extend_from_slice(fwd.proto.as_bytes());
    out.end_field();
    if let Some(host) = fwd.host {
        out.field(b"X-Forwarded-Host: ").extend_from_slice(host);
        out.end_field();
    }
    out.lines(fwd.identity);
    if fwd.request_id != RequestId::Off && !id_seen {
        new_id(out.field(b"X-Request-Id: "));
        out.end_field();
    }
    if fwd.upgrade {
        if let Some(v) = upgrade_value {
            out.field(b"Connection: ").extend_from_slice(b"upgrade");
            out.end_field();
            out.field(b"Upgrade: ").extend_from_slice(v);
            out.end_field();
        }
    }
    out.end();
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identity_headers_of_the_client_are_replaced_by_the_providers() {
        let raw = b"GET / HTTP/1.1\r\nHost: a\r\nRemote-User: forged\r\nremote_groups: admins\r\nX-Authentik-Name: x\r\nAccept: */*\r\n\r\n";
        let strip = [
            gapura_gate::auth::HeaderMatch::parse("Remote-User"),
            gapura_gate::auth::HeaderMatch::parse("Remote-Groups"),
            gapura_gate::auth::HeaderMatch::parse("X-authentik-*"),
        ];
        let pass = HostHeader::PassThrough;
        let f = Forwarding {
            strip: &strip,
            identity: b"Remote-User: ana\r\n",
            ..fwd(&pass, RequestId::Off, false)
        };
        let h = head(raw, &f);
        assert!(
            !h.contains("forged") && !h.contains("admins") && !h.contains("X-Authentik"),
            "{h}"
        );
        assert!(
            h.contains("\r\nRemote-User: ana\r\n") && h.contains("Accept: */*"),
            "{h}"
        );
    }

    #[test]
    fn addresses_are_written_as_display_writes_them() {
        for a in [
            "0.0.0.0",
            "1.2.3.4",
            "10.0.0.7",
            "99.100.199.200",
            "255.255.255.255",
            "203.0.113.7",
            "::1",
            "2001:db8::7",
        ] {
            let addr: IpAddr = a.parse().unwrap();
            let mut out = Vec::new();
            write_addr(&mut out, addr);
            assert_eq!(out, addr.to_string().into_bytes(), "{a}");
        }
        for n in 0..=255u8 {
            let addr = IpAddr::from([n, n / 3, 255 - n, n % 10]);
            let mut out = Vec::new();
            write_addr(&mut out, addr);
            assert_eq!(out, addr.to_string().into_bytes());
        }
    }

    fn head(raw: &[u8], fwd: &Forwarding<'_>) -> String {
        let mut buf = crate::codec::header_buf::<{ crate::server::bounds::REQUEST_LINES }>();
        let crate::codec::head::Parse::Complete(_, lines) =
            crate::codec::parse_head(raw, &mut buf, &crate::server::bounds::HEAD_BOUNDS)
        else {
            panic!("test head parses");
        };
        let mut out = Vec::new();
        assert!(write_request_head(raw, lines, fwd, &mut out, &mut |o| o
            .extend_from_slice(b"gen-1")));
        String::from_utf8(out).unwrap()
    }

    fn fwd<'a>(
        host_header: &'a HostHeader,
        request_id: RequestId,
        upgrade: bool,
    ) -> Forwarding<'a> {
        Forwarding {
            client: "10.0.0.7".parse().unwrap(),
            trusted: true,
            proto: "http",
            host: Some(b"app.test"),
            path: b"/p?q=1",
            host_header,
            request_id,
            upgrade,
            strip_authorization: false,
            strip: &[],
            identity: b"",
        }
    }

    #[test]
    fn hop_by_hop_headers_are_removed_and_forwarding_headers_set() {
        let raw = b"GET /p?q=1 HTTP/1.1\r\nHost: app.test\r\nConnection: keep-alive, X-Secret\r\nKeep-Alive: 5\r\nX-Secret: s\r\nTE: trailers\r\nProxy-Authorization: x\r\nX-Forwarded-For: 1.1.1.1\r\nX-Forwarded-For: 2.2.2.2\r\nX-Forwarded-Proto: https\r\nAccept: */*\r\nExpect: 100-continue\r\nUpgrade: websocket\r\n\r\n";
        let pass = HostHeader::PassThrough;
        let h = head(raw, &fwd(&pass, RequestId::Keep, false));
        assert_eq!(
            h,
            "GET /p?q=1 HTTP/1.1\r\nHost: app.test\r\nAccept: */*\r\nX-Forwarded-For: 1.1.1.1, 2.2.2.2, 10.0.0.7\r\nX-Forwarded-Proto: http\r\nX-Forwarded-Host: app.test\r\nX-Request-Id: gen-1\r\n\r\n"
        );
    }

    #[test]
    fn what_an_untrusted_client_says_of_its_address_never_goes_upstream() {
        let raw = b"GET /p HTTP/1.1\r\nHost: app.test\r\nX-Forwarded-For: 6.6.6.6\r\nX-Real-IP: 6.6.6.6\r\nForwarded: for=6.6.6.6\r\nCF-Connecting-IP: 6.6.6.6\r\nTrue-Client-IP: 6.6.6.6\r\nAccept: */*\r\n\r\n";
        let pass = HostHeader::PassThrough;
        let direct = Forwarding {
            trusted: false,
            ..fwd(&pass, RequestId::Off, false)
        };
        let h = head(raw, &direct);
        assert!(!h.contains("6.6.6.6"), "{h}");
        assert!(
            h.contains("Accept: */*\r\nX-Forwarded-For: 10.0.0.7\r\n"),
            "{h}"
        );
        // From a trusted proxy: its chain, appended to, and the rest as sent.
        let h = head(raw, &fwd(&pass, RequestId::Off, false));
        assert!(h.contains("X-Forwarded-For: 6.6.6.6, 10.0.0.7\r\n"), "{h}");
        assert!(h.contains("Forwarded: for=6.6.6.6\r\n"), "{h}");
    }

    #[test]
    fn request_id_kept_or_generated_and_host_rewritten() {
        let raw = b"POST /p HTTP/1.1\r\nHost: app.test\r\nX-Request-Id: client-7\r\nContent-Length: 3\r\n\r\n";
        let rw = HostHeader::Rewrite("backend:8080".into());
        let h = head(raw, &fwd(&rw, RequestId::Keep, false));
        assert!(h.starts_with("POST /p?q=1 HTTP/1.1\r\nHost: backend:8080\r\n"));
        assert!(h.contains("X-Request-Id: client-7\r\n"));
        assert!(h.contains("Content-Length: 3\r\n"));
        assert!(!h.contains("gen-1"));
        let h = head(raw, &fwd(&rw, RequestId::Generate, false));
        assert!(h.contains("X-Request-Id: gen-1\r\n") && !h.contains("client-7"));
        let h = head(raw, &fwd(&rw, RequestId::Off, false));
        assert!(h.contains("X-Request-Id: client-7\r\n") && !h.contains("gen-1"));
    }

    #[test]
    fn upgrade_is_forwarded_only_when_upgrading() {
        let raw = b"GET /ws HTTP/1.1\r\nHost: app.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Key: k\r\n\r\n";
        let pass = HostHeader::PassThrough;
        let h = head(raw, &fwd(&pass, RequestId::Off, true));
        assert!(h.contains("Connection: upgrade\r\nUpgrade: websocket\r\n"));
        assert!(h.contains("Sec-WebSocket-Key: k\r\n"));
        let h = head(raw, &fwd(&pass, RequestId::Off, false));
        assert!(!h.contains("Upgrade"));
    }
}
