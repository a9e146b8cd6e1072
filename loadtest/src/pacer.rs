//! Precise waits for the open loop.
//!
//! monoio's timer wheel rounds every sleep up to the next millisecond, which
//! would add up to a millisecond to every open-loop latency (latency counts
//! from the intended send time). A [`Pacer`] is a `timerfd` armed with an
//! absolute CLOCK_MONOTONIC deadline (the clock `Instant` reads) and read
//! whose readiness monoio waits for (a poll on io_uring, epoll on the legacy driver), so the wait ends within microseconds on
//! either driver without spinning a core that a server may share.

use std::io;
use std::os::fd::FromRawFd;
use std::time::{Duration, Instant};

use monoio::net::TcpStream;

/// Waits shorter than this are not worth a timer.
const MIN_WAIT: Duration = Duration::from_micros(20);

pub struct Pacer {
    fd: i32,
    stream: TcpStream,
}

impl Pacer {
    /// Creates the timerfd. Costs one descriptor.
    pub fn new() -> io::Result<Pacer> {
        // SAFETY: plain syscall; the descriptor is owned by the stream below.
        let fd = unsafe {
            libc::timerfd_create(
                libc::CLOCK_MONOTONIC,
                libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` is a fresh descriptor we own; monoio only reads and closes it.
        let std = unsafe { std::net::TcpStream::from_raw_fd(fd) };
        let stream = TcpStream::from_std(std)?;
        Ok(Pacer { fd, stream })
    }

    /// Waits until `t`.
    pub async fn until(&mut self, t: Instant) -> io::Result<()> {
        let now = Instant::now();
        if t <= now + MIN_WAIT {
            return Ok(());
        }
        let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
        // SAFETY: clock_gettime writes the current time into `ts`.
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
        let base = Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32);
        let at = base + (t - now);
        let spec = libc::itimerspec {
            it_interval: libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: libc::timespec {
                tv_sec: at.as_secs() as _,
                tv_nsec: at.subsec_nanos() as _,
            },
        };
        // SAFETY: arms our own timerfd with a valid itimerspec.
        let r = unsafe {
            libc::timerfd_settime(
                self.fd,
                libc::TFD_TIMER_ABSTIME,
                &spec,
                std::ptr::null_mut(),
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        loop {
            self.stream.readable(false).await?;
            let mut expirations = 0u64;
            // SAFETY: reads 8 bytes into a u64 from our own non-blocking timerfd.
            let r = unsafe {
                libc::read(
                    self.fd,
                    &mut expirations as *mut u64 as *mut libc::c_void,
                    8,
                )
            };
            if r == 8 {
                return Ok(());
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::WouldBlock {
                return Err(e);
            }
        }
    }
}

/// Waits until `t` on `pacer`, creating it on first use; falls back to
/// monoio's millisecond timer if a timerfd cannot be had.
pub async fn pace(pacer: &mut Option<Pacer>, t: Instant) {
    if pacer.is_none() {
        *pacer = Pacer::new().ok();
    }
    let ok = match pacer.as_mut() {
        Some(p) => p.until(t).await.is_ok(),
        None => false,
    };
    if !ok {
        crate::ctx::sleep_until(t).await;
    }
}
