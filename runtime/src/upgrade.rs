//! Graceful binary upgrade: a running Gapura hands its listening sockets to
//! a new process over a Unix socket, then drains and exits; no connection
//! is refused or dropped on the way.
//!
//! `gapura run --upgrade-socket PATH` serves hand-overs at PATH (a
//! SOCK_SEQPACKET socket, mode 0600). `gapura run --take-over PATH`
//! connects there, receives every shard's listening sockets and the admin
//! listener (one descriptor per message, SCM_RIGHTS), starts its shards on
//! them and, once every shard serves, says `READY`: the old process then
//! drains as on SIGTERM. The sockets are the same kernel sockets, so their
//! accept queues and steering program carry over: a connection waiting in
//! a queue is accepted by whichever process still accepts. Until `READY`
//! the old process serves as before; a new process that fails or goes away
//! changes nothing.
//!
//! The new profile must listen on the same addresses with the same shard
//! count (each shard's socket is handed to the same shard); otherwise the
//! new process refuses to start and the old one keeps serving. A process
//! with UDP relays refuses hand-overs (their sockets are not handed over).
//!
//! Messages: `TAKE` (new to old); `tcp REQUESTED BOUND SHARD` or
//! `admin REQUESTED BOUND`, each with its descriptor, then `END COUNT`, or
//! `REFUSE REASON` (old to new); `READY` (new to old).

use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The most one message holds (a descriptor's line is far shorter).
const MESSAGE_BYTES: usize = 512;
/// How long the old process waits for `READY` once it has handed over.
const READY_TIMEOUT: Duration = Duration::from_secs(120);

/// One socket offered for a hand-over.
struct Offer {
    line: String,
    fd: OwnedFd,
}

/// The old side: serves hand-overs at a path.
pub struct Handover {
    listener: OwnedFd,
    path: PathBuf,
    offers: Arc<Mutex<Vec<Offer>>>,
    refuse: Option<String>,
    /// Raised when a new process has taken over and is ready.
    pub taken: Arc<AtomicBool>,
    busy: Arc<AtomicBool>,
}

impl Handover {
    /// Binds `path` (replacing a stale socket nobody answers on; refusing
    /// one another process serves).
    pub fn bind(path: &Path) -> Result<Handover, String> {
        if path.exists() {
            if connect(path).is_ok() {
                return Err(format!(
                    "{}: another process serves hand-overs there",
                    path.display()
                ));
            }
            std::fs::remove_file(path)
                .map_err(|e| format!("{}: cannot remove the stale socket: {e}", path.display()))?;
        }
        let listener = seqpacket().map_err(|e| format!("upgrade socket: {e}"))?;
        let addr = unix_addr(path)?;
        // SAFETY: binding and listening on a socket we own with a valid
        // sockaddr_un; fchmod-like restriction by chmod after bind.
        let rc = unsafe {
            libc::bind(
                listener.as_raw_fd(),
                &addr.0 as *const libc::sockaddr_un as *const libc::sockaddr,
                addr.1,
            )
        };
        if rc != 0 {
            return Err(format!(
                "{}: {}",
                path.display(),
                io::Error::last_os_error()
            ));
        }
        std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o600))
            .map_err(|e| format!("{}: {e}", path.display()))?;
        // SAFETY: listen on our socket; non-blocking accepts below.
        if unsafe { libc::listen(listener.as_raw_fd(), 4) } != 0
            || unsafe { libc::fcntl(listener.as_raw_fd(), libc::F_SETFL, libc::O_NONBLOCK) } != 0
        {
            return Err(format!(
                "{}: {}",
                path.display(),
                io::Error::last_os_error()
            ));
        }
        Ok(Handover {
            listener,
            path: path.to_path_buf(),
            offers: Arc::new(Mutex::new(Vec::new())),
            refuse: None,
            taken: Arc::new(AtomicBool::new(false)),
            busy: Arc::new(AtomicBool::new(false)),
        })
    }

    /// Offers a shard's listening socket (a duplicate is kept).
    pub fn offer_tcp(
        &self,
        requested: SocketAddr,
        bound: SocketAddr,
        shard: usize,
        sock: &std::net::TcpListener,
    ) -> io::Result<()> {
        self.offer(format!("tcp {requested} {bound} {shard}"), sock)
    }

    /// Offers the admin listener.
    pub fn offer_admin(
        &self,
        requested: SocketAddr,
        sock: &std::net::TcpListener,
    ) -> io::Result<()> {
        self.offer(format!("admin {requested} {}", sock.local_addr()?), sock)
    }

    fn offer(&self, line: String, sock: &std::net::TcpListener) -> io::Result<()> {
        let fd = OwnedFd::from(sock.try_clone()?);
        if let Ok(mut offers) = self.offers.lock() {
            offers.push(Offer { line, fd });
        }
        Ok(())
    }

    /// Hand-overs are refused, saying why.
    pub fn refuse(&mut self, why: String) {
        self.refuse = Some(why);
    }

    /// Serves a new process that connected, on a thread of its own; the
    /// control loop calls this on every turn.
    pub fn poll(&self) {
        // SAFETY: a non-blocking accept on our listening socket.
        let fd = unsafe {
            libc::accept4(
                self.listener.as_raw_fd(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                libc::SOCK_CLOEXEC,
            )
        };
        if fd < 0 {
            return;
        }
        // SAFETY: accept4 returned a new descriptor we now own.
        let conn = unsafe { OwnedFd::from_raw_fd(fd) };
        if self.busy.swap(true, Ordering::AcqRel) {
            let _ = send(&conn, b"REFUSE another hand-over is under way", None);
            return;
        }
        let (offers, taken, busy) = (self.offers.clone(), self.taken.clone(), self.busy.clone());
        let refuse = self.refuse.clone();
        let spawned = std::thread::Builder::new()
            .name("gapura-handover".into())
            .spawn(move || {
                match serve(&conn, &offers, refuse) {
                    Ok(()) => {
                        crate::log!("upgrade: a new process took over; draining");
                        taken.store(true, Ordering::Release);
                    }
                    Err(e) => crate::log!("upgrade: hand-over abandoned ({e}); serving on"),
                }
                busy.store(false, Ordering::Release);
            });
        if spawned.is_err() {
            self.busy.store(false, Ordering::Release);
        }
    }

    /// Removes the socket's path at a plain stop (after a hand-over the path
    /// belongs to the new process).
    pub fn remove(&self) {
        if !self.taken.load(Ordering::Acquire) {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// One hand-over, old side: the request, the sockets, the wait for READY.
fn serve(conn: &OwnedFd, offers: &Mutex<Vec<Offer>>, refuse: Option<String>) -> Result<(), String> {
    set_timeout(conn, Some(Duration::from_secs(10)));
    let (ask, _) = recv(conn).map_err(|e| format!("no request: {e}"))?;
    if ask != "TAKE" {
        return Err(format!("unknown request {ask:?}"));
    }
    if let Some(why) = refuse {
        let _ = send(conn, format!("REFUSE {why}").as_bytes(), None);
        return Err(why);
    }
    let offers = offers.lock().map_err(|_| "offers poisoned".to_string())?;
    for o in offers.iter() {
        send(conn, o.line.as_bytes(), Some(o.fd.as_raw_fd())).map_err(|e| e.to_string())?;
    }
    send(conn, format!("END {}", offers.len()).as_bytes(), None).map_err(|e| e.to_string())?;
    drop(offers);
    set_timeout(conn, Some(READY_TIMEOUT));
    match recv(conn) {
        Ok((m, _)) if m == "READY" => Ok(()),
        Ok((m, _)) => Err(format!("the new process said {m:?}")),
        Err(e) => Err(format!("the new process did not become ready: {e}")),
    }
}

/// What a new process received.
pub struct Inherited {
    /// (requested address, shard, socket).
    pub tcp: Vec<(SocketAddr, usize, std::net::TcpListener)>,
    /// (requested address, socket).
    pub admin: Option<(SocketAddr, std::net::TcpListener)>,
    conn: OwnedFd,
}

impl Inherited {
    /// Takes the socket a shard listens on at `requested`.
    pub fn take_tcp(
        &mut self,
        requested: SocketAddr,
        shard: usize,
    ) -> Option<std::net::TcpListener> {
        let i = self
            .tcp
            .iter()
            .position(|(a, s, _)| *a == requested && *s == shard)?;
        Some(self.tcp.swap_remove(i).2)
    }

    /// Tells the old process this one serves: it drains and exits.
    pub fn ready(self) {
        if let Err(e) = send(&self.conn, b"READY", None) {
            crate::log!("upgrade: cannot tell the old process ({e}); stop it with SIGTERM");
        }
    }
}

/// The new side: asks the process serving at `path` for its sockets.
pub fn take_over(path: &Path) -> Result<Inherited, String> {
    let conn = connect(path).map_err(|e| format!("{}: {e}", path.display()))?;
    set_timeout(&conn, Some(Duration::from_secs(10)));
    send(&conn, b"TAKE", None).map_err(|e| e.to_string())?;
    let mut got = Inherited {
        tcp: Vec::new(),
        admin: None,
        conn,
    };
    loop {
        let (line, fd) = recv(&got.conn).map_err(|e| format!("hand-over: {e}"))?;
        let words: Vec<&str> = line.split(' ').collect();
        let sock = fd.map(std::net::TcpListener::from);
        match (words.as_slice(), sock) {
            (["tcp", requested, _bound, shard], Some(s)) => {
                let requested = requested.parse().map_err(|_| bad(&line))?;
                let shard = shard.parse().map_err(|_| bad(&line))?;
                got.tcp.push((requested, shard, s));
            }
            (["admin", requested, _bound], Some(s)) => {
                got.admin = Some((requested.parse().map_err(|_| bad(&line))?, s));
            }
            (["END", n], None) if n.parse() == Ok(got.tcp.len() + got.admin.iter().count()) => {
                return Ok(got)
            }
            _ if line.starts_with("REFUSE ") => {
                return Err(format!("the running process refuses: {}", &line[7..]))
            }
            _ => return Err(bad(&line)),
        }
    }
}

fn bad(line: &str) -> String {
    format!("hand-over: unexpected message {line:?}")
}

fn seqpacket() -> io::Result<OwnedFd> {
    // SAFETY: creating a socket; the descriptor is owned at once.
    let fd = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: socket returned a new descriptor.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn unix_addr(path: &Path) -> Result<(libc::sockaddr_un, libc::socklen_t), String> {
    use std::os::unix::ffi::OsStrExt;
    // SAFETY: sockaddr_un is plain data.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let bytes = path.as_os_str().as_bytes();
    if bytes.len() >= addr.sun_path.len() {
        return Err(format!(
            "{}: the path is too long for a socket",
            path.display()
        ));
    }
    for (d, s) in addr.sun_path.iter_mut().zip(bytes) {
        *d = *s as libc::c_char;
    }
    let len = std::mem::size_of::<libc::sa_family_t>() + bytes.len() + 1;
    Ok((addr, len as libc::socklen_t))
}

fn connect(path: &Path) -> io::Result<OwnedFd> {
    let sock = seqpacket()?;
    let addr = unix_addr(path).map_err(io::Error::other)?;
    // SAFETY: connecting our socket to a valid sockaddr_un.
    let rc = unsafe {
        libc::connect(
            sock.as_raw_fd(),
            &addr.0 as *const libc::sockaddr_un as *const libc::sockaddr,
            addr.1,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(sock)
}

fn set_timeout(fd: &OwnedFd, t: Option<Duration>) {
    let t = t.unwrap_or_default();
    let tv = libc::timeval {
        tv_sec: t.as_secs() as libc::time_t,
        tv_usec: t.subsec_micros() as libc::suseconds_t,
    };
    for opt in [libc::SO_RCVTIMEO, libc::SO_SNDTIMEO] {
        // SAFETY: setting a timeval option on our socket.
        unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                opt,
                &tv as *const libc::timeval as *const libc::c_void,
                std::mem::size_of::<libc::timeval>() as libc::socklen_t,
            );
        }
    }
}

/// Room for one descriptor's control message.
#[repr(C)]
union Control {
    header: libc::cmsghdr,
    bytes: [u8; 64],
}

/// Sends one message, with a descriptor when given.
fn send(conn: &OwnedFd, data: &[u8], fd: Option<RawFd>) -> io::Result<()> {
    let mut iov = libc::iovec {
        iov_base: data.as_ptr() as *mut libc::c_void,
        iov_len: data.len(),
    };
    // SAFETY: msghdr and the control buffer are plain data; the control
    // message is written inside the buffer CMSG_SPACE sized; sendmsg reads
    // only what the header points to.
    unsafe {
        let mut control: Control = std::mem::zeroed();
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        if let Some(fd) = fd {
            let space = libc::CMSG_SPACE(std::mem::size_of::<RawFd>() as u32) as usize;
            msg.msg_control = control.bytes.as_mut_ptr() as *mut libc::c_void;
            msg.msg_controllen = space;
            let cmsg = libc::CMSG_FIRSTHDR(&msg);
            (*cmsg).cmsg_level = libc::SOL_SOCKET;
            (*cmsg).cmsg_type = libc::SCM_RIGHTS;
            (*cmsg).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<RawFd>() as u32) as usize;
            std::ptr::write_unaligned(libc::CMSG_DATA(cmsg) as *mut RawFd, fd);
        }
        if libc::sendmsg(conn.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Receives one message and the descriptor it carries, if any.
fn recv(conn: &OwnedFd) -> io::Result<(String, Option<OwnedFd>)> {
    let mut buf = [0u8; MESSAGE_BYTES];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr() as *mut libc::c_void,
        iov_len: buf.len(),
    };
    // SAFETY: as in `send`; received descriptors are owned at once
    // (MSG_CMSG_CLOEXEC), and a message past the buffer is refused.
    unsafe {
        let mut control: Control = std::mem::zeroed();
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.bytes.as_mut_ptr() as *mut libc::c_void;
        msg.msg_controllen = std::mem::size_of::<Control>();
        let n = libc::recvmsg(conn.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC);
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        if n == 0 {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "closed"));
        }
        let mut fd = None;
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        if !cmsg.is_null()
            && (*cmsg).cmsg_level == libc::SOL_SOCKET
            && (*cmsg).cmsg_type == libc::SCM_RIGHTS
        {
            let raw = std::ptr::read_unaligned(libc::CMSG_DATA(cmsg) as *const RawFd);
            fd = Some(OwnedFd::from_raw_fd(raw));
        }
        if msg.msg_flags & (libc::MSG_TRUNC | libc::MSG_CTRUNC) != 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "message too long",
            ));
        }
        let text = String::from_utf8_lossy(&buf[..n as usize]).into_owned();
        Ok((text, fd))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sockets_pass_to_another_end_and_stay_the_same_socket() {
        let dir = std::env::temp_dir().join(format!("gapura-upgrade-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("u.sock");
        let old = Handover::bind(&path).unwrap();
        // A second server on the same path is refused while one answers.
        let second = Handover::bind(&path).err().expect("refused");
        assert!(second.contains("another process"), "{second}");
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let bound = l.local_addr().unwrap();
        let requested: SocketAddr = "127.0.0.1:0".parse().unwrap();
        old.offer_tcp(requested, bound, 0, &l).unwrap();
        old.offer_admin(requested, &l).unwrap();
        let taker =
            std::thread::spawn(move || take_over(&path).map(|mut g| (g.take_tcp(requested, 0), g)));
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !taker.is_finished() && std::time::Instant::now() < deadline {
            old.poll();
            std::thread::sleep(Duration::from_millis(5));
        }
        let (sock, got) = taker.join().unwrap().unwrap();
        let sock = sock.expect("shard 0's socket");
        assert_eq!(sock.local_addr().unwrap(), bound);
        assert!(got.admin.is_some());
        // A connection to the address waits in the one queue both hold.
        let _c = std::net::TcpStream::connect(bound).unwrap();
        drop(l);
        sock.set_nonblocking(false).unwrap();
        assert!(sock.accept().is_ok());
        got.ready();
        // The hand-over thread sees READY and raises the flag.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !old.taken.load(Ordering::Acquire) && std::time::Instant::now() < deadline {
            std::thread::yield_now();
        }
        assert!(old.taken.load(Ordering::Acquire));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
