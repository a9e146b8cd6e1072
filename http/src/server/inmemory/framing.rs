//! Every framing refusal: each case gets its status with the built-in
//! page, `Connection: close`, and the connection closes; it is counted as
//! the error kind it is.

use super::*;
use crate::server::stats::ErrorKind;

const LIMITED: &str = r#"
[defaults.limits]
max_body_bytes = 100
max_header_count = 10
max_header_bytes = 2048
max_url_bytes = 512

[[host]]
names = ["hello.test"]
default = true
kind = "respond"
body = "hello\n"
"#;

/// Sends `req` on a fresh connection and checks the refusal.
fn refused(req: &[u8], status: u16, kind: ErrorKind) {
    let req = req.to_vec();
    run(async move {
        let shard = shard("", LIMITED);
        let c = open(&shard);
        c.send(&req);
        let r = c.response(false).await.expect("an answer");
        assert_eq!(
            r.status,
            status,
            "for {:?}",
            String::from_utf8_lossy(&req[..req.len().min(80)])
        );
        assert_eq!(r.header("Connection"), Some("close"));
        assert_eq!(r.header("Cache-Control"), Some("no-store"));
        assert!(r.header("Content-Length").is_some());
        c.until_closed().await;
        // It lingers a second (reading what the client still sends) and
        // then ends.
        advance(&shard, Duration::from_millis(900)).await;
        assert!(c.server_holds(), "lingering");
        advance(&shard, Duration::from_millis(200)).await;
        assert!(!c.server_holds());
        assert_eq!(shard.stats.errors[kind as usize].get(), 1, "{kind:?}");
        assert_eq!(open_count(&shard), 0);
    })
}

fn post(headers: &str, body: &str) -> Vec<u8> {
    format!("POST /u HTTP/1.1\r\nHost: hello.test\r\n{headers}\r\n{body}").into_bytes()
}

macro_rules! bad_request {
    ($($name:ident: $req:expr;)*) => {$(
        #[test]
        fn $name() {
            refused(AsRef::<[u8]>::as_ref(&$req), 400, ErrorKind::BadRequest);
        }
    )*};
}

bad_request! {
    content_length_and_chunked: post("Content-Length: 5\r\nTransfer-Encoding: chunked\r\n", "0\r\n\r\n");
    chunked_and_content_length: post("Transfer-Encoding: chunked\r\nContent-Length: 5\r\n", "0\r\n\r\n");
    two_differing_lengths: post("Content-Length: 5\r\nContent-Length: 6\r\n", "hello!");
    a_length_list_that_differs: post("Content-Length: 5, 6\r\n", "hello!");
    a_negative_length: post("Content-Length: -1\r\n", "");
    a_hex_length: post("Content-Length: 0x5\r\n", "hello");
    a_length_with_a_plus_sign: post("Content-Length: +5\r\n", "hello");
    a_length_with_a_space_inside: post("Content-Length: 1 2\r\n", "");
    an_empty_length: post("Content-Length: \r\n", "");
    gzip_then_chunked: post("Transfer-Encoding: gzip, chunked\r\n", "0\r\n\r\n");
    chunked_then_gzip: post("Transfer-Encoding: chunked, gzip\r\n", "0\r\n\r\n");
    identity_coding: post("Transfer-Encoding: identity\r\n", "");
    chunked_twice: post("Transfer-Encoding: chunked, chunked\r\n", "0\r\n\r\n");
    chunked_on_two_lines: post("Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n", "0\r\n\r\n");
    xchunked: post("Transfer-Encoding: xchunked\r\n", "0\r\n\r\n");
    chunked_with_a_parameter: post("Transfer-Encoding: chunked;q=1\r\n", "0\r\n\r\n");
    chunked_in_http10: b"POST /u HTTP/1.0\r\nHost: hello.test\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n";
    a_space_before_the_colon: post("Transfer-Encoding : chunked\r\n", "0\r\n\r\n");
    an_obs_folded_line: post("X-Folded: a,\r\n b\r\n", "");
    a_bare_cr_in_a_value: post("X-A: a\rb\r\n", "");
    a_nul_in_a_value: post("X-A: a\0b\r\n", "");
    a_space_in_a_header_name: post("Bad Header: x\r\n", "");
    an_empty_header_name: post(": x\r\n", "");
    a_duplicate_host: b"GET / HTTP/1.1\r\nHost: hello.test\r\nHost: other.test\r\n\r\n";
    a_fragment_in_the_target: b"GET /a#b HTTP/1.1\r\nHost: hello.test\r\n\r\n";
    a_space_in_the_target: b"GET /a b HTTP/1.1\r\nHost: hello.test\r\n\r\n";
    an_unknown_version: b"GET / HTTP/1.2\r\nHost: hello.test\r\n\r\n";
    the_h2_preface_as_http1: b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
    garbage: b"GARBAGE\r\n\r\n";
    a_chunk_size_not_hex: post("Transfer-Encoding: chunked\r\n", "zz\r\nhello\r\n0\r\n\r\n");
    a_chunk_size_overflowing: post("Transfer-Encoding: chunked\r\n", "ffffffffffffffffff\r\nx\r\n0\r\n\r\n");
    a_chunk_without_its_crlf: post("Transfer-Encoding: chunked\r\n", "5\r\nhelloXX0\r\n\r\n");
    a_chunk_size_with_a_bare_lf: post("Transfer-Encoding: chunked\r\n", "5\nhello\r\n0\r\n\r\n");
    a_chunk_size_with_a_sign: post("Transfer-Encoding: chunked\r\n", "+5\r\nhello\r\n0\r\n\r\n");
}

#[test]
fn a_declared_body_over_the_limit_is_413() {
    refused(&post("Content-Length: 101\r\n", ""), 413, ErrorKind::Limit);
}

#[test]
fn a_chunked_body_growing_past_the_limit_is_413() {
    let mut body = String::new();
    for _ in 0..3 {
        body.push_str(&format!("28\r\n{}\r\n", "x".repeat(40)));
    }
    refused(
        &post("Transfer-Encoding: chunked\r\n", &body),
        413,
        ErrorKind::Limit,
    );
}

#[test]
fn a_target_over_the_host_limit_is_414() {
    let req = format!(
        "GET /{} HTTP/1.1\r\nHost: hello.test\r\n\r\n",
        "a".repeat(600)
    );
    refused(req.as_bytes(), 414, ErrorKind::Limit);
}

#[test]
fn a_request_line_past_the_outer_bound_is_414_before_it_ends() {
    let req = format!("GET /{}", "a".repeat(20_000));
    refused(req.as_bytes(), 414, ErrorKind::Limit);
}

#[test]
fn too_many_header_lines_is_431() {
    let mut req = String::from("GET / HTTP/1.1\r\nHost: hello.test\r\n");
    for i in 0..12 {
        req.push_str(&format!("X-{i}: v\r\n"));
    }
    req.push_str("\r\n");
    refused(req.as_bytes(), 431, ErrorKind::Limit);
}

#[test]
fn header_bytes_over_the_limit_is_431() {
    let req = format!(
        "GET / HTTP/1.1\r\nHost: hello.test\r\nX-Big: {}\r\n\r\n",
        "b".repeat(3000)
    );
    refused(req.as_bytes(), 431, ErrorKind::Limit);
}

#[test]
fn a_head_past_the_parsers_outer_bound_is_431() {
    let mut req = String::from("GET / HTTP/1.1\r\nHost: hello.test\r\n");
    for i in 0..100 {
        req.push_str(&format!("X-{i}: {}\r\n", "c".repeat(1200)));
    }
    refused(req.as_bytes(), 431, ErrorKind::Limit);
}

#[test]
fn a_body_at_the_limit_passes_and_the_connection_goes_on() {
    run(async {
        let shard = shard("", LIMITED);
        let c = open(&shard);
        let mut req = post("Content-Length: 100\r\n", "");
        req.extend_from_slice(&[b'y'; 100]);
        req.extend(get("/next", &[]));
        c.send(&req);
        assert_eq!(c.response(false).await.unwrap().status, 200);
        assert_eq!(c.response(false).await.unwrap().status, 200);
        assert!(!c.server_ended());
    })
}
