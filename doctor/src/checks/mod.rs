//! The checks: each one a function from what the host shows (files read
//! through [`Host`], answers from [`Probe`]) and the profile to one
//! [`Finding`].

mod cpu;
mod limits;
mod net;
mod nic;
mod system;
mod uring;

#[cfg(test)]
mod tests;

use crate::finding::Finding;
use crate::host::Host;
use crate::parse;
use crate::probe::Probe;
use gapura_config::{Compiled, Shards};

/// The listen backlog Gapura asks for. Must match `BACKLOG` in
/// runtime/src/listeners.rs.
pub const LISTEN_BACKLOG: u32 = 4096;

/// Entries of each shard's submission queue. Must match `RING_ENTRIES` in
/// runtime/src/shard.rs.
pub const RING_ENTRIES: u32 = 4096;

/// Every check's id, in the order the report lists them.
pub const CHECK_IDS: &[&str] = &[
    "io_uring.disabled",
    "io_uring.ring",
    "io_uring.flags",
    "limits.memlock",
    "limits.nofile",
    "net.somaxconn",
    "net.syn_backlog",
    "net.steering",
    "cpu.online",
    "cpu.isolation",
    "cpu.shards",
    "cpu.smt",
    "numa.nodes",
    "nic.irqs",
    "nic.rps_xps",
    "time.clocksource",
    "mem.thp",
    "tls.ktls",
    "ports.free",
];

/// What every check may look at.
pub(crate) struct Ctx<'a> {
    pub host: &'a dyn Host,
    pub probe: &'a dyn Probe,
    pub profile: Option<&'a Compiled>,
    pub cpus: Cpus,
}

/// The CPUs as the host shows them and where the shards will run.
#[derive(Clone, Debug)]
pub(crate) struct Cpus {
    /// /sys/devices/system/cpu/online, if readable.
    pub online: Option<Vec<u32>>,
    /// Cpus_allowed_list of /proc/self/status, if readable.
    pub allowed: Option<Vec<u32>>,
    /// The core of each shard, in shard order.
    pub shard_cores: Vec<u32>,
    /// How the shard count was decided, for messages.
    pub shards_from: String,
}

impl Cpus {
    fn read(host: &dyn Host, profile: Option<&Compiled>) -> Cpus {
        let online = host
            .read("/sys/devices/system/cpu/online")
            .and_then(|t| parse::cpu_list(&t))
            .filter(|c| !c.is_empty());
        let allowed = host
            .read("/proc/self/status")
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
                    .and_then(parse::cpu_list)
            })
            .filter(|c| !c.is_empty());
        let pool = allowed
            .clone()
            .or_else(|| online.clone())
            .unwrap_or_else(|| vec![0]);
        let (shard_cores, shards_from) = match profile.map(|p| p.runtime.shards) {
            Some(Shards::Count(n)) => (
                // The profile allows 1..=1024; never fewer than one here.
                (0..n.max(1) as usize)
                    .map(|i| pool[i % pool.len()])
                    .collect(),
                format!("the profile's shards = {n}"),
            ),
            Some(Shards::Auto) => (pool, "the profile's shards = \"auto\"".to_string()),
            None => (
                pool,
                "no profile given: assuming shards = \"auto\"".to_string(),
            ),
        };
        Cpus {
            online,
            allowed,
            shard_cores,
            shards_from,
        }
    }

    pub fn shards(&self) -> usize {
        self.shard_cores.len()
    }
}

/// Runs every check, in [`CHECK_IDS`] order.
pub(crate) fn run_all(
    host: &dyn Host,
    probe: &dyn Probe,
    profile: Option<&Compiled>,
    steering: &dyn Fn() -> Result<(), String>,
) -> Vec<Finding> {
    let cx = Ctx {
        host,
        probe,
        profile,
        cpus: Cpus::read(host, profile),
    };
    vec![
        uring::disabled(&cx),
        uring::ring(&cx),
        uring::flags(&cx),
        uring::memlock(&cx),
        limits::nofile(&cx),
        net::somaxconn(&cx),
        net::syn_backlog(&cx),
        net::steering(&cx, steering),
        cpu::online(&cx),
        cpu::isolation(&cx),
        cpu::shards(&cx),
        cpu::smt(&cx),
        nic::numa(&cx),
        nic::irqs(&cx),
        nic::rps_xps(&cx),
        system::clocksource(&cx),
        system::thp(&cx),
        net::ktls(&cx),
        net::ports(&cx),
    ]
}
