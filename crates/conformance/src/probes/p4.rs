//! P4 — no network egress: TCP connects to host listeners on 127.0.0.1 and
//! ::1, a UDP send to a host socket, raw, packet and ICMP socket creation,
//! the same TCP connect issued through io_uring (which bypasses seccomp
//! socket filters), and datagrams to host UNIX sockets sent without
//! `socket()` — from a `socketpair(AF_UNIX, SOCK_DGRAM)` end, with
//! `sendto` to a pathname or abstract address or after `connect` (think
//! `/dev/log`) — all fail, and the host confirms nothing arrived.
//!
//! Only a denial (`EPERM`/`EACCES`) counts as a pass: `ECONNREFUSED` or a
//! timeout means the packet reached the network stack, which proves
//! nothing. `io_uring_setup` failing with `ENOSYS` counts only where the
//! host saw `ENOSYS` too (the kernel has no io_uring, see `kernel.rs`).
//!
//! A `SOCK_SEQPACKET` pair is not tried: the kernel ignores the address of
//! a `sendto` on a connected seqpacket socket (`unix_seqpacket_sendmsg()`
//! in net/unix/af_unix.c clears `msg_namelen`), so it cannot reach a host
//! socket with or without a sandbox — a check there could not fail.

use std::collections::BTreeMap;
use std::net::{TcpListener, UdpSocket};

use cordon_core::{CheckResult, Evidence, ProbeId, ProbeStatus};

use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};

use crate::child::{errno, Reporter};
use crate::harness::{fail, pass, random_token, unreachable, ProbeContext};
use crate::probes::p1::unix_addr;
use crate::registry::{manifest, HostConditions, Manifest, Probe, ProbeArgs};

/// P4 in the registry (`probes/mod.rs`).
pub(crate) struct P4;

#[async_trait::async_trait]
impl Probe for P4 {
    fn id(&self) -> ProbeId {
        ProbeId::P4
    }

    fn title(&self) -> &'static str {
        "No network egress"
    }

    fn checks(&self, _: &HostConditions) -> Manifest {
        manifest(CHECKS)
    }

    async fn host(&self, ctx: &ProbeContext) -> Vec<CheckResult> {
        let mut checks = Vec::new();
        let tcp4 = TcpListener::bind("127.0.0.1:0");
        let tcp6 = TcpListener::bind("[::1]:0");
        let udp = UdpSocket::bind("127.0.0.1:0");
        let mut args = Vec::new();
        if let Ok(l) = &tcp4 {
            args.push((
                "tcp4".to_string(),
                l.local_addr().map(|a| a.port()).unwrap_or(0).to_string(),
            ));
        }
        if let Ok(l) = &tcp6 {
            args.push((
                "tcp6".to_string(),
                l.local_addr().map(|a| a.port()).unwrap_or(0).to_string(),
            ));
        }
        if let Ok(u) = &udp {
            args.push((
                "udp".to_string(),
                u.local_addr().map(|a| a.port()).unwrap_or(0).to_string(),
            ));
        }
        // Host UNIX sockets: a pathname and an abstract datagram socket;
        // world-writable so that only the sandbox stands in the way.
        let dgram_path = ctx.root.path().join("p4-dgram.sock");
        let dgram = UnixDatagram::bind(&dgram_path);
        let abstract_name = format!("cordon-p4-{}", random_token());
        let abstract_dgram = SocketAddr::from_abstract_name(abstract_name.as_bytes())
            .and_then(|a| UnixDatagram::bind_addr(&a));
        {
            use std::os::unix::fs::PermissionsExt;
            let _ = std::fs::set_permissions(&dgram_path, std::fs::Permissions::from_mode(0o777));
        }
        args.push(("dgram_path".into(), dgram_path.display().to_string()));
        args.push(("dgram_abstract".into(), abstract_name));
        args.push(("kernel_missing".into(), ctx.kernel.missing_arg()));
        let run = ctx.run("P4", &args).await;
        for (name, sock) in [
            ("host-unix-dgram-listener", dgram),
            ("host-abstract-dgram-listener", abstract_dgram),
        ] {
            checks.push(match sock {
                Ok(s) => {
                    let _ = s.set_nonblocking(true);
                    let mut buf = [0u8; 16];
                    match s.recv(&mut buf) {
                        Ok(_) => fail(name, "received a datagram from the child"),
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                            pass(name, "no datagram arrived")
                        }
                        Err(e) => unreachable(name, e.to_string()),
                    }
                }
                Err(e) => unreachable(name, format!("the host cannot bind: {e}")),
            });
        }
        let _ = std::fs::remove_file(&dgram_path);
        for (name, listener) in [("host-tcp4-listener", tcp4), ("host-tcp6-listener", tcp6)] {
            match listener {
                Ok(l) => {
                    let _ = l.set_nonblocking(true);
                    match l.accept() {
                        Ok((_, from)) => {
                            checks.push(fail(name, format!("accepted a connection from {from}")))
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                            checks.push(pass(name, "no connection arrived"))
                        }
                        Err(e) => checks.push(unreachable(name, e.to_string())),
                    }
                }
                Err(e) => checks.push(unreachable(name, format!("the host cannot listen: {e}"))),
            }
        }
        match udp {
            Ok(u) => {
                let _ = u.set_nonblocking(true);
                let mut buf = [0u8; 16];
                match u.recv_from(&mut buf) {
                    Ok((_, from)) => checks.push(fail(
                        "host-udp-socket",
                        format!("received a datagram from {from}"),
                    )),
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        checks.push(pass("host-udp-socket", "no datagram arrived"))
                    }
                    Err(e) => checks.push(unreachable("host-udp-socket", e.to_string())),
                }
            }
            Err(e) => checks.push(unreachable(
                "host-udp-socket",
                format!("the host cannot bind: {e}"),
            )),
        }
        checks.extend(run.into_checks());
        checks
    }

    fn child(&self, r: &mut Reporter, args: &ProbeArgs) {
        let port = |k: &str| args.get(k).and_then(|p| p.parse::<u16>().ok());
        match port("tcp4") {
            Some(p) => r.forbidden("tcp4-connect", tcp_connect(v4(p)), &DENIED),
            None => r.check(
                "tcp4-connect",
                ProbeStatus::Unreachable,
                "the host had no IPv4 listener",
            ),
        }
        match port("tcp6") {
            Some(p) => r.forbidden("tcp6-connect", tcp_connect(v6(p)), &DENIED),
            None => r.check(
                "tcp6-connect",
                ProbeStatus::Unreachable,
                "the host had no ::1 listener",
            ),
        }
        match port("udp") {
            Some(p) => r.forbidden("udp-send", udp_send(v4(p)), &DENIED),
            None => r.check(
                "udp-send",
                ProbeStatus::Unreachable,
                "the host had no UDP socket",
            ),
        }
        for (name, domain, ty, proto) in [
            (
                "raw-socket",
                libc::AF_INET,
                libc::SOCK_RAW,
                libc::IPPROTO_ICMP,
            ),
            ("packet-socket", libc::AF_PACKET, libc::SOCK_RAW, 0),
            (
                "icmp-socket",
                libc::AF_INET,
                libc::SOCK_DGRAM,
                libc::IPPROTO_ICMP,
            ),
        ] {
            // SAFETY: socket() on integers; closed if created.
            let fd = unsafe { libc::socket(domain, ty | libc::SOCK_CLOEXEC, proto) };
            let res = if fd >= 0 {
                // SAFETY: closes the fd just created here.
                unsafe { libc::close(fd) };
                Ok(format!("created socket({domain}, {ty}, {proto})"))
            } else {
                Err(errno())
            };
            r.forbidden(name, res, &DENIED);
        }
        let kernel_missing: Vec<&str> = args
            .get("kernel_missing")
            .map(|s| s.split(',').collect())
            .unwrap_or_default();
        match port("tcp4") {
            Some(p) => io_uring_connect(r, p, &kernel_missing),
            None => r.check(
                "io-uring-connect",
                ProbeStatus::Unreachable,
                "the host had no IPv4 listener",
            ),
        }
        unix_datagrams(r, args);
    }
}

/// Every check P4 makes on any host.
const CHECKS: &[(&str, Evidence)] = &[
    ("host-unix-dgram-listener", Evidence::Host),
    ("host-abstract-dgram-listener", Evidence::Host),
    ("host-tcp4-listener", Evidence::Host),
    ("host-tcp6-listener", Evidence::Host),
    ("host-udp-socket", Evidence::Host),
    ("tcp4-connect", Evidence::Child),
    ("tcp6-connect", Evidence::Child),
    ("udp-send", Evidence::Child),
    ("raw-socket", Evidence::Child),
    ("packet-socket", Evidence::Child),
    ("icmp-socket", Evidence::Child),
    ("io-uring-connect", Evidence::Child),
    ("unix-dgram-sendto", Evidence::Child),
    ("unix-dgram-connect", Evidence::Child),
    ("unix-dgram-sendto-abstract", Evidence::Child),
];

const DENIED: [i32; 2] = [libc::EPERM, libc::EACCES];

/// A `socketpair` of `ty`, or the errno.
fn pair(ty: i32) -> Result<[i32; 2], i32> {
    let mut fds = [0i32; 2];
    // SAFETY: fds has room for two fds.
    if unsafe { libc::socketpair(libc::AF_UNIX, ty | libc::SOCK_CLOEXEC, 0, fds.as_mut_ptr()) } == 0
    {
        Ok(fds)
    } else {
        Err(errno())
    }
}

fn close_pair(fds: [i32; 2]) {
    // SAFETY: closing fds we own.
    unsafe {
        libc::close(fds[0]);
        libc::close(fds[1]);
    }
}

/// `sendto` from a socketpair end to a UNIX address.
fn sendto_unix(fd: i32, name: &[u8], abstract_ns: bool) -> Result<String, i32> {
    let (addr, len) = unix_addr(name, abstract_ns);
    // SAFETY: a 1-byte buffer and a valid sockaddr_un of length len.
    let n = unsafe {
        libc::sendto(
            fd,
            b"x".as_ptr().cast(),
            1,
            libc::MSG_DONTWAIT,
            (&addr as *const libc::sockaddr_un).cast(),
            len,
        )
    };
    if n == 1 {
        Ok("sent a datagram to the host's socket".into())
    } else {
        Err(errno())
    }
}

/// Datagrams to host UNIX sockets without `socket()`.
fn unix_datagrams(r: &mut Reporter, args: &BTreeMap<String, String>) {
    let path = args.get("dgram_path").cloned().unwrap_or_default();
    let abstract_name = args.get("dgram_abstract").cloned().unwrap_or_default();
    let res = pair(libc::SOCK_DGRAM).and_then(|fds| {
        let res = sendto_unix(fds[0], path.as_bytes(), false);
        close_pair(fds);
        res
    });
    r.forbidden("unix-dgram-sendto", res, &DENIED);
    let res = pair(libc::SOCK_DGRAM).and_then(|fds| {
        let (addr, len) = unix_addr(path.as_bytes(), false);
        // SAFETY: connect with a valid sockaddr_un, then a 1-byte send.
        let res = unsafe {
            if libc::connect(fds[0], (&addr as *const libc::sockaddr_un).cast(), len) != 0 {
                Err(errno())
            } else if libc::send(fds[0], b"x".as_ptr().cast(), 1, libc::MSG_DONTWAIT) == 1 {
                Ok("connected to the host's socket and sent".to_string())
            } else {
                Err(errno())
            }
        };
        close_pair(fds);
        res
    });
    r.forbidden("unix-dgram-connect", res, &DENIED);
    let res = pair(libc::SOCK_DGRAM).and_then(|fds| {
        let res = sendto_unix(fds[0], abstract_name.as_bytes(), true);
        close_pair(fds);
        res
    });
    r.forbidden("unix-dgram-sendto-abstract", res, &DENIED);
}

enum Addr {
    V4(libc::sockaddr_in),
    V6(libc::sockaddr_in6),
}

impl Addr {
    fn raw(&self) -> (*const libc::sockaddr, libc::socklen_t, i32) {
        match self {
            Addr::V4(a) => (
                (a as *const libc::sockaddr_in).cast(),
                std::mem::size_of_val(a) as _,
                libc::AF_INET,
            ),
            Addr::V6(a) => (
                (a as *const libc::sockaddr_in6).cast(),
                std::mem::size_of_val(a) as _,
                libc::AF_INET6,
            ),
        }
    }
}

fn v4(port: u16) -> Addr {
    // SAFETY: sockaddr_in is plain data.
    let mut a: libc::sockaddr_in = unsafe { std::mem::zeroed() };
    a.sin_family = libc::AF_INET as libc::sa_family_t;
    a.sin_port = port.to_be();
    a.sin_addr.s_addr = u32::from_be_bytes([127, 0, 0, 1]).to_be();
    Addr::V4(a)
}

fn v6(port: u16) -> Addr {
    // SAFETY: sockaddr_in6 is plain data.
    let mut a: libc::sockaddr_in6 = unsafe { std::mem::zeroed() };
    a.sin6_family = libc::AF_INET6 as libc::sa_family_t;
    a.sin6_port = port.to_be();
    a.sin6_addr.s6_addr[15] = 1;
    Addr::V6(a)
}

fn tcp_connect(addr: Addr) -> Result<String, i32> {
    let (ptr, len, family) = addr.raw();
    // SAFETY: socket/connect with a valid sockaddr.
    unsafe {
        let fd = libc::socket(family, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return Err(errno());
        }
        let rc = libc::connect(fd, ptr, len);
        let e = errno();
        libc::close(fd);
        if rc == 0 {
            Ok("connected to the host listener".into())
        } else {
            Err(e)
        }
    }
}

fn udp_send(addr: Addr) -> Result<String, i32> {
    let (ptr, len, family) = addr.raw();
    // SAFETY: socket/sendto with a valid sockaddr and buffer.
    unsafe {
        let fd = libc::socket(family, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return Err(errno());
        }
        let n = libc::sendto(fd, b"x".as_ptr().cast(), 1, 0, ptr, len);
        let e = errno();
        libc::close(fd);
        if n == 1 {
            Ok("sent a datagram".into())
        } else {
            Err(e)
        }
    }
}

/// Creates a socket and connects it entirely through io_uring.
fn io_uring_connect(r: &mut Reporter, port: u16, kernel_missing: &[&str]) {
    use io_uring::{opcode, types, IoUring};
    let mut ring = match IoUring::new(4) {
        Ok(ring) => ring,
        Err(e) => {
            let code = e.raw_os_error().unwrap_or(0);
            if code == libc::ENOSYS && kernel_missing.contains(&"io_uring_setup") {
                r.check(
                    "io-uring-connect",
                    ProbeStatus::Pass,
                    "the kernel has no io_uring (the host sees ENOSYS too)",
                );
            } else if code == libc::ENOSYS {
                r.check(
                    "io-uring-connect",
                    ProbeStatus::Unreachable,
                    "io_uring_setup said ENOSYS but the kernel has io_uring: a filter answered; \
                     refuse it with EPERM so refusal and absence can be told apart",
                );
            } else {
                r.forbidden("io-uring-connect", Err(code), &DENIED);
            }
            return;
        }
    };
    let mut submit = |entry: io_uring::squeue::Entry| -> Result<i32, String> {
        // SAFETY: the entry's pointers (the sockaddr) outlive the wait below.
        unsafe {
            ring.submission()
                .push(&entry)
                .map_err(|_| "submission queue full".to_string())?;
        }
        ring.submit_and_wait(1).map_err(|e| e.to_string())?;
        ring.completion()
            .next()
            .map(|c| c.result())
            .ok_or_else(|| "no completion".to_string())
    };
    let fd = match submit(opcode::Socket::new(libc::AF_INET, libc::SOCK_STREAM, 0).build()) {
        Ok(fd) if fd >= 0 => fd,
        Ok(neg) => {
            r.forbidden("io-uring-connect", Err(-neg), &DENIED);
            return;
        }
        Err(e) => {
            r.check("io-uring-connect", ProbeStatus::Unreachable, e);
            return;
        }
    };
    let addr = v4(port);
    let (ptr, len, _) = addr.raw();
    let res = submit(opcode::Connect::new(types::Fd(fd), ptr, len).build());
    // SAFETY: closing the fd io_uring created for us.
    unsafe { libc::close(fd) };
    match res {
        Ok(0) => r.check(
            "io-uring-connect",
            ProbeStatus::Fail,
            "connected to the host listener through io_uring",
        ),
        Ok(neg) => r.forbidden("io-uring-connect", Err(-neg), &DENIED),
        Err(e) => r.check("io-uring-connect", ProbeStatus::Unreachable, e),
    }
}
