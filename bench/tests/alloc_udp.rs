//! The UDP relay's decisions allocate nothing in steady state: relaying a
//! known session's datagram, a reply, and every drop. A counting global
//! allocator proves it.

use gapura_gate::quota::{Budget, RatePolicy};
use gapura_gate::udp::{EnvelopeKey, EnvelopePolicy, UdpDrop};
use gapura_udp::envelope::seal;
use gapura_udp::testing::policy;
use gapura_udp::{Inbound, Relay};
use std::net::SocketAddr;
use std::sync::Arc;

#[path = "../../gate/tests/common/mod.rs"]
mod counting;
use counting::allocations;

const UNIX: u64 = 1_800_000_000_000;

#[test]
fn relay_decisions_allocate_nothing() {
    let servers: Vec<SocketAddr> = vec!["127.0.0.1:7001".parse().unwrap()];
    let mut p = policy(&servers);
    p.budgets.prefix = Some(Budget::flat(1_000).unwrap());
    p.session.rate = Some(RatePolicy::per_second(100, 100).unwrap());
    let key = EnvelopeKey::new(&[1; 32]);
    p.envelope = Some(EnvelopePolicy {
        key_files: Vec::new(),
        keys: vec![key.clone()],
        max_age_ms: 5_000,
        replay_window: 1_024,
        key_budget: None,
        strip: true,
    });
    let mut r = Relay::new(Arc::new(p), [4; 16], Default::default());
    let src: SocketAddr = "203.0.113.7:4000".parse().unwrap();
    let mut d = Vec::with_capacity(256);
    seal(&key, 0, UNIX, 1, b"first", &mut d);
    let Inbound::Forward { session, .. } = r.inbound(src, &d, 0, UNIX) else {
        panic!("the first datagram opens a session")
    };
    let mut forged = d.clone();
    forged[20] ^= 1;
    let big = vec![0u8; 2_000];
    let mut nonce = 2;
    let n = allocations(|| {
        for i in (0..50u64).map(|n| n * 100) {
            seal(&key, 0, UNIX, nonce, b"move", &mut d);
            nonce += 1;
            assert!(matches!(
                r.inbound(src, &d, i, UNIX),
                Inbound::Forward { .. }
            ));
            assert!(r.outbound(session, 4, i).is_ok());
            let drops = [
                (r.inbound(src, &d, i, UNIX), UdpDrop::Replayed),
                (r.inbound(src, &forged, i, UNIX), UdpDrop::BadTag),
                (r.inbound(src, &big, i, UNIX), UdpDrop::Oversized),
                (r.inbound(src, b"short", i, UNIX), UdpDrop::Malformed),
            ];
            for (got, want) in drops {
                assert!(matches!(got, Inbound::Drop { reason, .. } if reason == want));
            }
        }
    });
    assert_eq!(n, 0);
}
