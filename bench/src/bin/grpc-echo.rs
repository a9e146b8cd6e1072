//! An HTTP/2 (h2c) server answering every call the way a gRPC unary
//! method does: `200`, `content-type: application/grpc`, the request's
//! message echoed as one DATA frame, then the trailers `grpc-status: 0`;
//! `GET /big` gets 1,000,000 bytes instead (the h2 upstream of bench/
//! hostile.py's h2-zero-window). The upstream of `bench/grpc.py`; one
//! thread.
//!
//!     grpc-echo PORT

use bytes::Bytes;
use std::net::SocketAddr;

fn main() {
    let port: u16 = std::env::args()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .expect("usage: grpc-echo PORT");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .expect("a runtime");
    rt.block_on(async move {
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let l = tokio::net::TcpListener::bind(addr).await.expect("bind");
        loop {
            let Ok((tcp, _)) = l.accept().await else {
                continue;
            };
            let _ = tcp.set_nodelay(true);
            tokio::spawn(async move {
                let Ok(mut conn) = h2::server::Builder::new()
                    .max_concurrent_streams(1000)
                    .handshake::<_, Bytes>(tcp)
                    .await
                else {
                    return;
                };
                while let Some(Ok((req, respond))) = conn.accept().await {
                    tokio::spawn(answer(req, respond));
                }
            });
        }
    });
}

async fn answer(req: http::Request<h2::RecvStream>, mut respond: h2::server::SendResponse<Bytes>) {
    if req.uri().path() == "/big" {
        let head = http::Response::builder()
            .status(200)
            .body(())
            .expect("a head");
        if let Ok(mut send) = respond.send_response(head, false) {
            let _ = send.send_data(Bytes::from(vec![b'x'; 1_000_000]), true);
        }
        return;
    }
    let mut body = req.into_body();
    let mut message = Vec::new();
    while let Some(Ok(chunk)) = body.data().await {
        let _ = body.flow_control().release_capacity(chunk.len());
        message.extend_from_slice(&chunk);
    }
    let head = http::Response::builder()
        .status(200)
        .header("content-type", "application/grpc")
        .body(())
        .expect("a head");
    let Ok(mut send) = respond.send_response(head, false) else {
        return;
    };
    let _ = send.send_data(Bytes::from(message), false);
    let mut trailers = http::HeaderMap::new();
    trailers.insert("grpc-status", http::HeaderValue::from_static("0"));
    let _ = send.send_trailers(trailers);
}
