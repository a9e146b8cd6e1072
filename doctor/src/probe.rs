//! Live questions to the kernel that are not file reads: can a ring with
//! these flags be created, what are the resource limits, can an address be
//! bound. Each answer is taken and everything created is released at once.

use std::io;
use std::net::SocketAddr;

/// The io_uring setup flags a probe asks for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RingFlags {
    pub coop_taskrun: bool,
    pub taskrun_flag: bool,
    pub single_issuer: bool,
    pub defer_taskrun: bool,
}

impl RingFlags {
    /// What every Gapura shard's ring asks for (COOP_TASKRUN and
    /// TASKRUN_FLAG; see gapura-http's driver).
    pub const GAPURA: RingFlags = RingFlags {
        coop_taskrun: true,
        taskrun_flag: true,
        single_issuer: false,
        defer_taskrun: false,
    };
}

/// A resource limit doctor looks at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resource {
    /// RLIMIT_NOFILE (`ulimit -n`).
    NoFile,
    /// RLIMIT_MEMLOCK (`ulimit -l`), in bytes.
    MemLock,
}

/// A soft and hard limit; `None` is unlimited.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rlimit {
    pub soft: Option<u64>,
    pub hard: Option<u64>,
}

/// The transport of an address to bind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Proto {
    Tcp,
    Udp,
}

impl Proto {
    pub fn name(self) -> &'static str {
        match self {
            Proto::Tcp => "tcp",
            Proto::Udp => "udp",
        }
    }
}

/// The kernel questions doctor asks.
pub trait Probe {
    /// Creates (and drops) a ring of `entries` with `flags`.
    fn ring(&self, flags: RingFlags, entries: u32) -> Result<(), String>;
    /// The process's limit; `None` when it cannot be read.
    fn rlimit(&self, which: Resource) -> Option<Rlimit>;
    /// Binds `addr` and releases it at once.
    fn bind(&self, addr: SocketAddr, proto: Proto) -> io::Result<()>;
}

/// The probe that asks this host's kernel.
#[derive(Clone, Copy, Debug, Default)]
pub struct RealProbe;

impl Probe for RealProbe {
    fn ring(&self, flags: RingFlags, entries: u32) -> Result<(), String> {
        let mut b =
            io_uring::IoUring::<io_uring::squeue::Entry, io_uring::cqueue::Entry>::builder();
        if flags.coop_taskrun {
            b.setup_coop_taskrun();
        }
        if flags.taskrun_flag {
            b.setup_taskrun_flag();
        }
        if flags.single_issuer {
            b.setup_single_issuer();
        }
        if flags.defer_taskrun {
            b.setup_defer_taskrun();
        }
        b.build(entries).map(drop).map_err(|e| e.to_string())
    }

    fn rlimit(&self, which: Resource) -> Option<Rlimit> {
        let resource = match which {
            Resource::NoFile => libc::RLIMIT_NOFILE,
            Resource::MemLock => libc::RLIMIT_MEMLOCK,
        };
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit writes one rlimit into the struct we own.
        let rc = unsafe { libc::getrlimit(resource, &mut lim) };
        if rc != 0 {
            return None;
        }
        // rlim_t is 32 bits on some targets.
        #[allow(clippy::unnecessary_cast)]
        let value = |v: libc::rlim_t| (v != libc::RLIM_INFINITY).then_some(v as u64);
        Some(Rlimit {
            soft: value(lim.rlim_cur),
            hard: value(lim.rlim_max),
        })
    }

    fn bind(&self, addr: SocketAddr, proto: Proto) -> io::Result<()> {
        match proto {
            Proto::Tcp => std::net::TcpListener::bind(addr).map(drop),
            Proto::Udp => std::net::UdpSocket::bind(addr).map(drop),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn real_limits_are_read_and_soft_never_exceeds_hard() {
        for which in [Resource::NoFile, Resource::MemLock] {
            let l = RealProbe.rlimit(which).expect("getrlimit answers");
            if let (Some(s), Some(h)) = (l.soft, l.hard) {
                assert!(s <= h, "{which:?}: {s} > {h}");
            }
        }
    }

    #[test]
    fn a_bound_port_is_reported_in_use_and_released_after_the_probe() {
        let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = held.local_addr().unwrap();
        let e = RealProbe.bind(addr, Proto::Tcp).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AddrInUse);
        drop(held);
        let free = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let uaddr = free.local_addr().unwrap();
        drop(free);
        RealProbe.bind(uaddr, Proto::Udp).unwrap();
        // The probe released it: binding again works.
        RealProbe.bind(uaddr, Proto::Udp).unwrap();
    }
}
