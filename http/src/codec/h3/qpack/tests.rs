use super::*;

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// GET https://a.example/ with `x-a: 1`, `custom-key: custom-value`
/// (both Huffman-coded) and two cookies.
fn section() -> Vec<u8> {
    let mut b = vec![0x00, 0x00, 0xd1, 0xd7, 0xc1, 0x50, 0x09];
    b.extend_from_slice(b"a.example");
    b.extend_from_slice(&[0x23]);
    b.extend_from_slice(b"x-a");
    b.extend_from_slice(&[0x01, b'1']);
    b.extend_from_slice(&[0x2f, 0x01]);
    b.extend_from_slice(&hex("25a849e95ba97d7f"));
    b.push(0x89);
    b.extend_from_slice(&hex("25a849e95bb8e8b4bf"));
    for c in ["a=1", "b=2"] {
        b.extend_from_slice(&[0x55, c.len() as u8]);
        b.extend_from_slice(c.as_bytes());
    }
    b
}

#[test]
fn a_request_decodes_to_its_parts() {
    let p = decode_request(&section(), 16 * 1024).unwrap();
    assert_eq!(p.method, http::Method::GET);
    assert_eq!(p.uri.to_string(), "https://a.example/");
    assert_eq!(p.version, http::Version::HTTP_3);
    assert_eq!(p.headers["x-a"], "1");
    assert_eq!(p.headers["custom-key"], "custom-value");
    let cookies: Vec<_> = p.headers.get_all("cookie").iter().collect();
    assert_eq!(cookies, ["a=1", "b=2"]);
}

#[test]
fn the_size_bound_counts_32_bytes_a_field() {
    // :method GET (7 + 3 + 32), :scheme https (7 + 5 + 32), :path / (5 + 1
    // + 32), :authority a.example (10 + 9 + 32), x-a 1 (3 + 1 + 32),
    // custom-key custom-value (10 + 12 + 32), cookie a=1 twice (6 + 3 + 32).
    let size = 42 + 44 + 38 + 51 + 36 + 54 + 41 * 2;
    assert!(decode_request(&section(), size).is_ok());
    assert_eq!(
        decode_request(&section(), size - 1).unwrap_err(),
        FieldError::TooLarge
    );
}

#[test]
fn dynamic_references_end_the_connection() {
    for bad in [
        &[0x01, 0x00, 0xd1][..],   // Required Insert Count 1
        &[0x00, 0x00, 0x80],       // indexed, dynamic
        &[0x00, 0x00, 0x10],       // indexed, post-base
        &[0x00, 0x00, 0x40, 0x00], // name reference, dynamic
        &[0x00, 0x00, 0x00, 0x00], // name reference, post-base
        &[0x00, 0x00, 0xff, 0x64], // static index 163: no such entry
        &[0x00, 0x00, 0x23, b'x'], // a name cut short
        &[0x00],                   // a prefix cut short
    ] {
        assert_eq!(
            decode_request(bad, 16 * 1024).unwrap_err(),
            FieldError::Decompression,
            "{bad:x?}"
        );
    }
}

#[test]
fn malformed_requests_are_refused() {
    let with = |extra: &[u8]| {
        let mut b = vec![0x00, 0x00, 0xd1, 0xd7, 0xc1];
        b.extend_from_slice(extra);
        decode_request(&b, 16 * 1024)
    };
    assert!(
        with(&[]).is_ok(),
        "no authority is allowed (a Host field may say it)"
    );
    // An uppercase name.
    assert_eq!(
        with(&[0x23, b'X', b'-', b'a', 0x01, b'1']).unwrap_err(),
        FieldError::Malformed
    );
    // A connection-specific field.
    // (a 10-byte name: 7 in the prefix, 3 after)
    let mut conn = vec![0x27, 0x03];
    conn.extend_from_slice(b"connection");
    conn.extend_from_slice(&[0x05]);
    conn.extend_from_slice(b"close");
    assert_eq!(with(&conn).unwrap_err(), FieldError::Malformed);
    // A pseudo-field twice, or after a regular field.
    assert_eq!(with(&[0xd1]).unwrap_err(), FieldError::Malformed);
    assert_eq!(
        with(&[0x23, b'x', b'-', b'a', 0x01, b'1', 0xc1]).unwrap_err(),
        FieldError::Malformed
    );
    // No :path, no :scheme.
    assert_eq!(
        decode_request(&[0, 0, 0xd1, 0xd7], 1024).unwrap_err(),
        FieldError::Malformed
    );
    assert_eq!(
        decode_request(&[0, 0, 0xd1, 0xc1], 1024).unwrap_err(),
        FieldError::Malformed
    );
    // An unknown pseudo-field.
    let mut unknown = vec![0x00, 0x00, 0x25];
    unknown.extend_from_slice(b":what");
    unknown.extend_from_slice(&[0x01, b'x', 0xd1, 0xd7, 0xc1]);
    assert_eq!(
        decode_request(&unknown, 1024).unwrap_err(),
        FieldError::Malformed
    );
}

#[test]
fn an_answer_encodes_and_reads_back() {
    let mut out = Vec::new();
    encode_response(
        &mut out,
        429,
        [
            ("content-type", &b"text/html; charset=utf-8"[..]),
            ("content-length", b"1234"),
            ("retry-after", b"7"),
            ("x-long-field-name-past-seven", b"v"),
        ]
        .into_iter(),
    );
    let mut buf = Vec::new();
    let mut lines = Vec::new();
    decode_lines(&out, 16 * 1024, &mut buf, &mut lines).unwrap();
    let got: Vec<(String, String)> = lines
        .iter()
        .map(|l| {
            (
                String::from_utf8(buf[l.name.clone()].to_vec()).unwrap(),
                String::from_utf8(buf[l.value.clone()].to_vec()).unwrap(),
            )
        })
        .collect();
    let want = [
        (":status", "429"),
        ("content-type", "text/html; charset=utf-8"),
        ("content-length", "1234"),
        ("retry-after", "7"),
        ("x-long-field-name-past-seven", "v"),
    ];
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(want) {
        assert_eq!((g.0.as_str(), g.1.as_str()), w);
    }
    // 200 and the whole static content-type entry: one byte each.
    let mut out = Vec::new();
    encode_response(
        &mut out,
        200,
        [("content-type", &b"text/plain"[..])].into_iter(),
    );
    assert_eq!(out, vec![0x00, 0x00, 0xc0 | 25, 0xc0 | 53]);
}

#[test]
fn integers_round_trip_across_prefixes() {
    for bits in 3..=8u8 {
        for v in [
            0u64, 1, 6, 7, 30, 31, 62, 63, 126, 127, 254, 255, 256, 1_000_000,
        ] {
            let mut out = Vec::new();
            write_int(&mut out, 0, bits, v);
            let mut at = 0;
            assert_eq!(read_int(&out, &mut at, bits), Some(v), "{bits} {v}");
            assert_eq!(at, out.len());
        }
    }
    // Past 2^32: refused, not wrapped.
    let mut at = 0;
    assert_eq!(
        read_int(&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f], &mut at, 8),
        None
    );
}

#[test]
fn a_clients_request_reads_back_and_an_answers_status_is_read() {
    let mut out = Vec::new();
    encode_request(
        &mut out,
        ("GET", "https", "a.example", "/x?y=1"),
        [("user-agent", &b"t"[..])].into_iter(),
    );
    let p = decode_request(&out, 16 * 1024).unwrap();
    assert_eq!(p.method, http::Method::GET);
    assert_eq!(p.uri.to_string(), "https://a.example/x?y=1");
    assert_eq!(p.headers["user-agent"], "t");
    let mut answer = Vec::new();
    encode_response(&mut answer, 429, [("retry-after", &b"1"[..])].into_iter());
    assert_eq!(decode_status(&answer, 1024), Ok(429));
    let mut answer = Vec::new();
    encode_response(&mut answer, 200, std::iter::empty());
    assert_eq!(decode_status(&answer, 1024), Ok(200));
    assert_eq!(decode_status(&out, 1024), Err(FieldError::Malformed));
}
