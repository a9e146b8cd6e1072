//! io_uring driven directly. The parts shared by every engine that drives
//! one (the server's shards, the load tester's, the floor proxy of
//! `bench/`): `setup`, where every ring of the project is built (the
//! runtime's too) with the flags of its use ([`RingUse`]), and the
//! provided-buffer ring that multishot receives take their buffers from.
//! `engine` and `stream`: a shard's own ring under its plain HTTP/1.1
//! client connections, beside the runtime's.
//!
//! A provided-buffer ring (`IORING_REGISTER_PBUF_RING`) is a ring of buffer
//! descriptors in memory shared with the kernel: a receive armed with its
//! group id takes the next buffer itself, so a multishot receive stays
//! armed across any number of completions and no receive is submitted per
//! read. Buffers go back with [`BufRing::push`] and become visible to the
//! kernel with [`BufRing::publish`] (once per batch of completions).

pub mod engine;
pub mod setup;
pub mod stream;

pub use engine::ShardRing;
pub use setup::{RingFlags, RingUse};

use std::io;

/// A provided-buffer ring: `count` buffers of `buf_bytes` bytes each, in
/// buffer group `bgid`, with its ring of descriptors in its own
/// page-aligned mapping.
pub struct BufRing {
    ring: *mut u8,
    ring_bytes: usize,
    bufs: Vec<u8>,
    buf_bytes: usize,
    mask: u16,
    tail: u16,
}

#[repr(C)]
struct BufReg {
    ring_addr: u64,
    ring_entries: u32,
    bgid: u16,
    flags: u16,
    resv: [u64; 3],
}

/// `IORING_REGISTER_PBUF_RING`.
const REGISTER_PBUF_RING: libc::c_uint = 22;

impl BufRing {
    /// Registers a ring of `count` buffers (a power of two, at most 32768)
    /// of `buf_bytes` each as group `bgid` of the io_uring `ring_fd`, all
    /// of them handed to the kernel.
    pub fn new(ring_fd: i32, bgid: u16, count: u16, buf_bytes: usize) -> io::Result<BufRing> {
        if !count.is_power_of_two()
            || count > 32768
            || buf_bytes == 0
            || buf_bytes > u32::MAX as usize
        {
            return Err(io::ErrorKind::InvalidInput.into());
        }
        let ring_bytes = (count as usize * 16).max(4096);
        // SAFETY: an anonymous private mapping, checked below.
        let ring = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                ring_bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if ring == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let mut br = BufRing {
            ring: ring as *mut u8,
            ring_bytes,
            bufs: vec![0u8; count as usize * buf_bytes],
            buf_bytes,
            mask: count - 1,
            tail: 0,
        };
        let reg = BufReg {
            ring_addr: ring as u64,
            ring_entries: count as u32,
            bgid,
            flags: 0,
            resv: [0; 3],
        };
        // SAFETY: registers our mapping with the ring; `reg` is valid for
        // the call. On failure `br` unmaps it.
        let r = unsafe {
            libc::syscall(
                libc::SYS_io_uring_register,
                ring_fd,
                REGISTER_PBUF_RING,
                &reg,
                1,
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        for bid in 0..count {
            br.push(bid);
        }
        br.publish();
        Ok(br)
    }

    /// Each buffer's size.
    pub fn buf_bytes(&self) -> usize {
        self.buf_bytes
    }

    /// Queues buffer `bid` for the kernel (visible after `publish`).
    pub fn push(&mut self, bid: u16) {
        let bid = bid & self.mask;
        let idx = (self.tail & self.mask) as usize;
        // SAFETY: idx < count; each entry is 16 bytes: addr u64, len u32,
        // bid u16, resv u16 (the first entry's resv is the ring's tail,
        // written only by `publish`). `bid` < count, so the address lies in
        // `bufs`.
        unsafe {
            let e = self.ring.add(idx * 16);
            (e as *mut u64).write(self.bufs.as_ptr().add(bid as usize * self.buf_bytes) as u64);
            (e.add(8) as *mut u32).write(self.buf_bytes as u32);
            (e.add(12) as *mut u16).write(bid);
        }
        self.tail = self.tail.wrapping_add(1);
    }

    /// Makes the pushed buffers visible to the kernel.
    pub fn publish(&self) {
        // SAFETY: the ring's tail is the u16 at offset 14 of the first entry.
        let tail = unsafe { &*(self.ring.add(14) as *const std::sync::atomic::AtomicU16) };
        tail.store(self.tail, std::sync::atomic::Ordering::Release);
    }

    /// The first `len` bytes of buffer `bid` (as a completion names it).
    pub fn buf(&self, bid: u16, len: usize) -> &[u8] {
        let start = (bid & self.mask) as usize * self.buf_bytes;
        &self.bufs[start..start + len.min(self.buf_bytes)]
    }
}

impl Drop for BufRing {
    fn drop(&mut self) {
        // SAFETY: unmaps our own mapping. The kernel holds no reference to
        // it past the ring's close, and a ring is closed before its buffer
        // ring is dropped by every engine (fields drop in order).
        unsafe { libc::munmap(self.ring as *mut libc::c_void, self.ring_bytes) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use io_uring::{cqueue, opcode, types};
    use std::io::Write;
    use std::os::fd::AsRawFd;

    #[test]
    fn a_multishot_receive_takes_provided_buffers_until_the_peer_closes() {
        let mut ring = match RingUse::SingleThread.build(64, 256) {
            Ok(r) => r,
            // A kernel without io_uring, or a sandbox that forbids it.
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOSYS | libc::EPERM)) => return,
            Err(e) => panic!("{e}"),
        };
        let mut bufs = BufRing::new(ring.as_raw_fd(), 3, 4, 8).unwrap();
        assert_eq!(bufs.buf_bytes(), 8);
        let (mut a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        let recv = opcode::RecvMulti::new(types::Fd(b.as_raw_fd()), 3)
            .build()
            .user_data(9);
        // SAFETY: the socket outlives the ring's use of it (closed last).
        unsafe { ring.submission().push(&recv).unwrap() };
        ring.submit().unwrap();
        let mut got = Vec::new();
        // 3 writes, more than one buffer's worth in all, then the end.
        for part in [&b"hello, "[..], b"world, again", b"!"] {
            a.write_all(part).unwrap();
            let want = got.len() + part.len();
            while got.len() < want {
                ring.submit_and_wait(1).unwrap();
                let done: Vec<_> = ring.completion().collect();
                for c in done {
                    assert_eq!(c.user_data(), 9);
                    assert!(c.result() > 0, "{}", c.result());
                    assert!(cqueue::more(c.flags()));
                    let bid = cqueue::buffer_select(c.flags()).unwrap();
                    got.extend_from_slice(bufs.buf(bid, c.result() as usize));
                    bufs.push(bid);
                }
                bufs.publish();
            }
        }
        assert_eq!(got, b"hello, world, again!");
        drop(a);
        ring.submit_and_wait(1).unwrap();
        let end: Vec<_> = ring.completion().collect();
        assert_eq!(end.len(), 1);
        assert_eq!(end[0].result(), 0);
        assert!(!cqueue::more(end[0].flags()));
    }

    #[test]
    fn a_buffer_ring_needs_a_power_of_two_count() {
        let Ok(ring) = RingUse::SingleThread.build(8, 8) else {
            return;
        };
        let e = BufRing::new(ring.as_raw_fd(), 1, 3, 8).err().unwrap();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    }
}
