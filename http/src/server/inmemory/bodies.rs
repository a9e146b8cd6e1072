//! Request bodies read by the server itself (a respond host reads and
//! drops them), 100-continue, and what a refusal does with a body.

use super::*;

fn post(headers: &str) -> Vec<u8> {
    format!("POST /u HTTP/1.1\r\nHost: hello.test\r\n{headers}\r\n\r\n").into_bytes()
}

#[test]
fn a_content_length_body_is_read_and_the_next_request_parsed_after_it() {
    run(async {
        let shard = shard("", HELLO);
        let c = open(&shard);
        let mut req = post("Content-Length: 11");
        req.extend_from_slice(b"GET / HTTP/");
        req.extend(get("/after", &[]));
        c.send(&req);
        assert_eq!(c.response(false).await.unwrap().status, 200);
        assert_eq!(
            c.response(false).await.unwrap().status,
            200,
            "the body's bytes were not taken for a request"
        );
        assert_eq!(shard.stats.requests.get(), 2);
    })
}

#[test]
fn a_chunked_body_with_extensions_and_trailers_is_read_whole() {
    run(async {
        let shard = shard("", HELLO);
        let c = open(&shard);
        let mut req = post("Transfer-Encoding: chunked");
        req.extend_from_slice(b"5;ext=1\r\nhello\r\n3\r\nabc\r\n0\r\nX-Trailer: t\r\n\r\n");
        req.extend(get("/after", &[]));
        c.send(&req);
        assert_eq!(c.response(false).await.unwrap().status, 200);
        assert_eq!(c.response(false).await.unwrap().status, 200);
        assert_eq!(shard.stats.requests.get(), 2);
    })
}

#[test]
fn a_body_arriving_in_pieces_is_waited_for() {
    run(async {
        let shard = shard("", HELLO);
        let c = open(&shard);
        c.send(&post("Content-Length: 6"));
        for b in b"abcdef" {
            settle().await;
            c.send(&[*b]);
        }
        assert_eq!(c.response(false).await.unwrap().status, 200);
        c.send(&get("/", &[]));
        assert_eq!(c.response(false).await.unwrap().status, 200);
    })
}

#[test]
fn expect_100_continue_gets_the_interim_answer_before_the_body_is_sent() {
    run(async {
        let shard = shard("", HELLO);
        let c = open(&shard);
        c.send(&post("Content-Length: 4\r\nExpect: 100-continue"));
        let interim = c.response(false).await.unwrap();
        assert_eq!(interim.status, 100);
        settle().await;
        assert_eq!(c.pending(), 0, "the final answer waits for the body");
        c.send(b"data");
        assert_eq!(c.response(false).await.unwrap().status, 200);
    })
}

#[test]
fn a_refused_request_gets_no_100_continue_and_its_body_is_not_read() {
    run(async {
        let shard = shard(
            "",
            "[defaults.limits]\nmax_body_bytes = 100\n[[host]]\nnames = [\"hello.test\"]\ndefault = true\nkind = \"respond\"\nbody = \"x\"\n",
        );
        let c = open(&shard);
        c.send(&post("Content-Length: 1000\r\nExpect: 100-continue"));
        let r = c.response(false).await.unwrap();
        assert_eq!(r.status, 413, "no interim answer first");
        c.until_closed().await;
    })
}

#[test]
fn a_small_body_of_a_refusal_is_read_and_the_connection_kept() {
    run(async {
        let shard = shard(
            "",
            "[[host]]\nnames = [\"hello.test\"]\ndefault = true\nkind = \"respond\"\nstatus = 403\nbody = \"no\"\n",
        );
        let c = open(&shard);
        let mut req = post("Content-Length: 5");
        req.extend_from_slice(b"hello");
        req.extend(get("/", &[]));
        c.send(&req);
        assert_eq!(c.response(false).await.unwrap().status, 403);
        assert_eq!(c.response(false).await.unwrap().status, 403);
        assert!(!c.server_ended());
    })
}

#[test]
fn a_client_that_closes_mid_body_ends_the_connection_without_an_answer() {
    run(async {
        let shard = shard("", HELLO);
        let c = open(&shard);
        let mut req = post("Content-Length: 100");
        req.extend_from_slice(b"short");
        c.send(&req);
        c.finish();
        let rest = c.until_closed().await;
        assert!(rest.is_empty(), "{:?}", String::from_utf8_lossy(&rest));
        settle().await;
        assert_eq!(open_count(&shard), 0);
    })
}
