//! The relay of an allowed connection: bytes both ways between the
//! program's socket and the target's, with `poll`, until both sides are
//! done, the proxy stops, a socket fails or a cap is passed.

use std::io;
use std::net::TcpStream;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::Ordering;

use super::proxy::Shared;

/// One direction of a relay: bytes read from one socket, not yet written
/// to the other.
struct Flow {
    buf: Vec<u8>,
    start: usize,
    eof: bool,
    shut: bool,
}

impl Flow {
    fn new(first: Vec<u8>) -> Flow {
        Flow {
            buf: first,
            start: 0,
            eof: false,
            shut: false,
        }
    }
    fn pending(&self) -> bool {
        self.start < self.buf.len()
    }
    fn done(&self) -> bool {
        self.eof && !self.pending()
    }
}

/// Copies both ways between `client` and `upstream` until both sides are
/// done, the proxy stops, a socket fails, the byte cap is passed or more
/// than `up_limit` bytes would go to the upstream.
pub(super) fn relay(
    shared: &Shared,
    client: TcpStream,
    upstream: TcpStream,
    to_up: Vec<u8>,
    to_client: Vec<u8>,
    up_limit: Option<u64>,
) {
    let mut up_total = to_up.len() as u64;
    if up_limit.is_some_and(|l| up_total > l) {
        tracing::info!(target: "cordon::egress", "egress: more than one judged request; closed");
        return;
    }
    if client.set_nonblocking(true).is_err() || upstream.set_nonblocking(true).is_err() {
        return;
    }
    let fds = [client.as_raw_fd(), upstream.as_raw_fd()];
    // flows[0]: client → upstream; flows[1]: upstream → client.
    let mut flows = [Flow::new(to_up), Flow::new(to_client)];
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        if flows.iter().all(Flow::done) {
            return;
        }
        let mut events = [0 as libc::c_short; 2];
        for (i, f) in flows.iter().enumerate() {
            if f.pending() {
                events[1 - i] |= libc::POLLOUT;
            } else if !f.eof {
                events[i] |= libc::POLLIN;
            }
        }
        let mut pfds = [
            pollfd(fds[0], events[0]),
            pollfd(fds[1], events[1]),
            pollfd(shared.stop.as_raw_fd(), libc::POLLIN),
        ];
        // SAFETY: poll on three pollfds we own.
        let n = unsafe { libc::poll(pfds.as_mut_ptr(), 3, -1) };
        if n < 0 {
            if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return;
        }
        if pfds[2].revents != 0 {
            return;
        }
        for i in 0..2 {
            let (src, dst) = (fds[i], fds[1 - i]);
            let f = &mut flows[i];
            if f.pending() && pfds[1 - i].revents != 0 {
                // SAFETY: send from our buffer on a socket we own.
                let w = unsafe {
                    libc::send(
                        dst,
                        f.buf[f.start..].as_ptr().cast(),
                        f.buf.len() - f.start,
                        SEND_FLAGS,
                    )
                };
                if w < 0 {
                    if io::Error::last_os_error().kind() != io::ErrorKind::WouldBlock {
                        return;
                    }
                } else {
                    f.start += w as usize;
                    if !f.pending() {
                        f.buf.clear();
                        f.start = 0;
                    }
                }
            } else if !f.pending() && !f.eof && pfds[i].revents != 0 {
                // SAFETY: recv into our buffer on a socket we own.
                let r = unsafe { libc::recv(src, chunk.as_mut_ptr().cast(), chunk.len(), 0) };
                if r < 0 {
                    if io::Error::last_os_error().kind() != io::ErrorKind::WouldBlock {
                        return;
                    }
                } else if r == 0 {
                    f.eof = true;
                } else {
                    let r = r as usize;
                    let before = shared.bytes.fetch_add(r as u64, Ordering::Relaxed);
                    if before + r as u64 > shared.limits.max_bytes {
                        tracing::info!(
                            target: "cordon::egress",
                            max_bytes = shared.limits.max_bytes,
                            "egress: byte cap reached; connection closed"
                        );
                        return;
                    }
                    if i == 0 {
                        up_total += r as u64;
                        if up_limit.is_some_and(|l| up_total > l) {
                            tracing::info!(
                                target: "cordon::egress",
                                "egress: bytes after a judged request; closed"
                            );
                            return;
                        }
                    }
                    f.buf.extend_from_slice(&chunk[..r]);
                }
            }
            if f.done() && !f.shut {
                // SAFETY: shutdown on a socket we own.
                unsafe { libc::shutdown(dst, libc::SHUT_WR) };
                f.shut = true;
            }
        }
    }
}

/// No `SIGPIPE` for a write to a closed peer (Linux; elsewhere the
/// embedding binary's disposition holds, which Rust sets to ignore).
#[cfg(target_os = "linux")]
pub(super) const SEND_FLAGS: libc::c_int = libc::MSG_NOSIGNAL;
#[cfg(not(target_os = "linux"))]
pub(super) const SEND_FLAGS: libc::c_int = 0;

fn pollfd(fd: RawFd, events: libc::c_short) -> libc::pollfd {
    // A socket we want nothing from is left out (fd -1), or its hang-up
    // would wake every poll while the other side cannot take data.
    libc::pollfd {
        fd: if events == 0 { -1 } else { fd },
        events,
        revents: 0,
    }
}
