//! The grammar of forwarding headers: the nodes of `X-Forwarded-For` and
//! `Forwarded` (RFC 7239), the bare address of `CF-Connecting-IP`, and the
//! `CF-Ray` characters kept. Every function reads borrowed bytes, is bounded
//! by [`MAX_NODE_BYTES`] where it parses an address, and never allocates;
//! anything malformed names nobody (`None`).

use super::{MAX_CF_RAY_BYTES, MAX_NODE_BYTES};
use crate::cidr::canonical;
use std::net::{IpAddr, Ipv4Addr};

fn trim_ows(b: &[u8]) -> &[u8] {
    let ows = |c: &u8| *c == b' ' || *c == b'\t';
    if !b.first().is_some_and(ows) && !b.last().is_some_and(ows) {
        return b;
    }
    let start = b
        .iter()
        .position(|&c| c != b' ' && c != b'\t')
        .unwrap_or(b.len());
    let end = b
        .iter()
        .rposition(|&c| c != b' ' && c != b'\t')
        .map_or(start, |e| e + 1);
    &b[start..end]
}

pub(super) fn last_xff_element(line: &[u8]) -> Option<IpAddr> {
    let last = line.rsplit(|&b| b == b',').next()?;
    parse_node(last)
}

/// A bare address, as `CF-Connecting-IP` carries it.
pub(super) fn parse_bare(value: &[u8]) -> Option<IpAddr> {
    let v = trim_ows(value);
    if v.len() > MAX_NODE_BYTES {
        return None;
    }
    if let Some(v4) = plain_ipv4(v) {
        return Some(IpAddr::V4(v4));
    }
    let ip: IpAddr = std::str::from_utf8(v).ok()?.parse().ok()?;
    Some(canonical(ip))
}

/// An address as a forwarding header writes a node: `192.0.2.1`,
/// `192.0.2.1:4711`, `2001:db8::1`, `[2001:db8::1]`, `[2001:db8::1]:4711`
/// (a port may be obfuscated, `_x`). `unknown` and obfuscated identifiers
/// are not addresses.
///
/// The dotted quad is read in line (every request through a proxy has one);
/// the other forms out of line.
#[inline(always)]
fn parse_node(node: &[u8]) -> Option<IpAddr> {
    let node = trim_ows(node);
    if node.is_empty() || node.len() > MAX_NODE_BYTES {
        return None;
    }
    if let Some(v4) = plain_ipv4(node) {
        return Some(IpAddr::V4(v4));
    }
    parse_node_other(node)
}

/// [`parse_node`] for a node that is not a plain dotted quad.
#[inline(never)]
fn parse_node_other(node: &[u8]) -> Option<IpAddr> {
    let text = std::str::from_utf8(node).ok()?;
    let ip = if let Some(rest) = text.strip_prefix('[') {
        let (inner, after) = rest.split_once(']')?;
        if !after.is_empty() && !after.strip_prefix(':').is_some_and(valid_port) {
            return None;
        }
        IpAddr::V6(inner.parse().ok()?)
    } else if let Ok(ip) = text.parse::<IpAddr>() {
        ip
    } else {
        let (host, port) = text.split_once(':')?;
        if !valid_port(port) {
            return None;
        }
        IpAddr::V4(host.parse().ok()?)
    };
    Some(canonical(ip))
}

/// The common node, a dotted quad without a port, read straight from the
/// bytes: four groups of one to three digits, each at most 255, without
/// leading zeros. Anything else is `None` and left to the full parser, which
/// reads every form this one takes the same way. O(length), no allocation.
#[inline]
fn plain_ipv4(b: &[u8]) -> Option<Ipv4Addr> {
    let n = b.len();
    if !(7..=15).contains(&n) {
        return None;
    }
    let mut octets = [0u8; 4];
    let mut i = 0;
    for (k, octet) in octets.iter_mut().enumerate() {
        if k > 0 {
            if b.get(i) != Some(&b'.') {
                return None;
            }
            i += 1;
        }
        let start = i;
        let mut value: u32 = 0;
        while i < n && i - start < 3 {
            let d = b[i].wrapping_sub(b'0');
            if d > 9 {
                break;
            }
            value = value * 10 + u32::from(d);
            i += 1;
        }
        let digits = i - start;
        if digits == 0 || (digits > 1 && b[start] == b'0') {
            return None;
        }
        *octet = u8::try_from(value).ok()?;
    }
    (i == n).then(|| Ipv4Addr::from(octets))
}

/// 1 to 5 digits up to 65535, or an obfuscated port (`_` then letters,
/// digits, `.`, `_`, `-`).
fn valid_port(p: &str) -> bool {
    let b = p.as_bytes();
    if let Some(obf) = b.strip_prefix(b"_") {
        return !obf.is_empty()
            && obf
                .iter()
                .all(|&c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b'-'));
    }
    !b.is_empty()
        && b.len() <= 5
        && b.iter().all(u8::is_ascii_digit)
        && p.parse::<u32>().is_ok_and(|n| n <= 65535)
}

pub(super) fn valid_cf_ray(v: &[u8]) -> bool {
    !v.is_empty()
        && v.len() <= MAX_CF_RAY_BYTES
        && v.iter().all(|&c| c.is_ascii_alphanumeric() || c == b'-')
}

/// The `for=` of the last element of one `Forwarded` line. A malformed
/// line (an unterminated quote, a pair without `=`, `for` twice in the
/// element) names nobody.
pub(super) fn last_forwarded_for(line: &[u8]) -> Option<IpAddr> {
    // The last element starts after the last comma outside quotes.
    let mut start = 0;
    let (mut quoted, mut escaped) = (false, false);
    for (i, &b) in line.iter().enumerate() {
        if quoted {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                quoted = false;
            }
        } else if b == b'"' {
            quoted = true;
        } else if b == b',' {
            start = i + 1;
        }
    }
    if quoted {
        return None;
    }
    let element = &line[start..];
    // Its pairs are separated by semicolons outside quotes.
    let mut found: Option<&[u8]> = None;
    let mut pair_start = 0;
    let (mut quoted, mut escaped) = (false, false);
    for i in 0..=element.len() {
        let b = element.get(i).copied();
        if quoted {
            match b {
                _ if escaped => escaped = false,
                Some(b'\\') => escaped = true,
                Some(b'"') => quoted = false,
                _ => {}
            }
            continue;
        }
        match b {
            Some(b'"') => quoted = true,
            Some(b';') | None => {
                let pair = trim_ows(&element[pair_start..i]);
                pair_start = i + 1;
                if pair.is_empty() {
                    continue;
                }
                let eq = pair.iter().position(|&c| c == b'=')?;
                if pair[..eq].eq_ignore_ascii_case(b"for") {
                    if found.is_some() {
                        return None;
                    }
                    found = Some(&pair[eq + 1..]);
                }
            }
            _ => {}
        }
    }
    let mut buf = [0u8; MAX_NODE_BYTES];
    let node = unquote(found?, &mut buf)?;
    parse_node(node)
}

/// A token as is, or a quoted string with its escapes undone into `buf`.
fn unquote<'a>(v: &'a [u8], buf: &'a mut [u8; MAX_NODE_BYTES]) -> Option<&'a [u8]> {
    let Some(inner) = v.strip_prefix(b"\"") else {
        return if v.contains(&b'"') { None } else { Some(v) };
    };
    let inner = inner.strip_suffix(b"\"")?;
    let mut n = 0;
    let mut escaped = false;
    for &b in inner {
        if !escaped && b == b'\\' {
            escaped = true;
            continue;
        }
        if !escaped && b == b'"' {
            return None;
        }
        escaped = false;
        *buf.get_mut(n)? = b;
        n += 1;
    }
    if escaped {
        return None;
    }
    Some(&buf[..n])
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn plain_ipv4_takes_only_what_the_full_parser_reads_the_same() {
        for ok in [
            "0.0.0.0",
            "203.0.113.7",
            "255.255.255.255",
            "10.0.0.1",
            "1.2.3.4",
        ] {
            assert_eq!(plain_ipv4(ok.as_bytes()), ok.parse().ok(), "{ok}");
        }
        for other in [
            "",
            "1.2.3",
            "1.2.3.4.5",
            "256.0.0.1",
            "01.2.3.4",
            "1.2.3.04",
            "1..2.3",
            ".1.2.3",
            "1.2.3.",
            "1.2.3.4:80",
            "1.2.3.4 ",
            "1234.1.1.1",
            "::1",
            "unknown",
        ] {
            assert_eq!(plain_ipv4(other.as_bytes()), None, "{other}");
        }
        assert_eq!(parse_node(b" 203.0.113.7 "), "203.0.113.7".parse().ok());
        assert_eq!(parse_node(b"203.0.113.7:4711"), "203.0.113.7".parse().ok());
    }

    proptest! {
        #![proptest_config(ProptestConfig {
            rng_seed: proptest::test_runner::RngSeed::Fixed(0x9A7B_0002),
            ..ProptestConfig::default()
        })]
        #[test]
        fn plain_ipv4_reads_every_dotted_quad(o in any::<[u8; 4]>()) {
            let text = Ipv4Addr::from(o).to_string();
            prop_assert_eq!(plain_ipv4(text.as_bytes()), Some(Ipv4Addr::from(o)));
            let padded = format!("\t {text} ");
            prop_assert_eq!(parse_node(padded.as_bytes()), Some(IpAddr::V4(Ipv4Addr::from(o))));
        }

        #[test]
        fn plain_ipv4_never_disagrees_with_the_full_parser(s in "[0-9.]{0,17}") {
            if let Some(v4) = plain_ipv4(s.as_bytes()) {
                prop_assert_eq!(Some(v4), s.parse::<Ipv4Addr>().ok());
            }
            // And the node parser's answer is the full parser's.
            let full = s.parse::<IpAddr>().ok().map(canonical);
            prop_assert_eq!(parse_node(s.as_bytes()), full);
            prop_assert_eq!(parse_bare(s.as_bytes()), full);
        }
    }
}
