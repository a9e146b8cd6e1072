//! Where every io_uring of the project is built: [`RingUse`] names what a
//! ring is for, and its [`RingUse::builder`] is the only place setup flags
//! are chosen. The flags differ because the rings are driven differently;
//! the reasons, once:
//!
//! - `COOP_TASKRUN` (the runtime's ring, a shard's own ring): the kernel
//!   does not interrupt the thread to run completion task work; it runs it
//!   when the thread next enters the kernel, which every loop turn does.
//! - `TASKRUN_FLAG` (with `COOP_TASKRUN`): the submission ring's flags say
//!   when such task work is pending (`IORING_SQ_TASKRUN`), so a reaper that
//!   finds no completions can tell that entering the kernel would post
//!   some.
//! - `SINGLE_ISSUER` (a shard's own ring, a thread alone): one thread
//!   submits, the one that built the ring; the kernel trusts it and skips
//!   the locking for several submitters. Required by `DEFER_TASKRUN`.
//! - `DEFER_TASKRUN` (a thread alone, only): completions are posted only
//!   when the ring's owner waits for them (`io_uring_enter` with
//!   `GETEVENTS`): no task-work interruptions, and one wait for a batch is
//!   woken once. Not for a ring whose file the runtime polls: a deferring
//!   ring does not wake a poller of its file (only a registered eventfd),
//!   and its owner sleeps in the runtime's ring, not in it
//!   (docs/design-notes.md).
//! - Not on the runtime's ring: `SINGLE_ISSUER | DEFER_TASKRUN` there, with
//!   and without `COOP_TASKRUN`, was measured without gain
//!   (docs/performance.md); the runtime's ring keeps `COOP_TASKRUN |
//!   TASKRUN_FLAG`.
//! - A separate completion queue size (a shard's own ring, a thread alone):
//!   a multishot receive posts many completions per submission. monoio
//!   sizes the runtime's ring from its entries alone (the kernel's default:
//!   twice as many completions).
//!
//! `gapura doctor` asks the kernel for the runtime's flags with a probe of
//! its own (doctor does not link this crate): `RingFlags::GAPURA` there
//! follows [`RingUse::Runtime`] here.

use io_uring::IoUring;
use std::io;

/// What a ring is for, which decides its setup flags (see the module's
/// documentation for why each has its own).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RingUse {
    /// monoio's runtime ring, under every shard on io_uring (the server's,
    /// the load tester's monoio engine, the floor proxy's monoio engine):
    /// `COOP_TASKRUN | TASKRUN_FLAG`; monoio builds it from
    /// [`RingUse::builder`] with its entries (`crate::driver::block_on`).
    Runtime,
    /// A shard's own ring beside the runtime's, whose completions a task of
    /// the runtime reaps when the runtime finds the ring's file readable
    /// ([`crate::uring::ShardRing`]): `SINGLE_ISSUER | COOP_TASKRUN |
    /// TASKRUN_FLAG`.
    PolledByRuntime,
    /// A ring that one thread submits to and reaps from alone, waiting in
    /// it (the load tester's direct engine, the floor proxy's ring
    /// engine): `SINGLE_ISSUER | DEFER_TASKRUN`.
    SingleThread,
}

/// A ring's setup flags, by name.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RingFlags {
    pub single_issuer: bool,
    pub coop_taskrun: bool,
    pub taskrun_flag: bool,
    pub defer_taskrun: bool,
}

impl RingUse {
    /// This use's setup flags.
    pub const fn flags(self) -> RingFlags {
        match self {
            RingUse::Runtime => RingFlags {
                single_issuer: false,
                coop_taskrun: true,
                taskrun_flag: true,
                defer_taskrun: false,
            },
            RingUse::PolledByRuntime => RingFlags {
                single_issuer: true,
                coop_taskrun: true,
                taskrun_flag: true,
                defer_taskrun: false,
            },
            RingUse::SingleThread => RingFlags {
                single_issuer: true,
                coop_taskrun: false,
                taskrun_flag: false,
                defer_taskrun: true,
            },
        }
    }

    /// A builder with this use's setup flags and no sizes: what monoio is
    /// given for [`RingUse::Runtime`]; [`RingUse::build`] for the others.
    pub fn builder(self) -> io_uring::Builder {
        let f = self.flags();
        let mut b = IoUring::builder();
        if f.single_issuer {
            b.setup_single_issuer();
        }
        if f.coop_taskrun {
            b.setup_coop_taskrun();
        }
        if f.taskrun_flag {
            b.setup_taskrun_flag();
        }
        if f.defer_taskrun {
            b.setup_defer_taskrun();
        }
        b
    }

    /// Builds the ring on the calling thread (with `SINGLE_ISSUER`, the
    /// only one that may submit to it): `entries` submission entries and
    /// `cq_entries` completion entries, at least `entries`.
    pub fn build(self, entries: u32, cq_entries: u32) -> io::Result<IoUring> {
        self.builder()
            .setup_cqsize(cq_entries.max(entries))
            .build(entries)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [RingUse; 3] = [
        RingUse::Runtime,
        RingUse::PolledByRuntime,
        RingUse::SingleThread,
    ];

    #[test]
    fn each_use_keeps_its_flags() {
        let f = |single_issuer, coop_taskrun, taskrun_flag, defer_taskrun| RingFlags {
            single_issuer,
            coop_taskrun,
            taskrun_flag,
            defer_taskrun,
        };
        assert_eq!(RingUse::Runtime.flags(), f(false, true, true, false));
        assert_eq!(RingUse::PolledByRuntime.flags(), f(true, true, true, false));
        assert_eq!(RingUse::SingleThread.flags(), f(true, false, false, true));
    }

    #[test]
    fn the_kernels_pairings_hold() {
        for u in ALL {
            let f = u.flags();
            // DEFER_TASKRUN needs SINGLE_ISSUER; TASKRUN_FLAG means
            // something only with COOP_TASKRUN.
            assert!(!f.defer_taskrun || f.single_issuer, "{u:?}");
            assert_eq!(f.taskrun_flag, f.coop_taskrun, "{u:?}");
            // A ring the runtime polls must post completions unasked.
            if u != RingUse::SingleThread {
                assert!(!f.defer_taskrun, "{u:?}");
            }
        }
    }

    #[test]
    fn built_rings_have_their_sizes_and_issuer() {
        for u in ALL {
            let ring = match u.build(64, 1024) {
                Ok(r) => r,
                // A kernel without io_uring (or these flags), or a sandbox
                // that forbids it.
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::ENOSYS | libc::EPERM | libc::EINVAL)
                    ) =>
                {
                    continue
                }
                Err(e) => panic!("{u:?}: {e}"),
            };
            let p = ring.params();
            assert_eq!(p.sq_entries(), 64, "{u:?}");
            assert_eq!(p.cq_entries(), 1024, "{u:?}");
            assert_eq!(p.is_setup_single_issuer(), u.flags().single_issuer);
        }
        // At least as many completion entries as submission entries.
        if let Ok(ring) = RingUse::SingleThread.build(64, 8) {
            assert_eq!(ring.params().cq_entries(), 64);
        }
    }
}
