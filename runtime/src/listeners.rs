//! Listening sockets: the port-ownership check, one SO_REUSEPORT socket per
//! shard and address, and source steering.
//!
//! Steering attaches a classic BPF program to each reuseport group that
//! picks the socket by the client's source address (IPv4: the whole address;
//! IPv6: the /64), modulo the shard count. The index it returns is the order
//! in which the group's sockets called listen(), which is shard order here,
//! so every connection from one source lands on the same shard and every
//! source-keyed table is exact without cross-shard traffic.

use socket2::{Domain, Protocol, Socket, Type};
use std::io;
use std::net::{SocketAddr, TcpListener};
use std::os::fd::AsRawFd;

const BACKLOG: i32 = 4096;

/// Offset of the network header in classic BPF loads (`SKF_NET_OFF`).
const SKF_NET_OFF: i32 = -0x10_0000;
/// BPF_LD | BPF_W | BPF_ABS (the first two are 0).
const BPF_LD_W_ABS: u16 = 0x20;
const BPF_ALU_MOD_K: u16 = 0x04 | 0x90;
const BPF_ALU_XOR_X: u16 = 0x04 | 0xa0 | 0x08;
const BPF_ALU_AND_K: u16 = 0x04 | 0x50;
const BPF_MISC_TAX: u16 = 0x07;
const BPF_RET_A: u16 = 0x06 | 0x10;

/// BPF_LD | BPF_B | BPF_ABS and BPF_LD | BPF_H | BPF_ABS.
const BPF_LD_B_ABS: u16 = 0x30;
const BPF_LD_H_ABS: u16 = 0x28;
/// BPF_JMP | BPF_JSET | BPF_K.
const BPF_JSET_K: u16 = 0x45;

fn op(code: u16, k: u32) -> libc::sock_filter {
    libc::sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    }
}

/// The steering program for one group of `shards` sockets: by the whole
/// IPv4 address and the IPv6 /64, or with `prefix` by the IPv4 /24 and the
/// IPv6 /56 (the source-prefix budgets' partition).
pub fn steering_program(ipv6: bool, shards: u32, prefix: bool) -> Vec<libc::sock_filter> {
    let mut p = Vec::with_capacity(7);
    if ipv6 {
        // Words at +8 and +12 of the IPv6 header are the first 64 bits.
        p.push(op(BPF_LD_W_ABS, (SKF_NET_OFF + 8) as u32));
        p.push(op(BPF_MISC_TAX, 0));
        p.push(op(BPF_LD_W_ABS, (SKF_NET_OFF + 12) as u32));
        if prefix {
            p.push(op(BPF_ALU_AND_K, 0xffff_ff00));
        }
        p.push(op(BPF_ALU_XOR_X, 0));
    } else {
        p.push(op(BPF_LD_W_ABS, (SKF_NET_OFF + 12) as u32));
        if prefix {
            p.push(op(BPF_ALU_AND_K, 0xffff_ff00));
        }
    }
    p.push(op(BPF_ALU_MOD_K, shards));
    p.push(op(BPF_RET_A, 0));
    p
}

/// The steering program of an HTTP/3 listener's UDP group. A reuseport
/// program reads the datagram from its UDP payload: a QUIC packet with a
/// short header (the first bit clear) goes to the shard its destination
/// connection ID names (the two bytes after the first, modulo the shard
/// count: `gapura_http::server::h3::cid`), whatever address it comes
/// from; a long header (a new connection's Initial, or its handshake) is
/// steered by source as [`steering_program`] does.
pub fn quic_steering_program(ipv6: bool, shards: u32, prefix: bool) -> Vec<libc::sock_filter> {
    let mut p = vec![
        op(BPF_LD_B_ABS, 0),
        // Long header: jump over the next three to the source program.
        libc::sock_filter {
            code: BPF_JSET_K,
            jt: 3,
            jf: 0,
            k: 0x80,
        },
        op(BPF_LD_H_ABS, 1),
        op(BPF_ALU_MOD_K, shards),
        op(BPF_RET_A, 0),
    ];
    p.extend(steering_program(ipv6, shards, prefix));
    p
}

fn attach_steering(sock: &Socket, ipv6: bool, shards: u32, prefix: bool) -> io::Result<()> {
    let prog = steering_program(ipv6, shards, prefix);
    attach_program(sock, &prog)
}

fn attach_program(sock: &Socket, prog: &[libc::sock_filter]) -> io::Result<()> {
    let fprog = libc::sock_fprog {
        len: prog.len() as u16,
        filter: prog.as_ptr() as *mut libc::sock_filter,
    };
    // SAFETY: fprog points at `prog`, which outlives the call; the kernel copies it.
    let rc = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_ATTACH_REUSEPORT_CBPF,
            &fprog as *const libc::sock_fprog as *const libc::c_void,
            std::mem::size_of::<libc::sock_fprog>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Refuses an address another process already listens on. SO_REUSEPORT
/// would otherwise let a stale process share the port silently: a plain
/// bind (SO_REUSEADDR only, so TIME_WAIT does not count) must succeed.
pub fn check_port_free(addr: SocketAddr) -> io::Result<()> {
    check_free(addr, Type::STREAM, Protocol::TCP, "")
}

/// Binds `addr` plainly and lets it go: an error when another socket holds
/// it. `what` prefixes the address in the message.
fn check_free(addr: SocketAddr, ty: Type, proto: Protocol, what: &str) -> io::Result<()> {
    if addr.port() == 0 {
        return Ok(());
    }
    let sock = Socket::new(Domain::for_address(addr), ty, Some(proto))?;
    if ty == Type::STREAM {
        sock.set_reuse_address(true)?;
    }
    if addr.is_ipv6() {
        sock.set_only_v6(true)?;
    }
    sock.bind(&addr.into()).map_err(|e| {
        if e.kind() == io::ErrorKind::AddrInUse {
            io::Error::new(
                io::ErrorKind::AddrInUse,
                format!("{what}{addr} is already in use by another process; refusing to share it"),
            )
        } else {
            io::Error::new(e.kind(), format!("{what}{addr}: {e}"))
        }
    })
}

/// Attaches the steering program to a group through its first socket.
fn steer_group(
    first: Option<&Socket>,
    bound: SocketAddr,
    shards: usize,
    steer: Steer,
) -> io::Result<()> {
    if steer == Steer::Kernel || shards < 2 {
        return Ok(());
    }
    let Some(sock) = first else { return Ok(()) };
    attach_steering(sock, bound.is_ipv6(), shards as u32, steer == Steer::Prefix)
        .map_err(|e| io::Error::new(e.kind(), format!("steering on {bound}: {e}")))
}

/// One address's group: socket `i` belongs to shard `i`.
pub struct Group {
    /// The address as the profile wrote it (port 0 stays 0).
    pub requested: SocketAddr,
    /// The bound address.
    pub addr: SocketAddr,
    pub sockets: Vec<TcpListener>,
}

/// How a group steers: not at all (the kernel's hash), by source, by prefix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Steer {
    Kernel,
    Source,
    Prefix,
}

/// Binds `shards` reuseport sockets on `addr` (a port of 0 is chosen by the
/// first bind and shared by the rest), listening in shard order, with
/// steering attached when asked.
pub fn bind_group(addr: SocketAddr, shards: usize, steer: Steer) -> io::Result<Group> {
    let mut bound = addr;
    let mut sockets = Vec::with_capacity(shards);
    let mut first: Option<Socket> = None;
    for _ in 0..shards {
        let sock = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
        sock.set_reuse_address(true)?;
        sock.set_reuse_port(true)?;
        if addr.is_ipv6() {
            sock.set_only_v6(true)?;
        }
        sock.bind(&bound.into())
            .map_err(|e| io::Error::new(e.kind(), format!("bind {bound}: {e}")))?;
        sock.listen(BACKLOG)?;
        if bound.port() == 0 {
            if let Some(local) = sock.local_addr()?.as_socket() {
                bound.set_port(local.port());
            }
        }
        if first.is_none() {
            first = Some(sock.try_clone()?);
        }
        sockets.push(TcpListener::from(sock));
    }
    steer_group(first.as_ref(), bound, shards, steer)?;
    Ok(Group {
        requested: addr,
        addr: bound,
        sockets,
    })
}

/// Refuses a UDP address another process holds (a plain bind, without
/// SO_REUSEPORT, must succeed).
pub fn check_udp_port_free(addr: SocketAddr) -> io::Result<()> {
    check_free(addr, Type::DGRAM, Protocol::UDP, "udp ")
}

/// Binds `shards` reuseport UDP sockets on `addr` in shard order (a port
/// of 0 is chosen by the first bind), steered like the TCP groups: the
/// datagrams of one source reach one shard, whose tables are then exact.
pub fn bind_udp_group(
    addr: SocketAddr,
    shards: usize,
    steer: Steer,
) -> io::Result<(SocketAddr, Vec<std::net::UdpSocket>)> {
    let (bound, sockets, first) = bind_udp_sockets(addr, shards)?;
    steer_group(first.as_ref(), bound, shards, steer)?;
    Ok((bound, sockets))
}

/// Binds an HTTP/3 listener's UDP group on `addr` (its TCP group's
/// address), steered by [`quic_steering_program`]: a connection's packets
/// reach its shard even when its address changes. With `Steer::Kernel`
/// (or one shard) nothing is attached.
pub fn bind_quic_group(
    addr: SocketAddr,
    shards: usize,
    steer: Steer,
) -> io::Result<(SocketAddr, Vec<std::net::UdpSocket>)> {
    let (bound, sockets, first) = bind_udp_sockets(addr, shards)?;
    if let (Some(sock), true) = (first.as_ref(), steer != Steer::Kernel && shards > 1) {
        let prog = quic_steering_program(bound.is_ipv6(), shards as u32, steer == Steer::Prefix);
        attach_program(sock, &prog)
            .map_err(|e| io::Error::new(e.kind(), format!("steering on udp {bound}: {e}")))?;
    }
    Ok((bound, sockets))
}

/// A UDP group of `shards` reuseport sockets in shard order, and its first
/// socket (where a steering program attaches).
fn bind_udp_sockets(
    addr: SocketAddr,
    shards: usize,
) -> io::Result<(SocketAddr, Vec<std::net::UdpSocket>, Option<Socket>)> {
    let mut bound = addr;
    let mut sockets = Vec::with_capacity(shards);
    let mut first: Option<Socket> = None;
    for _ in 0..shards {
        let sock = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
        sock.set_reuse_port(true)?;
        if addr.is_ipv6() {
            sock.set_only_v6(true)?;
        }
        sock.bind(&bound.into())
            .map_err(|e| io::Error::new(e.kind(), format!("bind udp {bound}: {e}")))?;
        if bound.port() == 0 {
            if let Some(local) = sock.local_addr()?.as_socket() {
                bound.set_port(local.port());
            }
        }
        if first.is_none() {
            first = Some(sock.try_clone()?);
        }
        sockets.push(std::net::UdpSocket::from(sock));
    }
    Ok((bound, sockets, first))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::TcpStream;

    #[test]
    fn doctor_checks_against_the_backlog_and_ring_the_runtime_uses() {
        assert_eq!(BACKLOG as u32, gapura_doctor::LISTEN_BACKLOG);
        assert_eq!(crate::shard::RING_ENTRIES, gapura_doctor::RING_ENTRIES);
    }

    #[test]
    fn steered_udp_group_sends_one_source_to_one_socket() {
        let (addr, socks) =
            bind_udp_group("127.0.0.1:0".parse().unwrap(), 2, Steer::Source).unwrap();
        for s in &socks {
            s.set_nonblocking(true).unwrap();
        }
        for (src, want) in [("127.0.0.2", 0usize), ("127.0.0.3", 1usize)] {
            let c = std::net::UdpSocket::bind(format!("{src}:0")).unwrap();
            for _ in 0..4 {
                c.send_to(b"x", addr).unwrap();
            }
            // Wait for each datagram on the steered socket (a generous
            // ceiling, not a pause), then find none on the other.
            let mut b = [0u8; 4];
            socks[want].set_nonblocking(false).unwrap();
            socks[want]
                .set_read_timeout(Some(std::time::Duration::from_secs(10)))
                .unwrap();
            for _ in 0..4 {
                socks[want].recv_from(&mut b).expect("steered datagram");
            }
            socks[want].set_nonblocking(true).unwrap();
            assert!(socks[1 - want].recv_from(&mut b).is_err());
        }
        assert!(check_udp_port_free(addr).is_err());
    }

    #[test]
    fn quic_short_headers_follow_their_connection_id_and_long_ones_their_source() {
        let (addr, socks) =
            bind_quic_group("127.0.0.1:0".parse().unwrap(), 2, Steer::Source).unwrap();
        for s in &socks {
            s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
                .unwrap();
        }
        // 127.0.0.2 is source-steered to shard 0, 127.0.0.3 to shard 1.
        let short = |shard: u8| [0x40, 0x8e, shard + 0x10 * 2, 1, 2, 3, 4, 5, 6, 7];
        let long = [0xc0u8, 0, 0, 0, 1, 8, 9, 9, 9, 9];
        for (src, packet, want) in [
            ("127.0.0.2", &short(1)[..], 1usize),
            ("127.0.0.3", &short(0)[..], 0),
            ("127.0.0.2", &long[..], 0),
            ("127.0.0.3", &long[..], 1),
        ] {
            let c = std::net::UdpSocket::bind(format!("{src}:0")).unwrap();
            c.send_to(packet, addr).unwrap();
            let mut b = [0u8; 32];
            let (n, from) = socks[want].recv_from(&mut b).expect("steered datagram");
            assert_eq!((&b[..n], from), (packet, c.local_addr().unwrap()), "{src}");
        }
        for s in &socks {
            s.set_nonblocking(true).unwrap();
            assert!(s.recv_from(&mut [0u8; 32]).is_err(), "nothing else arrived");
        }
    }

    #[test]
    fn steering_program_shapes() {
        let v4 = steering_program(false, 4, false);
        assert_eq!(v4.len(), 3);
        assert_eq!(v4[0].k, (SKF_NET_OFF + 12) as u32);
        assert_eq!(v4[1].k, 4);
        assert_eq!(steering_program(true, 2, false).len(), 6);
        let v4 = steering_program(false, 4, true);
        assert_eq!((v4[1].code, v4[1].k), (BPF_ALU_AND_K, 0xffff_ff00));
        assert_eq!(steering_program(true, 2, true).len(), 7);
    }

    #[test]
    fn a_port_held_by_another_listener_is_refused() {
        let other = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = other.local_addr().unwrap();
        let err = check_port_free(addr).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::AddrInUse);
        drop(other);
        check_port_free(addr).unwrap();
    }

    #[test]
    fn steered_group_sends_one_source_to_one_socket() {
        let group = bind_group("127.0.0.1:0".parse().unwrap(), 2, Steer::Source).unwrap();
        for s in &group.sockets {
            s.set_nonblocking(true).unwrap();
        }
        // 127.0.0.2 is even: the program picks socket 0; 127.0.0.3 socket 1.
        for (src, want) in [("127.0.0.2", 0usize), ("127.0.0.3", 1usize)] {
            for _ in 0..4 {
                let sock = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
                let local: SocketAddr = format!("{src}:0").parse().unwrap();
                sock.bind(&local.into()).unwrap();
                sock.connect(&group.addr.into()).unwrap();
                let mut c: TcpStream = sock.into();
                c.write_all(b"x").unwrap();
                std::thread::sleep(std::time::Duration::from_millis(20));
                let (mut accepted, _) = group.sockets[want].accept().expect("steered socket");
                let mut b = [0u8; 1];
                accepted.read_exact(&mut b).unwrap();
                assert!(group.sockets[1 - want].accept().is_err());
            }
        }
    }

    #[test]
    fn prefix_steering_sends_a_whole_24_to_one_socket() {
        let group = bind_group("127.0.0.1:0".parse().unwrap(), 2, Steer::Prefix).unwrap();
        for s in &group.sockets {
            s.set_nonblocking(true).unwrap();
        }
        let mut seen = Vec::new();
        for src in ["127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5"] {
            let sock = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
            let local: SocketAddr = format!("{src}:0").parse().unwrap();
            sock.bind(&local.into()).unwrap();
            sock.connect(&group.addr.into()).unwrap();
            let mut c: TcpStream = sock.into();
            c.write_all(b"x").unwrap();
            std::thread::sleep(std::time::Duration::from_millis(20));
            let on = (0..2)
                .find(|&i| group.sockets[i].accept().is_ok())
                .expect("accepted on one socket");
            seen.push(on);
        }
        // 127.0.0.0/24 is one prefix: every source lands on the same socket.
        assert!(seen.iter().all(|&s| s == seen[0]), "{seen:?}");
    }
}
