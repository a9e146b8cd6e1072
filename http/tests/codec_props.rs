//! Property tests of the HTTP/1.1 codec over seeded random and mutated
//! inputs: the head parser and the chunked decoder never panic, never read
//! past their input, and agree with themselves however the input is split.

use gapura_http::codec::chunked::ChunkedDecoder;
use gapura_http::codec::head::{header_buf, parse_head, Parse};
use proptest::prelude::*;

/// Valid requests to mutate.
const SEEDS: [&[u8]; 4] = [
    b"GET /a/b?c=d HTTP/1.1\r\nHost: example.com\r\nUser-Agent: x\r\nAccept: */*\r\n\r\n",
    b"POST /upload HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello",
    b"PUT /x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
    b"GET http://h.test:8080/p HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
];

fn parse_all(buf: &[u8]) -> String {
    let mut headers = header_buf::<{ gapura_http::server::REQUEST_LINES }>();
    match parse_head(buf, &mut headers, &gapura_http::server::HEAD_BOUNDS) {
        Parse::Complete(h, lines) => {
            assert!(h.head_len <= buf.len());
            assert!(h.target.end <= buf.len() && h.path.end <= buf.len());
            if let Some(host) = &h.host {
                assert!(host.end <= buf.len());
            }
            assert_eq!(lines.len(), h.header_count);
            format!("complete {} {:?} {}", h.head_len, h.framing, h.close)
        }
        Parse::Partial => "partial".into(),
        Parse::Error(e) => format!("error {e:?}"),
    }
}

/// Decodes `input` fed in pieces given by `cuts`; the body and where it
/// ended, or the error.
fn decode_split(input: &[u8], cuts: &[usize]) -> Result<(Vec<u8>, usize), String> {
    let mut d = ChunkedDecoder::new();
    let mut body = Vec::new();
    let mut at = 0;
    let mut bounds: Vec<usize> = cuts.iter().map(|c| c % (input.len() + 1)).collect();
    bounds.push(input.len());
    bounds.sort_unstable();
    for end in bounds {
        while at < end {
            let step = d.step(&input[at..end]).map_err(|e| format!("{e:?}"))?;
            assert!(step.consumed <= end - at);
            assert!(step.data.end <= step.consumed);
            body.extend_from_slice(&input[at..end][step.data.clone()]);
            at += step.consumed;
            if step.done {
                return Ok((body, at));
            }
            if step.consumed == 0 {
                break;
            }
        }
    }
    Err("incomplete".into())
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 2000,
        rng_seed: proptest::test_runner::RngSeed::Fixed(0x9A7B_0006),
        ..ProptestConfig::default()
    })]

    #[test]
    fn the_head_parser_never_panics_on_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
        parse_all(&bytes);
    }

    #[test]
    fn the_head_parser_never_panics_on_mutated_requests(
        seed in 0usize..SEEDS.len(),
        edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..8),
    ) {
        let mut req = SEEDS[seed].to_vec();
        for (at, b) in edits {
            let i = at % req.len();
            req[i] = b;
        }
        parse_all(&req);
    }

    #[test]
    fn a_prefix_of_a_complete_head_is_partial(seed in 0usize..SEEDS.len(), cut in any::<usize>()) {
        let req = SEEDS[seed];
        let full = parse_all(req);
        prop_assert!(full.starts_with("complete"));
        let head_len: usize = full.split(' ').nth(1).unwrap().parse().unwrap();
        let cut = cut % head_len;
        prop_assert_eq!(parse_all(&req[..cut]), "partial");
    }

    #[test]
    fn the_chunked_decoder_agrees_with_itself_however_input_is_split(
        chunks in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 1..300), 0..8),
        cuts in proptest::collection::vec(any::<usize>(), 0..12),
    ) {
        let mut input = Vec::new();
        let mut want = Vec::new();
        for c in &chunks {
            input.extend_from_slice(format!("{:x}\r\n", c.len()).as_bytes());
            input.extend_from_slice(c);
            input.extend_from_slice(b"\r\n");
            want.extend_from_slice(c);
        }
        input.extend_from_slice(b"0\r\nX-Trailer: 1\r\n\r\nNEXT");
        let whole = decode_split(&input, &[]).unwrap();
        let split = decode_split(&input, &cuts).unwrap();
        prop_assert_eq!(&whole.0, &want);
        prop_assert_eq!(whole.1, input.len() - 4);
        prop_assert_eq!(whole, split);
    }

    #[test]
    fn the_chunked_decoder_never_panics_on_arbitrary_bytes(
        bytes in proptest::collection::vec(any::<u8>(), 0..600),
        cuts in proptest::collection::vec(any::<usize>(), 0..6),
    ) {
        let _ = decode_split(&bytes, &cuts);
    }
}
