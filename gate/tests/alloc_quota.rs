//! The quota decision paths allocate nothing: a counting global allocator
//! watches this thread while tables built beforehand are used.

use gapura_gate::quota::{
    Budget, Ceiling, Class, Dim, DimLimits, DimRequest, Domain, Keyer, LeaseLimits,
    OperationLimits, Quota, QuotaDecision, QuotaLimits, QuotaRequest, QuotaSizes, QuotaTicket,
    RateCheck, RatePolicy, SourcePrefix,
};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

mod common;
use common::allocations_in;

#[test]
fn quota_paths_allocate_nothing() {
    // Built once, allocating.
    let ceiling = Ceiling::new(4_096, 256).unwrap();
    let mut q = Quota::new(&QuotaSizes {
        rate_entries: 1 << 16,
        policy_slots: 64,
        slot_grace_ms: 60_000,
        window_ms: 1_000,
        window_keys: ceiling,
        lease_keys: ceiling,
        max_leases: 1_024,
        operations: 4,
    })
    .unwrap();
    let flat = |n| Some(Budget::flat(n).unwrap());
    let limits = QuotaLimits {
        global: Some(Budget::new(1_000_000, 900_000).unwrap()),
        source: flat(100_000),
        health: flat(100),
        identity: flat(100_000),
        operations: vec![
            OperationLimits {
                requests: flat(1_000_000),
                concurrent: flat(1_000),
            };
            4
        ]
        .into_boxed_slice(),
        leases: LeaseLimits {
            global: flat(1_000),
            per_key: flat(1_000),
        },
        fleet: Default::default(),
        dims: DimLimits {
            tenant: Dim {
                requests: flat(1_000_000),
                concurrent: flat(1_000),
            },
            principal: Dim {
                requests: flat(100_000),
                concurrent: flat(100),
            },
            resource: flat(1_000_000),
        },
    };
    let wide = RatePolicy::per_second(1_000_000, 1_000_000).unwrap();
    let narrow = RatePolicy::per_minute(1, 1).unwrap();
    let wide_slot = q.slots_mut().bind(1, wide).unwrap();
    let narrow_slot = q.slots_mut().bind(2, narrow).unwrap();
    let keyer = Keyer::new([7; 16]);
    let v4 = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1));
    let v6 = IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 1, 2, 3, 4, 5, 6));
    let mut tokens = Vec::with_capacity(64);
    let mut alone = gapura_gate::quota::fleet::FleetState::default();

    let n = allocations_in(|| {
        // Keys.
        let source = keyer.source(Domain::SourceBudget, v4, SourcePrefix::BUDGET);
        let rate_key = keyer.source(Domain::RateSource, v6, SourcePrefix::RATE);
        let _ = keyer.source_path(v4, SourcePrefix::RATE, b"/API/Users/42");
        let _ = keyer.header_or_source(Some(b"key-1"), v4, SourcePrefix::RATE);
        let identity = keyer.identity(b"Bearer abcdef");

        // try_acquire: misses (new keys) and hits, allowed and refused.
        for k in 0..1_000u64 {
            assert!(
                q.rate_mut()
                    .try_acquire(&wide, wide_slot, rate_key ^ k, 5)
                    .allowed
            );
        }
        for _ in 0..1_000 {
            assert!(
                q.rate_mut()
                    .try_acquire(&wide, wide_slot, rate_key, 5)
                    .allowed
            );
        }
        assert!(
            q.rate_mut()
                .try_acquire(&narrow, narrow_slot, rate_key, 5)
                .allowed
        );
        for _ in 0..100 {
            assert!(
                !q.rate_mut()
                    .try_acquire(&narrow, narrow_slot, rate_key, 6)
                    .allowed
            );
        }
        let _ = q.rate().peek(&narrow, narrow_slot, rate_key, 7);

        // Full decisions: window consumes, lease acquire and release, rate.
        let checks = [RateCheck {
            policy: &wide,
            slot: wide_slot,
            key: rate_key,
        }];
        for i in 0..5_000u64 {
            let r = QuotaRequest {
                class: if i % 10 == 0 {
                    Class::Critical
                } else {
                    Class::Normal
                },
                source: source ^ (i % 300),
                operation: Some((i % 4) as u16),
                identity: Some(identity ^ (i % 50)),
                rate: &checks,
            };
            match q.decide(&limits, &r, 10 + i / 2) {
                QuotaDecision::Admit(t) => {
                    // The identity dimensions, after: their leases merged in.
                    let dims = DimRequest {
                        class: Class::Normal,
                        tenant: Some(keyer.bytes(Domain::Tenant, b"acme") ^ (i % 7)),
                        principal: Some(keyer.bytes(Domain::Principal, b"alice") ^ (i % 30)),
                        resource: Some(keyer.bytes(Domain::Resource, b"/api")),
                    };
                    let d = q
                        .admit_dims(&limits, &dims, &mut alone, 10 + i / 2)
                        .expect("within every dimension");
                    let t = QuotaTicket::merge(Some(t), d).unwrap();
                    if tokens.len() < tokens.capacity() {
                        tokens.push(t);
                    } else {
                        q.release(t);
                    }
                }
                QuotaDecision::Refuse(r) => panic!("refused {r:?}"),
            }
        }
        // Health probes and a refusal with its Retry-After.
        let probe = QuotaRequest {
            class: Class::Health,
            source,
            operation: None,
            identity: None,
            rate: &[],
        };
        for _ in 0..200 {
            if let QuotaDecision::Admit(t) = q.decide(&limits, &probe, 3_000) {
                q.release(t);
            }
        }
        for t in tokens.drain(..) {
            assert!(q.release(t));
            assert!(!q.release(t));
        }
        // The sweeper, over a window boundary.
        q.sweep(70_000, 4_096);
    });
    assert_eq!(n, 0, "allocations on the quota paths");
    assert_eq!(q.leases().active(), 0);
    assert!(q.counters.refused(gapura_gate::quota::Level::Health) > 0);
}

#[test]
fn the_counter_sees_allocations() {
    let n = allocations_in(|| {
        std::hint::black_box(Vec::<u8>::with_capacity(16));
    });
    assert_eq!(n, 1);
}
