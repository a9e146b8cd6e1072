//! Writes the checked-in seed corpus of every fuzz target into
//! `fuzz/corpus/TARGET/seed-NN` (run from anywhere:
//! `cargo run -p gapura-fuzz --example seeds`). The seeds are valid and
//! near-valid inputs the fuzzer mutates from; they are rewritten, never
//! appended to, so the folders' other files (found by long runs) stay.

use gapura_gate::udp::EnvelopeKey;
use gapura_http::codec::proxyproto::{encode_v1, encode_v2, ProxyHeader};
use std::path::Path;
use std::sync::Arc;

fn requests() -> Vec<Vec<u8>> {
    [
        &b"GET /a/b?c=d HTTP/1.1\r\nHost: example.com\r\nUser-Agent: x\r\nAccept: text/html\r\n\r\n"[..],
        b"POST /upload HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello",
        b"PUT /x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
        b"GET http://h.test:8080/p HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3, 4\r\n\r\n",
        b"GET /#frag HTTP/1.1\r\nHost: a\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: a b\r\n\r\n",
        b"GET /ws HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 9\r\n\r\n",
        b"CONNECT a:443 HTTP/1.1\r\nHost: a\r\n\r\n",
        b"OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: a\r\nAuthorization: Basic dXNlcjpwYXNz\r\nCookie: a=b\r\n\r\n",
    ]
    .iter()
    .map(|r| r.to_vec())
    .collect()
}

fn chunked() -> Vec<Vec<u8>> {
    [
        &b"5\r\nhello\r\n0\r\n\r\n"[..],
        b"3;ext=1\r\nabc\r\n0\r\nTrailer: x\r\n\r\n",
        b"A\r\n0123456789\r\n0\r\n\r\n",
        b"ffffffffffffffffff\r\n",
        b"5\r\nhel",
        b"0\r\n\r\nextra",
    ]
    .iter()
    .flat_map(|c| [3u8, 0].map(|k| [&[k][..], c].concat()))
    .collect()
}

fn responses() -> Vec<Vec<u8>> {
    [
        &b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"[..],
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: keep-alive\r\n\r\n",
        b"HTTP/1.1 204 No Content\r\n\r\n",
        b"HTTP/1.1 304 Not Modified\r\nETag: x\r\n\r\n",
        b"HTTP/1.1 101 Switching Protocols\r\nConnection: upgrade\r\nUpgrade: websocket\r\n\r\n",
        b"HTTP/1.0 200 OK\r\nServer: s\r\n\r\nbody",
        b"HTTP/1.1 502 Bad Gateway\r\nConnection: close, x-drop\r\nX-Drop: 1\r\nContent-Length: 0\r\n\r\n",
    ]
    .iter()
    .flat_map(|r| [0u8, 1, 2].map(|k| [&[k][..], r].concat()))
    .collect()
}

fn paths() -> Vec<Vec<u8>> {
    [
        "/",
        "/a/b/c",
        "/A/%2F/b",
        "/a/../b/./c/",
        "/a;x=1/b",
        "/..;/admin",
        "/admin.",
        "/%252F",
        "/%3f?q",
        "/%c3%a9t%C3%A9",
        "/a\\b",
        "/%zz",
        "/%00",
        "//a//b//",
        "/a/%2e%2e/b",
        "a/b",
        "/...",
        "/x/..",
    ]
    .iter()
    .map(|p| p.as_bytes().to_vec())
    .collect()
}

fn proxy_headers() -> Vec<Vec<u8>> {
    let headers = [
        ProxyHeader::Tcp {
            src: "192.0.2.1:1234".parse().unwrap(),
            dst: "192.0.2.2:80".parse().unwrap(),
        },
        ProxyHeader::Tcp {
            src: "[2001:db8::1]:1234".parse().unwrap(),
            dst: "[2001:db8::2]:443".parse().unwrap(),
        },
        ProxyHeader::Udp {
            src: "192.0.2.1:53".parse().unwrap(),
            dst: "192.0.2.2:53".parse().unwrap(),
        },
        ProxyHeader::Unknown,
        ProxyHeader::Local,
    ];
    let mut seeds = Vec::new();
    for h in &headers {
        let mut v1 = Vec::new();
        if encode_v1(h, &mut v1) {
            v1.extend_from_slice(b"GET / HTTP/1.1\r\n");
            seeds.push(v1);
        }
        let mut v2 = Vec::new();
        if encode_v2(h, &[(0x01, b"h2"), (0x04, b"")], &mut v2) {
            seeds.push(v2);
        }
    }
    seeds.push(b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\r\n".to_vec());
    seeds
}

fn credentials() -> Vec<Vec<u8>> {
    [
        "Basic dXNlcjpwYXNz",
        "basic   YWxpY2U6c2VjcmV0",
        "Basic dXNlcg==",
        "Basic OnBhc3M=",
        "Bearer abc",
        "Basic !!!",
        "Basic w6k6w6k=",
    ]
    .iter()
    .map(|c| c.as_bytes().to_vec())
    .collect()
}

fn profiles(root: &Path) -> Vec<Vec<u8>> {
    let mut seeds: Vec<Vec<u8>> = ["default", "example", "edge", "internal-api", "game-relay"]
        .iter()
        .map(|p| std::fs::read(root.join(format!("profiles/{p}.toml"))).expect("a profile"))
        .collect();
    seeds.push(
        b"[server]\nlisten = [\"127.0.0.1:1\"]\nunknown = 3\n[[host]]\nnames = [1]\n".to_vec(),
    );
    seeds
}

fn datagrams() -> Vec<Vec<u8>> {
    let mut plain = vec![0u8];
    for client in 0..3u8 {
        plain.extend_from_slice(&[client, 1, 0, 5]);
        plain.extend_from_slice(b"hello");
    }
    let mut sealed = vec![1u8];
    for (i, client) in [0u8, 0, 1, 0].iter().enumerate() {
        sealed.extend_from_slice(&[*client, 2, 1 | (40 << 1), 12]);
        sealed.extend_from_slice(&(i as u64 % 3).to_be_bytes());
        sealed.extend_from_slice(b"ping");
    }
    let key = EnvelopeKey::new(b"0123456789abcdef0123456789abcdef");
    let mut raw = Vec::new();
    gapura_udp::envelope::seal(&key, 0, 1_800_000_000_000, 1, b"x", &mut raw);
    let mut forged = vec![0u8, 0, 1, 0, raw.len() as u8];
    forged.extend_from_slice(&raw);
    vec![plain, sealed, forged]
}

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let n = payload.len();
    let mut f = vec![(n >> 16) as u8, (n >> 8) as u8, n as u8, kind, flags];
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

fn h2_connections() -> Vec<Vec<u8>> {
    let settings = frame(4, 0, 0, &[]);
    // :method GET, :path /, :scheme http, :authority a.example.
    let get = [&[0x82, 0x84, 0x86, 0x41, 9][..], b"a.example"].concat();
    // :method POST, :path /, :scheme https, :authority, content-type.
    let post = [
        &[0x83, 0x84, 0x87, 0x41, 9][..],
        b"a.example",
        &[0x5f, 4],
        b"text",
    ]
    .concat();
    let mut seeds = Vec::new();
    for knobs in [3u8, 0x41, 0x06] {
        let mut c = vec![knobs];
        c.extend(&settings);
        c.extend(frame(1, 0x5, 1, &get));
        c.extend(frame(1, 0x4, 3, &post));
        c.extend(frame(0, 0x0, 3, b"abc"));
        c.extend(frame(0, 0x1, 3, b"def"));
        c.extend(frame(6, 0, 0, &[0; 8]));
        c.extend(frame(3, 0, 1, &[0, 0, 0, 8]));
        seeds.push(c);
    }
    let mut split = vec![1u8];
    split.extend(&settings);
    split.extend(frame(1, 0x1, 1, &get[..3]));
    split.extend(frame(9, 0x4, 1, &get[3..]));
    seeds.push(split);
    seeds
}

fn client_hellos() -> Vec<Vec<u8>> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut seeds = Vec::new();
    for (name, alpn) in [
        ("a.example", &b"h2"[..]),
        ("x.b.example", b"http/1.1"),
        ("other.test", b"h2"),
    ] {
        for versions in [&[&rustls::version::TLS13][..], &[&rustls::version::TLS12]] {
            let mut config = rustls::ClientConfig::builder_with_provider(provider.clone())
                .with_protocol_versions(versions)
                .expect("versions")
                .with_root_certificates(rustls::RootCertStore::empty())
                .with_no_client_auth();
            config.alpn_protocols = vec![alpn.to_vec()];
            let mut conn = rustls::ClientConnection::new(
                Arc::new(config),
                name.to_string().try_into().expect("a name"),
            )
            .expect("a connection");
            let mut hello = vec![3u8];
            conn.write_tls(&mut hello).expect("a hello");
            seeds.push(hello);
        }
    }
    seeds
}

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let sets: Vec<(&str, Vec<Vec<u8>>)> = vec![
        ("request_head", requests()),
        ("chunked", chunked()),
        ("response_head", responses()),
        ("canonical_path", paths()),
        ("proxy_protocol", proxy_headers()),
        ("basic_auth", credentials()),
        ("profile", profiles(&root)),
        ("udp_envelope", datagrams()),
        ("h2_front", h2_connections()),
        ("tls_front", client_hellos()),
    ];
    for (target, seeds) in sets {
        let dir = root.join("fuzz/corpus").join(target);
        std::fs::create_dir_all(&dir).expect("the corpus folder");
        for (i, seed) in seeds.iter().enumerate() {
            std::fs::write(dir.join(format!("seed-{i:02}")), seed).expect("a seed");
        }
        println!("{target}: {} seeds", seeds.len());
    }
}
