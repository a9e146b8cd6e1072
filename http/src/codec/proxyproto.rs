//! The PROXY protocol header (HAProxy's v1 text and v2 binary forms).
//!
//! A listener that enables the protocol reads this header before anything
//! else on a connection from a trusted peer; its source address then stands
//! in for the peer's (the gate's `ClientPolicy::accept_proxy_header` takes
//! [`ProxyHeader::source`]).
//! [`parse`] works on whatever bytes have arrived: it answers "need more"
//! until the header is complete, and refuses as soon as the bytes cannot be
//! one. It is bounded (a v1 line is at most [`V1_MAX_BYTES`], a v2 payload at
//! most [`V2_MAX_PAYLOAD_BYTES`]), strict about the grammar, never panics on
//! any input, and never allocates. TLVs are walked for their bounds and
//! otherwise skipped. The encoders are test support: built for this crate's
//! tests and, with the `test-support` feature, for other crates' tests.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// Longest v1 header, `PROXY` to CRLF included (the specification's bound).
pub const V1_MAX_BYTES: usize = 107;
/// The first 12 bytes of every v2 header.
pub const V2_SIGNATURE: [u8; 12] = *b"\r\n\r\n\0\r\nQUIT\n";
/// The fixed part of a v2 header: signature, version and command, family,
/// payload length.
pub const V2_FIXED_BYTES: usize = 16;
/// Largest v2 payload (addresses plus TLVs) accepted. Addresses take at most
/// 216 bytes; the rest is room for the TLVs load balancers send (ALPN,
/// authority, TLS facts, cloud endpoint ids). A longer header is refused
/// rather than buffered.
pub const V2_MAX_PAYLOAD_BYTES: usize = 1024;

const V1_PREFIX: &[u8; 6] = b"PROXY ";

/// What a complete header says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProxyHeader {
    /// v2 LOCAL: the proxy's own connection (a health check). The real
    /// connection's addresses apply.
    Local,
    /// v1 UNKNOWN, or v2 PROXY with a family or transport that carries no IP
    /// addresses (unspecified, UNIX). The real connection's addresses apply.
    Unknown,
    /// v1 TCP4/TCP6, or v2 INET/INET6 over a stream.
    Tcp { src: SocketAddr, dst: SocketAddr },
    /// v2 INET/INET6 over datagrams.
    Udp { src: SocketAddr, dst: SocketAddr },
}

impl ProxyHeader {
    /// The proxied client's address, when the header carries one.
    pub fn source(&self) -> Option<SocketAddr> {
        match self {
            ProxyHeader::Tcp { src, .. } | ProxyHeader::Udp { src, .. } => Some(*src),
            ProxyHeader::Local | ProxyHeader::Unknown => None,
        }
    }
}

/// Why the bytes are not a valid header. The connection is closed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProxyError {
    /// Neither signature: the peer did not send a PROXY header.
    NotProxy,
    /// No CRLF within [`V1_MAX_BYTES`].
    V1TooLong,
    /// A v1 line that breaks the grammar; the reason says where.
    V1Malformed(&'static str),
    /// A v2 version other than 2.
    V2Version,
    /// A v2 command other than LOCAL or PROXY.
    V2Command,
    /// A v2 address family or transport the specification does not define.
    V2Family,
    /// A v2 payload longer than [`V2_MAX_PAYLOAD_BYTES`].
    V2TooLong,
    /// A v2 payload shorter than its family's addresses.
    V2AddressTooShort,
    /// A v2 TLV that runs past the end of the payload.
    V2Tlv,
}

impl ProxyError {
    /// A stable name for counters and logs.
    pub fn code(&self) -> &'static str {
        match self {
            ProxyError::NotProxy => "proxy_protocol.missing",
            ProxyError::V1TooLong => "proxy_protocol.v1.too_long",
            ProxyError::V1Malformed(_) => "proxy_protocol.v1.malformed",
            ProxyError::V2Version => "proxy_protocol.v2.version",
            ProxyError::V2Command => "proxy_protocol.v2.command",
            ProxyError::V2Family => "proxy_protocol.v2.family",
            ProxyError::V2TooLong => "proxy_protocol.v2.too_long",
            ProxyError::V2AddressTooShort => "proxy_protocol.v2.address_too_short",
            ProxyError::V2Tlv => "proxy_protocol.v2.tlv",
        }
    }
}

impl fmt::Display for ProxyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProxyError::NotProxy => f.write_str("the connection did not start with a PROXY header"),
            ProxyError::V1TooLong => write!(f, "PROXY v1 line longer than {V1_MAX_BYTES} bytes"),
            ProxyError::V1Malformed(why) => write!(f, "malformed PROXY v1 line: {why}"),
            ProxyError::V2Version => f.write_str("PROXY v2 header with an unknown version"),
            ProxyError::V2Command => f.write_str("PROXY v2 header with an unknown command"),
            ProxyError::V2Family => f.write_str("PROXY v2 header with an unknown family"),
            ProxyError::V2TooLong => write!(
                f,
                "PROXY v2 payload longer than {V2_MAX_PAYLOAD_BYTES} bytes"
            ),
            ProxyError::V2AddressTooShort => {
                f.write_str("PROXY v2 payload shorter than its addresses")
            }
            ProxyError::V2Tlv => f.write_str("PROXY v2 TLV runs past the payload"),
        }
    }
}

impl std::error::Error for ProxyError {}

/// Parses a PROXY header at the start of `buf`.
///
/// `Ok(Some((header, consumed)))`: complete; the request bytes start at
/// `consumed`. `Ok(None)`: what arrived is a valid beginning; read more
/// (at most [`V1_MAX_BYTES`] or [`V2_FIXED_BYTES`] + [`V2_MAX_PAYLOAD_BYTES`]
/// in all). `Err`: close the connection. O(header), no allocation.
pub fn parse(buf: &[u8]) -> Result<Option<(ProxyHeader, usize)>, ProxyError> {
    match buf.first() {
        None => Ok(None),
        Some(b'P') => parse_v1(buf),
        Some(b'\r') => parse_v2(buf),
        Some(_) => Err(ProxyError::NotProxy),
    }
}

fn parse_v1(buf: &[u8]) -> Result<Option<(ProxyHeader, usize)>, ProxyError> {
    let n = buf.len().min(V1_PREFIX.len());
    if buf[..n] != V1_PREFIX[..n] {
        return Err(ProxyError::NotProxy);
    }
    let mut end = None;
    for (i, &b) in buf.iter().enumerate().take(V1_MAX_BYTES) {
        match b {
            b'\r' if i + 2 > V1_MAX_BYTES => return Err(ProxyError::V1TooLong),
            b'\r' => match buf.get(i + 1) {
                Some(b'\n') => {
                    end = Some(i);
                    break;
                }
                Some(_) => return Err(ProxyError::V1Malformed("CR without LF")),
                None => return Ok(None),
            },
            b'\n' => return Err(ProxyError::V1Malformed("LF without CR")),
            0x20..=0x7e => {}
            _ => {
                return Err(ProxyError::V1Malformed(
                    "a byte that is not printable ASCII",
                ))
            }
        }
    }
    let Some(end) = end else {
        return if buf.len() >= V1_MAX_BYTES {
            Err(ProxyError::V1TooLong)
        } else {
            Ok(None)
        };
    };
    let line = &buf[V1_PREFIX.len()..end];
    let mut fields = line.split(|&b| b == b' ');
    let proto = fields.next().unwrap_or_default();
    let v6 = match proto {
        b"UNKNOWN" => return Ok(Some((ProxyHeader::Unknown, end + 2))),
        b"TCP4" => false,
        b"TCP6" => true,
        _ => {
            return Err(ProxyError::V1Malformed(
                "protocol is not TCP4, TCP6 or UNKNOWN",
            ))
        }
    };
    let mut next = || {
        fields
            .next()
            .ok_or(ProxyError::V1Malformed("missing field"))
    };
    let (src, dst) = (next()?, next()?);
    let (sport, dport) = (next()?, next()?);
    if fields.next().is_some() {
        return Err(ProxyError::V1Malformed("extra field"));
    }
    let src = v1_addr(src, v6)?;
    let dst = v1_addr(dst, v6)?;
    let sport = v1_port(sport)?;
    let dport = v1_port(dport)?;
    Ok(Some((
        ProxyHeader::Tcp {
            src: SocketAddr::new(src, sport),
            dst: SocketAddr::new(dst, dport),
        },
        end + 2,
    )))
}

fn v1_addr(field: &[u8], v6: bool) -> Result<IpAddr, ProxyError> {
    let bad = ProxyError::V1Malformed("address does not match the protocol");
    let text = std::str::from_utf8(field).map_err(|_| bad)?;
    if v6 {
        text.parse::<Ipv6Addr>().map(IpAddr::V6).map_err(|_| bad)
    } else {
        text.parse::<Ipv4Addr>().map(IpAddr::V4).map_err(|_| bad)
    }
}

/// 1 to 5 digits, no leading zero except `0` itself, at most 65535.
fn v1_port(field: &[u8]) -> Result<u16, ProxyError> {
    let bad = ProxyError::V1Malformed("port is not a number from 0 to 65535");
    if field.is_empty()
        || field.len() > 5
        || !field.iter().all(u8::is_ascii_digit)
        || (field.len() > 1 && field[0] == b'0')
    {
        return Err(bad);
    }
    let n = field
        .iter()
        .fold(0u32, |acc, &d| acc * 10 + u32::from(d - b'0'));
    u16::try_from(n).map_err(|_| bad)
}

fn parse_v2(buf: &[u8]) -> Result<Option<(ProxyHeader, usize)>, ProxyError> {
    let n = buf.len().min(V2_SIGNATURE.len());
    if buf[..n] != V2_SIGNATURE[..n] {
        return Err(ProxyError::NotProxy);
    }
    if buf.len() < V2_FIXED_BYTES {
        return Ok(None);
    }
    let (version, command) = (buf[12] >> 4, buf[12] & 0x0f);
    if version != 2 {
        return Err(ProxyError::V2Version);
    }
    if command > 1 {
        return Err(ProxyError::V2Command);
    }
    let (family, transport) = (buf[13] >> 4, buf[13] & 0x0f);
    if family > 3 || transport > 2 {
        return Err(ProxyError::V2Family);
    }
    let len = usize::from(u16::from_be_bytes([buf[14], buf[15]]));
    if len > V2_MAX_PAYLOAD_BYTES {
        return Err(ProxyError::V2TooLong);
    }
    let total = V2_FIXED_BYTES + len;
    let Some(payload) = buf.get(V2_FIXED_BYTES..total) else {
        return Ok(None);
    };
    if command == 0 {
        // LOCAL: the receiver uses the real addresses and skips the rest.
        return Ok(Some((ProxyHeader::Local, total)));
    }
    let addr_len = match family {
        0 => 0,
        1 => 12,
        2 => 36,
        _ => 216,
    };
    let Some(addrs) = payload.get(..addr_len) else {
        return Err(ProxyError::V2AddressTooShort);
    };
    walk_tlvs(&payload[addr_len..])?;
    let pair = match family {
        1 => {
            let ip = |i: usize| {
                IpAddr::V4(Ipv4Addr::new(
                    addrs[i],
                    addrs[i + 1],
                    addrs[i + 2],
                    addrs[i + 3],
                ))
            };
            let port = |i: usize| u16::from_be_bytes([addrs[i], addrs[i + 1]]);
            Some((
                SocketAddr::new(ip(0), port(8)),
                SocketAddr::new(ip(4), port(10)),
            ))
        }
        2 => {
            let ip = |i: usize| {
                let mut o = [0u8; 16];
                o.copy_from_slice(&addrs[i..i + 16]);
                IpAddr::V6(Ipv6Addr::from(o))
            };
            let port = |i: usize| u16::from_be_bytes([addrs[i], addrs[i + 1]]);
            Some((
                SocketAddr::new(ip(0), port(32)),
                SocketAddr::new(ip(16), port(34)),
            ))
        }
        _ => None,
    };
    let header = match (pair, transport) {
        (Some((src, dst)), 1) => ProxyHeader::Tcp { src, dst },
        (Some((src, dst)), 2) => ProxyHeader::Udp { src, dst },
        _ => ProxyHeader::Unknown,
    };
    Ok(Some((header, total)))
}

/// Checks that each TLV (type, 16-bit length, value) ends inside `rest`.
fn walk_tlvs(mut rest: &[u8]) -> Result<(), ProxyError> {
    while !rest.is_empty() {
        if rest.len() < 3 {
            return Err(ProxyError::V2Tlv);
        }
        let len = usize::from(u16::from_be_bytes([rest[1], rest[2]]));
        rest = rest.get(3 + len..).ok_or(ProxyError::V2Tlv)?;
    }
    Ok(())
}

#[cfg(any(test, feature = "test-support"))]
/// Appends `header` as a v1 line. Returns false (appending nothing) for what
/// v1 cannot say: LOCAL, UDP, or a source and destination of different
/// families. Allocates only by growing `out`.
pub fn encode_v1(header: &ProxyHeader, out: &mut Vec<u8>) -> bool {
    use std::io::Write;
    match header {
        ProxyHeader::Unknown => out.extend_from_slice(b"PROXY UNKNOWN\r\n"),
        ProxyHeader::Tcp { src, dst } => {
            let proto = match (src.ip(), dst.ip()) {
                (IpAddr::V4(_), IpAddr::V4(_)) => "TCP4",
                (IpAddr::V6(_), IpAddr::V6(_)) => "TCP6",
                _ => return false,
            };
            let _ = write!(
                out,
                "PROXY {proto} {} {} {} {}\r\n",
                src.ip(),
                dst.ip(),
                src.port(),
                dst.port()
            );
        }
        ProxyHeader::Local | ProxyHeader::Udp { .. } => return false,
    }
    true
}

#[cfg(any(test, feature = "test-support"))]
/// Appends `header` as a v2 header with these TLVs (type, value). Returns
/// false (appending nothing) when source and destination differ in family
/// or the payload would exceed [`V2_MAX_PAYLOAD_BYTES`].
pub fn encode_v2(header: &ProxyHeader, tlvs: &[(u8, &[u8])], out: &mut Vec<u8>) -> bool {
    let (command, family, addrs): (u8, u8, Option<(SocketAddr, SocketAddr)>) = match header {
        ProxyHeader::Local => (0, 0x00, None),
        ProxyHeader::Unknown => (1, 0x00, None),
        ProxyHeader::Tcp { src, dst } | ProxyHeader::Udp { src, dst } => {
            let transport = if matches!(header, ProxyHeader::Tcp { .. }) {
                1
            } else {
                2
            };
            match (src.ip(), dst.ip()) {
                (IpAddr::V4(_), IpAddr::V4(_)) => (1, 0x10 | transport, Some((*src, *dst))),
                (IpAddr::V6(_), IpAddr::V6(_)) => (1, 0x20 | transport, Some((*src, *dst))),
                _ => return false,
            }
        }
    };
    let addr_len = match family >> 4 {
        1 => 12,
        2 => 36,
        _ => 0,
    };
    let tlv_len: usize = tlvs.iter().map(|(_, v)| 3 + v.len()).sum();
    let len = addr_len + tlv_len;
    if len > V2_MAX_PAYLOAD_BYTES || tlvs.iter().any(|(_, v)| v.len() > usize::from(u16::MAX)) {
        return false;
    }
    out.extend_from_slice(&V2_SIGNATURE);
    out.push(0x20 | command);
    out.push(family);
    out.extend_from_slice(&(len as u16).to_be_bytes());
    if let Some((src, dst)) = addrs {
        match (src.ip(), dst.ip()) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                out.extend_from_slice(&s.octets());
                out.extend_from_slice(&d.octets());
            }
            (IpAddr::V6(s), IpAddr::V6(d)) => {
                out.extend_from_slice(&s.octets());
                out.extend_from_slice(&d.octets());
            }
            _ => unreachable!("families checked above"),
        }
        out.extend_from_slice(&src.port().to_be_bytes());
        out.extend_from_slice(&dst.port().to_be_bytes());
    }
    for (t, v) in tlvs {
        out.push(*t);
        out.extend_from_slice(&(v.len() as u16).to_be_bytes());
        out.extend_from_slice(v);
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sa(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn v1_tcp4_and_tcp6_lines_parse() {
        let buf = b"PROXY TCP4 192.0.2.1 198.51.100.2 56324 443\r\nGET / HTTP/1.1\r\n";
        assert_eq!(
            parse(buf),
            Ok(Some((
                ProxyHeader::Tcp {
                    src: sa("192.0.2.1:56324"),
                    dst: sa("198.51.100.2:443")
                },
                45
            )))
        );
        let buf = b"PROXY TCP6 2001:db8::1 2001:db8::2 65535 0\r\n";
        assert_eq!(
            parse(buf),
            Ok(Some((
                ProxyHeader::Tcp {
                    src: sa("[2001:db8::1]:65535"),
                    dst: sa("[2001:db8::2]:0")
                },
                buf.len()
            )))
        );
    }

    #[test]
    fn v1_unknown_ignores_the_rest_of_its_line() {
        assert_eq!(
            parse(b"PROXY UNKNOWN\r\n"),
            Ok(Some((ProxyHeader::Unknown, 15)))
        );
        assert_eq!(
            parse(b"PROXY UNKNOWN ffff:f::1 ffff:f::2 1 2\r\nX"),
            Ok(Some((ProxyHeader::Unknown, 39)))
        );
    }

    #[test]
    fn v1_waits_for_its_crlf_up_to_107_bytes() {
        let full = b"PROXY TCP4 192.0.2.1 198.51.100.2 56324 443\r\n";
        for n in 0..full.len() {
            assert_eq!(parse(&full[..n]), Ok(None), "prefix of {n} bytes");
        }
        let longest = format!(
            "PROXY TCP6 {a} {a} 65535 65535\r\n",
            a = "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"
        );
        assert_eq!(longest.len(), 104);
        assert!(matches!(parse(longest.as_bytes()), Ok(Some((_, 104)))));
        let mut long = b"PROXY UNKNOWN ".to_vec();
        long.resize(106, b'a');
        assert_eq!(parse(&long), Ok(None));
        long.extend_from_slice(b"\r\n");
        assert_eq!(parse(&long), Err(ProxyError::V1TooLong));
        assert_eq!(parse(&long[..107]), Err(ProxyError::V1TooLong));
        long.truncate(105);
        long.extend_from_slice(b"\r\n");
        assert_eq!(parse(&long), Ok(Some((ProxyHeader::Unknown, 107))));
    }

    #[test]
    fn v1_grammar_is_strict() {
        let bad: &[&[u8]] = &[
            b"PROXY TCP4 192.0.2.1 198.51.100.2 56324 443\n",
            b"PROXY TCP4 192.0.2.1 198.51.100.2 56324 443\rx",
            b"PROXY TCP4  192.0.2.1 198.51.100.2 56324 443\r\n",
            b"PROXY TCP4 192.0.2.1 198.51.100.2 56324\r\n",
            b"PROXY TCP4 192.0.2.1 198.51.100.2 56324 443 1\r\n",
            b"PROXY TCP4 2001:db8::1 198.51.100.2 56324 443\r\n",
            b"PROXY TCP6 192.0.2.1 2001:db8::2 56324 443\r\n",
            b"PROXY TCP4 192.0.2.1 198.51.100.2 65536 443\r\n",
            b"PROXY TCP4 192.0.2.1 198.51.100.2 0443 443\r\n",
            b"PROXY TCP4 192.0.2.1 198.51.100.2 -1 443\r\n",
            b"PROXY TCP4 192.0.2.01 198.51.100.2 1 443\r\n",
            b"PROXY UDP4 192.0.2.1 198.51.100.2 1 443\r\n",
            b"PROXY tcp4 192.0.2.1 198.51.100.2 1 443\r\n",
            b"PROXY TCP4 192.0.2.1\t198.51.100.2 1 443\r\n",
            b"PROXY \r\n",
        ];
        for b in bad {
            assert!(
                matches!(parse(b), Err(ProxyError::V1Malformed(_))),
                "{:?} gave {:?}",
                String::from_utf8_lossy(b),
                parse(b)
            );
        }
    }

    #[test]
    fn other_bytes_are_not_a_proxy_header() {
        assert_eq!(parse(b"GET / HTTP/1.1\r\n"), Err(ProxyError::NotProxy));
        assert_eq!(parse(b"PROXZ"), Err(ProxyError::NotProxy));
        assert_eq!(parse(b"PRO"), Ok(None));
        assert_eq!(parse(b"\r\n\r\n\0\r\nQUIx"), Err(ProxyError::NotProxy));
        assert_eq!(parse(b"\r\n\r\n"), Ok(None));
        assert_eq!(parse(b""), Ok(None));
        assert_eq!(ProxyError::NotProxy.code(), "proxy_protocol.missing");
    }

    fn v2(ver_cmd: u8, fam: u8, payload: &[u8]) -> Vec<u8> {
        let mut b = V2_SIGNATURE.to_vec();
        b.push(ver_cmd);
        b.push(fam);
        b.extend_from_slice(&(payload.len() as u16).to_be_bytes());
        b.extend_from_slice(payload);
        b
    }

    #[test]
    fn v2_inet_and_inet6_parse_with_tlvs_skipped() {
        let mut p = vec![192, 0, 2, 1, 198, 51, 100, 2, 0xdc, 0x04, 0x01, 0xbb];
        p.extend_from_slice(&[0x01, 0x00, 0x02, b'h', b'2', 0x04, 0x00, 0x00]);
        let mut b = v2(0x21, 0x11, &p);
        b.extend_from_slice(b"GET");
        assert_eq!(
            parse(&b),
            Ok(Some((
                ProxyHeader::Tcp {
                    src: sa("192.0.2.1:56324"),
                    dst: sa("198.51.100.2:443")
                },
                16 + 20
            )))
        );
        let mut p = Ipv6Addr::from(1u128).octets().to_vec();
        p.extend_from_slice(&Ipv6Addr::from(2u128).octets());
        p.extend_from_slice(&[0, 7, 0, 8]);
        assert_eq!(
            parse(&v2(0x21, 0x22, &p)),
            Ok(Some((
                ProxyHeader::Udp {
                    src: sa("[::1]:7"),
                    dst: sa("[::2]:8")
                },
                52
            )))
        );
    }

    #[test]
    fn v2_local_unspec_and_unix_use_the_real_addresses() {
        assert_eq!(
            parse(&v2(0x20, 0x00, &[])),
            Ok(Some((ProxyHeader::Local, 16)))
        );
        // LOCAL skips whatever it carries.
        assert_eq!(
            parse(&v2(0x20, 0x11, &[1, 2, 3])),
            Ok(Some((ProxyHeader::Local, 19)))
        );
        assert_eq!(
            parse(&v2(0x21, 0x00, &[])),
            Ok(Some((ProxyHeader::Unknown, 16)))
        );
        assert_eq!(
            parse(&v2(0x21, 0x31, &[0; 216])),
            Ok(Some((ProxyHeader::Unknown, 232)))
        );
        assert_eq!(
            parse(&v2(0x21, 0x10, &[0; 12])),
            Ok(Some((ProxyHeader::Unknown, 28)))
        );
    }

    #[test]
    fn v2_refuses_bad_versions_commands_families_and_lengths() {
        assert_eq!(parse(&v2(0x11, 0x11, &[0; 12])), Err(ProxyError::V2Version));
        assert_eq!(parse(&v2(0x22, 0x11, &[0; 12])), Err(ProxyError::V2Command));
        assert_eq!(parse(&v2(0x21, 0x41, &[0; 12])), Err(ProxyError::V2Family));
        assert_eq!(parse(&v2(0x21, 0x13, &[0; 12])), Err(ProxyError::V2Family));
        assert_eq!(
            parse(&v2(0x21, 0x11, &[0; 11])),
            Err(ProxyError::V2AddressTooShort)
        );
        assert_eq!(
            parse(&v2(0x21, 0x21, &[0; 35])),
            Err(ProxyError::V2AddressTooShort)
        );
        assert_eq!(
            parse(&v2(0x21, 0x11, &[0; V2_MAX_PAYLOAD_BYTES + 1])[..16]),
            Err(ProxyError::V2TooLong)
        );
        let mut p = vec![0; 12];
        p.extend_from_slice(&[0x05, 0x00, 0x09, 1]);
        assert_eq!(parse(&v2(0x21, 0x11, &p)), Err(ProxyError::V2Tlv));
        let mut p = vec![0; 12];
        p.extend_from_slice(&[0x05, 0x00]);
        assert_eq!(parse(&v2(0x21, 0x11, &p)), Err(ProxyError::V2Tlv));
    }

    #[test]
    fn v2_waits_for_its_whole_payload() {
        let mut b = Vec::new();
        let h = ProxyHeader::Tcp {
            src: sa("[2001:db8::7]:1"),
            dst: sa("[2001:db8::8]:2"),
        };
        assert!(encode_v2(&h, &[(0x02, b"example.com")], &mut b));
        for n in 0..b.len() {
            assert_eq!(parse(&b[..n]), Ok(None), "prefix of {n} bytes");
        }
        assert_eq!(parse(&b), Ok(Some((h, b.len()))));
    }

    use gapura_gate::testing::TestRng as Rng;

    fn random_header(r: &mut Rng) -> ProxyHeader {
        let v4 = r.below(2) == 0;
        let addr = |r: &mut Rng| {
            let ip = if v4 {
                IpAddr::V4(Ipv4Addr::from(r.next() as u32))
            } else {
                IpAddr::V6(Ipv6Addr::from(
                    u128::from(r.next()) << 64 | u128::from(r.next()),
                ))
            };
            SocketAddr::new(ip, r.next() as u16)
        };
        let (src, dst) = (addr(r), addr(r));
        match r.below(8) {
            0 => ProxyHeader::Local,
            1 => ProxyHeader::Unknown,
            2 => ProxyHeader::Udp { src, dst },
            _ => ProxyHeader::Tcp { src, dst },
        }
    }

    #[test]
    fn generated_headers_round_trip() {
        let mut r = Rng(0x1557A7E);
        for _ in 0..5_000 {
            let h = random_header(&mut r);
            let tail = b"GET / HTTP/1.1\r\n";
            let mut b = Vec::new();
            if encode_v1(&h, &mut b) {
                let n = b.len();
                assert!(n <= V1_MAX_BYTES);
                b.extend_from_slice(tail);
                assert_eq!(parse(&b), Ok(Some((h, n))), "{h:?}");
            }
            let tlv_bytes: Vec<u8> = (0..r.below(40)).map(|_| r.next() as u8).collect();
            let tlvs: &[(u8, &[u8])] = &[(0x01, b"h2"), (0xee, &tlv_bytes)];
            let tlvs = &tlvs[..r.below(3) as usize];
            let mut b = Vec::new();
            assert!(encode_v2(&h, tlvs, &mut b));
            let n = b.len();
            b.extend_from_slice(tail);
            assert_eq!(parse(&b), Ok(Some((h, n))), "{h:?}");
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic() {
        let mut r = Rng(0x152026);
        let mut buf = Vec::new();
        for i in 0..20_000 {
            buf.clear();
            // Start from a valid header a third of the time, then mutate.
            match i % 3 {
                0 => {
                    encode_v1(&random_header(&mut r), &mut buf);
                }
                1 => {
                    encode_v2(&random_header(&mut r), &[(0x04, b"x")], &mut buf);
                }
                _ => buf.extend_from_slice(if r.below(2) == 0 {
                    b"PROXY "
                } else {
                    &V2_SIGNATURE
                }),
            }
            let extra = r.below(64) as usize;
            buf.extend((0..extra).map(|_| r.next() as u8));
            for _ in 0..r.below(6) {
                if !buf.is_empty() {
                    let at = r.below(buf.len() as u64) as usize;
                    buf[at] = r.next() as u8;
                }
            }
            let cut = r.below(buf.len() as u64 + 1) as usize;
            if let Ok(Some((_, consumed))) = parse(&buf[..cut]) {
                assert!(consumed <= cut);
            }
        }
    }
}
