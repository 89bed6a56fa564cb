//! The proxy's hook for a terminating interceptor (the credential broker,
//! `cordon-broker`): the `CONNECT`s it asks for are handed to it once the
//! allowlist and the address guard let them through, instead of being
//! tunnelled; plain-HTTP requests are shown to it before they are sent.
//!
//! The interceptor lives in another crate so TLS stays out of this one;
//! this module gives it the two sockets as [`GuardedStream`]s, which keep
//! the proxy's rules while it reads and writes them: the proxy's stop
//! ends every wait, a peer silent for the head timeout ends the
//! connection, and the bytes count toward the sandbox's byte cap.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use super::proxy::{wait, Shared};
use super::{RefusedRequest, TargetHost};

/// What terminates some of the sandbox's `CONNECT`s instead of
/// tunnelling them. Implemented by `cordon-broker`.
pub trait Intercept: Send + Sync + std::fmt::Debug {
    /// Whether a `CONNECT` to `host`:`port` (already allowed) is
    /// terminated and served by [`serve`](Self::serve).
    fn terminates(&self, host: &TargetHost, port: u16) -> bool;

    /// Checks a `CONNECT` (already allowed) that it does not terminate:
    /// `Err` refuses it (a `403`), e.g. a tunnel to another port of a host
    /// a request rule is for.
    fn check_tunnel(&self, host: &TargetHost, port: u16) -> Result<(), RefusedRequest>;

    /// Checks a plain-HTTP request (already allowed) before the proxy
    /// sends it, by the head the proxy will send (`head`: origin form,
    /// `Connection: close`). `Err` refuses it (a `403`); `Ok(Some(n))`: the
    /// request was judged on its head, and at most `n` more bytes (its
    /// body) may follow it to the target, the connection closed past them.
    fn check_plain(
        &self,
        host: &TargetHost,
        port: u16,
        head: &[u8],
    ) -> Result<Option<u64>, RefusedRequest>;

    /// Serves one terminated connection, to its end. The program has been
    /// told `200 Connection established`; `upstream` is connected to an
    /// address the guard checked.
    fn serve(&self, conn: Intercepted);
}

/// A terminated connection, as the proxy hands it over.
#[derive(Debug)]
pub struct Intercepted {
    /// The program's side.
    pub client: GuardedStream,
    /// The target's side.
    pub upstream: GuardedStream,
    /// The `CONNECT`'s host.
    pub host: TargetHost,
    /// The `CONNECT`'s port.
    pub port: u16,
    /// Where the interceptor reports what it refuses.
    pub refusals: Refusals,
}

/// Where an interceptor reports the requests it refused: counted with
/// the proxy's own, and shown to its observer (what `--explain` lists).
#[derive(Clone)]
pub struct Refusals {
    pub(super) shared: Arc<Shared>,
}

impl std::fmt::Debug for Refusals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Refusals").finish_non_exhaustive()
    }
}

impl Refusals {
    /// Counts a request the interceptor refused and tells the proxy's
    /// observer.
    pub fn refused(&self, request: RefusedRequest) {
        self.shared.refused.fetch_add(1, Ordering::Relaxed);
        tracing::info!(target: "cordon::egress", reason = %request.reason, "egress: refused inside TLS");
        if let Some(observe) = &self.shared.observer {
            observe(&request);
        }
    }
}

/// One of an intercepted connection's sockets, blocking, that keeps the
/// proxy's rules: the proxy's stop ends every wait, a peer silent for the
/// head timeout ends the connection, and the bytes read count toward the
/// sandbox's byte cap.
#[derive(Debug)]
pub struct GuardedStream {
    socket: TcpStream,
    shared: Arc<Shared>,
}

impl GuardedStream {
    pub(super) fn new(socket: TcpStream, shared: Arc<Shared>) -> io::Result<GuardedStream> {
        socket.set_nonblocking(true)?;
        Ok(GuardedStream { socket, shared })
    }

    /// Whether the next read would not block (bytes, or the peer's end,
    /// are waiting): how a pipelined request is seen.
    pub fn readable_now(&self) -> bool {
        let mut p = libc::pollfd {
            fd: self.socket.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: poll on one pollfd we own, without waiting.
        unsafe { libc::poll(&mut p, 1, 0) > 0 }
    }

    /// Closes the sending direction (the peer reads its end).
    pub fn shutdown_write(&self) {
        let _ = self.socket.shutdown(std::net::Shutdown::Write);
    }

    fn ready(&self, events: libc::c_short) -> io::Result<()> {
        let deadline = Instant::now() + self.shared.limits.head_timeout;
        match wait(
            self.socket.as_raw_fd(),
            events,
            self.shared.stop.as_raw_fd(),
            Some(deadline),
        )? {
            true => Ok(()),
            false => Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the proxy stopped, or the peer was silent too long",
            )),
        }
    }
}

impl Read for GuardedStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            self.ready(libc::POLLIN)?;
            match (&self.socket).read(buf) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Ok(n) => {
                    let before = self.shared.bytes.fetch_add(n as u64, Ordering::Relaxed);
                    if before + n as u64 > self.shared.limits.max_bytes {
                        return Err(io::Error::other(format!(
                            "the sandbox relayed its {} bytes",
                            self.shared.limits.max_bytes
                        )));
                    }
                    return Ok(n);
                }
                other => return other,
            }
        }
    }
}

impl Write for GuardedStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        loop {
            self.ready(libc::POLLOUT)?;
            // SAFETY: send from the caller's buffer on a socket we own.
            let w = unsafe {
                libc::send(
                    self.socket.as_raw_fd(),
                    buf.as_ptr().cast(),
                    buf.len(),
                    super::relay::SEND_FLAGS,
                )
            };
            if w >= 0 {
                return Ok(w as usize);
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::WouldBlock {
                return Err(e);
            }
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
