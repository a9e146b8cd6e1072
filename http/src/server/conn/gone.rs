//! Whether a client has gone away while its request waits on another
//! server (an upstream, a forward-auth provider, the verification line):
//! a connection it closed, or an HTTP/2 stream it reset. Reads nothing.

use crate::transport::Transport;
use std::os::fd::AsRawFd;

/// Whether the peer closed `fd` (EOF waiting), without consuming data.
pub(super) fn peer_closed(fd: i32) -> bool {
    let mut b = [0u8; 1];
    // SAFETY: a one-byte peek into a stack buffer on a socket we own.
    let n = unsafe {
        libc::recv(
            fd,
            b.as_mut_ptr() as *mut libc::c_void,
            1,
            libc::MSG_PEEK | libc::MSG_DONTWAIT,
        )
    };
    n == 0
}

/// Ends when the client has gone away: an HTTP/2 stream it reset, or a
/// connection it closed (bytes it pipelined end the watch: they wait in
/// the socket for the next request).
pub(super) async fn client_gone<S: Transport>(stream: &mut S) {
    if let Some(socket) = stream.socket() {
        if socket.readable(false).await.is_ok()
            && peer_closed(socket.as_raw_fd())
            && !stream.buffered()
        {
            return;
        }
        std::future::pending::<()>().await
    } else {
        stream.until_abandoned().await
    }
}
