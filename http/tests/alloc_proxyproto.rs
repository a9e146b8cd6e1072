//! Proves that PROXY header parsing allocates nothing, whole, partial or
//! absent. The counting allocator is the gate's allocation tests' own.

use gapura_http::codec::proxyproto;
use std::hint::black_box;

#[path = "../../gate/tests/common/mod.rs"]
mod common;
use common::allocations;

#[test]
fn proxy_header_parsing_allocates_nothing() {
    // v2, PROXY over TCP/IPv6, [2001:db8::1]:1 to [2001:db8::2]:2, with an
    // ALPN TLV "h2".
    let mut v2 = proxyproto::V2_SIGNATURE.to_vec();
    v2.extend_from_slice(&[0x21, 0x21, 0, 41]);
    v2.extend_from_slice(
        &"2001:db8::1"
            .parse::<std::net::Ipv6Addr>()
            .unwrap()
            .octets(),
    );
    v2.extend_from_slice(
        &"2001:db8::2"
            .parse::<std::net::Ipv6Addr>()
            .unwrap()
            .octets(),
    );
    v2.extend_from_slice(&[0, 1, 0, 2, 0x01, 0, 2, b'h', b'2']);
    assert!(matches!(proxyproto::parse(&v2), Ok(Some((_, 57)))));
    let v1 = b"PROXY TCP4 192.0.2.1 198.51.100.2 56324 443\r\nGET /";
    let n = allocations(|| {
        (
            proxyproto::parse(black_box(v1)),
            proxyproto::parse(black_box(&v2)),
            proxyproto::parse(black_box(b"GET / HTTP/1.1\r\n")),
            proxyproto::parse(black_box(&v2[..10])),
        )
    });
    assert_eq!(n, 0);
}
