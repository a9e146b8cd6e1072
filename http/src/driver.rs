//! The one way a shard, the server's or the load tester's, gets its monoio
//! runtime: io_uring with `COOP_TASKRUN | TASKRUN_FLAG`
//! ([`RingUse::Runtime`](crate::uring::RingUse::Runtime); why these flags:
//! [`crate::uring::setup`]), and the legacy (epoll) driver when asked for
//! or, under [`Driver::Auto`], when the ring cannot be built (memlock,
//! seccomp, an old kernel). The fallback is explicit: the caller learns why
//! and logs it once.

use std::future::Future;

/// Which driver a shard runs on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Driver {
    /// io_uring, or epoll when the ring cannot be built.
    #[default]
    Auto,
    /// io_uring only: a ring that cannot be built fails the shard.
    IoUring,
    /// The legacy (epoll) driver.
    Epoll,
}

/// The driver a runtime was built on, told to the shard before it runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Started {
    /// `"io_uring"` or `"epoll"`.
    pub name: &'static str,
    /// Under [`Driver::Auto`], why the ring could not be built (the shard
    /// runs on epoll).
    pub fallback: Option<String>,
}

impl Started {
    /// Whether the shard runs on the legacy (epoll) driver.
    pub fn legacy(&self) -> bool {
        self.name == "epoll"
    }
}

/// Why no runtime could start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StartError {
    /// [`Driver::IoUring`] was asked for and the ring could not be built.
    RingRequired(String),
    /// The epoll driver could not be built either.
    NoDriver(String),
}

/// Builds the runtime `driver` asks for, with a ring of `ring_entries`
/// entries, and runs `f(started)` on it to completion.
pub fn block_on<F, Fut>(driver: Driver, ring_entries: u32, f: F) -> Result<Fut::Output, StartError>
where
    F: FnOnce(Started) -> Fut,
    Fut: Future,
{
    let mut fallback = None;
    if driver != Driver::Epoll {
        let built = monoio::RuntimeBuilder::<monoio::IoUringDriver>::new()
            .with_entries(ring_entries)
            .uring_builder(crate::uring::RingUse::Runtime.builder())
            .enable_timer()
            .build();
        match built {
            Ok(mut rt) => {
                return Ok(rt.block_on(f(Started {
                    name: "io_uring",
                    fallback: None,
                })))
            }
            Err(e) if driver == Driver::Auto => fallback = Some(e.to_string()),
            Err(e) => return Err(StartError::RingRequired(e.to_string())),
        }
    }
    let mut rt = monoio::RuntimeBuilder::<monoio::LegacyDriver>::new()
        .enable_timer()
        .build()
        .map_err(|e| StartError::NoDriver(e.to_string()))?;
    Ok(rt.block_on(f(Started {
        name: "epoll",
        fallback,
    })))
}
