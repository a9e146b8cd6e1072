//! The budgets a datagram pays before it is decoded: size bound, global,
//! source prefix, operation class, in that order ([`UdpBudgets::admit`]).
//! A relay with `auth` splits them around the envelope's check: the size
//! bound and the prefix first ([`UdpBudgets::admit_prefix`], all an
//! invalid datagram pays), the global and operation budgets once the
//! envelope verified, with the class read from authenticated bytes
//! ([`UdpBudgets::admit_authenticated`]).
//!
//! Every check runs before any count moves, and the counts move only when
//! every check passed: a dropped datagram adds nothing anywhere (a flood
//! refused by its prefix does not spend the global budget of everyone
//! else). The source prefix is the budget partition of HTTP (IPv4 /24,
//! IPv6 /56), keyed in a domain of its own ([`Domain::UdpPrefix`]).
//!
//! A fleet-scoped `global` or `prefix` budget (`scope = "fleet"`) is
//! decided the same way against the fleet's count as this shard last
//! learned it ([`super::fleet`]); the relay's windows are then cut from
//! Unix time.
//!
//! One shard's state; O(1) plus the prefix table's bounded probe per
//! datagram; no allocation after [`UdpBudgets::new`].

use super::fleet::{UdpFleet, UdpFleetBudgets};
use super::{UdpDrop, UdpPolicy, MAX_CLASSES, MAX_ENVELOPE_KEYS};
use crate::quota::fleetwindow::WindowChoice;
use crate::quota::{
    Class, Domain, FixedWindow, Keyer, SourcePrefix, WindowPass, WindowRefusal, WindowTable,
};
use std::net::IpAddr;

/// What passed: the datagram's operation class.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Admitted {
    /// Index in the policy's `classes` (0: unmatched).
    pub class: u8,
    /// Whether the class may use the reserves.
    pub critical: bool,
}

/// One relay's budget counters on one shard.
#[derive(Debug)]
pub struct UdpBudgets {
    pub(super) global: FixedWindow,
    pub(super) prefixes: WindowTable,
    classes: [FixedWindow; MAX_CLASSES + 1],
    /// Per key id (`auth.key_budget`).
    keys: [FixedWindow; MAX_ENVELOPE_KEYS],
    /// The policy's fleet-scoped budgets, as these counters were built
    /// for (with them, windows are cut from Unix time).
    pub(super) identities: UdpFleetBudgets,
    /// The relay's shared keys; kept across a rebuild ([`Self::renew`]).
    pub(super) fleet: UdpFleet,
}

impl UdpBudgets {
    /// Counters for `policy` (the prefix table sized by its ceiling,
    /// allocated once).
    pub fn new(policy: &UdpPolicy) -> UdpBudgets {
        let b = &policy.budgets;
        UdpBudgets {
            global: FixedWindow::default(),
            // The window length was checked when the policy was compiled.
            prefixes: WindowTable::new(b.window_ms, b.tracked)
                .expect("a compiled window length is in range"),
            classes: [FixedWindow::default(); MAX_CLASSES + 1],
            keys: [FixedWindow::default(); MAX_ENVELOPE_KEYS],
            identities: b.fleet,
            fleet: UdpFleet::default(),
        }
    }

    /// Shares the fleet-scoped budgets through `fleet` (see
    /// [`super::fleet`]).
    pub fn enable_fleet(&mut self, fleet: UdpFleet) {
        self.fleet = fleet;
    }

    pub fn fleet(&self) -> &UdpFleet {
        &self.fleet
    }

    /// Whether these counters can serve `policy` as they are (same window,
    /// ceiling and clock: Unix time with a fleet-scoped budget); otherwise
    /// a reload builds new ones ([`Self::renew`]). A changed share or
    /// budget keeps the counts.
    pub fn fits(&self, policy: &UdpPolicy) -> bool {
        self.prefixes.window_ms() == policy.budgets.window_ms
            && self.prefixes.ceiling() == policy.budgets.tracked
            && self.identities.any() == policy.budgets.fleet.any()
    }

    /// New counters for `policy`, keeping the relay's shared keys (what
    /// they counted still reaches the fleet). Allocates the prefix table.
    pub fn renew(&mut self, policy: &UdpPolicy) {
        let fleet = std::mem::take(&mut self.fleet);
        *self = UdpBudgets::new(policy);
        self.fleet = fleet;
    }

    /// The budgets' clock: the relay's, or Unix time when a budget is
    /// fleet-scoped (its windows are the fleet's). O(1).
    #[inline]
    fn clock(&self, now_ms: u64) -> u64 {
        if self.identities.any() {
            self.fleet.unix_ms(now_ms)
        } else {
            now_ms
        }
    }

    /// Prefixes tracked in the current window.
    pub fn tracked_prefixes(&self) -> u32 {
        self.prefixes.tracked_keys()
    }

    /// Runs the size bound and the three budgets for a datagram from `src`
    /// at `now_ms`, counting it when every one passed. O(1) + probe.
    pub fn admit(
        &mut self,
        policy: &UdpPolicy,
        keyer: &Keyer,
        src: IpAddr,
        datagram: &[u8],
        now_ms: u64,
    ) -> Result<Admitted, UdpDrop> {
        if datagram.len() > policy.max_datagram_bytes as usize {
            return Err(UdpDrop::Oversized);
        }
        let admitted = classify(policy, datagram);
        let class = class_of(admitted.critical);
        let now_ms = self.clock(now_ms);
        let window = self.prefixes.roll(now_ms);
        let global = self.global_fits(policy, class, window)?;
        let prefix = self.prefix_check(policy, keyer, src, class, now_ms)?;
        let class_budget = self.class_fits(policy, admitted, class, window)?;
        self.commit_prefix(prefix);
        self.count_global_and_class(policy, (admitted, global), class_budget, window);
        Ok(admitted)
    }

    /// Whether the global budget has room at `class`'s threshold (the
    /// fleet's choice for it, to record when the datagram is counted).
    fn global_fits(
        &mut self,
        policy: &UdpPolicy,
        class: Class,
        window: u64,
    ) -> Result<WindowChoice, UdpDrop> {
        let Some(g) = policy.budgets.global else {
            return Ok(WindowChoice::Local);
        };
        let (b, choice) = self.fleet.budget(
            policy.budgets.fleet.global,
            g,
            (self.identities.global_identity, 0),
            (window, policy.budgets.window_ms),
            self.global.count(window),
            class,
        );
        if self.global.fits(window, b.threshold(class)) {
            Ok(choice)
        } else {
            Err(UdpDrop::GlobalBudget)
        }
    }

    /// Counts a prefix's pass, and for the fleet when its key is shared.
    fn commit_prefix(&mut self, prefix: Option<(WindowPass, WindowChoice)>) {
        if let Some((pass, choice)) = prefix {
            self.prefixes.commit(pass);
            self.fleet.windows.record(choice);
        }
    }

    /// The source prefix's check (its pass, to commit, and the fleet's
    /// choice for it), when the relay has a prefix budget. A fleet-scoped
    /// prefix is keyed under the fleet's seed, the same on every node.
    fn prefix_check(
        &mut self,
        policy: &UdpPolicy,
        keyer: &Keyer,
        src: IpAddr,
        class: Class,
        now_ms: u64,
    ) -> Result<Option<(WindowPass, WindowChoice)>, UdpDrop> {
        let Some(whole) = policy.budgets.prefix else {
            return Ok(None);
        };
        let share = policy.budgets.fleet.prefix;
        let keyer = match (share, self.fleet.keyer()) {
            (Some(_), Some(fleet)) => fleet,
            _ => keyer,
        };
        let key = keyer.source(Domain::UdpPrefix, src, SourcePrefix::BUDGET);
        let (budget, choice) = self.fleet.budget(
            share,
            whole,
            (self.identities.prefix_identity, key),
            (self.prefixes.window(), policy.budgets.window_ms),
            self.prefixes.count(key),
            class,
        );
        match self
            .prefixes
            .check(key, budget.threshold(class), class, now_ms)
        {
            Ok(pass) => Ok(Some((pass, choice))),
            Err(WindowRefusal::Exhausted) => Err(UdpDrop::PrefixBudget),
            Err(WindowRefusal::Untracked) => Err(UdpDrop::TrackedKeys),
        }
    }

    /// Whether the datagram's operation class has room; true when the
    /// class has a budget (to count).
    fn class_fits(
        &self,
        policy: &UdpPolicy,
        admitted: Admitted,
        class: Class,
        window: u64,
    ) -> Result<bool, UdpDrop> {
        let c = usize::from(admitted.class);
        match policy.classes.get(c).and_then(|k| k.budget) {
            Some(b) if !self.classes[c].fits(window, b.threshold(class)) => {
                Err(UdpDrop::OperationBudget)
            }
            Some(_) => Ok(true),
            None => Ok(false),
        }
    }

    /// Counts a datagram that passed in the global and class budgets.
    fn count_global_and_class(
        &mut self,
        policy: &UdpPolicy,
        (admitted, global): (Admitted, WindowChoice),
        class_budget: bool,
        window: u64,
    ) {
        if policy.budgets.global.is_some() {
            self.global.add(window);
            self.fleet.windows.record(global);
        }
        if class_budget {
            self.classes[usize::from(admitted.class)].add(window);
        }
    }
}

impl UdpBudgets {
    /// With `auth`, what a datagram pays before its envelope is checked:
    /// the size bound and its source prefix's budget, counted at once (an
    /// invalid datagram pays this and nothing else). `critical`: the
    /// threshold to hold it to (the reserve only for an authenticated
    /// critical class). O(1) + probe.
    pub fn admit_prefix(
        &mut self,
        policy: &UdpPolicy,
        keyer: &Keyer,
        src: IpAddr,
        len: usize,
        critical: bool,
        now_ms: u64,
    ) -> Result<(), UdpDrop> {
        if len > policy.max_datagram_bytes as usize {
            return Err(UdpDrop::Oversized);
        }
        let now_ms = self.clock(now_ms);
        self.prefixes.roll(now_ms);
        let prefix = self.prefix_check(policy, keyer, src, class_of(critical), now_ms)?;
        self.commit_prefix(prefix);
        Ok(())
    }

    /// With `auth`, the budget of the key an envelope verified under
    /// (`auth.key_budget` datagrams a window), counted when it passes: a
    /// holder of one key cannot spend the relay's budgets for the others.
    /// O(1).
    pub fn admit_key(
        &mut self,
        policy: &UdpPolicy,
        key_id: u8,
        now_ms: u64,
    ) -> Result<(), UdpDrop> {
        let Some(budget) = policy.envelope.as_ref().and_then(|e| e.key_budget) else {
            return Ok(());
        };
        let window = self.prefixes.roll(self.clock(now_ms));
        let Some(k) = self.keys.get_mut(usize::from(key_id)) else {
            return Err(UdpDrop::UnknownKey);
        };
        if !k.fits(window, budget) {
            return Err(UdpDrop::KeyBudget);
        }
        k.add(window);
        Ok(())
    }

    /// With `auth`, what an authenticated datagram of class `admitted`
    /// pays after its prefix: the global and operation budgets, counted
    /// when both pass. O(1).
    pub fn admit_authenticated(
        &mut self,
        policy: &UdpPolicy,
        admitted: Admitted,
        now_ms: u64,
    ) -> Result<(), UdpDrop> {
        let class = class_of(admitted.critical);
        let window = self.prefixes.roll(self.clock(now_ms));
        let global = self.global_fits(policy, class, window)?;
        let class_budget = self.class_fits(policy, admitted, class, window)?;
        self.count_global_and_class(policy, (admitted, global), class_budget, window);
        Ok(())
    }
}

/// The threshold a datagram is held to: the reserve for critical classes.
fn class_of(critical: bool) -> Class {
    if critical {
        Class::Critical
    } else {
        Class::Normal
    }
}

/// The datagram's operation class: the first class whose values hold the
/// field's value; the unmatched class when none does, when the datagram is
/// too short for the field, or when the relay reads no field.
/// O(classes x values), at most a few dozen comparisons.
#[inline]
pub fn classify(policy: &UdpPolicy, datagram: &[u8]) -> Admitted {
    let unmatched = Admitted {
        class: 0,
        critical: policy.classes.first().is_some_and(|c| c.critical),
    };
    let Some(value) = policy.operation.and_then(|f| f.read(datagram)) else {
        return unmatched;
    };
    for (i, c) in policy.classes.iter().enumerate().skip(1) {
        if c.values.contains(&value) {
            return Admitted {
                class: i as u8,
                critical: c.critical,
            };
        }
    }
    unmatched
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quota::{Budget, Ceiling};
    use crate::udp::{OperationField, SessionPolicy, UdpBudgetPolicy, UdpClass};
    use crate::upstream::Balance;

    fn policy() -> UdpPolicy {
        UdpPolicy {
            name: "game".into(),
            listen: Vec::new(),
            servers: Vec::new(),
            balance: Balance::RoundRobin,
            max_datagram_bytes: 64,
            budgets: UdpBudgetPolicy {
                window_ms: 1_000,
                global: Some(Budget::new(10, 8).unwrap()),
                prefix: Some(Budget::flat(4).unwrap()),
                tracked: Ceiling::new(4, 1).unwrap(),
                fleet: Default::default(),
            },
            operation: Some(OperationField { offset: 0, len: 1 }),
            classes: vec![
                UdpClass::other(),
                UdpClass {
                    name: "join".into(),
                    values: vec![1],
                    budget: Some(Budget::flat(2).unwrap()),
                    critical: true,
                },
            ],
            session: SessionPolicy {
                rate: None,
                idle_timeout_ms: 30_000,
                ceiling: Ceiling::new(16, 2).unwrap(),
            },
            envelope: None,
        }
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    const SEED: [u8; 16] = [7; 16];

    #[test]
    fn an_oversized_datagram_is_dropped_before_any_budget() {
        let p = policy();
        let mut b = UdpBudgets::new(&p);
        let k = Keyer::new(SEED);
        assert_eq!(
            b.admit(&p, &k, ip("192.0.2.1"), &[0u8; 65], 0),
            Err(UdpDrop::Oversized)
        );
        assert_eq!(b.tracked_prefixes(), 0, "nothing counted");
        assert!(b.admit(&p, &k, ip("192.0.2.1"), &[0u8; 64], 0).is_ok());
    }

    #[test]
    fn a_prefix_pays_as_one_and_recovers_at_the_boundary() {
        let p = policy();
        let mut b = UdpBudgets::new(&p);
        let k = Keyer::new(SEED);
        for last in 1..=4 {
            let src = ip(&format!("192.0.2.{last}"));
            assert!(b.admit(&p, &k, src, b"\x00x", 100).is_ok());
        }
        assert_eq!(
            b.admit(&p, &k, ip("192.0.2.200"), b"\x00x", 999),
            Err(UdpDrop::PrefixBudget)
        );
        // Another /24 still has its own.
        assert!(b.admit(&p, &k, ip("192.0.3.1"), b"\x00x", 999).is_ok());
        assert!(b.admit(&p, &k, ip("192.0.2.9"), b"\x00x", 1_000).is_ok());
    }

    #[test]
    fn ipv6_sources_share_their_slash_56() {
        let p = policy();
        let mut b = UdpBudgets::new(&p);
        let k = Keyer::new(SEED);
        for i in 0..4 {
            let src = ip(&format!("2001:db8:1:2{i:02x}::1"));
            assert!(b.admit(&p, &k, src, b"\x00", 0).is_ok());
        }
        assert_eq!(
            b.admit(&p, &k, ip("2001:db8:1:2ff::7"), b"\x00", 0),
            Err(UdpDrop::PrefixBudget)
        );
        assert!(b.admit(&p, &k, ip("2001:db8:1:300::1"), b"\x00", 0).is_ok());
    }

    #[test]
    fn a_refused_datagram_spends_no_budget_anywhere() {
        let mut p = policy();
        p.budgets.prefix = Some(Budget::flat(1).unwrap());
        p.budgets.tracked = Ceiling::new(64, 1).unwrap();
        let mut b = UdpBudgets::new(&p);
        let k = Keyer::new(SEED);
        assert!(b.admit(&p, &k, ip("192.0.2.1"), b"\x00", 0).is_ok());
        // 100 refusals by the prefix leave the global budget (8 for
        // ordinary work) to everyone else.
        for _ in 0..100 {
            assert_eq!(
                b.admit(&p, &k, ip("192.0.2.1"), b"\x00", 0),
                Err(UdpDrop::PrefixBudget)
            );
        }
        for last in 2..=8 {
            let src = ip(&format!("198.51.{last}.1"));
            assert!(b.admit(&p, &k, src, b"\x00", 0).is_ok(), "{src}");
        }
    }

    #[test]
    fn operation_classes_have_their_own_budget_and_reserve() {
        let mut p = policy();
        p.budgets.prefix = None;
        let mut b = UdpBudgets::new(&p);
        let k = Keyer::new(SEED);
        let src = ip("192.0.2.1");
        // "join" (0x01) has 2 per window.
        assert_eq!(
            b.admit(&p, &k, src, b"\x01", 0),
            Ok(Admitted {
                class: 1,
                critical: true
            })
        );
        assert!(b.admit(&p, &k, src, b"\x01", 0).is_ok());
        assert_eq!(
            b.admit(&p, &k, src, b"\x01", 0),
            Err(UdpDrop::OperationBudget)
        );
        // Ordinary work stops at the global budget's optional part (8 of
        // 10): 2 joins and 6 others.
        for _ in 0..6 {
            assert!(b.admit(&p, &k, src, b"\x02", 0).is_ok());
        }
        assert_eq!(b.admit(&p, &k, src, b"\x02", 0), Err(UdpDrop::GlobalBudget));
        // A critical class still has the reserve, within its own budget.
        assert_eq!(b.admit(&p, &k, src, b"\x01", 1_000).map(|a| a.class), Ok(1));
    }

    #[test]
    fn unmatched_short_or_unread_datagrams_are_the_other_class() {
        let mut p = policy();
        assert_eq!(classify(&p, b"\x07").class, 0);
        assert_eq!(classify(&p, b"").class, 0);
        assert_eq!(classify(&p, b"\x01").class, 1);
        p.operation = None;
        assert_eq!(classify(&p, b"\x01").class, 0);
    }

    #[test]
    fn a_full_prefix_table_fails_closed() {
        let mut p = policy();
        p.budgets.global = None;
        let mut b = UdpBudgets::new(&p);
        let k = Keyer::new(SEED);
        // Ceiling 4 with 1 reserved: 3 ordinary prefixes.
        for n in 1..=3 {
            assert!(b
                .admit(&p, &k, ip(&format!("10.{n}.0.1")), b"\x00", 0)
                .is_ok());
        }
        assert_eq!(
            b.admit(&p, &k, ip("10.9.0.1"), b"\x00", 0),
            Err(UdpDrop::TrackedKeys)
        );
        assert_eq!(b.tracked_prefixes(), 3);
        // A critical class may take the reserve.
        assert!(b.admit(&p, &k, ip("10.9.0.1"), b"\x01", 0).is_ok());
    }
}
