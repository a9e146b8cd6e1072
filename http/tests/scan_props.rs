//! The plain head's one-pass reader (`codec::scan`) against httparse: what
//! it accepts, httparse accepts with the same method, target, version,
//! lines and length, each part where it lies in the buffer; what it
//! declines is left to httparse whole. Over heads built from plain and
//! unusual parts, mutated, cut short and followed by more bytes; plus the
//! heads real clients send, which it must take.

use gapura_http::codec::head::{header_buf, parse_head, Method, Parse};
use gapura_http::codec::scan::{check_against_httparse, scan, Declined};
use gapura_http::server::{HEAD_BOUNDS, REQUEST_LINES};
use proptest::prelude::*;

/// Whether `scan` took `buf`; when it did, httparse read the same head
/// (`check_against_httparse`), and the method named is the one sent.
fn agrees(buf: &[u8]) -> bool {
    let taken = check_against_httparse::<REQUEST_LINES>(buf)
        .unwrap_or_else(|why| panic!("{why}: {:?}", String::from_utf8_lossy(buf)));
    if !taken {
        return false;
    }
    let mut lines = header_buf::<REQUEST_LINES>();
    let (plain, _) = scan(buf, &mut lines).unwrap();
    let token = std::str::from_utf8(plain.method_token).unwrap();
    let named = [
        ("GET", Method::Get),
        ("HEAD", Method::Head),
        ("POST", Method::Post),
        ("PUT", Method::Put),
        ("DELETE", Method::Delete),
        ("OPTIONS", Method::Options),
        ("PATCH", Method::Patch),
        ("CONNECT", Method::Connect),
    ];
    let want = named
        .iter()
        .find(|(t, _)| *t == token)
        .map_or(Method::Other, |(_, m)| *m);
    assert_eq!(plain.method, want);
    true
}

/// A part of a head, plain (`true`: the shape `scan` must take) or not.
fn part(plain: &[&'static str], unusual: &[&'static str]) -> BoxedStrategy<(String, bool)> {
    let p: Vec<(String, bool)> = plain.iter().map(|s| (s.to_string(), true)).collect();
    let u: Vec<(String, bool)> = unusual.iter().map(|s| (s.to_string(), false)).collect();
    prop_oneof![
        4 => proptest::sample::select(p),
        1 => proptest::sample::select(u),
    ]
    .boxed()
}

/// A header value: visible ASCII, spaces and tabs (plain), or any bytes.
fn value() -> BoxedStrategy<(Vec<u8>, bool)> {
    let plain_bytes =
        proptest::sample::select(b"abcXYZ019 \t-_.:;,/=\"'()*+?!~#%&[]{}<>@\\^`|$".to_vec());
    prop_oneof![
        6 => proptest::collection::vec(plain_bytes, 0..40).prop_map(|v| (v, true)),
        1 => proptest::collection::vec(any::<u8>(), 0..12).prop_map(|v| {
            let plain = v.iter().all(|&b| b == b'\t' || (0x20..0x7f).contains(&b));
            (v, plain)
        }),
    ]
    .boxed()
}

/// A head assembled from parts, and whether every part was plain.
fn head() -> impl Strategy<Value = (Vec<u8>, bool)> {
    let start = part(&[""], &["\r\n", "\n"]);
    let method = part(
        &[
            "GET", "POST", "HEAD", "PUT", "DELETE", "OPTIONS", "PATCH", "PROPFIND", "CONNECT",
        ],
        &["get", "G-T", "", "GET\t", "GE T"],
    );
    let target = part(
        &[
            "/",
            "/a/b?c=d",
            "*",
            "http://h.test:8080/p",
            "/%2e%2e/x#f",
            "/~!$&'()*+,;=:@[]",
        ],
        &["", "/a b", "/\x7f", "/\u{e9}", "/\t"],
    );
    let version = part(
        &["HTTP/1.1\r\n", "HTTP/1.0\r\n"],
        &[
            "HTTP/1.1\n",
            "HTTP/2.0\r\n",
            "HTTP/1.1",
            "HTTP/1.1 \r\n",
            "http/1.1\r\n",
        ],
    );
    let name = part(
        &[
            "Host",
            "content-length",
            "X-A",
            "Accept",
            "a",
            "!#$%&'*+-.^_`|~",
        ],
        &["", "Bad Name", "X\tY", "X(Y)"],
    );
    let sep = part(&[":", ": ", ":\t ", ":   "], &[" :", ""]);
    let end = part(&["\r\n"], &["\n", "\r", "\r\r\n", "\n\r\n"]);
    let line = (name, sep, value(), end);
    let lines = proptest::collection::vec(line, 0..6);
    let last = part(&["\r\n"], &["\n", "\r", "", " \r\n"]);
    (start, method, target, version, lines, last).prop_map(
        |(start, method, target, version, lines, last)| {
            let mut plain = start.1 && method.1 && target.1 && version.1 && last.1;
            let mut out = Vec::new();
            out.extend_from_slice(start.0.as_bytes());
            out.extend_from_slice(method.0.as_bytes());
            out.push(b' ');
            out.extend_from_slice(target.0.as_bytes());
            out.push(b' ');
            out.extend_from_slice(version.0.as_bytes());
            for (name, sep, value, end) in lines {
                plain &= name.1 && sep.1 && value.1 && end.1;
                out.extend_from_slice(name.0.as_bytes());
                out.extend_from_slice(sep.0.as_bytes());
                out.extend_from_slice(&value.0);
                out.extend_from_slice(end.0.as_bytes());
            }
            out.extend_from_slice(last.0.as_bytes());
            (out, plain)
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 4000,
        rng_seed: proptest::test_runner::RngSeed::Fixed(0x5CA7_0001),
        ..ProptestConfig::default()
    })]

    #[test]
    fn a_plain_head_is_taken_and_read_as_httparse_reads_it(
        (head, plain) in head(),
        after in proptest::collection::vec(any::<u8>(), 0..16),
    ) {
        let mut buf = head.clone();
        buf.extend_from_slice(&after);
        let taken = agrees(&buf);
        if plain {
            prop_assert!(taken, "declined a plain head {:?}", String::from_utf8_lossy(&head));
        }
        // A strict prefix of a head is never a head; of a plain one, it
        // waits for the rest.
        for cut in 0..head.len() {
            agrees(&head[..cut]);
            if plain {
                let mut lines = header_buf::<REQUEST_LINES>();
                prop_assert_eq!(scan(&head[..cut], &mut lines).err(), Some(Declined::Partial));
            }
        }
    }

    #[test]
    fn a_mutated_head_is_taken_only_as_httparse_reads_it(
        (head, _) in head(),
        edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..6),
    ) {
        let mut buf = head;
        if buf.is_empty() {
            return Ok(());
        }
        for (at, b) in edits {
            let i = at % buf.len();
            buf[i] = b;
        }
        agrees(&buf);
    }

    #[test]
    fn arbitrary_bytes_are_taken_only_as_httparse_reads_them(
        bytes in proptest::collection::vec(any::<u8>(), 0..200),
    ) {
        let mut buf = b"GET / HTTP/1.1\r\n".to_vec();
        buf.extend_from_slice(&bytes);
        agrees(&bytes);
        agrees(&buf);
    }
}

/// Heads as real clients send them: each is taken, with its parts.
#[test]
fn the_heads_clients_send_are_taken() {
    let heads: [&[u8]; 5] = [
        b"GET / HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n\r\n",
        b"GET /index.html HTTP/1.1\r\nHost: example.com\r\nUser-Agent: curl/8.5.0\r\nAccept: */*\r\n\r\n",
        b"GET /a?b=c HTTP/1.1\r\nHost: example.com\r\nUser-Agent: Mozilla/5.0 (X11; Linux x86_64; rv:120.0) Gecko/20100101 Firefox/120.0\r\nAccept: text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8\r\nAccept-Language: en-US,en;q=0.5\r\nAccept-Encoding: gzip, deflate, br\r\nConnection: keep-alive\r\nCookie: a=b; c=d\r\nUpgrade-Insecure-Requests: 1\r\n\r\n",
        b"POST /upload HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello",
        b"HEAD /x HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
    ];
    for h in heads {
        assert!(agrees(h), "{:?}", String::from_utf8_lossy(h));
    }
    let mut lines = header_buf::<REQUEST_LINES>();
    let (plain, read) = scan(heads[3], &mut lines).unwrap();
    assert_eq!(plain.method, Method::Post);
    assert_eq!(plain.target, b"/upload");
    assert_eq!(plain.version, 1);
    assert_eq!(plain.head_len, heads[3].len() - 5);
    let read: Vec<(&str, &[u8])> = read.iter().map(|h| (h.name, h.value)).collect();
    assert_eq!(read, [("Host", &b"a"[..]), ("Content-Length", &b"5"[..])]);
}

/// What `scan` declines, the parser still decides as httparse's path did:
/// a head with a bare LF is read, one with obs-fold refused, one cut short
/// waits.
#[test]
fn a_declined_head_is_decided_by_the_full_parser() {
    let cases: [(&[u8], &str); 5] = [
        (b"GET / HTTP/1.1\nHost: a\n\n", "complete"),
        (b"\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n", "complete"),
        (b"GET / HTTP/1.1\r\nHost: a\r\nX: b\r\n c\r\n\r\n", "error"),
        (
            b"GET / HTTP/1.1\r\nHost: a\r\nX: \xc3\xa9\r\n\r\n",
            "complete",
        ),
        (b"GET / HTTP/1.1\r\nHost: a\r\n", "partial"),
    ];
    for (buf, want) in cases {
        let mut mine = header_buf::<REQUEST_LINES>();
        assert!(scan(buf, &mut mine).is_err());
        let mut lines = header_buf::<REQUEST_LINES>();
        let got = match parse_head(buf, &mut lines, &HEAD_BOUNDS) {
            Parse::Complete(..) => "complete",
            Parse::Partial => "partial",
            Parse::Error(_) => "error",
        };
        assert_eq!(got, want, "{:?}", String::from_utf8_lossy(buf));
    }
}

/// More lines than the array holds: declined, and the full parser says 431.
#[test]
fn more_lines_than_the_array_holds_are_declined() {
    let mut buf = b"GET / HTTP/1.1\r\nHost: a\r\n".to_vec();
    for i in 0..REQUEST_LINES {
        buf.extend_from_slice(format!("X-{i}: v\r\n").as_bytes());
    }
    buf.extend_from_slice(b"\r\n");
    let mut mine = header_buf::<REQUEST_LINES>();
    assert_eq!(scan(&buf, &mut mine).err(), Some(Declined::Other));
    let mut lines = header_buf::<REQUEST_LINES>();
    assert!(matches!(
        parse_head(&buf, &mut lines, &HEAD_BOUNDS),
        Parse::Error(gapura_http::codec::HeadError::TooLarge)
    ));
}

/// Every byte value in every place a byte can stand (method, target,
/// name, value, the line ends), at every offset from a word's start and
/// from the buffer's end: taken only as httparse reads it, and taken when
/// the byte belongs there.
#[test]
fn every_byte_in_every_place_is_read_as_httparse_reads_it() {
    for pad in 0..17 {
        let fill = "a".repeat(pad);
        for b in 0..=255u8 {
            let cases: [(Vec<u8>, bool); 6] = [
                (
                    [
                        b"GET /".as_slice(),
                        fill.as_bytes(),
                        &[b],
                        b" HTTP/1.1\r\n\r\n",
                    ]
                    .concat(),
                    (0x21..0x7f).contains(&b),
                ),
                (
                    [b"GET / HTTP/1.1\r\nX: ", fill.as_bytes(), &[b], b"\r\n\r\n"].concat(),
                    b == b'\t' || (0x20..0x7f).contains(&b),
                ),
                (
                    [
                        b"GET / HTTP/1.1\r\nX: ".as_slice(),
                        &[b],
                        fill.as_bytes(),
                        b"\r\n\r\n",
                    ]
                    .concat(),
                    b == b'\t' || (0x20..0x7f).contains(&b),
                ),
                (
                    [
                        b"GET / HTTP/1.1\r\nX",
                        fill.as_bytes(),
                        &[b],
                        b": v\r\n\r\n",
                    ]
                    .concat(),
                    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b),
                ),
                (
                    [
                        b"GE".as_slice(),
                        &[b],
                        b" /",
                        fill.as_bytes(),
                        b" HTTP/1.1\r\n\r\n",
                    ]
                    .concat(),
                    b.is_ascii_uppercase(),
                ),
                (
                    [b"GET / HTTP/1.1\r\nX: v", fill.as_bytes(), &[b], b"\n\r\n"].concat(),
                    b == b'\r',
                ),
            ];
            for (buf, plain) in cases {
                let taken = agrees(&buf);
                assert!(
                    !plain || taken,
                    "declined {:?}",
                    String::from_utf8_lossy(&buf)
                );
                // And cut at every length, the byte near the end.
                for cut in buf.len().saturating_sub(12)..buf.len() {
                    agrees(&buf[..cut]);
                }
            }
        }
    }
}
