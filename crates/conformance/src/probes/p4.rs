//! P4 — no network egress: TCP connects to host listeners on 127.0.0.1 and
//! ::1, a UDP send to a host socket, raw, packet and ICMP socket creation,
//! and the same TCP connect issued through io_uring (which bypasses seccomp
//! socket filters) all fail, and the host confirms nothing arrived.
//!
//! Only a denial (`EPERM`/`EACCES`) counts as a pass: `ECONNREFUSED` or a
//! timeout means the packet reached the network stack, which proves nothing.

use std::collections::BTreeMap;
use std::net::{TcpListener, UdpSocket};

use cordon_core::{CheckResult, ProbeStatus};

use crate::child::{errno, errno_name, Reporter};
use crate::harness::{fail, pass, unreachable, Ctx};

pub(crate) async fn host(ctx: &Ctx) -> Vec<CheckResult> {
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
    let run = ctx.run("P4", &args).await;
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

const DENIED: [i32; 2] = [libc::EPERM, libc::EACCES];

pub(crate) fn child(r: &mut Reporter, args: &BTreeMap<String, String>) {
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
            unsafe { libc::close(fd) };
            Ok(format!("created socket({domain}, {ty}, {proto})"))
        } else {
            Err(errno())
        };
        r.forbidden(name, res, &DENIED);
    }
    match port("tcp4") {
        Some(p) => io_uring_connect(r, p),
        None => r.check(
            "io-uring-connect",
            ProbeStatus::Unreachable,
            "the host had no IPv4 listener",
        ),
    }
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
fn io_uring_connect(r: &mut Reporter, port: u16) {
    use io_uring::{opcode, types, IoUring};
    let mut ring = match IoUring::new(4) {
        Ok(ring) => ring,
        Err(e) => {
            let code = e.raw_os_error().unwrap_or(0);
            // No io_uring at all (refused or not built) is the safe outcome.
            let status = if [libc::EPERM, libc::EACCES, libc::ENOSYS].contains(&code) {
                ProbeStatus::Pass
            } else {
                ProbeStatus::Unreachable
            };
            r.check(
                "io-uring-connect",
                status,
                format!("io_uring_setup refused ({})", errno_name(code)),
            );
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
