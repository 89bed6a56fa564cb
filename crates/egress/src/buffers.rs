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

/// How long a proxy socket may hold data its peer does not take (no
/// acknowledgement, or a window kept shut) before the kernel drops the
/// connection: a tunnel the proxy has closed with data still queued
/// toward a sandbox that stopped reading would otherwise keep its buffer,
/// uncounted by `max_open`, for as long as the peer answers probes.
pub const STALL_TIMEOUT_MS: u32 = 30_000;

fn set_int(s: &TcpStream, level: libc::c_int, opt: libc::c_int, value: libc::c_int) -> bool {
    // SAFETY: setsockopt on a socket we own, with an int option.
    unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            level,
            opt,
            (&value as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        ) == 0
    }
}

/// Fixes `s`'s send and receive buffers at [`SOCKET_BUFFER`], its
/// stall timeout at [`STALL_TIMEOUT_MS`], and sets `TCP_NODELAY` (best effort: a socket the
/// kernel refuses this keeps its autotuning). The size is forced where
/// the proxy may (`CAP_NET_ADMIN`, a root host), since the plain options
/// are clamped to `net.core.rmem_max`/`wmem_max` (about 208 KiB by
/// default, which would slow every download).
pub(crate) fn fix(s: &TcpStream) {
    // Linux doubles what it is given (for its own bookkeeping).
    let half = (SOCKET_BUFFER / 2) as libc::c_int;
    // The forced options and the stall timeout are Linux's; elsewhere the
    // plain sizes only.
    #[cfg(target_os = "linux")]
    let options = [
        (Some(libc::SO_RCVBUFFORCE), libc::SO_RCVBUF),
        (Some(libc::SO_SNDBUFFORCE), libc::SO_SNDBUF),
    ];
    #[cfg(not(target_os = "linux"))]
    let options = [(None, libc::SO_RCVBUF), (None, libc::SO_SNDBUF)];
    for (forced, plain) in options {
        if !forced.is_some_and(|f| set_int(s, libc::SOL_SOCKET, f, half)) {
            set_int(s, libc::SOL_SOCKET, plain, half);
        }
    }
    #[cfg(target_os = "linux")]
    set_int(
        s,
        libc::IPPROTO_TCP,
        libc::TCP_USER_TIMEOUT,
        STALL_TIMEOUT_MS as libc::c_int,
    );
    // A relay sends what it has as it has it: Nagle's wait for an ACK the
    // peer delays (40 ms on Linux) would be paid on every small answer
    // whose pieces arrive apart (a head, then its body).
    let _ = s.set_nodelay(true);
}
