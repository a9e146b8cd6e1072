//! A relay policy for tests and benchmarks: one relay, generous budgets,
//! no envelope, the servers given.

use gapura_gate::quota::{Budget, Ceiling, RatePolicy};
use gapura_gate::udp::{SessionPolicy, UdpBudgetPolicy, UdpClass, UdpPolicy};
use gapura_gate::upstream::{Balance, UpstreamServer};
use std::net::SocketAddr;

/// A relay named `test` towards `servers`: 1,000 datagrams per prefix and
/// 100,000 in all per second, 64 sessions (8 reserved), a session bucket of
/// 100/s with a burst of 10, 1 KiB datagrams.
pub fn policy(servers: &[SocketAddr]) -> UdpPolicy {
    UdpPolicy {
        name: "test".into(),
        listen: Vec::new(),
        servers: servers
            .iter()
            .enumerate()
            .map(|(i, &addr)| UpstreamServer {
                addr,
                name: None,
                weight: 1,
                key: i as u64 + 1,
                health_slot: 0,
            })
            .collect(),
        balance: Balance::RoundRobin,
        max_datagram_bytes: 1_024,
        budgets: UdpBudgetPolicy {
            window_ms: 1_000,
            global: Some(Budget::flat(100_000).expect("in range")),
            prefix: Some(Budget::flat(1_000).expect("in range")),
            tracked: Ceiling::new(1_024, 64).expect("in range"),
            fleet: Default::default(),
        },
        operation: None,
        classes: vec![UdpClass::other()],
        session: SessionPolicy {
            rate: Some(RatePolicy::per_second(100, 10).expect("in range")),
            idle_timeout_ms: 30_000,
            ceiling: Ceiling::new(64, 8).expect("in range"),
        },
        envelope: None,
    }
}
