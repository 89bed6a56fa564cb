//! The proxy's own socket buffers, fixed.
//!
//! TCP memory is one pool for the host (`net.ipv4.tcp_mem`). Left to the
//! kernel's autotuning, each of the proxy's sockets grows its buffers up
//! to `tcp_rmem`/`tcp_wmem`'s maximum (32 MiB of receive buffer on many
//! hosts) while it is read fast, and keeps them when the reading stops: a
//! sandbox that starts [`EgressLimits::max_open`](crate::EgressLimits)
//! large downloads, reads them fast and then stops would pin that much
//! per tunnel, on both of the proxy's sockets. A fixed size turns
//! autotuning off for that socket, so a tunnel holds at most
//! [`SOCKET_BUFFER`] per direction on each proxy socket, whatever the
//! sandbox does; what the sandbox's own socket holds is its network
//! namespace's `tcp_rmem`/`tcp_wmem`, or what `setsockopt` may raise it
//! to (`net.core.rmem_max`/`wmem_max`, doubled).

use std::net::TcpStream;
use std::os::fd::AsRawFd;

/// What each of the proxy's sockets may buffer per direction: enough
/// for 20 MB/s per tunnel at 100 ms of round trip.
pub const SOCKET_BUFFER: usize = 2 << 20;

/// Fixes `s`'s send and receive buffers at [`SOCKET_BUFFER`] (best
/// effort: a socket the kernel refuses this keeps its autotuning).
pub(crate) fn fix(s: &TcpStream) {
    // The kernel doubles what it is given (for its own bookkeeping).
    let half = (SOCKET_BUFFER / 2) as libc::c_int;
    for opt in [libc::SO_RCVBUF, libc::SO_SNDBUF] {
        // SAFETY: setsockopt on a socket we own, with an int option.
        unsafe {
            libc::setsockopt(
                s.as_raw_fd(),
                libc::SOL_SOCKET,
                opt,
                (&half as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            );
        }
    }
}
