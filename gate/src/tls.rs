//! What TLS listeners serve, as a snapshot carries it: certificates (DER
//! bytes read by the runtime when the profile was compiled), the names they
//! answer for, the protocol floor and the session-ticket secret. Pure data:
//! the HTTP layer builds its rustls configuration from it, once per shard
//! and snapshot.
//!
//! Beside it, the HTTPS redirect's answer: the authority it names
//! ([`redirect_authority`]) and its head ([`write_https_redirect`]). The
//! host's policy that asks for it is [`crate::https::HttpsPolicy`].
//!
//! Private keys and the ticket secret never appear in `Debug` output.

use crate::host::HostTable;
use crate::sink::{Lines, Sink};
use std::fmt;

/// The lowest protocol version a TLS listener accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TlsVersion {
    V12,
    V13,
}

/// Bytes that must never be logged.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Secret(pub Vec<u8>);

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Secret({} bytes)", self.0.len())
    }
}

/// One `[[certificate]]`: its chain (leaf first), its key and an optional
/// OCSP response to staple (the names it answers for are in
/// [`TlsSettings::names`]).
#[derive(Clone, Debug)]
pub struct Certificate {
    /// The certificate file as written in the profile (for logs).
    pub label: String,
    /// DER certificates, the leaf first.
    pub chain: Vec<Vec<u8>>,
    /// The private key's DER (PKCS#8, SEC1 or PKCS#1).
    pub key: Secret,
    /// A DER OCSP response, stapled to every handshake.
    pub ocsp: Option<Vec<u8>>,
    /// `acme = true`: the names it is ordered for (the chain is empty
    /// until one is issued; a handshake for it then fails).
    pub acme: Vec<String>,
}

/// Every TLS listener's settings.
#[derive(Clone, Debug)]
pub struct TlsSettings {
    pub certificates: Vec<Certificate>,
    /// A certificate's names to its index; the default (no SNI, or a name
    /// no certificate claims) is set.
    pub names: HostTable,
    pub min_version: TlsVersion,
    /// The longest a handshake may take, from the connection's accept.
    pub handshake_timeout_ms: u64,
    /// Session tickets: a ticket key is derived from `ticket_secret` for
    /// each period of `ticket_rotation_s` seconds of wall-clock time, so
    /// every shard holds the same key without sharing state. A ticket is
    /// accepted in the period it was issued in and the next. An empty
    /// secret turns tickets off.
    pub ticket_secret: Secret,
    pub ticket_rotation_s: u64,
    /// Offer HTTP/2 by ALPN (`[server] http2`).
    pub h2: bool,
    /// TLS-ALPN-01 certificates of ACME orders in flight (the runtime
    /// sets them): served to `acme-tls/1` handshakes only.
    pub acme_alpn: Vec<crate::acme::AlpnChallenge>,
}

impl TlsSettings {
    /// The index of the certificate for a client's SNI name.
    pub fn certificate_for(&self, sni: Option<&str>) -> usize {
        self.names
            .lookup(sni.map(str::as_bytes))
            .map_or(0, |i| i as usize)
    }

    /// Whether `sni` is claimed by a certificate (not served the default).
    pub fn claims(&self, sni: &str) -> bool {
        self.names
            .lookup_exact_or_wildcard(sni.as_bytes())
            .is_some()
    }
}

/// The authority of an HTTPS redirect: the request's host without its
/// port, when it is a plain name or address literal (letters, digits, `-`,
/// `.`, or `[...]` with hex digits, `:` and `.`), else `None`.
pub fn redirect_authority(host: &[u8]) -> Option<&[u8]> {
    let host = host.trim_ascii();
    let name = if host.first() == Some(&b'[') {
        let end = host.iter().position(|&b| b == b']')?;
        let inner = &host[1..end];
        if inner.is_empty()
            || !inner
                .iter()
                .all(|b| b.is_ascii_hexdigit() || *b == b':' || *b == b'.')
        {
            return None;
        }
        &host[..=end]
    } else {
        let name = match host.iter().position(|&b| b == b':') {
            Some(colon) => &host[..colon],
            None => host,
        };
        if name.is_empty()
            || !name
                .iter()
                .all(|b| b.is_ascii_alphanumeric() || *b == b'-' || *b == b'.')
        {
            return None;
        }
        name
    };
    (name.len() <= crate::host::MAX_HOST_BYTES + 2).then_some(name)
}

/// Writes the head of a 308 to `https://AUTHORITY[:PORT]TARGET` (the port
/// only when not 443), up to its connection line ([`crate::answer::end_head`]
/// finishes). No allocation once `out` has room.
pub fn write_https_redirect<O: Sink>(
    out: &mut O,
    authority: &[u8],
    port: u16,
    target: &[u8],
    date_line: &[u8],
) {
    static LINES: std::sync::OnceLock<(Lines, Lines)> = std::sync::OnceLock::new();
    let (status, rest) = LINES.get_or_init(|| {
        (
            Lines::status(308),
            Lines::new(None, &[("Content-Length", "0")]),
        )
    });
    out.head(308, status);
    let mut digits = [0u8; 6];
    let mut at = digits.len();
    if port != 443 {
        let mut n = port;
        loop {
            at -= 1;
            digits[at] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        at -= 1;
        digits[at] = b':';
    }
    let target: &[u8] = if target.first() == Some(&b'/') {
        target
    } else {
        b"/"
    };
    out.field(
        b"Location",
        http::header::LOCATION,
        &[b"https://", authority, &digits[at..], target],
    );
    out.lines(rest);
    out.date(date_line);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redirects_keep_the_host_and_target_and_name_a_port_only_when_needed() {
        let mut out = Vec::new();
        write_https_redirect(&mut out, b"a.example", 443, b"/p?q=1", b"Date: d\r\n");
        assert_eq!(
            out,
            b"HTTP/1.1 308 Permanent Redirect\r\nLocation: https://a.example/p?q=1\r\nContent-Length: 0\r\nDate: d\r\n"
        );
        out.clear();
        write_https_redirect(&mut out, b"[::1]", 8443, b"*", b"");
        assert_eq!(
            out,
            b"HTTP/1.1 308 Permanent Redirect\r\nLocation: https://[::1]:8443/\r\nContent-Length: 0\r\n"
        );
    }

    #[test]
    fn only_plain_hosts_become_an_authority() {
        assert_eq!(
            redirect_authority(b"A.example:8080"),
            Some(&b"A.example"[..])
        );
        assert_eq!(
            redirect_authority(b"[2001:db8::1]:80"),
            Some(&b"[2001:db8::1]"[..])
        );
        assert_eq!(redirect_authority(b"10.0.0.1"), Some(&b"10.0.0.1"[..]));
        for bad in [
            &b""[..],
            b"a b",
            b"evil.example/x",
            b"a@b",
            b"[zz]",
            b"[::1",
            b":80",
            b"a\r\nX: y",
        ] {
            assert_eq!(redirect_authority(bad), None, "{bad:?}");
        }
    }

    fn settings() -> TlsSettings {
        let mut names = HostTable::default();
        names.insert("a.example", 0).unwrap();
        names.insert("*.b.example", 1).unwrap();
        names.set_default(0);
        TlsSettings {
            certificates: Vec::new(),
            names,
            min_version: TlsVersion::V12,
            handshake_timeout_ms: 10_000,
            ticket_secret: Secret(vec![7; 32]),
            ticket_rotation_s: 3600,
            h2: false,
            acme_alpn: Vec::new(),
        }
    }

    #[test]
    fn names_pick_certificates_like_hosts() {
        let s = settings();
        assert_eq!(s.certificate_for(Some("a.example")), 0);
        assert_eq!(s.certificate_for(Some("A.Example")), 0);
        assert_eq!(s.certificate_for(Some("x.b.example")), 1);
        assert_eq!(s.certificate_for(Some("y.x.b.example")), 1);
        // The bare suffix is not the wildcard's: the default.
        assert_eq!(s.certificate_for(Some("b.example")), 0);
        assert_eq!(s.certificate_for(None), 0);
        assert!(s.claims("x.b.example"));
        assert!(!s.claims("b.example"));
        assert!(!s.claims("unknown.example"));
    }

    #[test]
    fn secrets_stay_out_of_debug_output() {
        let text = format!("{:?}", settings());
        assert!(text.contains("Secret(32 bytes)"), "{text}");
        assert!(!text.contains("7, 7"), "{text}");
    }
}
