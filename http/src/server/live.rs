//! `gapura explain --live` on the shard's side: an ask from the admin
//! thread, answered from this shard's tables without changing them.

use super::shard::Shard;
use gapura_gate::chain::{LiveView, Request};
use gapura_gate::client::Peer;
use std::net::IpAddr;
use std::sync::mpsc::SyncSender;

/// A request described by the admin listener, and where the answer goes.
#[derive(Debug)]
pub struct LiveAsk {
    pub method: String,
    pub path: String,
    pub peer: IpAddr,
    /// Header lines, the `Host` among them.
    pub headers: Vec<(String, String)>,
    /// The shard's id, its view and its HTTP/1.1 upstream pools (each
    /// group's figures: connections, idle ones, requests queued).
    pub reply: SyncSender<LiveAnswer>,
}

/// One shard's answer to a [`LiveAsk`].
pub struct LiveAnswer {
    pub shard: usize,
    pub view: LiveView,
    pub upstreams: Vec<(String, crate::upstream::pool::PoolCounts)>,
}

impl Shard {
    /// Answers an ask from the current snapshot and this shard's tables.
    /// Reads only (the snapshot's rate slots are bound first, as the next
    /// request would bind them). Allocates; an admin path.
    pub fn answer_live(&self, ask: LiveAsk) {
        let snap = self.snapshot();
        let lines: Vec<(&str, &[u8])> = ask
            .headers
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_bytes()))
            .collect();
        let host = ask
            .headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case("host"))
            .map(|(_, v)| v.as_bytes());
        let req = Request {
            peer: Peer::tcp(ask.peer),
            method: ask.method.as_bytes(),
            host,
            target: ask.path.as_bytes(),
            path: ask.path.as_bytes(),
            header_count: lines.len(),
            header_bytes: 0,
            content_length: None,
            headers: &lines[..],
            connection: None,
            tls: false,
        };
        let now_ms = self.now_ms();
        self.gate_mut().adopt(&snap, now_ms);
        let mut scratch = Box::new([0u8; gapura_gate::path::MAX_PATH_BYTES]);
        let view = self
            .gate
            .borrow()
            .live_view(&snap, &req, now_ms, &mut scratch);
        let _ = ask.reply.try_send(LiveAnswer {
            shard: self.id,
            view,
            upstreams: self.upstream_pools(),
        });
    }
}
