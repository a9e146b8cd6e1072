//! Datagrams moved in batches: `recvmmsg` into buffers and message
//! headers allocated once ([`Batch`]), and `sendmmsg` of datagrams to
//! their destinations ([`send_many`]), both without blocking. Shared by
//! the relay's loop (`io`) and HTTP/3's endpoints.

use std::mem::MaybeUninit;
use std::net::SocketAddr;
use std::os::fd::RawFd;

/// Message headers over fixed buffers, built once per task.
pub struct Batch {
    pub data: Vec<u8>,
    pub slot: usize,
    iov: Vec<libc::iovec>,
    addrs: Vec<libc::sockaddr_storage>,
    msgs: Vec<libc::mmsghdr>,
}

impl Batch {
    pub fn new(n: usize, slot: usize) -> Batch {
        let mut b = Batch {
            data: vec![0; n * slot],
            slot,
            iov: Vec::with_capacity(n),
            // SAFETY: sockaddr_storage is plain bytes; all zeros is valid.
            addrs: vec![unsafe { MaybeUninit::zeroed().assume_init() }; n],
            msgs: Vec::with_capacity(n),
        };
        for i in 0..n {
            b.iov.push(libc::iovec {
                iov_base: b.data[i * slot..].as_mut_ptr().cast(),
                iov_len: slot,
            });
        }
        for i in 0..n {
            // SAFETY: mmsghdr is plain data; all zeros is valid.
            let mut m: libc::mmsghdr = unsafe { MaybeUninit::zeroed().assume_init() };
            m.msg_hdr.msg_iov = &mut b.iov[i];
            m.msg_hdr.msg_iovlen = 1;
            m.msg_hdr.msg_name = (&mut b.addrs[i] as *mut libc::sockaddr_storage).cast();
            m.msg_hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as u32;
            b.msgs.push(m);
        }
        b
    }

    /// Receives up to the batch's size without blocking; 0 when nothing is
    /// waiting (or on an error, which the next readiness retries).
    pub fn receive(&mut self, fd: RawFd) -> usize {
        for m in &mut self.msgs {
            m.msg_hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as u32;
            m.msg_hdr.msg_flags = 0;
            m.msg_len = 0;
        }
        // SAFETY: every header points at this batch's iovecs, buffers and
        // address slots, which live as long as `self` and do not move.
        let n = unsafe {
            libc::recvmmsg(
                fd,
                self.msgs.as_mut_ptr(),
                self.msgs.len() as u32,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        n.max(0) as usize
    }

    /// Datagram `i` of the last receive: its bytes, whether the kernel cut
    /// it, and its source.
    pub fn get(&self, i: usize) -> (&[u8], bool, Option<SocketAddr>) {
        let m = &self.msgs[i];
        let len = (m.msg_len as usize).min(self.slot);
        let cut = m.msg_hdr.msg_flags & libc::MSG_TRUNC != 0;
        let data = &self.data[i * self.slot..i * self.slot + len];
        (data, cut, sockaddr(&self.addrs[i]))
    }
}

pub fn sockaddr(s: &libc::sockaddr_storage) -> Option<SocketAddr> {
    match i32::from(s.ss_family) {
        libc::AF_INET => {
            // SAFETY: the family says this storage holds a sockaddr_in.
            let a = unsafe { &*(s as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            let ip = std::net::Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr));
            Some(SocketAddr::new(ip.into(), u16::from_be(a.sin_port)))
        }
        libc::AF_INET6 => {
            // SAFETY: the family says this storage holds a sockaddr_in6.
            let a = unsafe { &*(s as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>() };
            let ip = std::net::Ipv6Addr::from(a.sin6_addr.s6_addr);
            Some(SocketAddr::new(ip.into(), u16::from_be(a.sin6_port)))
        }
        _ => None,
    }
}

/// Sends each `(destination, bytes)` with one `sendmmsg` (up to 32 at a
/// time) without blocking: how many went, from the first. Fewer than all
/// means the socket's buffer is full (or an error): the caller waits for
/// the socket to be writable and sends the rest.
pub fn send_many(fd: RawFd, datagrams: &[(SocketAddr, &[u8])]) -> usize {
    const MAX: usize = 32;
    let mut sent = 0;
    while sent < datagrams.len() {
        let chunk = &datagrams[sent..datagrams.len().min(sent + MAX)];
        let addrs: Vec<socket2::SockAddr> = chunk
            .iter()
            .map(|(to, _)| socket2::SockAddr::from(*to))
            .collect();
        let mut iov: [MaybeUninit<libc::iovec>; MAX] = [MaybeUninit::uninit(); MAX];
        // SAFETY: mmsghdr is plain data; all zeros is valid.
        let mut msgs: [libc::mmsghdr; MAX] = unsafe { MaybeUninit::zeroed().assume_init() };
        for (k, (_, data)) in chunk.iter().enumerate() {
            iov[k].write(libc::iovec {
                iov_base: data.as_ptr() as *mut libc::c_void,
                iov_len: data.len(),
            });
            msgs[k].msg_hdr.msg_iov = iov[k].as_mut_ptr();
            msgs[k].msg_hdr.msg_iovlen = 1;
            msgs[k].msg_hdr.msg_name = addrs[k].as_ptr() as *mut libc::c_void;
            msgs[k].msg_hdr.msg_namelen = addrs[k].len();
        }
        // SAFETY: the first chunk.len() headers point at initialised iovecs
        // over the datagrams' bytes and at `addrs`, all alive for the call.
        let n = unsafe {
            libc::sendmmsg(
                fd,
                msgs.as_mut_ptr(),
                chunk.len() as u32,
                libc::MSG_DONTWAIT,
            )
        };
        if n <= 0 {
            return sent;
        }
        sent += n as usize;
        if (n as usize) < chunk.len() {
            return sent;
        }
    }
    sent
}
