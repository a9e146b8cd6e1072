//! Tests of every check over recorded files: this project's build machine
//! as recorded (a 2-CPU virtual machine, kernel 6.18), and hand-made
//! variants for each level.

mod cpu;
mod limits_net;
mod nic;
mod system;
mod uring;
mod whole;

use crate::finding::{Finding, Level, Report};
use crate::host::MapHost;
use crate::probe::{Probe, Proto, Resource, RingFlags, Rlimit};
use gapura_config::{Compiled, Environment, NoFiles, NoNames};
use std::io;
use std::net::SocketAddr;

/// The build machine's files as recorded: 2 CPUs (0-1) without SMT, one
/// NUMA node, eth0 on virtio2 (one rx and one tx queue), kernel 6.18,
/// somaxconn 4096, tcp_max_syn_backlog 2048, THP madvise, clock tsc,
/// io_uring enabled, no kTLS.
pub fn recorded() -> MapHost {
    MapHost::new()
        .file("/proc/sys/kernel/io_uring_disabled", "0\n")
        .file("/proc/sys/kernel/io_uring_group", "-1\n")
        .file("/proc/sys/kernel/osrelease", "6.18.44-fc-v657\n")
        .file("/proc/sys/net/core/somaxconn", "4096\n")
        .file("/proc/sys/net/ipv4/tcp_max_syn_backlog", "2048\n")
        .file("/proc/sys/net/ipv4/tcp_syncookies", "1\n")
        .file("/proc/sys/net/ipv4/tcp_available_ulp", "mptcp\n")
        .file("/sys/devices/system/cpu/online", "0-1\n")
        .file("/sys/devices/system/cpu/isolated", "\n")
        .file(
            "/sys/devices/system/cpu/cpu0/topology/thread_siblings_list",
            "0\n",
        )
        .file(
            "/sys/devices/system/cpu/cpu1/topology/thread_siblings_list",
            "1\n",
        )
        .file("/sys/devices/system/node/node0/cpulist", "0-1\n")
        .file(
            "/sys/devices/system/clocksource/clocksource0/current_clocksource",
            "tsc\n",
        )
        .file(
            "/sys/kernel/mm/transparent_hugepage/enabled",
            "always [madvise] never\n",
        )
        .file(
            "/proc/cmdline",
            include_str!("../../../tests/fixtures/recorded/cmdline"),
        )
        .file(
            "/proc/self/status",
            include_str!("../../../tests/fixtures/recorded/status"),
        )
        .file(
            "/proc/interrupts",
            include_str!("../../../tests/fixtures/recorded/interrupts"),
        )
        .symlink("/sys/class/net/eth0/device", "../../../virtio2")
        .file("/sys/class/net/eth0/queues/rx-0/rps_cpus", "0\n")
        .file("/sys/class/net/eth0/queues/tx-0/tx_maxrate", "0\n")
        .file("/sys/class/net/ifb0/queues/rx-0/rps_cpus", "0\n")
        .file("/sys/class/net/ifb1/queues/rx-0/rps_cpus", "0\n")
        .file("/sys/class/net/lo/queues/rx-0/rps_cpus", "0\n")
        .file("/proc/irq/38/smp_affinity_list", "0-1\n")
        .file("/proc/irq/39/smp_affinity_list", "0-1\n")
        .file("/proc/irq/37/smp_affinity_list", "0-1\n")
}

/// A /proc/self/status with only the lines doctor reads.
pub fn status(allowed: &str, groups: &str) -> String {
    format!("Name:\tgapura\nGroups:\t{groups}\nCpus_allowed_list:\t{allowed}\n")
}

/// A probe with fixed answers.
#[derive(Clone, Debug)]
pub struct FakeProbe {
    /// Why Gapura's ring (and so every ring) cannot be created.
    pub ring: Option<String>,
    pub single_issuer: Option<String>,
    pub defer_taskrun: Option<String>,
    pub nofile: Option<Rlimit>,
    pub memlock: Option<Rlimit>,
    /// Addresses that do not bind, and why.
    pub refused: Vec<(SocketAddr, Proto, io::ErrorKind)>,
}

impl Default for FakeProbe {
    /// The build machine's answers: every ring, nofile 20000/20000,
    /// memlock 8 MiB, every address free.
    fn default() -> Self {
        FakeProbe {
            ring: None,
            single_issuer: None,
            defer_taskrun: None,
            nofile: Some(Rlimit {
                soft: Some(20_000),
                hard: Some(20_000),
            }),
            memlock: Some(Rlimit {
                soft: Some(8 << 20),
                hard: Some(8 << 20),
            }),
            refused: Vec::new(),
        }
    }
}

impl Probe for FakeProbe {
    fn ring(&self, flags: RingFlags, _entries: u32) -> Result<(), String> {
        let why = match () {
            _ if flags.defer_taskrun && self.defer_taskrun.is_some() => &self.defer_taskrun,
            _ if flags.single_issuer && self.single_issuer.is_some() => &self.single_issuer,
            _ => &self.ring,
        };
        why.clone().map_or(Ok(()), Err)
    }

    fn rlimit(&self, which: Resource) -> Option<Rlimit> {
        match which {
            Resource::NoFile => self.nofile,
            Resource::MemLock => self.memlock,
        }
    }

    fn bind(&self, addr: SocketAddr, proto: Proto) -> io::Result<()> {
        match self
            .refused
            .iter()
            .find(|(a, p, _)| *a == addr && *p == proto)
        {
            Some((_, _, kind)) => Err(io::Error::from(*kind)),
            None => Ok(()),
        }
    }
}

/// Compiles a profile as on a machine with `cores` allowed CPUs.
pub fn compiled(src: &str, cores: u32) -> Compiled {
    let env = Environment {
        cores,
        memory_bytes: 8 << 30,
        resolver: &NoNames,
        certificates: &NoFiles,
    };
    match gapura_config::compile_with(src, &env) {
        Ok(c) => c,
        Err(e) => panic!("test profile should compile: {e:#?}"),
    }
}

/// The built-in profile on 2 CPUs.
pub fn default_profile() -> Compiled {
    compiled(gapura_config::DEFAULT_PROFILE, 2)
}

/// A profile with the given `[server]` lines and no hosts.
pub fn server(lines: &str) -> Compiled {
    compiled(&format!("[server]\n{lines}\n"), 2)
}

/// The report for a host and probe with a profile; steering attaches.
pub fn check(host: &MapHost, probe: &FakeProbe, profile: Option<&Compiled>) -> Report {
    crate::report(host, probe, profile, &|| Ok(()))
}

/// The one finding with this id.
pub fn finding(r: &Report, id: &str) -> Finding {
    r.get(id)
        .unwrap_or_else(|| panic!("no {id} in {r:#?}"))
        .clone()
}

/// Asserts the level and that `found` holds every needle.
#[track_caller]
pub fn expect(f: &Finding, level: Level, needles: &[&str]) {
    assert_eq!(f.level, level, "{f:#?}");
    for n in needles {
        assert!(f.found.contains(n), "{n:?} not in found of {f:#?}");
    }
}

/// Asserts that `fix` holds every needle.
#[track_caller]
pub fn expect_fix(f: &Finding, needles: &[&str]) {
    for n in needles {
        assert!(f.fix.contains(n), "{n:?} not in fix of {f:#?}");
    }
}
