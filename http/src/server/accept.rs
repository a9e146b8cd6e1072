//! Connection-level checks before the first request, on the plain TCP
//! stream and before any TLS handshake: a PROXY header from trusted peers,
//! the connection limits, the server's access list on the address.

use super::client::ClientIo;
use super::end::{End, ReadFail};
use super::place::Place;
use super::shard::Shard;
use super::stats::ErrorKind;
use crate::clock;
use gapura_gate::client::Peer;
use monoio::net::TcpStream;
use std::net::SocketAddr;

/// Connection-level checks before the first request: the PROXY header
/// on listeners that expect one (from trusted peers only; anyone else's
/// bytes are read as HTTP), then the connection limits and the server's
/// access list on the address. The peer the gate sees (the connection's
/// place in its limit held by `place`), or how the connection ends.
pub(super) async fn accept(
    io: &mut ClientIo<TcpStream>,
    shard: &Shard,
    place: &mut Place,
    peer: SocketAddr,
    proxy_protocol: bool,
) -> Result<Peer, End> {
    let snap = shard.snapshot();
    let tcp_ip = peer.ip();
    let mut client_peer = Peer::tcp(tcp_ip);
    if proxy_protocol && snap.gate.client.proxy_protocol_trusted(tcp_ip) {
        let deadline = clock::deadline(snap.server.header_timeout_ms);
        loop {
            match crate::codec::proxyproto::parse(io.unread()) {
                Ok(Some((header, used))) => {
                    match snap
                        .gate
                        .client
                        .accept_proxy_header(tcp_ip, header.source())
                    {
                        Some(p) => client_peer = p,
                        None => return Err(End::Error(ErrorKind::BadRequest)),
                    }
                    io.consume(used);
                    break;
                }
                Ok(None) => match io.read_more(deadline).await {
                    Ok(n) if n > 0 => {}
                    Ok(_) | Err(ReadFail::Io) => return Err(End::Error(ErrorKind::Io)),
                    Err(ReadFail::Timeout) => return Err(End::Error(ErrorKind::HeaderTimeout)),
                },
                Err(_) => return Err(End::Error(ErrorKind::BadRequest)),
            }
        }
    }
    let now_ms = shard.now_ms();
    match shard.gate_mut().admit_connection(
        snap.gate.connections.as_ref(),
        client_peer.addr(),
        now_ms,
    ) {
        Ok(token) => place.hold(token),
        Err(_) => {
            shard.stats.connections_refused.inc();
            return Err(End::Done);
        }
    }
    // The server's list judges the peer only where the peer is the
    // client: directly connected, or named by a trusted PROXY header.
    let peer_is_client = snap.gate.client.mode == gapura_gate::client::ClientMode::Direct
        || client_peer.via_proxy_protocol();
    if let Some(i) = snap.gate.accept_list.filter(|_| peer_is_client) {
        if let Some(list) = snap.gate.access_lists.get(i as usize) {
            if list.address_only_verdict(client_peer.addr()).is_some() {
                shard.stats.accept_drops.inc();
                return Err(End::Done);
            }
        }
    }
    Ok(client_peer)
}
