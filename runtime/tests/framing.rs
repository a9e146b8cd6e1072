//! The framing corpus: hostile request heads and bodies, each sent on its
//! own connection through the proxy to an upstream that records every
//! request it receives. A hostile message is refused (400, 413, 414, 431,
//! or closed) and the upstream never sees it, so no two parsers can
//! disagree about where a request ends. Plain requests beside them are
//! forwarded with one framing each.

mod common;

use common::upstream::{self, Reply, UpRequest};
use common::*;
use std::io::{Read, Write};
use std::sync::Arc;
use std::time::Duration;

const H: &str = "Host: f.test\r\n";

/// The hostile cases: (name, bytes).
fn corpus() -> Vec<(&'static str, Vec<u8>)> {
    let post = |headers: &str, body: &str| {
        format!("POST /u HTTP/1.1\r\n{H}{headers}\r\n{body}").into_bytes()
    };
    vec![
        (
            "CL and TE",
            post(
                "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n",
                "0\r\n\r\n",
            ),
        ),
        (
            "TE and CL",
            post(
                "Transfer-Encoding: chunked\r\nContent-Length: 5\r\n",
                "0\r\n\r\n",
            ),
        ),
        (
            "two differing CL",
            post("Content-Length: 5\r\nContent-Length: 6\r\n", "hello!"),
        ),
        (
            "CL list differing",
            post("Content-Length: 5, 6\r\n", "hello!"),
        ),
        ("CL negative", post("Content-Length: -1\r\n", "")),
        ("CL hex", post("Content-Length: 0x5\r\n", "hello")),
        ("CL plus sign", post("Content-Length: +5\r\n", "hello")),
        (
            "CL huge",
            post("Content-Length: 99999999999999999999\r\n", ""),
        ),
        ("CL with space inside", post("Content-Length: 1 2\r\n", "")),
        ("CL empty", post("Content-Length: \r\n", "")),
        (
            "TE gzip, chunked",
            post("Transfer-Encoding: gzip, chunked\r\n", "0\r\n\r\n"),
        ),
        (
            "TE identity, chunked",
            post("Transfer-Encoding: identity, chunked\r\n", "0\r\n\r\n"),
        ),
        (
            "TE chunked, gzip",
            post("Transfer-Encoding: chunked, gzip\r\n", "0\r\n\r\n"),
        ),
        ("TE identity", post("Transfer-Encoding: identity\r\n", "")),
        (
            "TE chunked twice in a list",
            post("Transfer-Encoding: chunked, chunked\r\n", "0\r\n\r\n"),
        ),
        (
            "TE chunked on two lines",
            post(
                "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n",
                "0\r\n\r\n",
            ),
        ),
        (
            "TE split gzip then chunked",
            post(
                "Transfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n",
                "0\r\n\r\n",
            ),
        ),
        (
            "TE xchunked",
            post("Transfer-Encoding: xchunked\r\n", "0\r\n\r\n"),
        ),
        (
            "TE chunked with parameter",
            post("Transfer-Encoding: chunked;q=1\r\n", "0\r\n\r\n"),
        ),
        (
            "TE in HTTP/1.0",
            format!("POST /u HTTP/1.0\r\n{H}Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n")
                .into_bytes(),
        ),
        (
            "TE with a space before the colon",
            post("Transfer-Encoding : chunked\r\n", "0\r\n\r\n"),
        ),
        (
            "TE obs-folded",
            post("Transfer-Encoding: gzip,\r\n chunked\r\n", "0\r\n\r\n"),
        ),
        (
            "header name with a tab",
            post("Transfer-Encoding\t: chunked\r\n", "0\r\n\r\n"),
        ),
        (
            "bare LF in a header",
            format!("POST /u HTTP/1.1\r\n{H}X-A: 1\nContent-Length: 3\r\n\r\nabc").into_bytes(),
        ),
        ("bare CR in a header", post("X-A: a\rb\r\n", "")),
        ("NUL in a header value", post("X-A: a\0b\r\n", "")),
        (
            "duplicate Host",
            format!("GET / HTTP/1.1\r\n{H}Host: other.test\r\n\r\n").into_bytes(),
        ),
        (
            "fragment in the target",
            format!("GET /a#b HTTP/1.1\r\n{H}\r\n").into_bytes(),
        ),
        (
            "absolute target with a fragment",
            format!("GET http://f.test/a#b HTTP/1.1\r\n{H}\r\n").into_bytes(),
        ),
        (
            "space in the target",
            format!("GET /a b HTTP/1.1\r\n{H}\r\n").into_bytes(),
        ),
        (
            "unknown version",
            format!("GET / HTTP/1.2\r\n{H}\r\n").into_bytes(),
        ),
        (
            "HTTP/2 preface as HTTP/1",
            b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec(),
        ),
        (
            "no space after the method",
            format!("GET/ HTTP/1.1\r\n{H}\r\n").into_bytes(),
        ),
        (
            "chunk size not hex",
            post("Transfer-Encoding: chunked\r\n", "zz\r\nhello\r\n0\r\n\r\n"),
        ),
        (
            "chunk size overflowing",
            post(
                "Transfer-Encoding: chunked\r\n",
                "ffffffffffffffffff\r\nx\r\n0\r\n\r\n",
            ),
        ),
        (
            "chunk without its CRLF",
            post("Transfer-Encoding: chunked\r\n", "5\r\nhelloXX0\r\n\r\n"),
        ),
        (
            "chunk size with a bare LF",
            post("Transfer-Encoding: chunked\r\n", "5\nhello\r\n0\r\n\r\n"),
        ),
        (
            "chunk size with a leading space",
            post("Transfer-Encoding: chunked\r\n", " 5\r\nhello\r\n0\r\n\r\n"),
        ),
        (
            "chunk size with a sign",
            post("Transfer-Encoding: chunked\r\n", "+5\r\nhello\r\n0\r\n\r\n"),
        ),
        (
            "Host with a space",
            "GET / HTTP/1.1\r\nHost: f .test\r\n\r\n"
                .as_bytes()
                .to_vec(),
        ),
        ("empty header name", post(": x\r\n", "")),
        (
            "request line only LF",
            format!("GET / HTTP/1.1\n{H}\r\n").into_bytes(),
        ),
    ]
}

#[test]
fn hostile_framing_is_refused_and_never_reaches_the_upstream() {
    let up = upstream::start(Arc::new(|_r: &UpRequest| {
        Reply::Bytes(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nup\n".to_vec())
    }));
    let g = Gapura::start(&profile(
        "",
        &format!(
            "[[upstream]]\nname = \"app\"\nservers = [\"{}\"]\n\n[[host]]\nnames = [\"f.test\"]\ndefault = true\nkind = \"proxy\"\n  [[host.route]]\n  path = \"/\"\n  upstream = \"app\"\n",
            up.addr
        ),
    ));
    let cases = corpus();
    assert!(cases.len() >= 40, "{} cases", cases.len());
    let (mut forwarded, mut refused, mut tolerated) = (0, 0, Vec::new());
    for (name, bytes) in &cases {
        let mut s = std::net::TcpStream::connect(g.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let _ = s.write_all(bytes);
        let mut got = Vec::new();
        let _ = s.read_to_end(&mut got);
        let text = String::from_utf8_lossy(&got);
        let status: u16 = text
            .strip_prefix("HTTP/1.1 ")
            .and_then(|t| t.get(..3))
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        let seen = up.requests.lock().unwrap().clone();
        if seen.len() > forwarded {
            // Tolerated and normalised (a bare LF ends a line, as RFC 9112
            // allows): what the upstream got is one unambiguous request.
            assert_eq!(status, 200, "{name}: {text}");
            assert_eq!(seen.len(), forwarded + 1, "{name}");
            assert_unambiguous(&seen[forwarded], name);
            forwarded += 1;
            tolerated.push(*name);
            continue;
        }
        assert!(
            matches!(status, 0 | 400 | 413 | 414 | 431 | 501),
            "{name}: answered {status}: {text}"
        );
        refused += 1;
    }
    assert_eq!(tolerated, ["bare LF in a header", "request line only LF"]);
    assert!(refused >= 40, "{refused} refused");
    // Plain requests beside them go through, each with one framing.
    for req in [
        format!("POST /u HTTP/1.1\r\n{H}Content-Length: 5\r\nConnection: close\r\n\r\nhello"),
        format!("POST /u HTTP/1.1\r\n{H}Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n5\r\nhello\r\n0\r\n\r\n"),
    ] {
        assert_eq!(request(g.addr, req.as_bytes()).status, 200);
    }
    let seen = up.requests.lock().unwrap();
    assert_eq!(seen.len(), forwarded + 2);
    for r in &seen[forwarded..] {
        assert_eq!(r.body, b"hello");
        assert_unambiguous(r, "plain");
    }
}

/// One framing at most, CRLF line ends only, no fragment.
fn assert_unambiguous(r: &UpRequest, name: &str) {
    let head = &r.raw_head;
    let cl = head
        .to_ascii_lowercase()
        .matches("\r\ncontent-length:")
        .count();
    let te = head
        .to_ascii_lowercase()
        .matches("\r\ntransfer-encoding:")
        .count();
    assert!(cl + te <= 1, "{name}: {head:?}");
    assert_eq!(
        head.matches('\n').count(),
        head.matches("\r\n").count(),
        "{name}: {head:?}"
    );
    assert!(!head.contains('#'), "{name}: {head:?}");
}
