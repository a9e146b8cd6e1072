use super::*;
use crate::quota::rate::RatePolicy;
use crate::quota::Slot;

fn sizes(window_keys: Ceiling, lease_keys: Ceiling) -> QuotaSizes {
    QuotaSizes {
        rate_entries: 1024,
        policy_slots: 16,
        slot_grace_ms: 60_000,
        window_ms: 1_000,
        window_keys,
        lease_keys,
        max_leases: 64,
        operations: 4,
    }
}

fn quota() -> Quota {
    let c = Ceiling::new(64, 8).unwrap();
    Quota::new(&sizes(c, c)).unwrap()
}

fn flat(n: u32) -> Option<Budget> {
    Some(Budget::flat(n).unwrap())
}

fn req(class: Class, source: u64) -> QuotaRequest<'static> {
    QuotaRequest {
        class,
        source,
        operation: None,
        identity: None,
        rate: &[],
    }
}

fn admit(d: QuotaDecision) -> QuotaTicket {
    match d {
        QuotaDecision::Admit(t) => t,
        QuotaDecision::Refuse(r) => panic!("refused: {r:?}"),
    }
}

fn refusal(d: QuotaDecision) -> Refusal {
    match d {
        QuotaDecision::Refuse(r) => r,
        QuotaDecision::Admit(_) => panic!("admitted"),
    }
}

#[test]
fn a_source_budget_recovers_at_the_window_boundary() {
    let mut q = quota();
    let limits = QuotaLimits {
        source: flat(3),
        ..Default::default()
    };
    for _ in 0..3 {
        let t = admit(q.decide(&limits, &req(Class::Normal, 1), 1_200));
        q.release(t);
    }
    assert_eq!(
        refusal(q.decide(&limits, &req(Class::Normal, 1), 1_999)),
        Refusal {
            level: Level::Source,
            untracked: false,
            retry_after_s: 1
        }
    );
    assert!(matches!(
        q.decide(&limits, &req(Class::Normal, 2), 1_999),
        QuotaDecision::Admit(_)
    ));
    assert!(matches!(
        q.decide(&limits, &req(Class::Normal, 1), 2_000),
        QuotaDecision::Admit(_)
    ));
}

#[test]
fn a_refused_level_counts_in_no_budget() {
    let mut q = quota();
    let limits = QuotaLimits {
        global: flat(100),
        source: flat(1),
        operations: vec![OperationLimits {
            requests: flat(100),
            concurrent: None,
        }]
        .into_boxed_slice(),
        ..Default::default()
    };
    let r = QuotaRequest {
        operation: Some(0),
        ..req(Class::Normal, 1)
    };
    admit(q.decide(&limits, &r, 0));
    for _ in 0..10 {
        assert_eq!(refusal(q.decide(&limits, &r, 0)).level, Level::Source);
    }
    assert_eq!(
        q.global_count(),
        1,
        "the prefix's refusals spent no global budget"
    );
    assert_eq!(q.operation_count(0), 1);
    assert_eq!(q.counters.refused(Level::Source), 10);
    assert_eq!(q.counters.admitted, 1);
}

#[test]
fn levels_refuse_in_enforcement_order() {
    let mut q = quota();
    let limits = QuotaLimits {
        global: flat(1),
        source: flat(1),
        ..Default::default()
    };
    admit(q.decide(&limits, &req(Class::Normal, 1), 0));
    // Both the global and the source budget are spent: global answers.
    assert_eq!(
        refusal(q.decide(&limits, &req(Class::Normal, 1), 0)).level,
        Level::Global
    );
    assert_eq!(q.counters.refused(Level::Source), 0);
}

#[test]
fn the_optional_work_budget_keeps_a_reserve_for_critical_routes() {
    let mut q = quota();
    let limits = QuotaLimits {
        global: Some(Budget::new(10, 7).unwrap()),
        ..Default::default()
    };
    let mut normal = 0;
    for s in 0..20 {
        if let QuotaDecision::Admit(t) = q.decide(&limits, &req(Class::Normal, s), 0) {
            q.release(t);
            normal += 1;
        }
    }
    assert_eq!(normal, 7);
    let mut critical = 0;
    for s in 0..20 {
        if let QuotaDecision::Admit(t) = q.decide(&limits, &req(Class::Critical, s), 0) {
            q.release(t);
            critical += 1;
        }
    }
    assert_eq!(critical, 3);
}

#[test]
fn health_probes_use_their_own_source_budget() {
    let mut q = quota();
    let limits = QuotaLimits {
        source: flat(2),
        health: flat(1),
        ..Default::default()
    };
    for _ in 0..2 {
        let t = admit(q.decide(&limits, &req(Class::Normal, 9), 0));
        q.release(t);
    }
    assert_eq!(
        refusal(q.decide(&limits, &req(Class::Normal, 9), 0)).level,
        Level::Source
    );
    // Public overload of the prefix does not fail its health probe...
    let t = admit(q.decide(&limits, &req(Class::Health, 9), 0));
    q.release(t);
    // ...and health traffic is bounded too.
    assert_eq!(
        refusal(q.decide(&limits, &req(Class::Health, 9), 0)).level,
        Level::Health
    );
}

#[test]
fn reserve_behaviour_at_the_ceiling() {
    // 10 window keys, 3 kept for critical work and health probes.
    let mut q = Quota::new(&sizes(
        Ceiling::new(10, 3).unwrap(),
        Ceiling::new(64, 0).unwrap(),
    ))
    .unwrap();
    let limits = QuotaLimits {
        source: flat(1_000),
        health: flat(1_000),
        ..Default::default()
    };
    for s in 0..7 {
        let t = admit(q.decide(&limits, &req(Class::Normal, 100 + s), 0));
        q.release(t);
    }
    assert_eq!(
        refusal(q.decide(&limits, &req(Class::Normal, 200), 0)),
        Refusal {
            level: Level::Source,
            untracked: true,
            retry_after_s: 1
        }
    );
    // The reserve: critical work and health probes may take the last 3.
    for (class, s) in [
        (Class::Critical, 300),
        (Class::Health, 301),
        (Class::Critical, 302),
    ] {
        let t = admit(q.decide(&limits, &req(class, s), 0));
        q.release(t);
    }
    assert_eq!(q.windows().tracked_keys(), 10);
    // The hard ceiling holds for them too.
    assert!(refusal(q.decide(&limits, &req(Class::Critical, 303), 0)).untracked);
    // Known keys keep working at the ceiling.
    let t = admit(q.decide(&limits, &req(Class::Normal, 100), 0));
    q.release(t);
    assert_eq!(q.counters.untracked(Level::Source), 2);
}

#[test]
fn a_flood_of_unique_sources_never_evicts_the_reserve() {
    let mut q = Quota::new(&sizes(
        Ceiling::new(100, 10).unwrap(),
        Ceiling::new(100, 10).unwrap(),
    ))
    .unwrap();
    let limits = QuotaLimits {
        source: flat(5),
        leases: LeaseLimits {
            global: None,
            per_key: flat(5),
        },
        ..Default::default()
    };
    // A critical client holds a lease and has spent 3 of its budget.
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(admit(q.decide(&limits, &req(Class::Critical, 7), 0)));
    }
    // 10 000 unique sources in the same window.
    let mut admitted = 0;
    for s in 0..10_000u64 {
        if let QuotaDecision::Admit(t) = q.decide(&limits, &req(Class::Normal, 1_000_000 + s), 0) {
            q.release(t);
            admitted += 1;
        }
    }
    assert_eq!(
        admitted, 89,
        "the ceiling less the reserve less the critical key"
    );
    assert_eq!(q.windows().count(7), 3);
    assert_eq!(q.leases().active_for(7), 3);
    // The critical client still gets its remaining budget.
    held.push(admit(q.decide(&limits, &req(Class::Critical, 7), 0)));
    assert!(q.windows().tracked_keys() <= 100);
    for t in held {
        assert!(q.release(t));
    }
}

#[test]
fn a_request_over_its_ceiling_fails_closed_without_new_state() {
    let mut q = Quota::new(&sizes(
        Ceiling::new(4, 0).unwrap(),
        Ceiling::new(64, 0).unwrap(),
    ))
    .unwrap();
    let limits = QuotaLimits {
        global: flat(1_000),
        source: flat(10),
        ..Default::default()
    };
    for s in 1..=4 {
        let t = admit(q.decide(&limits, &req(Class::Normal, s), 0));
        q.release(t);
    }
    let (keys, global, leases) = (
        q.windows().tracked_keys(),
        q.global_count(),
        q.leases().active(),
    );
    let r = refusal(q.decide(&limits, &req(Class::Critical, 5), 0));
    assert!(r.untracked);
    assert_eq!(q.windows().tracked_keys(), keys);
    assert_eq!(q.windows().count(5), 0);
    assert_eq!(q.global_count(), global);
    assert_eq!(q.leases().active(), leases);
}

#[test]
fn a_concurrency_limit_refuses_until_a_lease_ends() {
    let mut q = quota();
    let limits = QuotaLimits {
        leases: LeaseLimits {
            global: None,
            per_key: flat(2),
        },
        ..Default::default()
    };
    let a = admit(q.decide(&limits, &req(Class::Normal, 1), 0));
    let _b = admit(q.decide(&limits, &req(Class::Normal, 1), 0));
    assert_eq!(
        refusal(q.decide(&limits, &req(Class::Normal, 1), 0)),
        Refusal {
            level: Level::ConcurrentSource,
            untracked: false,
            retry_after_s: 1
        }
    );
    assert!(q.release(a));
    assert!(!q.release(a), "a second release does nothing");
    admit(q.decide(&limits, &req(Class::Normal, 1), 0));
    assert_eq!(q.counters.released, 1);
}

#[test]
fn an_operation_has_its_budget_and_concurrency() {
    let mut q = quota();
    let limits = QuotaLimits {
        operations: vec![
            OperationLimits::default(),
            OperationLimits {
                requests: flat(3),
                concurrent: flat(1),
            },
        ]
        .into_boxed_slice(),
        ..Default::default()
    };
    let login = QuotaRequest {
        operation: Some(1),
        ..req(Class::Normal, 1)
    };
    let t = admit(q.decide(&limits, &login, 0));
    assert_eq!(
        refusal(q.decide(&limits, &login, 0)).level,
        Level::ConcurrentOperation
    );
    q.release(t);
    let t = admit(q.decide(&limits, &login, 0));
    q.release(t);
    assert_eq!(
        refusal(q.decide(&limits, &login, 0)).level,
        Level::Operation
    );
    // Operation 0 has no limits.
    let other = QuotaRequest {
        operation: Some(0),
        ..req(Class::Normal, 1)
    };
    admit(q.decide(&limits, &other, 0));
}

#[test]
fn an_identity_refusal_releases_the_lease() {
    let mut q = quota();
    let limits = QuotaLimits {
        identity: flat(1),
        ..Default::default()
    };
    let r = QuotaRequest {
        identity: Some(0xfeed),
        ..req(Class::Normal, 1)
    };
    let t = admit(q.decide(&limits, &r, 500));
    q.release(t);
    assert_eq!(
        refusal(q.decide(&limits, &r, 500)),
        Refusal {
            level: Level::Identity,
            untracked: false,
            retry_after_s: 1
        }
    );
    assert_eq!(q.leases().active(), 0);
    // Another source with the same credential shares the identity budget.
    let elsewhere = QuotaRequest { source: 2, ..r };
    assert_eq!(
        refusal(q.decide(&limits, &elsewhere, 900)).level,
        Level::Identity
    );
}

#[test]
fn a_rate_refusal_releases_the_lease_and_says_when_to_retry() {
    let mut q = quota();
    let p = RatePolicy::per_minute(2, 1).unwrap();
    let slot = q.slots_mut().bind(0xabc, p).unwrap();
    let checks = [RateCheck {
        policy: &p,
        slot,
        key: 0x5555,
    }];
    let r = QuotaRequest {
        rate: &checks,
        ..req(Class::Normal, 1)
    };
    let limits = QuotaLimits::default();
    let t = admit(q.decide(&limits, &r, 0));
    q.release(t);
    assert_eq!(
        refusal(q.decide(&limits, &r, 1_000)),
        Refusal {
            level: Level::Rate,
            untracked: false,
            retry_after_s: 29
        }
    );
    assert_eq!(q.leases().active(), 0);
    assert_eq!(q.counters.refused(Level::Rate), 1);
}

#[test]
fn retry_after_is_clamped_to_an_hour() {
    let mut q = quota();
    let p = RatePolicy::new(1, 16_384_000, 1).unwrap();
    let slot = Slot::new(1).unwrap();
    let checks = [RateCheck {
        policy: &p,
        slot,
        key: 1,
    }];
    let r = QuotaRequest {
        rate: &checks,
        ..req(Class::Normal, 1)
    };
    let t = admit(q.decide(&QuotaLimits::default(), &r, 0));
    q.release(t);
    assert_eq!(
        refusal(q.decide(&QuotaLimits::default(), &r, 0)).retry_after_s,
        3_600
    );
}

/// The server's guard (`gapura_http::server::Leases`, tested there) relies
/// on this: a ticket released twice is given back once.
#[test]
fn a_ticket_is_released_once() {
    let mut q = quota();
    let limits = QuotaLimits {
        leases: LeaseLimits {
            global: flat(10),
            per_key: flat(10),
        },
        ..Default::default()
    };
    let t = admit(q.decide(&limits, &req(Class::Normal, 42), 0));
    assert_eq!((q.leases().active(), q.leases().tracked_keys()), (1, 1));
    assert!(q.release(t));
    assert!(!q.release(t));
    assert_eq!((q.leases().active(), q.leases().tracked_keys()), (0, 0));
    assert_eq!(q.counters.released, 1);
    assert_eq!(q.leases().stats.stale_releases, 1);
}

#[test]
fn sizes_are_checked() {
    let c = Ceiling::new(8, 0).unwrap();
    let mut s = sizes(c, c);
    s.rate_entries = 1000;
    assert_eq!(Quota::new(&s).unwrap_err(), SizeError::RateEntries);
    s.rate_entries = 1024;
    s.window_ms = 10;
    assert_eq!(Quota::new(&s).unwrap_err(), SizeError::WindowMs);
}

#[test]
fn level_names_are_distinct_metric_labels() {
    let mut names: Vec<_> = Level::ALL.iter().map(|l| l.name()).collect();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), Level::COUNT);
    for (i, l) in Level::ALL.iter().enumerate() {
        assert_eq!(*l as usize, i);
    }
}

#[test]
fn a_size_change_names_its_profile_key() {
    let c = Ceiling::new(64, 8).unwrap();
    let a = sizes(c, c);
    assert_eq!(a.change_to(&a), None);
    let mut b = a;
    b.max_leases += 1;
    assert_eq!(
        a.change_to(&b),
        Some(SizeChange {
            key: "quota.max_leases",
            running: u64::from(a.max_leases),
            new: u64::from(a.max_leases) + 1,
        })
    );
    let mut b = a;
    b.window_keys = Ceiling::new(64, 9).unwrap();
    assert_eq!(a.change_to(&b).unwrap().key, "quota.critical_reserve");
}
