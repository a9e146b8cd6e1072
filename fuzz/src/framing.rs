//! HTTP/1.1 framing: the request head parser (against httparse's own
//! acceptance), the chunked decoder (the same body however the bytes are
//! split) and the upstream response parser (its client copy parses back).

use gapura_http::codec::chunked::ChunkedDecoder;
use gapura_http::codec::head::{header_buf, parse_head, BodyFraming, Method, Parse};
use gapura_http::codec::scan::check_against_httparse;
use gapura_http::server::{HEAD_BOUNDS, REQUEST_LINES};
use gapura_http::upstream::response::{
    parse_response, resp_header_buf, write_client_head, RespFraming, RespParse,
};

/// What the server's parser says of `data`, as a comparable summary.
fn summary(data: &[u8]) -> Result<Option<(usize, BodyFraming)>, ()> {
    let mut headers = header_buf::<REQUEST_LINES>();
    match parse_head(data, &mut headers, &HEAD_BOUNDS) {
        Parse::Complete(h, _) => Ok(Some((h.head_len, h.framing))),
        Parse::Partial => Ok(None),
        Parse::Error(_) => Err(()),
    }
}

/// The request head parser: ranges inside the input, the head httparse's
/// too, a strict prefix never complete, framing as the lines say, every
/// plain request (below) accepted, and what the one-pass reader of plain
/// heads takes read exactly as httparse reads it.
pub fn request_head(data: &[u8]) {
    scan_agrees(data);
    let mut headers = header_buf::<REQUEST_LINES>();
    let parsed = parse_head(data, &mut headers, &HEAD_BOUNDS);
    let complete = match &parsed {
        Parse::Complete(h, lines) => {
            assert!(h.head_len <= data.len() && h.head_len <= HEAD_BOUNDS.max_head_bytes);
            assert!(h.target.end <= h.head_len && h.path.end <= h.head_len);
            assert!(h.path.start >= h.target.start && h.path.end == h.target.end);
            assert!(h.host.as_ref().is_none_or(|r| r.end <= h.head_len));
            assert_eq!(lines.len(), h.header_count);
            assert!(h.method != Method::Connect);
            assert!(!data[h.target.clone()].contains(&b'#'));
            let te = lines
                .iter()
                .any(|l| l.name.eq_ignore_ascii_case("transfer-encoding"));
            match h.framing {
                BodyFraming::Chunked => {
                    assert!(h.version == 1 && te);
                    let codings: Vec<&[u8]> = lines
                        .iter()
                        .filter(|l| l.name.eq_ignore_ascii_case("transfer-encoding"))
                        .flat_map(|l| l.value.split(|&b| b == b','))
                        .map(<[u8]>::trim_ascii)
                        .filter(|c| !c.is_empty())
                        .collect();
                    assert!(
                        codings.len() == 1 && codings[0].eq_ignore_ascii_case(b"chunked"),
                        "{codings:?}"
                    );
                }
                BodyFraming::Length(n) => assert!(!te && n > 0),
                BodyFraming::None => assert!(!te),
            }
            let mut theirs = [httparse::EMPTY_HEADER; REQUEST_LINES];
            let mut req = httparse::Request::new(&mut theirs);
            assert_eq!(
                req.parse(data).ok(),
                Some(httparse::Status::Complete(h.head_len))
            );
            Some((h.head_len, h.framing))
        }
        Parse::Partial => {
            assert!(data.len() < HEAD_BOUNDS.max_head_bytes);
            None
        }
        Parse::Error(_) => None,
    };
    if let Some((len, framing)) = complete {
        // Bytes after the head never change it; a strict prefix is never a head.
        assert_eq!(summary(&data[..len]), Ok(Some((len, framing))));
        assert!(!matches!(summary(&data[..len - 1]), Ok(Some(_))));
    }
    if let Some(length) = plain_request(data) {
        let want = match length {
            Some(0) | None => BodyFraming::None,
            Some(n) => BodyFraming::Length(n),
        };
        assert!(
            matches!(complete, Some((_, f)) if f == want),
            "a plain request was refused: {:?}",
            String::from_utf8_lossy(data)
        );
    }
}

/// What `codec::scan` takes, httparse reads with the same method, target,
/// version, lines and length, each part where it lies in the input; what
/// it calls partial, httparse does too.
fn scan_agrees(data: &[u8]) {
    if let Err(why) = check_against_httparse::<REQUEST_LINES>(data) {
        panic!("{why}: {:?}", String::from_utf8_lossy(data));
    }
}

/// A request both parsers must accept: httparse reads a complete HTTP/1.1
/// head within the server's bounds, the method is not CONNECT, the target
/// is in origin form without a fragment, there is one valid `Host`, no
/// `Transfer-Encoding`, and at most one plain `Content-Length`. Its length.
fn plain_request(data: &[u8]) -> Option<Option<u64>> {
    let mut lines = [httparse::EMPTY_HEADER; REQUEST_LINES];
    let mut req = httparse::Request::new(&mut lines);
    let Ok(httparse::Status::Complete(len)) = req.parse(data) else {
        return None;
    };
    if len > HEAD_BOUNDS.max_head_bytes || req.version != Some(1) {
        return None;
    }
    if req.method == Some("CONNECT") {
        return None;
    }
    let target = req.path?.as_bytes();
    if target.first() != Some(&b'/') || target.contains(&b'#') {
        return None;
    }
    let (mut hosts, mut length) = (0, None);
    for h in req.headers.iter() {
        let name = h.name;
        if name.eq_ignore_ascii_case("host") {
            let v = h.value.trim_ascii();
            let ok = v
                .iter()
                .all(|&b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-' || b == b':');
            if !ok {
                return None;
            }
            hosts += 1;
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            return None;
        } else if name.eq_ignore_ascii_case("content-length") {
            let v = h.value.trim_ascii();
            if length.is_some() || v.is_empty() || v.len() > 18 || !v.iter().all(u8::is_ascii_digit)
            {
                return None;
            }
            length = std::str::from_utf8(v).ok()?.parse::<u64>().ok();
        }
    }
    (hosts == 1).then_some(length)
}

/// Decodes `input` fed in pieces ending at `cuts`: the body and where it
/// ended, or the error.
fn decode(input: &[u8], cuts: &[usize]) -> Result<(Vec<u8>, usize), String> {
    let mut d = ChunkedDecoder::new();
    let mut body = Vec::new();
    let mut at = 0;
    for &end in cuts.iter().chain(std::iter::once(&input.len())) {
        let end = end.clamp(at, input.len());
        while at < end {
            let step = d.step(&input[at..end]).map_err(|e| format!("{e:?}"))?;
            assert!(step.consumed <= end - at);
            assert!(step.data.start <= step.data.end && step.data.end <= step.consumed);
            body.extend_from_slice(&input[at..end][step.data.clone()]);
            at += step.consumed;
            if step.done {
                assert!(d.is_done());
                return Ok((body, at));
            }
            if step.consumed == 0 {
                break;
            }
        }
    }
    Err("incomplete".into())
}

/// The chunked decoder: the first byte picks where the input is split;
/// whole and split, the same body, end and error class.
pub fn chunked(data: &[u8]) {
    let Some((&pick, input)) = data.split_first() else {
        return;
    };
    let whole = decode(input, &[]);
    let step = usize::from(pick % 7) + 1;
    let cuts: Vec<usize> = (step..input.len()).step_by(step).collect();
    let split = decode(input, &cuts);
    match (&whole, &split) {
        (Ok(a), Ok(b)) => assert_eq!(a, b),
        (Err(_), Err(_)) => {}
        // Split input may wait for bytes the whole had; never the reverse.
        (Err(e), Ok(_)) => panic!("whole failed ({e}) where split succeeded"),
        (Ok(_), Err(e)) => panic!("split failed ({e}) where whole succeeded"),
    }
    if let Ok((body, end)) = whole {
        assert!(body.len() <= end);
    }
}

/// The upstream response parser: the head inside the input, and the
/// client's copy of it parses back with the same status and framing.
pub fn response_head(data: &[u8]) {
    let Some((&flags, input)) = data.split_first() else {
        return;
    };
    let was_head = flags & 1 != 0;
    let mut headers = resp_header_buf();
    let RespParse::Complete(head, reason, lines) = parse_response(input, &mut headers, was_head)
    else {
        return;
    };
    assert!(head.head_len <= input.len());
    assert!((100..=599).contains(&head.status));
    if was_head || head.status == 204 || head.status == 304 || head.status < 200 {
        assert!(matches!(head.framing, RespFraming::None), "{head:?}");
    }
    let mut copy = Vec::new();
    write_client_head(head.status, reason, lines, &mut copy, flags & 2 != 0);
    // Read back by httparse with room to spare: the copy may carry one line
    // more than the upstream's head (`Connection: close`).
    let mut lines = [httparse::EMPTY_HEADER; 512];
    let mut back = httparse::Response::new(&mut lines);
    assert_eq!(
        back.parse(&copy).ok(),
        Some(httparse::Status::Complete(copy.len())),
        "the client's copy does not parse: {:?}",
        String::from_utf8_lossy(&copy)
    );
    assert_eq!(back.code, Some(head.status));
}
