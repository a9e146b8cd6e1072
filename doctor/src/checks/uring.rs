//! io_uring: the kernel switch, whether Gapura's ring can be created, the
//! newer setup flags, and the memlock limit older kernels charge rings to.

use super::{Ctx, RING_ENTRIES};
use crate::finding::{Finding, Level};
use crate::parse;
use crate::probe::{Resource, RingFlags};
use gapura_config::Driver;

/// What one ring of [`RING_ENTRIES`] locks on kernels before 5.12: the SQ
/// entries (4096 × 64 bytes, 64 pages) and the rings with the CQ entries
/// (8192 × 16 bytes) and the SQ index array (4096 × 4 bytes), 37 pages.
pub const RING_MEMLOCK_BYTES: u64 = 101 * 4096;

/// The first kernel that charges rings to the memory cgroup instead of
/// RLIMIT_MEMLOCK.
const MEMCG_ACCOUNTING: (u32, u32) = (5, 12);

const SYSCTL_FIX: &str = "sysctl -w kernel.io_uring_disabled=0, and to keep it across \
     reboots put `kernel.io_uring_disabled = 0` in /etc/sysctl.d/90-gapura.conf";

/// How much io_uring missing matters: the profile's driver decides.
fn without_ring(cx: &Ctx) -> (Level, &'static str) {
    match cx.profile.map(|p| p.runtime.driver) {
        Some(Driver::IoUring) => (
            Level::Fail,
            "The profile says driver = \"io_uring\": without a ring the shards do not start.",
        ),
        Some(Driver::Epoll) => (
            Level::Info,
            "The profile says driver = \"epoll\": Gapura does not use io_uring.",
        ),
        Some(Driver::Auto) => (
            Level::Warn,
            "Without io_uring Gapura falls back to epoll (driver = \"auto\"): it works, \
             with more system calls per request.",
        ),
        None => (
            Level::Warn,
            "Without io_uring Gapura falls back to epoll (with driver = \"auto\"; a \
             profile with driver = \"io_uring\" would not start).",
        ),
    }
}

/// `io_uring.disabled`: kernel.io_uring_disabled (and io_uring_group).
pub fn disabled(cx: &Ctx) -> Finding {
    const ID: &str = "io_uring.disabled";
    let Some(text) = cx.host.read("/proc/sys/kernel/io_uring_disabled") else {
        return Finding::new(
            ID,
            Level::Info,
            "/proc/sys/kernel/io_uring_disabled is missing (kernels before 6.6 have no such \
             switch): cannot tell from it; io_uring.ring says whether a ring can be created.",
        );
    };
    let (level, why) = without_ring(cx);
    match parse::int(&text) {
        Some(0) => Finding::new(
            ID,
            Level::Ok,
            "kernel.io_uring_disabled = 0: io_uring is enabled for every process.",
        ),
        Some(1) => group_only(cx, level, why),
        Some(2) => Finding::new(
            ID,
            level,
            "kernel.io_uring_disabled = 2: io_uring is disabled for every process.",
        )
        .why(why)
        .fix(SYSCTL_FIX),
        _ => Finding::new(
            ID,
            Level::Info,
            format!(
                "kernel.io_uring_disabled reads {:?}, not 0, 1 or 2: cannot tell.",
                text.trim()
            ),
        ),
    }
}

/// io_uring_disabled = 1: only a group (or CAP_SYS_ADMIN) may create rings.
fn group_only(cx: &Ctx, level: Level, why: &str) -> Finding {
    const ID: &str = "io_uring.disabled";
    let group = cx
        .host
        .read("/proc/sys/kernel/io_uring_group")
        .and_then(|t| parse::int(&t));
    let found = match group {
        Some(g) if g >= 0 => format!(
            "kernel.io_uring_disabled = 1: only members of group {g} (kernel.io_uring_group) \
             and processes with CAP_SYS_ADMIN may create rings."
        ),
        _ => "kernel.io_uring_disabled = 1 and kernel.io_uring_group = -1: only processes \
              with CAP_SYS_ADMIN may create rings."
            .to_string(),
    };
    let in_group = group.filter(|g| *g >= 0).is_some_and(|g| {
        cx.host
            .read("/proc/self/status")
            .and_then(|s| {
                let line = s.lines().find_map(|l| l.strip_prefix("Groups:"))?;
                Some(line.split_whitespace().any(|w| w.parse::<i64>() == Ok(g)))
            })
            .unwrap_or(false)
    });
    let fix = match group {
        Some(g) if g >= 0 => format!(
            "Run Gapura with group {g} (SupplementaryGroups= in its systemd unit), or {SYSCTL_FIX}"
        ),
        _ => SYSCTL_FIX.to_string(),
    };
    if in_group {
        return Finding::new(
            ID,
            Level::Info,
            format!("{found} This process is in that group; the user Gapura runs as must be too."),
        )
        .why(why)
        .fix(fix);
    }
    Finding::new(ID, level, found).why(why).fix(fix)
}

/// `io_uring.ring`: creates the ring every shard creates.
pub fn ring(cx: &Ctx) -> Finding {
    const ID: &str = "io_uring.ring";
    match cx.probe.ring(RingFlags::GAPURA, RING_ENTRIES) {
        Ok(()) => Finding::new(
            ID,
            Level::Ok,
            format!(
                "Created a {RING_ENTRIES}-entry ring with COOP_TASKRUN and TASKRUN_FLAG, as \
                 each shard does."
            ),
        ),
        Err(e) => {
            let (level, why) = without_ring(cx);
            Finding::new(
                ID,
                level,
                format!(
                    "Cannot create a {RING_ENTRIES}-entry ring with COOP_TASKRUN and \
                     TASKRUN_FLAG: {e}"
                ),
            )
            .why(why)
            .fix(
                "These flags need Linux 5.19 or later. Look at io_uring.disabled and \
                 limits.memlock; in a container, the seccomp profile must allow \
                 io_uring_setup, io_uring_enter and io_uring_register (Docker: \
                 --security-opt seccomp=<profile allowing them>).",
            )
        }
    }
}

/// `io_uring.flags`: SINGLE_ISSUER and DEFER_TASKRUN, for information.
pub fn flags(cx: &Ctx) -> Finding {
    let single = RingFlags {
        single_issuer: true,
        ..RingFlags::GAPURA
    };
    let defer = RingFlags {
        defer_taskrun: true,
        ..single
    };
    let say = |flags| match cx.probe.ring(flags, RING_ENTRIES) {
        Ok(()) => "available".to_string(),
        Err(e) => format!("not available ({e})"),
    };
    Finding::new(
        "io_uring.flags",
        Level::Info,
        format!(
            "SINGLE_ISSUER: {} (Linux 6.0+); DEFER_TASKRUN: {} (Linux 6.1+).",
            say(single),
            say(defer)
        ),
    )
    .why(
        "The shards' runtime rings do not ask for them; a shard's own ring (ring = \"on\") \
         asks for SINGLE_ISSUER, and the load tester's direct engine for both.",
    )
}

/// `limits.memlock`: RLIMIT_MEMLOCK against the rings on kernels < 5.12.
pub fn memlock(cx: &Ctx) -> Finding {
    const ID: &str = "limits.memlock";
    let shards = cx.cpus.shards() as u64;
    let needed = shards * RING_MEMLOCK_BYTES;
    let need = format!(
        "{shards} shards × {} per {RING_ENTRIES}-entry ring = {}",
        parse::bytes(Some(RING_MEMLOCK_BYTES)),
        parse::bytes(Some(needed))
    );
    let Some(lim) = cx.probe.rlimit(Resource::MemLock) else {
        return Finding::new(ID, Level::Info, "Cannot read RLIMIT_MEMLOCK: cannot tell.");
    };
    let have = format!(
        "RLIMIT_MEMLOCK soft {}, hard {}",
        parse::bytes(lim.soft),
        parse::bytes(lim.hard)
    );
    let release = cx.host.read("/proc/sys/kernel/osrelease");
    let version = release.as_deref().and_then(parse::kernel_version);
    if let Some(v @ (major, minor)) = version {
        if v >= MEMCG_ACCOUNTING {
            return Finding::new(
                ID,
                Level::Ok,
                format!(
                    "{have}. Kernel {major}.{minor} charges io_uring rings to the memory \
                     cgroup, not to this limit (before 5.12 it would need {need})."
                ),
            );
        }
    }
    let kernel = match version {
        Some((major, minor)) => format!("Kernel {major}.{minor} charges"),
        None => "Kernel version unknown (/proc/sys/kernel/osrelease); kernels before 5.12 \
                 charge"
            .to_string(),
    };
    let found = format!("{have}. {kernel} io_uring rings to it: {need}.");
    if lim.soft.is_none_or(|s| s >= needed) {
        return Finding::new(ID, Level::Ok, found);
    }
    let (level, why) = without_ring(cx);
    let kib = needed.div_ceil(1024);
    Finding::new(ID, level, found)
        .why(format!(
            "Ring creation fails with ENOMEM past the limit. {why}"
        ))
        .fix(format!(
            "LimitMEMLOCK={needed} in the [Service] section of Gapura's systemd unit, or \
             `<user> soft memlock {kib}` and `<user> hard memlock {kib}` (KiB) in \
             /etc/security/limits.conf; or run Linux 5.12 or later."
        ))
}
