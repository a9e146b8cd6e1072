//! Soak-style check of the rate table under a busy, crowded shard: one
//! client at four times its limit spread over 12 rate-limited hosts, among
//! regular clients and a flood of one-request sources, with the sweeper
//! running. Simulated time, one minute, millisecond ticks.

use gapura_gate::quota::{Domain, Keyer, PolicySlots, RatePolicy, RateTable, Slot, SourcePrefix};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

const HOSTS: usize = 12;
const SECONDS: u64 = 60;
const LIMIT_PER_S: u64 = 20;
const BURST: u32 = 20;

struct Shard {
    keyer: Keyer,
    table: RateTable,
    slots: PolicySlots,
    hosts: Vec<Slot>,
    policy: RatePolicy,
}

impl Shard {
    fn new(table_entries: usize) -> Shard {
        let policy = RatePolicy::per_second(LIMIT_PER_S, BURST).unwrap();
        let mut slots = PolicySlots::new(64, 60_000);
        slots.begin_reload();
        let hosts = (0..HOSTS as u64)
            .map(|h| slots.bind(0x05ee_d000 + h, policy).unwrap())
            .collect();
        slots.finish_reload(0);
        Shard {
            keyer: Keyer::new(*b"soak-test-seed!!"),
            table: RateTable::new(table_entries).unwrap(),
            slots,
            hosts,
            policy,
        }
    }

    fn request(&mut self, host: usize, addr: IpAddr, now_ms: u64) -> bool {
        let key = self
            .keyer
            .source(Domain::RateSource, addr, SourcePrefix::RATE);
        self.table
            .try_acquire(&self.policy, self.hosts[host], key, now_ms)
            .allowed
    }
}

/// Runs the minute; returns the client's admissions per host.
fn soak(table_entries: usize) -> (Vec<u64>, Shard) {
    let mut shard = Shard::new(table_entries);
    let client = IpAddr::V4(Ipv4Addr::new(198, 51, 100, 7));
    let mut admitted = vec![0u64; HOSTS];
    let mut client_sent = 0u64;
    let mut flood = 0u64;
    for now in 0..SECONDS * 1_000 {
        // The client: 4 x 20/s on each of 12 hosts = 960/s, evenly paced.
        let due = (now + 1) * (4 * LIMIT_PER_S * HOSTS as u64) / 1_000;
        while client_sent < due {
            let host = (client_sent % HOSTS as u64) as usize;
            if shard.request(host, client, now) {
                admitted[host] += 1;
            }
            client_sent += 1;
        }
        // 200 regular clients per host, 2 requests a second each.
        for c in 0..200u64 {
            for (h, _) in (0..HOSTS).enumerate() {
                if now % 500 == (c * 7 + h as u64 * 13) % 500 {
                    let addr = IpAddr::V4(Ipv4Addr::new(10, h as u8, (c >> 8) as u8, c as u8));
                    shard.request(h, addr, now);
                }
            }
        }
        // A flood of one-request sources (IPv6 /64s), 3000 a second.
        for _ in 0..3 {
            flood += 1;
            let addr = IpAddr::V6(Ipv6Addr::from(
                0x2001_0db8_0000_0000_0000_0000_0000_0000u128 | ((flood as u128) << 64),
            ));
            shard.request((flood % HOSTS as u64) as usize, addr, now);
        }
        if now % 100 == 99 {
            shard.table.sweep(&mut shard.slots, now, 512);
        }
    }
    (admitted, shard)
}

#[test]
fn a_client_at_four_times_its_limit_over_twelve_hosts_is_admitted_at_its_limit() {
    let (admitted, shard) = soak(4_096);
    // The table was under pressure: misses evicted occupied buckets.
    assert!(
        shard.table.stats.evicted > 10_000,
        "evicted {}",
        shard.table.stats.evicted
    );
    let expected = BURST as f64 + (LIMIT_PER_S * SECONDS) as f64;
    eprintln!(
        "admitted per host {admitted:?} (limit {expected}); evictions {}; swept {}",
        shard.table.stats.evicted, shard.table.stats.swept
    );
    for (host, &n) in admitted.iter().enumerate() {
        let ratio = n as f64 / expected;
        assert!(
            (0.95..=1.05).contains(&ratio),
            "host {host}: admitted {n}, limit allows {expected} ({ratio:.3})"
        );
    }
    assert_eq!(shard.table.capacity(), 4_096, "memory is the fixed table");
}
