//! The fronts a client speaks to first: HTTP/2 (frames through the h2
//! server with the production settings and frame watch, each request's
//! head read from its fields as its stream's pipeline reads it) and TLS (records
//! through rustls with the production configuration and certificate
//! choice).

use bytes::Bytes;
use gapura_gate::host::HostTable;
use gapura_gate::limits::OUTER_MAX_HEAD_BYTES;
use gapura_gate::tls::{Certificate, Secret, TlsSettings, TlsVersion};
use gapura_http::server::fuzzing::{h2_head, FrameScan};
use gapura_http::server::ShardStats;
use std::cell::Cell;
use std::future::Future;
use std::io;
use std::pin::{pin, Pin};
use std::rc::Rc;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll, Waker};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The preface a client opens an HTTP/2 connection with.
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// A connection in memory: reads hand out the input `chunk` bytes at a
/// time, then wait a few times (a client that sent everything and waits
/// for the answers; the waits are counted), then end; writes are taken
/// whole.
struct Wire {
    input: Vec<u8>,
    at: usize,
    chunk: usize,
    waits: Rc<Cell<u32>>,
}

impl AsyncRead for Wire {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.at == self.input.len() {
            // A few waits (the server answers what it has), then the end
            // of the stream: the connection closes as a real one does.
            self.waits.set(self.waits.get() + 1);
            if self.waits.get() <= 8 {
                return Poll::Pending;
            }
            return Poll::Ready(Ok(()));
        }
        let n = self
            .chunk
            .min(self.input.len() - self.at)
            .min(buf.remaining());
        let at = self.at;
        buf.put_slice(&self.input[at..at + n]);
        self.at += n;
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for Wire {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Poll::Ready(Ok(buf.len()))
    }
    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// Polls `fut` with a waker that does nothing, at most `polls` times, and
/// no more once reads have found the input spent many times.
fn run<F: Future<Output = ()>>(fut: F, polls: usize, waits: &Cell<u32>) {
    let mut fut = pin!(fut);
    let mut cx = Context::from_waker(Waker::noop());
    for _ in 0..polls {
        if fut.as_mut().poll(&mut cx).is_ready() || waits.get() > 64 {
            return;
        }
    }
}

/// HTTP/2: the first byte sets the read size and the control-frame
/// budget, the rest follows the preface. The frame watch cuts the input
/// where its budget ends (as the server does); every request accepted
/// becomes a complete HTTP/1.1 head with its authority as `Host`.
pub fn h2_front(data: &[u8]) {
    h2_streams(data);
}

/// [`h2_front`]'s work; how many requests were accepted.
pub fn h2_streams(data: &[u8]) -> usize {
    let Some((&knobs, frames)) = data.split_first() else {
        return 0;
    };
    let mut input = PREFACE.to_vec();
    input.extend_from_slice(frames);
    let chunk = [1, 7, 64, 1 << 20][usize::from(knobs & 3)];
    let mut scan = FrameScan::new(u32::from(knobs >> 2) + 1);
    let mut seen = 0;
    for piece in input.chunks(chunk) {
        if let Some(cut) = scan.scan(piece) {
            assert!(scan.flooded() && cut <= piece.len());
            input.truncate(seen + cut);
            break;
        }
        seen += piece.len();
    }
    let waits = Rc::new(Cell::new(0));
    let wire = Wire {
        input,
        at: 0,
        chunk,
        waits: waits.clone(),
    };
    let accepted = std::cell::Cell::new(0);
    let serve = async {
        let mut builder = h2::server::Builder::new();
        builder
            .max_concurrent_streams(8)
            .max_header_list_size(OUTER_MAX_HEAD_BYTES as u32)
            .max_send_buffer_size(64 * 1024)
            .max_pending_accept_reset_streams(20);
        let Ok(mut conn) = builder.handshake::<_, Bytes>(wire).await else {
            return;
        };
        let mut streams = 0;
        while let Some(Ok((request, mut respond))) = conn.accept().await {
            let (parts, body) = request.into_parts();
            let chunked =
                !body.is_end_stream() && !parts.headers.contains_key(http::header::CONTENT_LENGTH);
            check_head(parts, chunked);
            let response = http::Response::builder()
                .status(200)
                .body(())
                .expect("a response");
            if let Ok(mut send) = respond.send_response(response, false) {
                let _ = send.send_data(Bytes::from_static(b"ok"), true);
            }
            streams += 1;
            accepted.set(streams);
            if streams == 64 {
                break;
            }
        }
    };
    run(serve, 4096, &waits);
    accepted.get()
}

/// What a stream's pipeline reads of a request's head: its ranges lie in
/// the input laid out for it, the head is all of that input, the target is
/// the request's path (CONNECT's is refused) and the host its authority.
fn check_head(parts: http::request::Parts, chunked: bool) {
    let authority = parts.uri.authority().map(|a| a.as_str().to_string());
    let path = parts.uri.path_and_query().map(|p| p.as_str().to_string());
    let (input, head) = h2_head(parts, chunked);
    let Ok(h) = head else {
        return;
    };
    assert_eq!(h.head_len, input.len());
    assert!(h.target.end <= input.len() && h.path.end <= input.len());
    if let Some(p) = path.filter(|p| p.starts_with('/')) {
        assert_eq!(&input[h.target.clone()], p.as_bytes());
    }
    let host = h.host.map(|r| &input[r]);
    if let Some(a) = &authority {
        assert_eq!(host, Some(a.as_bytes()));
    }
    assert!(host.is_some(), "a head without a host was served");
}

/// The production TLS configuration (two certificates by name, tickets,
/// h2 and http/1.1 by ALPN), built once.
fn tls_config() -> Arc<rustls::ServerConfig> {
    static CONFIG: OnceLock<Arc<rustls::ServerConfig>> = OnceLock::new();
    CONFIG
        .get_or_init(|| {
            let mut certificates = Vec::new();
            let mut names = HostTable::default();
            for (i, name) in ["a.example", "*.b.example"].into_iter().enumerate() {
                let c = rcgen::generate_simple_self_signed(vec![name.to_string()])
                    .expect("a certificate");
                certificates.push(Certificate {
                    label: name.into(),
                    chain: vec![c.cert.der().to_vec()],
                    key: Secret(c.key_pair.serialize_der()),
                    ocsp: None,
                    acme: Vec::new(),
                });
                names.insert(name, i as u32).expect("a name");
            }
            names.set_default(0);
            let settings = Arc::new(TlsSettings {
                certificates,
                names,
                min_version: TlsVersion::V12,
                handshake_timeout_ms: 10_000,
                ticket_secret: Secret(vec![9; 32]),
                ticket_rotation_s: 3600,
                h2: true,
                acme_alpn: Vec::new(),
            });
            gapura_http::server::tls::build_config(&settings, Arc::new(ShardStats::default()), None)
                .expect("a configuration")
        })
        .clone()
}

/// TLS: the input is what a client sends, read in pieces of the size the
/// first byte picks; every answer rustls writes is taken.
pub fn tls_front(data: &[u8]) {
    tls_answer(data);
}

/// [`tls_front`]'s work; how many bytes the server answered with.
pub fn tls_answer(data: &[u8]) -> usize {
    let Some((&knobs, records)) = data.split_first() else {
        return 0;
    };
    let mut conn = rustls::ServerConnection::new(tls_config()).expect("a connection");
    let chunk = [5, 64, 517, 1 << 16][usize::from(knobs & 3)];
    let mut out = Vec::new();
    for mut piece in records.chunks(chunk) {
        while !piece.is_empty() {
            match conn.read_tls(&mut piece) {
                Ok(0) | Err(_) => return out.len(),
                Ok(_) => {}
            }
            if conn.process_new_packets().is_err() {
                let _ = conn.write_tls(&mut out);
                return out.len();
            }
            while conn.wants_write() {
                if conn.write_tls(&mut out).is_err() {
                    return out.len();
                }
            }
        }
    }
    if let Some(p) = conn.alpn_protocol() {
        assert!(p == b"h2" || p == b"http/1.1", "{p:?}");
    }
    out.len()
}
