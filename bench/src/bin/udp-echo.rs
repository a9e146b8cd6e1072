//! A UDP echo upstream for `bench/udp.py`: binds ADDR and sends every datagram
//! back to its sender, unchanged. One thread, a blocking socket, batches of up
//! to 32 datagrams with `recvmmsg` (`MSG_WAITFORONE`) and `sendmmsg`.
//! `--core N` pins it to core N first. SIGTERM (its default action) ends it.
//!
//! Usage: `udp-echo [--core N] ADDR`, e.g. `udp-echo --core 1 127.0.0.1:9000`.

use std::net::UdpSocket;
use std::os::fd::AsRawFd;
use std::{env, io, mem, process, ptr};

/// Datagrams per `recvmmsg`/`sendmmsg` call.
const BATCH: usize = 32;
/// Room for the largest UDP payload.
const SLOT: usize = 65536;

fn usage(msg: &str) -> ! {
    eprintln!("udp-echo: {msg}\nusage: udp-echo [--core N] ADDR");
    process::exit(2);
}

fn pin(core: usize) -> io::Result<()> {
    // SAFETY: cpu_set_t is plain data; CPU_SET bounds-checks the index.
    let mut set: libc::cpu_set_t = unsafe { mem::zeroed() };
    unsafe { libc::CPU_SET(core, &mut set) };
    // SAFETY: `set` is a valid cpu_set_t of the size passed.
    let rc = unsafe { libc::sched_setaffinity(0, mem::size_of::<libc::cpu_set_t>(), &set) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Receives a batch, sends it back; forever, or until a receive fails.
fn echo(sock: &UdpSocket) -> io::Result<()> {
    let fd = sock.as_raw_fd();
    let mut bufs = vec![0u8; BATCH * SLOT];
    // SAFETY: all three are plain C structs for which zeroes are valid.
    let mut addrs: [libc::sockaddr_storage; BATCH] = unsafe { mem::zeroed() };
    let mut iovs: [libc::iovec; BATCH] = unsafe { mem::zeroed() };
    let mut msgs: [libc::mmsghdr; BATCH] = unsafe { mem::zeroed() };
    loop {
        let slots = bufs.chunks_mut(SLOT).zip(&mut iovs).zip(&mut addrs);
        for (((buf, iov), addr), msg) in slots.zip(&mut msgs) {
            iov.iov_base = buf.as_mut_ptr().cast();
            iov.iov_len = SLOT;
            msg.msg_hdr.msg_name = (addr as *mut libc::sockaddr_storage).cast();
            msg.msg_hdr.msg_namelen = mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            msg.msg_hdr.msg_iov = iov;
            msg.msg_hdr.msg_iovlen = 1;
            msg.msg_len = 0;
        }
        // SAFETY: every header points at its own live buffer, iovec and address.
        let (hdrs, wait) = (msgs.as_mut_ptr(), libc::MSG_WAITFORONE);
        let n = unsafe { libc::recvmmsg(fd, hdrs, BATCH as u32, wait, ptr::null_mut()) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        let n = n as usize;
        // Send back exactly what came in, to the address it came from.
        for msg in &msgs[..n] {
            // SAFETY: msg_iov points at this header's iovec, set up above.
            unsafe { (*msg.msg_hdr.msg_iov).iov_len = msg.msg_len as usize };
        }
        let mut sent = 0;
        while sent < n {
            // SAFETY: as above; the headers from `sent` on are still valid.
            let r = unsafe { libc::sendmmsg(fd, msgs[sent..].as_mut_ptr(), (n - sent) as u32, 0) };
            if r > 0 {
                sent += r as usize;
                continue;
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                // That datagram cannot go back (its sender is gone, say): drop it.
                eprintln!("udp-echo: send: {e}");
                sent += 1;
            }
        }
    }
}

fn main() {
    let mut core = None;
    let mut addr = None;
    let mut args = env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--core" => {
                let value = args.next().unwrap_or_else(|| usage("--core needs a value"));
                let n = value.parse::<usize>();
                core = Some(n.unwrap_or_else(|_| usage("--core: not a number")));
            }
            "-h" | "--help" => {
                println!("usage: udp-echo [--core N] ADDR");
                return;
            }
            _ if arg.starts_with('-') => usage(&format!("unknown option {arg}")),
            _ if addr.is_none() => addr = Some(arg),
            _ => usage("one ADDR only"),
        }
    }
    let addr = addr.unwrap_or_else(|| usage("ADDR is missing"));
    if let Some(core) = core {
        if let Err(e) = pin(core) {
            eprintln!("udp-echo: pinning to core {core}: {e}");
            process::exit(1);
        }
    }
    let sock = UdpSocket::bind(&addr).unwrap_or_else(|e| {
        eprintln!("udp-echo: bind {addr}: {e}");
        process::exit(1);
    });
    let bound = sock.local_addr().map_or(addr, |a| a.to_string());
    eprintln!("udp-echo: echoing on {bound}");
    if let Err(e) = echo(&sock) {
        eprintln!("udp-echo: receive: {e}");
        process::exit(1);
    }
}
