//! The UDP relay's decision on each datagram, envelope included: the
//! input is a run of datagrams from a few clients; every answer is a
//! drop or a payload inside its datagram.

use gapura_gate::udp::{EnvelopeKey, EnvelopePolicy, UdpDrop};
use gapura_udp::envelope::{self, seal, HEADER_BYTES, TAG_BYTES};
use gapura_udp::relay::{Inbound, Relay};
use std::net::SocketAddr;
use std::sync::Arc;

const KEY: &[u8; 32] = b"0123456789abcdef0123456789abcdef";
/// The relay's wall clock (ms) and the timestamps a sealed datagram gets.
const UNIX_MS: u64 = 1_800_000_000_000;

/// Records: `[client, clock step, flags, length]` then `length` bytes (at
/// most 255). Flag bit 0 seals the bytes as an envelope (the next bytes
/// of the record give the nonce), else they go as they are.
pub fn udp_envelope(data: &[u8]) {
    let upstream: SocketAddr = "127.0.0.1:9".parse().expect("address");
    let mut policy = gapura_udp::testing::policy(&[upstream]);
    policy.envelope = Some(EnvelopePolicy {
        key_files: vec!["k".into()],
        keys: vec![EnvelopeKey::new(KEY)],
        max_age_ms: 30_000,
        replay_window: 128,
        key_budget: None,
        strip: data.first().is_some_and(|b| b & 1 != 0),
    });
    let key = EnvelopeKey::new(KEY);
    let mut relay = Relay::new(Arc::new(policy), [7; 16], Default::default());
    let (mut now, mut at) = (1_000u64, 1);
    let mut sealed = Vec::new();
    while at + 4 <= data.len() {
        let [client, step, flags, len] = [data[at], data[at + 1], data[at + 2], data[at + 3]];
        at += 4;
        let end = (at + usize::from(len)).min(data.len());
        let bytes = &data[at..end];
        at = end;
        now += u64::from(step) * 10;
        let datagram: &[u8] = if flags & 1 != 0 {
            let nonce = bytes
                .iter()
                .take(8)
                .fold(0u64, |a, &b| a << 8 | u64::from(b));
            let stamp = UNIX_MS - 20_000 + u64::from(flags >> 1) * 500;
            seal(&key, 0, stamp, nonce, bytes, &mut sealed);
            let env = relay.policy().envelope.as_ref().expect("set");
            match envelope::open(env, &sealed, UNIX_MS) {
                Ok(opened) => {
                    assert!(stamp.abs_diff(UNIX_MS) <= env.max_age_ms);
                    assert_eq!((opened.timestamp_ms, opened.nonce), (stamp, nonce));
                    assert_eq!(opened.payload, (HEADER_BYTES, sealed.len() - TAG_BYTES));
                }
                Err(reason) => {
                    assert!(stamp.abs_diff(UNIX_MS) > env.max_age_ms, "{reason:?}");
                    assert_eq!(reason, UdpDrop::Stale);
                }
            }
            &sealed
        } else {
            bytes
        };
        let from = SocketAddr::from(([127, 0, 0, client % 5 + 1], 4000 + u16::from(client >> 5)));
        match relay.inbound(from, datagram, now, UNIX_MS) {
            Inbound::Forward {
                session, payload, ..
            } => {
                assert!(payload.0 <= payload.1 && payload.1 <= datagram.len());
                assert!(relay.session(session).is_some());
            }
            Inbound::Drop { .. } => {}
        }
        assert!(relay.live_sessions() <= 64);
    }
}
