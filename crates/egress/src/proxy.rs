//! The egress proxy: serves the connections a sandbox makes to its one way
//! out, outside the sandbox, with the allowlist and the address guard.
//!
//! Threads, not the async runtime: the proxy must keep serving whatever
//! the embedder's runtime does (a `current_thread` runtime blocked in a
//! `block_on`, say), and its load is a few connections per sandbox. One
//! thread accepts; each connection gets a thread that reads the request
//! head, decides, connects and then relays both directions with `poll`.
//! Every wait also watches one socket, which dropping the
//! [`EgressProxy`] signals: every thread then ends, and the sandbox's
//! connections close.

use std::io::{self, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::intercept::{GuardedStream, Intercept, Intercepted, Refusals};
use super::relay::relay;
use super::request::{parse_request, read_head};
use super::{Access, Allowlist, HostPattern, Refusal, TargetHost};

/// How much the proxy lets one sandbox do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EgressLimits {
    /// Connections open at once; more are refused (`503`).
    pub max_open: usize,
    /// Connections over the sandbox's life, refused ones included.
    pub max_connections: u64,
    /// Bytes relayed, both directions, over the sandbox's life; the
    /// connection that passes it is closed, and later ones refused.
    pub max_bytes: u64,
    /// How long a program may take to send its request head.
    pub head_timeout: Duration,
    /// How long the proxy waits for the target to accept.
    pub connect_timeout: Duration,
}

impl Default for EgressLimits {
    /// 32 open, 1024 in all, 1 GiB, 30 s for the head, 10 s to connect.
    fn default() -> Self {
        EgressLimits {
            max_open: 32,
            max_connections: 1024,
            max_bytes: 1 << 30,
            head_timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(10),
        }
    }
}

/// What a proxy did so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EgressStats {
    /// Connections that reached their target.
    pub allowed: u64,
    /// Connections refused: not on the allowlist, a non-public address, a
    /// malformed request or a limit.
    pub refused: u64,
    /// Allowed connections whose target could not be reached.
    pub failed: u64,
    /// Bytes relayed, both directions.
    pub bytes: u64,
}

/// A request the proxy refused, as an observer ([`EgressProxy::serve_observed`])
/// sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefusedRequest {
    /// `host:port` the program asked for, when its request named one.
    pub target: Option<String>,
    /// The allowlist entry that would allow this very request
    /// (`host:port`, or `http://host:port` for plain HTTP), when one would.
    pub allow_with: Option<String>,
    /// Why it was refused, as the program's `403`/`400`/`503` body says.
    pub reason: String,
    /// The request rule that would allow this very request, when a rule
    /// refused it (`GET https://host/path`).
    pub allow_rule: Option<String>,
}

/// Called for each refused request, on the proxy's connection thread.
pub type RefusalObserver = Arc<dyn Fn(&RefusedRequest) + Send + Sync>;

pub(super) struct Shared {
    allow: Allowlist,
    pub(super) observer: Option<RefusalObserver>,
    intercept: Option<Arc<dyn Intercept>>,
    pub(super) limits: EgressLimits,
    /// Readable once the proxy is dropped (see `stop_tx`).
    pub(super) stop: OwnedFd,
    stop_tx: OwnedFd,
    allowed: AtomicU64,
    pub(super) refused: AtomicU64,
    failed: AtomicU64,
    pub(super) bytes: AtomicU64,
    total: AtomicU64,
    open: AtomicUsize,
}

/// A running egress proxy for one sandbox. Dropping it stops it: the
/// listener and every connection are closed, and a summary line is logged
/// (`tracing`, info level, target `cordon::egress`).
#[derive(Debug)]
pub struct EgressProxy {
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("allow", &self.allow)
            .finish_non_exhaustive()
    }
}

impl EgressProxy {
    /// Serves the connections accepted on `listener` (a listening TCP
    /// socket, typically made inside the sandbox's network by the backend
    /// and passed out) with the allowlist `allow`, an operator's list
    /// ([`Allowlist::for_process`]): targets, and the private ranges its
    /// names may resolve into.
    pub fn serve(
        listener: OwnedFd,
        allow: Vec<HostPattern>,
        limits: EgressLimits,
    ) -> io::Result<EgressProxy> {
        EgressProxy::serve_observed(listener, allow, limits, None)
    }

    /// [`serve`](Self::serve), telling `observer` of every refused
    /// request (what a sandbox's explanation lists).
    pub fn serve_observed(
        listener: OwnedFd,
        allow: Vec<HostPattern>,
        limits: EgressLimits,
        observer: Option<RefusalObserver>,
    ) -> io::Result<EgressProxy> {
        EgressProxy::serve_intercepted(listener, allow, limits, observer, None)
    }

    /// [`serve_observed`](Self::serve_observed), handing the `CONNECT`s
    /// `intercept` terminates to it (after the allowlist and the address
    /// guard, as any other) and showing it every plain-HTTP head.
    pub fn serve_intercepted(
        listener: OwnedFd,
        allow: Vec<HostPattern>,
        limits: EgressLimits,
        observer: Option<RefusalObserver>,
        intercept: Option<Arc<dyn Intercept>>,
    ) -> io::Result<EgressProxy> {
        let listener = TcpListener::from(listener);
        listener.set_nonblocking(true)?;
        // Dropping the proxy writes one byte to `stop_tx`; nobody reads it,
        // so `stop` stays readable and every wait sees it.
        let (stop, stop_tx) = std::os::unix::net::UnixStream::pair()?;
        let shared = Arc::new(Shared {
            allow: Allowlist::for_process(allow),
            observer,
            intercept,
            limits,
            stop: OwnedFd::from(stop),
            stop_tx: OwnedFd::from(stop_tx),
            allowed: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            total: AtomicU64::new(0),
            open: AtomicUsize::new(0),
        });
        let s = Arc::clone(&shared);
        let accept = std::thread::Builder::new()
            .name("cordon-egress".into())
            .spawn(move || accept_loop(&s, &listener))?;
        Ok(EgressProxy {
            shared,
            accept: Some(accept),
        })
    }

    /// What the proxy did so far.
    pub fn stats(&self) -> EgressStats {
        let s = &self.shared;
        EgressStats {
            allowed: s.allowed.load(Ordering::Relaxed),
            refused: s.refused.load(Ordering::Relaxed),
            failed: s.failed.load(Ordering::Relaxed),
            bytes: s.bytes.load(Ordering::Relaxed),
        }
    }
}

impl Drop for EgressProxy {
    fn drop(&mut self) {
        // SAFETY: a one-byte write to our own socket.
        unsafe { libc::write(self.shared.stop_tx.as_raw_fd(), b"x".as_ptr().cast(), 1) };
        if let Some(t) = self.accept.take() {
            let _ = t.join();
        }
        let s = self.stats();
        tracing::info!(
            target: "cordon::egress",
            "egress: {} connection(s) allowed, {} refused, {} failed, {} bytes relayed",
            s.allowed,
            s.refused,
            s.failed,
            s.bytes
        );
    }
}

/// Waits for `fd` to be ready for `events`, or the stop signal, or the
/// deadline. `Ok(true)`: ready; `Ok(false)`: stopped or timed out.
pub(super) fn wait(
    fd: RawFd,
    events: libc::c_short,
    stop: RawFd,
    deadline: Option<Instant>,
) -> io::Result<bool> {
    loop {
        let timeout = match deadline {
            None => -1,
            Some(d) => {
                let left = d.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Ok(false);
                }
                left.as_millis().clamp(1, i32::MAX as u128) as i32
            }
        };
        let mut fds = [
            libc::pollfd {
                fd,
                events,
                revents: 0,
            },
            libc::pollfd {
                fd: stop,
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // SAFETY: poll on two pollfds we own.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), 2, timeout) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if fds[1].revents != 0 {
            return Ok(false);
        }
        if fds[0].revents != 0 {
            return Ok(true);
        }
    }
}

fn accept_loop(shared: &Arc<Shared>, listener: &TcpListener) {
    let stop = shared.stop.as_raw_fd();
    while let Ok(true) = wait(listener.as_raw_fd(), libc::POLLIN, stop, None) {
        let client = match listener.accept() {
            Ok((c, _)) => c,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) => {
                // Out of fds, say: back off rather than spin.
                tracing::warn!(target: "cordon::egress", error = %e, "egress: accept failed");
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
        };
        let total = shared.total.fetch_add(1, Ordering::Relaxed) + 1;
        let open = shared.open.fetch_add(1, Ordering::Relaxed) + 1;
        if total > shared.limits.max_connections {
            // The last one answered: the listener closes, and the
            // sandbox's later connects are refused by its own kernel.
            shared.open.fetch_sub(1, Ordering::Relaxed);
            let why = format!(
                "the sandbox made more than {} connections; no more are accepted",
                shared.limits.max_connections
            );
            refuse(shared, client, 503, "Service Unavailable", &Refusal(why));
            return;
        }
        let over = if open > shared.limits.max_open {
            Some(format!(
                "the sandbox has more than {} connections open",
                shared.limits.max_open
            ))
        } else if shared.bytes.load(Ordering::Relaxed) >= shared.limits.max_bytes {
            Some(format!(
                "the sandbox relayed its {} bytes",
                shared.limits.max_bytes
            ))
        } else {
            None
        };
        if let Some(why) = over {
            shared.open.fetch_sub(1, Ordering::Relaxed);
            refuse(shared, client, 503, "Service Unavailable", &Refusal(why));
            continue;
        }
        super::buffers::fix(&client);
        let s = Arc::clone(shared);
        let spawned = std::thread::Builder::new()
            .name("cordon-egress-conn".into())
            .spawn(move || {
                serve_connection(&s, client);
                s.open.fetch_sub(1, Ordering::Relaxed);
            });
        if let Err(e) = spawned {
            shared.open.fetch_sub(1, Ordering::Relaxed);
            shared.refused.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(target: "cordon::egress", error = %e, "egress: no thread for a connection");
        }
    }
}

/// Answers `client` with an error status and the reason, and counts it.
fn refuse(shared: &Shared, client: TcpStream, code: u16, reason: &str, why: &Refusal) {
    refuse_target(shared, client, (code, reason), why, None, None);
}

/// [`refuse`], for a request that named `target`; `allow_with` the entry
/// that would allow it.
fn refuse_target(
    shared: &Shared,
    client: TcpStream,
    (code, reason): (u16, &str),
    why: &Refusal,
    target: Option<String>,
    allow_with: Option<String>,
) {
    let request = RefusedRequest {
        target,
        allow_with,
        reason: why.0.clone(),
        allow_rule: None,
    };
    refuse_request(shared, client, (code, reason), request);
}

/// [`refuse_target`], for a refusal already put together.
fn refuse_request(
    shared: &Shared,
    mut client: TcpStream,
    (code, reason): (u16, &str),
    request: RefusedRequest,
) {
    shared.refused.fetch_add(1, Ordering::Relaxed);
    if let Some(observe) = &shared.observer {
        observe(&request);
    }
    let why = &request.reason;
    tracing::info!(target: "cordon::egress", code, reason = %why, "egress: refused");
    let body = format!("cordon egress proxy: {why}\n");
    let _ = client.set_nonblocking(false);
    let _ = client.set_write_timeout(Some(Duration::from_secs(2)));
    // One write: a client reading the status line gets it whole.
    let answer = format!(
        "HTTP/1.1 {code} {reason}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = client.write_all(answer.as_bytes());
}

/// How many of a name's addresses the proxy tries.
const MAX_ADDRESSES: usize = 8;

/// Connects to the first of `addrs` (at most [`MAX_ADDRESSES`]) that
/// accepts, within the connect timeout for all of them together, and not
/// after the proxy is stopped: a name with many silent addresses must not
/// keep a thread (and the sandbox's socket) past the sandbox's life.
fn connect_any(shared: &Shared, addrs: &[SocketAddr]) -> Option<TcpStream> {
    let deadline = Instant::now() + shared.limits.connect_timeout;
    for a in addrs.iter().take(MAX_ADDRESSES) {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || stop_signalled(shared) {
            return None;
        }
        if let Ok(s) = TcpStream::connect_timeout(a, left) {
            super::buffers::fix(&s);
            return Some(s);
        }
    }
    None
}

/// Whether the proxy was dropped (its stop socket is readable).
fn stop_signalled(shared: &Shared) -> bool {
    let mut p = libc::pollfd {
        fd: shared.stop.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: poll on one pollfd we own, without waiting.
    unsafe { libc::poll(&mut p, 1, 0) > 0 }
}

fn serve_connection(shared: &Arc<Shared>, client: TcpStream) {
    let stop = shared.stop.as_raw_fd();
    let (head, rest) = match read_head(&client, stop, shared.limits.head_timeout) {
        Ok(Some(h)) => h,
        Ok(None) => return,
        Err(why) => return refuse(shared, client, 400, "Bad Request", &why),
    };
    let req = match parse_request(&head) {
        Ok(r) => r,
        Err(why) => return refuse(shared, client, 400, "Bad Request", &why),
    };
    let access = if req.connect {
        Access::Tunnel
    } else {
        Access::Http
    };
    let target = format!("{}:{}", req.host, req.port);
    let pattern = match shared.allow.match_target(&req.host, req.port, access) {
        Ok(p) => p,
        Err(why) => {
            let allow_with = match access {
                Access::Http => format!("http://{target}"),
                Access::Https | Access::Tunnel => target.clone(),
            };
            let forbidden = (403, "Forbidden");
            return refuse_target(
                shared,
                client,
                forbidden,
                &why,
                Some(target),
                Some(allow_with),
            );
        }
    };
    let addrs: Vec<SocketAddr> = match &req.host {
        TargetHost::Ip(ip) => vec![SocketAddr::new(*ip, req.port)],
        TargetHost::Name(n) => match (n.as_str(), req.port).to_socket_addrs() {
            Ok(a) => a.collect(),
            Err(e) => {
                let why = Refusal(format!("{} does not resolve: {e}", req.host));
                return refuse(shared, client, 502, "Bad Gateway", &why);
            }
        },
    };
    if let Err(why) = shared
        .allow
        .check_addresses(Some(pattern), &req.host, &addrs)
    {
        return refuse_target(shared, client, (403, "Forbidden"), &why, Some(target), None);
    }
    let intercept = shared.intercept.clone();
    let mut body_limit = None;
    if let Some(i) = &intercept {
        let checked = if req.connect {
            if i.terminates(&req.host, req.port) {
                Ok(None)
            } else {
                i.check_tunnel(&req.host, req.port).map(|()| None)
            }
        } else {
            i.check_plain(&req.host, req.port, &req.upstream_head)
        };
        match checked {
            Ok(limit) => body_limit = limit,
            Err(r) => return refuse_request(shared, client, (403, "Forbidden"), r),
        }
    }
    let Some(upstream) = connect_any(shared, &addrs) else {
        shared.failed.fetch_add(1, Ordering::Relaxed);
        let why = Refusal(format!(
            "{}:{} did not accept a connection",
            req.host, req.port
        ));
        tracing::info!(target: "cordon::egress", reason = %why, "egress: target unreachable");
        let mut c = client;
        let _ = c.set_nonblocking(false);
        let _ = write!(
            c,
            "HTTP/1.1 502 Bad Gateway\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
        );
        return;
    };
    shared.allowed.fetch_add(1, Ordering::Relaxed);
    tracing::debug!(
        target: "cordon::egress",
        host = %req.host,
        port = req.port,
        connect = req.connect,
        "egress: allowed"
    );
    if let Some(i) = intercept.filter(|i| req.connect && i.terminates(&req.host, req.port)) {
        return hand_over(shared, &*i, client, upstream, req.host, req.port, rest);
    }
    let mut first_to_client: Vec<u8> = Vec::new();
    let mut first_to_upstream = req.upstream_head;
    if req.connect {
        first_to_client.extend_from_slice(b"HTTP/1.1 200 Connection established\r\n\r\n");
    }
    // A judged plain request: its head and at most its body go on.
    let up_limit = body_limit.map(|n| first_to_upstream.len() as u64 + n);
    first_to_upstream.extend_from_slice(&rest);
    relay(
        shared,
        client,
        upstream,
        first_to_upstream,
        first_to_client,
        up_limit,
    );
}

/// Gives a terminated `CONNECT` to the interceptor. Bytes the program
/// sent after its `CONNECT` head (a client hello that did not wait for
/// the `200`) are refused: a client that waits is all TLS needs, and a
/// stream the interceptor did not read from its start is not one it can
/// vouch for.
fn hand_over(
    shared: &Arc<Shared>,
    intercept: &dyn Intercept,
    mut client: TcpStream,
    upstream: TcpStream,
    host: TargetHost,
    port: u16,
    rest: Vec<u8>,
) {
    if !rest.is_empty() {
        let why = Refusal(format!(
            "bytes were sent to {host}:{port} before the proxy answered the CONNECT"
        ));
        return refuse_target(shared, client, (400, "Bad Request"), &why, None, None);
    }
    if client
        .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
        .is_err()
    {
        return;
    }
    let guarded = |s| GuardedStream::new(s, Arc::clone(shared));
    let (Ok(client), Ok(upstream)) = (guarded(client), guarded(upstream)) else {
        return;
    };
    intercept.serve(Intercepted {
        client,
        upstream,
        host,
        port,
        refusals: Refusals {
            shared: Arc::clone(shared),
        },
    });
}
