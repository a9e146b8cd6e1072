//! The recorded corpus of hostile HTTP and credential input: 5,000 inputs
//! from the recorded seed 0x154A50 through the production head parser,
//! chunked decoder and `Authorization: Basic` reader. Nothing panics,
//! every answer is typed and within its input, a complete head parses the
//! same from exactly its own bytes, credentials read back are well formed,
//! and the outcomes are the recorded ones (a change in any of them is a
//! change of behaviour, to be looked at).

use gapura_gate::access::basic::{parse_basic, Authorization};
use gapura_gate::testing::TestRng;
use gapura_http::codec::chunked::ChunkedDecoder;
use gapura_http::codec::head::{header_buf, parse_head, Parse};
use std::collections::BTreeMap;

const SEED: u64 = 0x154A50;

const REQUESTS: [&[u8]; 6] = [
    b"GET /a/b?c=d HTTP/1.1\r\nHost: example.com\r\nUser-Agent: x\r\nAccept: */*\r\n\r\n",
    b"POST /upload HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello",
    b"PUT /x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
    b"GET http://h.test:8080/p HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: a\r\nAuthorization: Basic YWxpY2U6c2VjcmV0\r\n\r\n",
    b"OPTIONS * HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n",
];

/// Bytes an attacker likes: line ends, separators, NUL, high bytes.
const NASTY: [u8; 12] = [
    b'\r', b'\n', b':', b' ', b'\t', 0, 0x7f, 0x80, 0xff, b'%', b'/', b'.',
];

fn mutate(rng: &mut TestRng, base: &[u8]) -> Vec<u8> {
    let mut v = base.to_vec();
    for _ in 0..1 + rng.below(4) {
        let at = rng.below(v.len() as u64 + 1) as usize;
        match rng.below(6) {
            0 if at < v.len() => v[at] = NASTY[rng.below(NASTY.len() as u64) as usize],
            1 if at < v.len() => {
                v.remove(at);
            }
            2 => v.insert(at, NASTY[rng.below(NASTY.len() as u64) as usize]),
            3 => {
                // A header line repeated (duplicate Content-Length, Host...).
                let line: &[u8] = match rng.below(4) {
                    0 => b"Content-Length: 7\r\n",
                    1 => b"Transfer-Encoding: chunked\r\n",
                    2 => b"Host: b\r\n",
                    _ => b"X: \x01\r\n",
                };
                let pos = v
                    .windows(2)
                    .position(|w| w == b"\r\n")
                    .map_or(v.len(), |p| p + 2);
                v.splice(pos..pos, line.iter().copied());
            }
            4 => v.truncate(at),
            _ if at < v.len() => v[at] ^= 1 << rng.below(8),
            _ => {}
        }
    }
    v
}

fn head_outcome(buf: &[u8]) -> String {
    let mut headers = header_buf::<{ gapura_http::server::REQUEST_LINES }>();
    match parse_head(buf, &mut headers, &gapura_http::server::HEAD_BOUNDS) {
        Parse::Complete(h, lines) => {
            assert!(h.head_len <= buf.len());
            assert!(h.target.end <= h.head_len && h.path.end <= h.head_len);
            assert_eq!(lines.len(), h.header_count);
            let own = h.head_len;
            let framing = format!("{:?}", h.framing);
            // The head alone parses to the same head.
            let mut again = header_buf::<{ gapura_http::server::REQUEST_LINES }>();
            match parse_head(&buf[..own], &mut again, &gapura_http::server::HEAD_BOUNDS) {
                Parse::Complete(h2, _) => assert_eq!(
                    (h2.head_len, format!("{:?}", h2.framing)),
                    (own, framing.clone())
                ),
                _ => panic!("a complete head is complete on its own bytes: {buf:?}"),
            }
            let kind = framing
                .split(['(', ' ', '{'])
                .next()
                .unwrap_or("")
                .to_string();
            format!("complete {kind}")
        }
        Parse::Partial => "partial".into(),
        Parse::Error(e) => {
            let e = format!("{e:?}");
            format!("error {}", e.split(['(', ' ', '{']).next().unwrap_or(""))
        }
    }
}

fn chunked_outcome(body: &[u8]) -> &'static str {
    let mut d = ChunkedDecoder::new();
    let mut at = 0;
    while at < body.len() {
        match d.step(&body[at..]) {
            Err(_) => return "error",
            Ok(step) => {
                assert!(step.consumed <= body.len() - at);
                assert!(step.data.end <= step.consumed);
                at += step.consumed;
                if step.done {
                    return "done";
                }
                if step.consumed == 0 {
                    break;
                }
            }
        }
    }
    "incomplete"
}

fn basic_outcome(value: &[u8]) -> String {
    match parse_basic(value) {
        Authorization::Missing => "missing".into(),
        Authorization::Unreadable(u) => format!("unreadable {u:?}"),
        Authorization::Basic(c) => {
            assert!(!c.name().is_empty() && c.name().len() <= 64);
            assert!(!c.name().contains(&b':'));
            assert!(!c.password().is_empty());
            assert!(std::str::from_utf8(c.name()).is_ok());
            "basic".into()
        }
    }
}

fn base64(raw: &[u8]) -> Vec<u8> {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = Vec::new();
    for c in raw.chunks(3) {
        let n = c
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, &b)| n | u32::from(b) << (16 - 8 * i));
        for i in 0..4 {
            if i <= c.len() {
                out.push(A[(n >> (18 - 6 * i) & 63) as usize]);
            } else {
                out.push(b'=');
            }
        }
    }
    out
}

#[test]
fn five_thousand_recorded_inputs_get_their_recorded_answers() {
    let mut rng = TestRng(SEED);
    let mut seen: BTreeMap<String, u32> = BTreeMap::new();
    let mut count = |k: String| *seen.entry(k).or_insert(0) += 1;
    for i in 0..5_000u32 {
        match i % 5 {
            0 | 1 => {
                let base = REQUESTS[rng.below(REQUESTS.len() as u64) as usize];
                count(format!("head {}", head_outcome(&mutate(&mut rng, base))));
            }
            2 => {
                let n = rng.below(300) as usize;
                let bytes: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
                count(format!("head {}", head_outcome(&bytes)));
            }
            3 => {
                let good: &[u8] = b"5\r\nhello\r\n3;ext=1\r\nabc\r\n0\r\nTrailer: x\r\n\r\n";
                count(format!(
                    "chunked {}",
                    chunked_outcome(&mutate(&mut rng, good))
                ));
            }
            _ => {
                let name_len = rng.below(70) as usize;
                let mut raw: Vec<u8> = (0..name_len).map(|_| b'a' + rng.below(26) as u8).collect();
                raw.push(b':');
                raw.extend((0..rng.below(40)).map(|_| rng.next() as u8));
                let mut value = b"Basic ".to_vec();
                value.extend(base64(&raw));
                // Half of them intact: names too long, passwords empty,
                // bytes that are not UTF-8, as well as damaged encodings.
                let value = if rng.below(2) == 0 {
                    mutate(&mut rng, &value)
                } else {
                    value
                };
                count(format!("basic {}", basic_outcome(&value)));
            }
        }
    }
    let total: u32 = seen.values().sum();
    assert_eq!(total, 5_000);
    let recorded: Vec<(String, u32)> = seen.into_iter().collect();
    assert_eq!(
        recorded,
        RECORDED
            .iter()
            .map(|(k, n)| (k.to_string(), *n))
            .collect::<Vec<_>>()
    );
}

/// The outcomes of the corpus, recorded.
const RECORDED: &[(&str, u32)] = &[
    ("basic basic", 19),
    ("basic missing", 83),
    ("basic unreadable Base64", 291),
    ("basic unreadable Empty", 2),
    ("basic unreadable Name", 3),
    ("basic unreadable NoColon", 51),
    ("basic unreadable NotUtf8", 539),
    ("basic unreadable Password", 12),
    ("chunked done", 111),
    ("chunked error", 751),
    ("chunked incomplete", 138),
    ("head complete Chunked", 38),
    ("head complete Length", 43),
    ("head complete None", 180),
    ("head error Malformed", 2379),
    ("head partial", 360),
];
