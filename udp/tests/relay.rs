//! The relay's decisions with time passed in: the order of the checks, the
//! session table's ceiling and reserve, the per-session bucket, the
//! envelope and its replay window, the amplification bound, and a seeded
//! corpus of arbitrary envelopes through the production decoder.

use gapura_gate::quota::{Budget, Ceiling, RatePolicy};
use gapura_gate::testing::TestRng;
use gapura_gate::udp::{EnvelopeKey, EnvelopePolicy, OperationField, UdpClass, UdpDrop, UdpPolicy};
use gapura_udp::envelope::seal;
use gapura_udp::testing::policy;
use gapura_udp::{Inbound, Relay};
use std::net::SocketAddr;
use std::sync::Arc;

const SEED: [u8; 16] = *b"udp-relay-tests!";
const UNIX: u64 = 1_780_000_000_000;

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

fn servers() -> Vec<SocketAddr> {
    vec![addr("127.0.0.1:7001"), addr("127.0.0.1:7002")]
}

fn relay(p: UdpPolicy) -> Relay {
    Relay::new(Arc::new(p), SEED, Default::default())
}

fn dropped(i: Inbound) -> Option<UdpDrop> {
    match i {
        Inbound::Drop { reason, .. } => Some(reason),
        Inbound::Forward { .. } => None,
    }
}

fn with_envelope(mut p: UdpPolicy) -> UdpPolicy {
    p.envelope = Some(EnvelopePolicy {
        key_files: Vec::new(),
        keys: vec![EnvelopeKey::new(&[9; 32])],
        max_age_ms: 5_000,
        replay_window: 1_024,
        key_budget: None,
        strip: true,
    });
    p
}

#[test]
fn a_client_gets_one_session_and_sessions_alternate_servers() {
    let mut r = relay(policy(&servers()));
    let a = addr("192.0.2.1:4000");
    let Inbound::Forward {
        session,
        new: true,
        server: s1,
        payload,
        ..
    } = r.inbound(a, b"ping", 0, UNIX)
    else {
        panic!("forwarded")
    };
    assert_eq!(payload, (0, 4));
    let Inbound::Forward {
        session: again,
        new: false,
        ..
    } = r.inbound(a, b"ping", 1, UNIX)
    else {
        panic!("same session")
    };
    assert_eq!(session, again);
    let Inbound::Forward { server: s2, .. } = r.inbound(addr("192.0.2.1:4001"), b"x", 2, UNIX)
    else {
        panic!()
    };
    assert_ne!(s1, s2, "round robin over two servers");
    assert_eq!(r.live_sessions(), 2);
    assert_eq!(r.counters.sessions_opened, 2);
}

#[test]
fn the_session_bucket_is_exact_with_time_passed_in() {
    let mut p = policy(&servers());
    p.session.rate = Some(RatePolicy::per_second(10, 3).unwrap());
    p.budgets.prefix = None;
    let mut r = relay(p);
    let a = addr("192.0.2.1:4000");
    // The burst of 3 (the first opens the session), then one per 100 ms.
    for _ in 0..3 {
        assert_eq!(dropped(r.inbound(a, b"x", 1_000, UNIX)), None);
    }
    assert_eq!(
        dropped(r.inbound(a, b"x", 1_000, UNIX)),
        Some(UdpDrop::SessionRate)
    );
    assert_eq!(
        dropped(r.inbound(a, b"x", 1_099, UNIX)),
        Some(UdpDrop::SessionRate)
    );
    assert_eq!(dropped(r.inbound(a, b"x", 1_100, UNIX)), None);
    assert_eq!(
        dropped(r.inbound(a, b"x", 1_100, UNIX)),
        Some(UdpDrop::SessionRate)
    );
    // An hour later: the burst again, no more.
    let later = 3_601_100;
    let passed = (0..10)
        .filter(|_| dropped(r.inbound(a, b"x", later, UNIX)).is_none())
        .count();
    assert_eq!(passed, 3);
    // Another session has its own bucket.
    assert_eq!(
        dropped(r.inbound(addr("192.0.2.1:4001"), b"x", 1_100, UNIX)),
        None
    );
    assert_eq!(r.counters.dropped[UdpDrop::SessionRate.index()], 10);
}

#[test]
fn rate_zero_disables_the_session_bucket() {
    let mut p = policy(&servers());
    p.session.rate = None;
    p.budgets.prefix = None;
    let mut r = relay(p);
    let a = addr("192.0.2.1:4000");
    for _ in 0..10_000 {
        assert_eq!(dropped(r.inbound(a, b"x", 0, UNIX)), None);
    }
}

#[test]
fn the_session_table_fills_to_its_ceiling_and_keeps_the_reserve() {
    let mut p = policy(&servers());
    p.session.ceiling = Ceiling::new(8, 2).unwrap();
    p.budgets.prefix = None;
    p.operation = Some(OperationField { offset: 0, len: 1 });
    p.classes.push(UdpClass {
        name: "join".into(),
        values: vec![b'J'.into()],
        budget: None,
        critical: true,
    });
    let mut r = relay(p);
    let mut opened = 0;
    for port in 0..100u16 {
        let a = SocketAddr::new("192.0.2.1".parse().unwrap(), 10_000 + port);
        match dropped(r.inbound(a, b"x", 0, UNIX)) {
            None => opened += 1,
            Some(UdpDrop::SessionCapacity) => {}
            Some(other) => panic!("{other:?}"),
        }
    }
    assert_eq!(opened, 6, "8 sessions, 2 reserved");
    // The flood added nothing; a critical class takes the reserve, then no more.
    assert_eq!(r.live_sessions(), 6);
    for port in 0..2u16 {
        let a = addr(&format!("198.51.100.1:{}", 2_000 + port));
        assert_eq!(dropped(r.inbound(a, b"J", 0, UNIX)), None);
    }
    assert_eq!(
        dropped(r.inbound(addr("198.51.100.1:3000"), b"J", 0, UNIX)),
        Some(UdpDrop::SessionCapacity)
    );
    // Known sessions still pass while the table is full.
    let known = SocketAddr::new("192.0.2.1".parse().unwrap(), 10_000);
    assert_eq!(dropped(r.inbound(known, b"x", 1, UNIX)), None);
    assert_eq!(r.counters.dropped[UdpDrop::SessionCapacity.index()], 95);
}

#[test]
fn idle_sessions_end_and_free_their_place() {
    let mut p = policy(&servers());
    p.session.idle_timeout_ms = 1_000;
    let mut r = relay(p);
    let a = addr("192.0.2.1:4000");
    let Inbound::Forward { session, .. } = r.inbound(a, b"x", 0, UNIX) else {
        panic!()
    };
    assert_eq!(r.idle_check(session, 400), Some(600));
    // A reply is activity too.
    assert!(r.outbound(session, 1, 500).is_ok());
    assert_eq!(r.idle_check(session, 1_499), Some(1));
    assert_eq!(r.idle_check(session, 1_500), None);
    assert_eq!(r.live_sessions(), 0);
    assert_eq!(r.idle_check(session, 1_500), None);
    // A reply to an ended session is dropped.
    assert_eq!(r.outbound(session, 1, 1_600), Err(UdpDrop::Unrelayed));
    let Inbound::Forward { new, .. } = r.inbound(a, b"x", 2_000, UNIX) else {
        panic!()
    };
    assert!(new, "a new session");
}

#[test]
fn replies_stay_within_three_times_for_the_whole_life_of_a_session_without_auth() {
    let mut r = relay(policy(&servers()));
    let a = addr("192.0.2.1:4000");
    let Inbound::Forward { session, .. } = r.inbound(a, &[0u8; 100], 0, UNIX) else {
        panic!()
    };
    assert_eq!(r.outbound(session, 250, 1), Ok(a));
    assert_eq!(r.outbound(session, 50, 1), Ok(a), "exactly 300");
    assert_eq!(
        r.outbound(session, 1, 1),
        Err(UdpDrop::Amplification),
        "301 > 3 x 100"
    );
    // A second datagram after a reply is what a blind spoofer can send
    // too: it proves nothing, it only raises the bound by 3 x its size.
    assert!(dropped(r.inbound(a, &[0u8; 10], 2, UNIX)).is_none());
    assert_eq!(r.outbound(session, 30, 3), Ok(a));
    assert_eq!(r.outbound(session, 1, 3), Err(UdpDrop::Amplification));
    assert!(!r.session(session).unwrap().validated);
    assert_eq!(r.counters.dropped[UdpDrop::Amplification.index()], 2);
}

#[test]
fn a_blind_spoofer_gets_at_most_three_times_over_a_session_life() {
    // 20 datagrams 100 ms apart from one spoofed source, an upstream that
    // answers each with ten times its size: at most 3x comes back.
    let mut r = relay(policy(&servers()));
    let victim = addr("198.51.100.7:27015");
    let (mut sent, mut back) = (0u64, 0u64);
    for i in 0..20u64 {
        let Inbound::Forward { session, .. } = r.inbound(victim, &[7u8; 50], i * 100, UNIX) else {
            panic!()
        };
        sent += 50;
        for _ in 0..10 {
            if r.outbound(session, 50, i * 100 + 1).is_ok() {
                back += 50;
            }
        }
    }
    assert_eq!(sent, 1_000);
    assert_eq!(back, 3_000, "3.0x, not the upstream's 10x");
}

#[test]
fn a_fresh_envelope_proves_the_session_and_a_replayed_one_from_elsewhere_is_dropped() {
    let p = with_envelope(policy(&servers()));
    let key = p.envelope.as_ref().unwrap().keys[0].clone();
    let mut r = relay(p);
    let a = addr("192.0.2.1:4000");
    let spoofed = addr("203.0.113.9:4000");
    let mut d = Vec::new();
    seal(&key, 0, UNIX, 1, b"move", &mut d);
    let Inbound::Forward { session, .. } = r.inbound(a, &d, 0, UNIX) else {
        panic!()
    };
    // Proved by the envelope: no bound on the replies.
    assert!(r.session(session).unwrap().validated);
    assert_eq!(r.outbound(session, 60_000, 1), Ok(a));
    // The same envelope from another source: the nonce is the key's.
    assert_eq!(
        dropped(r.inbound(spoofed, &d, 2, UNIX)),
        Some(UdpDrop::Replayed)
    );
    assert_eq!(r.live_sessions(), 1, "the replay opened no session");
}

#[test]
fn an_invalid_envelope_pays_only_its_prefix_and_never_the_session_bucket() {
    let mut p = with_envelope(policy(&servers()));
    p.budgets.global = Some(Budget::flat(3).unwrap());
    p.session.rate = Some(RatePolicy::new(1, 1_000, 1).unwrap());
    let key = p.envelope.as_ref().unwrap().keys[0].clone();
    let mut r = relay(p);
    let a = addr("192.0.2.1:4000");
    let mut d = Vec::new();
    seal(&key, 0, UNIX, 1, b"move", &mut d);
    assert!(dropped(r.inbound(a, &d, 0, UNIX)).is_none());
    // Spoofed garbage from the session's own address: dropped at the
    // tag, spending neither the global budget nor the session's token.
    let mut forged = d.clone();
    *forged.last_mut().unwrap() ^= 1;
    for _ in 0..10 {
        assert_eq!(
            dropped(r.inbound(a, &forged, 1_000, UNIX)),
            Some(UdpDrop::BadTag)
        );
    }
    seal(&key, 0, UNIX, 2, b"move", &mut d);
    assert!(
        dropped(r.inbound(a, &d, 1_000, UNIX)).is_none(),
        "its token and budget were kept"
    );
}

#[test]
fn an_envelope_is_checked_stripped_and_its_nonce_taken_once() {
    let p = with_envelope(policy(&servers()));
    let key = p.envelope.as_ref().unwrap().keys[0].clone();
    let mut r = relay(p);
    let a = addr("192.0.2.1:4000");
    let mut d = Vec::new();
    seal(&key, 0, UNIX, 7, b"move", &mut d);
    let Inbound::Forward { payload, .. } = r.inbound(a, &d, 0, UNIX + 10) else {
        panic!()
    };
    assert_eq!(&d[payload.0..payload.1], b"move");
    assert_eq!(
        dropped(r.inbound(a, &d, 1, UNIX + 10)),
        Some(UdpDrop::Replayed)
    );
    // Out of order within the window is fine; once.
    seal(&key, 0, UNIX, 5, b"late", &mut d);
    assert_eq!(dropped(r.inbound(a, &d, 2, UNIX)), None);
    assert_eq!(dropped(r.inbound(a, &d, 3, UNIX)), Some(UdpDrop::Replayed));
    // Older than the window of 1,024.
    seal(&key, 0, UNIX, 2_000, b"far", &mut d);
    assert_eq!(dropped(r.inbound(a, &d, 4, UNIX)), None);
    seal(&key, 0, UNIX, 975, b"old", &mut d);
    assert_eq!(dropped(r.inbound(a, &d, 5, UNIX)), Some(UdpDrop::Replayed));
    // Stale either side.
    seal(&key, 0, UNIX - 5_001, 3_000, b"stale", &mut d);
    assert_eq!(dropped(r.inbound(a, &d, 6, UNIX)), Some(UdpDrop::Stale));
    seal(&key, 0, UNIX + 5_001, 3_001, b"future", &mut d);
    assert_eq!(dropped(r.inbound(a, &d, 6, UNIX)), Some(UdpDrop::Stale));
}

#[test]
fn an_unauthenticated_datagram_opens_no_session() {
    let p = with_envelope(policy(&servers()));
    let mut r = relay(p);
    for port in 0..50u16 {
        let a = SocketAddr::new("192.0.2.1".parse().unwrap(), 20_000 + port);
        let mut forged = vec![1u8, 0];
        forged.extend_from_slice(&UNIX.to_be_bytes());
        forged.extend_from_slice(&[0u8; 8 + 4 + 16]);
        assert_eq!(
            dropped(r.inbound(a, &forged, 0, UNIX)),
            Some(UdpDrop::BadTag)
        );
    }
    assert_eq!(r.live_sessions(), 0);
    assert_eq!(r.counters.sessions_opened, 0);
}

#[test]
fn strip_false_relays_the_whole_envelope() {
    let mut p = with_envelope(policy(&servers()));
    p.envelope.as_mut().unwrap().strip = false;
    let key = p.envelope.as_ref().unwrap().keys[0].clone();
    let mut r = relay(p);
    let mut d = Vec::new();
    seal(&key, 0, UNIX, 1, b"move", &mut d);
    let Inbound::Forward { payload, .. } = r.inbound(addr("192.0.2.1:1"), &d, 0, UNIX) else {
        panic!()
    };
    assert_eq!(payload, (0, d.len()));
}

#[test]
fn budgets_come_before_the_session_and_the_envelope() {
    let mut p = with_envelope(policy(&servers()));
    p.budgets.prefix = Some(Budget::flat(2).unwrap());
    let mut r = relay(p);
    let a = addr("192.0.2.1:4000");
    // Garbage pays its prefix budget first: two unknown keys (key id 1 of
    // one key), then the budget.
    for _ in 0..2 {
        assert_eq!(
            dropped(r.inbound(a, &[1u8; 40], 0, UNIX)),
            Some(UdpDrop::UnknownKey)
        );
    }
    assert_eq!(
        dropped(r.inbound(a, &[1u8; 40], 0, UNIX)),
        Some(UdpDrop::PrefixBudget)
    );
    assert_eq!(
        dropped(r.inbound(a, &[0u8; 1_025], 0, UNIX)),
        Some(UdpDrop::Oversized)
    );
}

/// 10,000 arbitrary envelopes through the production decoder, recorded
/// seed 0x152026: nothing panics and nothing is relayed (no session opens,
/// nothing is forwarded); a tenth are made from a real envelope with one
/// byte changed, the hardest to refuse.
#[test]
fn ten_thousand_arbitrary_envelopes_are_all_dropped() {
    let p = with_envelope(policy(&servers()));
    let key = p.envelope.as_ref().unwrap().keys[0].clone();
    let mut p = p;
    p.budgets.prefix = None;
    p.budgets.global = None;
    p.session.rate = None;
    p.max_datagram_bytes = 2_048;
    let mut r = relay(p);
    let mut rng = TestRng(0x152026);
    let mut real = Vec::new();
    seal(&key, 0, UNIX, 1, b"payload", &mut real);
    let mut reasons = std::collections::HashMap::new();
    for i in 0..10_000u32 {
        let d: Vec<u8> = match i % 10 {
            0 => {
                let mut d = real.clone();
                let at = rng.below(d.len() as u64) as usize;
                d[at] ^= 1 << rng.below(8);
                d
            }
            1 => {
                // Well-formed header, current time, random tag.
                let mut d = vec![1u8, 0];
                d.extend_from_slice(&UNIX.to_be_bytes());
                let n = 8 + rng.below(64) as usize + 16;
                d.extend((0..n).map(|_| rng.next() as u8));
                d
            }
            _ => {
                let n = rng.below(2_100) as usize;
                (0..n).map(|_| rng.next() as u8).collect()
            }
        };
        let port = 1_000 + (i % 50_000) as u16;
        let src = SocketAddr::new("203.0.113.7".parse().unwrap(), port);
        match r.inbound(src, &d, u64::from(i), UNIX) {
            Inbound::Drop { reason, .. } => *reasons.entry(reason).or_insert(0) += 1,
            Inbound::Forward { .. } => panic!("datagram {i} was relayed: {d:?}"),
        }
    }
    assert_eq!(r.live_sessions(), 0);
    assert_eq!(r.counters.forwarded, 0);
    assert_eq!(reasons.values().sum::<u32>(), 10_000);
    for reason in [
        UdpDrop::Malformed,
        UdpDrop::BadTag,
        UdpDrop::Stale,
        UdpDrop::Oversized,
    ] {
        assert!(reasons.contains_key(&reason), "{reason:?} in {reasons:?}");
    }
}

#[test]
fn a_reload_keeps_sessions_and_a_resize_ends_them() {
    let p = policy(&servers());
    let mut r = relay(p.clone());
    let a = addr("192.0.2.1:4000");
    let Inbound::Forward { session, .. } = r.inbound(a, b"x", 0, UNIX) else {
        panic!()
    };
    let mut same = p.clone();
    same.session.idle_timeout_ms = 60_000;
    assert!(r.set_policy(Arc::new(same)).is_empty());
    assert!(r.session(session).is_some());
    assert_eq!(r.idle_check(session, 45_000), Some(15_000));
    let mut bigger = p;
    bigger.session.ceiling = Ceiling::new(128, 8).unwrap();
    assert_eq!(r.set_policy(Arc::new(bigger)), vec![session]);
    assert_eq!(r.live_sessions(), 0);
}

#[test]
fn each_key_pays_its_own_budget_once_its_envelope_verifies() {
    let mut p = with_envelope(policy(&servers()));
    let env = p.envelope.as_mut().unwrap();
    env.keys.push(EnvelopeKey::new(&[8; 32]));
    env.key_budget = Some(2);
    let (k0, k1) = (env.keys[0].clone(), env.keys[1].clone());
    let mut r = relay(p);
    let mut d = Vec::new();
    // Key 0 from two sources: its budget of 2 is the key's, not a source's.
    for (i, src) in ["192.0.2.1:1", "198.51.100.1:1"].iter().enumerate() {
        seal(&k0, 0, UNIX, i as u64 + 1, b"x", &mut d);
        assert!(dropped(r.inbound(addr(src), &d, 0, UNIX)).is_none());
    }
    seal(&k0, 0, UNIX, 3, b"x", &mut d);
    assert_eq!(
        dropped(r.inbound(addr("203.0.113.1:1"), &d, 0, UNIX)),
        Some(UdpDrop::KeyBudget)
    );
    // A forged envelope under key 0 does not count against it or reach it.
    let mut forged = d.clone();
    *forged.last_mut().unwrap() ^= 1;
    assert_eq!(
        dropped(r.inbound(addr("203.0.113.1:1"), &forged, 0, UNIX)),
        Some(UdpDrop::BadTag)
    );
    // Key 1 has its own; the next window gives key 0 its budget back.
    seal(&k1, 1, UNIX, 1, b"x", &mut d);
    assert!(dropped(r.inbound(addr("203.0.113.1:1"), &d, 0, UNIX)).is_none());
    seal(&k0, 0, UNIX + 1_000, 4, b"x", &mut d);
    assert!(dropped(r.inbound(addr("203.0.113.1:1"), &d, 1_000, UNIX + 1_000)).is_none());
    assert_eq!(r.counters.dropped[UdpDrop::KeyBudget.index()], 1);
}

#[test]
fn a_replay_on_another_shard_is_dropped_spends_no_budget_and_proves_nothing() {
    let mut p = with_envelope(policy(&servers()));
    p.budgets.global = Some(Budget::flat(2).unwrap());
    let key = p.envelope.as_ref().unwrap().keys[0].clone();
    let p = Arc::new(p);
    // Two shards of one process: one board of replay windows.
    let board = Arc::new(gapura_udp::replay::ReplayBoard::default());
    let mut shard0 = Relay::new(p.clone(), SEED, board.clone());
    let mut shard1 = Relay::new(p, SEED, board);
    let sender = addr("192.0.2.1:4000");
    let victim = addr("198.51.100.7:53");
    let mut d = Vec::new();
    seal(&key, 0, UNIX, 1, b"move", &mut d);
    assert!(dropped(shard0.inbound(sender, &d, 0, UNIX)).is_none());
    // Captured, and sent to the other shard from a spoofed source.
    for t in 1..5 {
        assert_eq!(
            dropped(shard1.inbound(victim, &d, t, UNIX)),
            Some(UdpDrop::Replayed)
        );
    }
    assert_eq!(shard1.live_sessions(), 0, "no session, proved or not");
    // The replays spent none of the global budget: a fresh envelope
    // still passes there.
    seal(&key, 0, UNIX, 2, b"move", &mut d);
    assert!(dropped(shard1.inbound(sender, &d, 6, UNIX)).is_none());
}
