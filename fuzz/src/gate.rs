//! The gate's parsers of peer bytes: the canonical path (against a slow
//! model of its rules), the PROXY protocol header (what it reads encodes
//! back to itself) and Basic credentials (what it reads encodes back).

use gapura_gate::access::basic::{parse_basic, Authorization, MAX_NAME_BYTES, MAX_PASSWORD_BYTES};
use gapura_gate::path::{
    canonical, canonicalize, is_canonical, path_of, PathError, PathScratch, MAX_PATH_BYTES,
};
use gapura_http::codec::proxyproto::{self, encode_v1, encode_v2, ProxyHeader};

/// The canonical path: equal to the model's answer, borrowed and rewritten
/// forms the same, the output a fixed point.
pub fn canonical_path(data: &[u8]) {
    let mut scratch: PathScratch = [0; MAX_PATH_BYTES];
    let fast = canonicalize(data, &mut scratch).map(<[u8]>::to_vec);
    assert_eq!(fast, model(data), "{:?}", String::from_utf8_lossy(data));
    let mut borrowed: PathScratch = [0; MAX_PATH_BYTES];
    assert_eq!(canonical(data, &mut borrowed).map(<[u8]>::to_vec), fast);
    if let Ok(out) = &fast {
        assert!(out.len() <= path_of(data).len().max(1));
        assert!(is_canonical(out));
        let mut again: PathScratch = [0; MAX_PATH_BYTES];
        assert_eq!(canonicalize(out, &mut again), Ok(&out[..]));
    }
    assert_eq!(
        is_canonical(path_of(data)),
        fast.as_deref() == Ok(path_of(data))
    );
}

/// The rules of `gapura_gate::path`, written the slow way: decode to
/// units, split into segments, then apply the dot and parameter rules.
fn model(raw: &[u8]) -> Result<Vec<u8>, PathError> {
    let path = match raw.iter().position(|&b| b == b'?') {
        Some(q) => &raw[..q],
        None => raw,
    };
    if path.len() > MAX_PATH_BYTES {
        return Err(PathError::TooLong);
    }
    if path.first() != Some(&b'/') {
        return Err(PathError::NotOriginForm);
    }
    // Segments as written to the output (escapes kept as three bytes),
    // each with whether parameters began in it.
    let mut segments: Vec<Vec<u8>> = vec![Vec::new()];
    let mut in_params = false;
    let mut i = 0;
    while i < path.len() {
        let mut unit: Vec<u8> = Vec::new();
        let b = if path[i] == b'%' {
            let hex = |c: Option<&u8>| c.and_then(|c| (*c as char).to_digit(16));
            let (Some(hi), Some(lo)) = (hex(path.get(i + 1)), hex(path.get(i + 2))) else {
                return Err(PathError::BadEscape);
            };
            i += 3;
            let v = (hi * 16 + lo) as u8;
            match v {
                b'%' => unit.extend_from_slice(b"%25"),
                b'?' => unit.extend_from_slice(b"%3f"),
                _ => {}
            }
            v
        } else {
            i += 1;
            path[i - 1]
        };
        if !unit.is_empty() {
            if !in_params {
                segments.last_mut().expect("one").extend_from_slice(&unit);
            }
            continue;
        }
        match b {
            b'/' | b'\\' => {
                segments.push(Vec::new());
                in_params = false;
            }
            b';' => in_params = true,
            _ if b < 0x20 || b == 0x7F => return Err(PathError::ControlByte),
            _ if in_params => {}
            _ => segments
                .last_mut()
                .expect("one")
                .push(b.to_ascii_lowercase()),
        }
    }
    let mut kept: Vec<Vec<u8>> = Vec::new();
    for mut s in segments {
        if s.is_empty() {
            continue;
        }
        if s == b".." {
            kept.pop();
            continue;
        }
        while s.last() == Some(&b'.') {
            s.pop();
        }
        if !s.is_empty() {
            kept.push(s);
        }
    }
    if kept.is_empty() {
        return Ok(b"/".to_vec());
    }
    Ok(kept.iter().flat_map(|s| [&b"/"[..], s].concat()).collect())
}

/// The PROXY protocol header: a header read is inside the input, and both
/// encodings of it that can say it parse back to the same header.
pub fn proxy_protocol(data: &[u8]) {
    let Ok(Some((header, used))) = proxyproto::parse(data) else {
        return;
    };
    assert!(used > 0 && used <= data.len());
    // Any split of the same bytes: a prefix is incomplete or the same header.
    if let Ok(Some((again, n))) = proxyproto::parse(&data[..used]) {
        assert_eq!((again, n), (header, used));
    } else {
        panic!("the header's own bytes do not parse alone");
    }
    assert!(!matches!(proxyproto::parse(&data[..used - 1]), Ok(Some(_))));
    let mut out = Vec::new();
    if encode_v1(&header, &mut out) {
        let back = proxyproto::parse(&out).expect("v1 encoding parses");
        assert_eq!(back, Some((header, out.len())));
    }
    out.clear();
    if encode_v2(&header, &[(0x04, b"x")], &mut out) {
        let back = proxyproto::parse(&out).expect("v2 encoding parses");
        let back = back.map(|(h, n)| (normalise(h), n));
        assert_eq!(back, Some((normalise(header), out.len())));
    }
}

/// v2 says "unknown" as LOCAL or an unspecified family; compare what
/// either carries.
fn normalise(h: ProxyHeader) -> Option<(std::net::SocketAddr, std::net::SocketAddr, bool)> {
    match h {
        ProxyHeader::Tcp { src, dst } => Some((src, dst, true)),
        ProxyHeader::Udp { src, dst } => Some((src, dst, false)),
        ProxyHeader::Local | ProxyHeader::Unknown => None,
    }
}

/// Basic credentials: what is read obeys the bounds and encodes back to
/// the same name and password.
pub fn basic_auth(data: &[u8]) {
    let Authorization::Basic(c) = parse_basic(data) else {
        return;
    };
    let (name, password) = (c.name().to_vec(), c.password().to_vec());
    assert!(!name.is_empty() && name.len() <= MAX_NAME_BYTES && !name.contains(&b':'));
    assert!(!password.is_empty() && password.len() <= MAX_PASSWORD_BYTES);
    assert_eq!(c.as_sent(), [&name[..], b":", &password[..]].concat());
    assert!(std::str::from_utf8(c.as_sent()).is_ok());
    use base64::Engine;
    let mut value = b"Basic ".to_vec();
    value.extend_from_slice(
        base64::engine::general_purpose::STANDARD
            .encode(c.as_sent())
            .as_bytes(),
    );
    let Authorization::Basic(back) = parse_basic(&value) else {
        panic!("re-encoded credentials do not parse");
    };
    assert_eq!((back.name(), back.password()), (&name[..], &password[..]));
}
