//! Seed 000's matrix for the identity dimensions: one principal cannot
//! starve another of its tenant, a tenant's ceiling holds across its
//! principals, a resource's budget holds across tenants, and leases come
//! back on every ending.

use super::*;
use crate::quota::{Ceiling, QuotaLimits, QuotaSizes};

fn quota() -> Quota {
    let c = Ceiling::new(64, 8).unwrap();
    Quota::new(&QuotaSizes {
        rate_entries: 16,
        policy_slots: 4,
        slot_grace_ms: 1_000,
        window_ms: 1_000,
        window_keys: c,
        lease_keys: c,
        max_leases: 64,
        operations: 0,
    })
    .unwrap()
}

fn limits(tenant: u32, principal: u32, resource: Option<u32>) -> QuotaLimits {
    QuotaLimits {
        dims: DimLimits {
            tenant: Dim {
                requests: Some(Budget::flat(tenant).unwrap()),
                concurrent: Some(Budget::flat(3).unwrap()),
            },
            principal: Dim {
                requests: Some(Budget::flat(principal).unwrap()),
                concurrent: Some(Budget::flat(2).unwrap()),
            },
            resource: resource.map(|r| Budget::flat(r).unwrap()),
        },
        ..QuotaLimits::default()
    }
}

/// Keys of tenant `t` and principal `p` (the keyer's domains keep a
/// tenant's key apart from a principal's; here, their own ranges).
fn req(t: u64, p: u64) -> DimRequest {
    DimRequest {
        class: Class::Normal,
        tenant: Some(TENANT + t),
        principal: Some(PRINCIPAL + p),
        resource: Some(77),
    }
}

const TENANT: u64 = 1 << 40;
const PRINCIPAL: u64 = 2 << 40;

/// Admits and releases at once (no lease held across requests).
fn pass(q: &mut Quota, l: &QuotaLimits, r: DimRequest, now_ms: u64) -> Result<(), Level> {
    let mut alone = FleetState::default();
    match q.admit_dims(l, &r, &mut alone, now_ms) {
        Ok(t) => {
            if let Some(t) = t {
                q.release(t);
            }
            Ok(())
        }
        Err(e) => Err(e.level),
    }
}

#[test]
fn one_principal_cannot_starve_another_of_its_tenant() {
    let (mut q, l) = (quota(), limits(10, 4, None));
    // Principal 1 sends 100: 4 pass, the rest are refused at the
    // principal's budget and spend nothing of the tenant's.
    let passed = (0..100)
        .filter(|_| pass(&mut q, &l, req(1, 1), 0).is_ok())
        .count();
    assert_eq!(passed, 4);
    assert_eq!(pass(&mut q, &l, req(1, 1), 0), Err(Level::Principal));
    // Principal 2 of the same tenant still gets its 4.
    let passed = (0..4)
        .filter(|_| pass(&mut q, &l, req(1, 2), 0).is_ok())
        .count();
    assert_eq!(passed, 4);
    assert_eq!(q.counters.refused(Level::Tenant), 0);
}

#[test]
fn a_tenants_ceiling_holds_across_its_principals() {
    let (mut q, l) = (quota(), limits(10, 4, None));
    let passed = (0..20u64)
        .filter(|p| pass(&mut q, &l, req(1, 100 + p), 0).is_ok())
        .count();
    assert_eq!(passed, 10, "ten principals, one each up to the tenant's 10");
    assert_eq!(pass(&mut q, &l, req(1, 999), 0), Err(Level::Tenant));
    // Another tenant is untouched; the next window starts again.
    assert_eq!(pass(&mut q, &l, req(2, 5), 0), Ok(()));
    assert_eq!(pass(&mut q, &l, req(1, 999), 1_000), Ok(()));
}

#[test]
fn a_resources_budget_holds_across_tenants() {
    let (mut q, l) = (quota(), limits(100, 100, Some(5)));
    let passed = (0..10u64)
        .filter(|t| pass(&mut q, &l, req(t + 1, t + 50), 0).is_ok())
        .count();
    assert_eq!(passed, 5);
    assert_eq!(q.counters.refused(Level::Resource), 5);
}

#[test]
fn leases_hold_running_requests_and_come_back_on_every_ending() {
    let (mut q, l) = (quota(), limits(100, 100, None));
    let mut alone = FleetState::default();
    let mut admit = |q: &mut Quota, r| q.admit_dims(&l, &r, &mut alone, 0);
    // Two running for principal 1 (its ceiling), a third refused.
    let a = admit(&mut q, req(1, 1)).unwrap().unwrap();
    let b = admit(&mut q, req(1, 1)).unwrap().unwrap();
    assert_eq!(
        admit(&mut q, req(1, 1)).unwrap_err().level,
        Level::ConcurrentPrincipal
    );
    // The tenant's 3: one more principal fits, then the tenant is full and
    // the refused request holds nothing (its principal's lease given back).
    let c = admit(&mut q, req(1, 2)).unwrap().unwrap();
    assert_eq!(
        admit(&mut q, req(1, 3)).unwrap_err().level,
        Level::ConcurrentTenant
    );
    assert_eq!(q.dim_running(TENANT + 1), 3);
    assert_eq!(q.dim_running(PRINCIPAL + 3), 0);
    // Ending (whatever the ending: the caller's guard releases) gives back.
    assert!(q.release(a));
    assert!(!q.release(a), "a second release does nothing");
    q.release(b);
    q.release(c);
    assert_eq!(q.dim_running(TENANT + 1), 0);
    assert!(admit(&mut q, req(1, 3)).is_ok());
}

#[test]
fn a_merged_ticket_releases_the_budgets_and_the_dimensions_leases() {
    let (mut q, l) = (quota(), limits(100, 100, None));
    let mut alone = FleetState::default();
    let r = crate::quota::QuotaRequest {
        class: Class::Normal,
        source: 9,
        operation: None,
        identity: None,
        rate: &[],
    };
    let budgets = match q.admit(&l, &r, 0) {
        crate::quota::QuotaDecision::Admit(t) => t,
        other => panic!("{other:?}"),
    };
    let dims = q.admit_dims(&l, &req(4, 4), &mut alone, 0).unwrap();
    let both = QuotaTicket::merge(Some(budgets), dims).unwrap();
    assert_eq!(q.dim_running(TENANT + 4), 1);
    assert!(q.release(both));
    assert_eq!(q.dim_running(TENANT + 4), 0);
    assert_eq!(q.leases().active(), 0);
}

#[test]
fn critical_routes_may_use_a_leases_reserve() {
    let mut l = limits(100, 100, None);
    l.dims.principal.concurrent = Some(Budget::new(3, 2).unwrap());
    let mut q = quota();
    let mut alone = FleetState::default();
    let mut admit = |q: &mut Quota, class| {
        let r = DimRequest { class, ..req(1, 1) };
        q.admit_dims(&l, &r, &mut alone, 0)
    };
    assert!(admit(&mut q, Class::Normal).is_ok());
    assert!(admit(&mut q, Class::Normal).is_ok());
    assert_eq!(
        admit(&mut q, Class::Normal).unwrap_err().level,
        Level::ConcurrentPrincipal,
        "ordinary work stops at 2"
    );
    assert!(
        admit(&mut q, Class::Critical).is_ok(),
        "the reserve's third"
    );
    assert!(admit(&mut q, Class::Critical).is_err());
}
