//! P8 — the egress allowlist holds (`Network::Allow`), for a backend that
//! claims it (`SandboxBackend::claims_egress_allowlist`).
//!
//! The host starts a *listed* target on 127.0.0.1 (an HTTP server that
//! answers with the child's token), a *bystander* TCP listener on every
//! address of the host (one on `0.0.0.0`, one on `[::]`), and a UDP
//! socket, and runs
//! the child with an allowlist of `localhost:<target>` and `127.1:<bystander>`
//! (a listed name that resolves to a loopback address). The child, told
//! only where the proxy is by `http_proxy`:
//!
//! - reaches the listed target through the proxy (the positive control;
//!   the host confirms the request arrived);
//! - asks the proxy for an unlisted port, for the target's IP literal
//!   (listed by name only) and for `127.1` — each must be refused (`403`);
//! - connects to the bystanders directly (127.0.0.1, `::1` and every
//!   address of every host interface, IPv4 and IPv6) — each must be
//!   denied (`EPERM`/`EACCES`), or find no route (`ENETUNREACH`,
//!   `EHOSTUNREACH`: a network namespace of its own has none but
//!   loopback's, which is a denial by construction); `ECONNREFUSED` or any
//!   other errno means the connect was attempted and is not counted;
//! - creates UDP (so DNS of its own), raw and packet sockets, and tries a
//!   TCP Fast Open `sendto` (a connect Landlock's port rule does not see)
//!   — each must be denied (`EPERM`/`EACCES`).
//!
//! The host then checks that nothing reached the bystanders: a connect
//! that "failed" in the child but arrived on the host is a breach.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cordon_egress::HostPattern;
use cordon_core::{CheckResult, Evidence, Network, ProbeId, ProbeStatus, SandboxBackend};

use crate::child::{errno, Reporter};
use crate::harness::{fail, pass, random_token, unreachable, ProbeContext};
use crate::registry::{manifest, HostConditions, Manifest, Probe, ProbeArgs};

/// P8 in the registry (`probes/mod.rs`).
pub(crate) struct P8;

#[async_trait::async_trait]
impl Probe for P8 {
    fn id(&self) -> ProbeId {
        ProbeId::P8
    }

    fn title(&self) -> &'static str {
        "Egress allowlist holds"
    }

    fn required_of(&self, backend: &dyn SandboxBackend) -> bool {
        backend.claims_egress_allowlist()
    }

    fn checks(&self, host: &HostConditions) -> Manifest {
        let mut m = manifest(CHECKS);
        #[cfg(all(target_os = "linux", feature = "broker"))]
        m.extend(manifest(BROKER_CHECKS));
        for ip in &host.addrs {
            m.insert(format!("direct-{ip}"), Evidence::Child);
            m.insert(format!("proxy-port-{ip}"), Evidence::Child);
        }
        m
    }

    async fn host(&self, ctx: &ProbeContext) -> Vec<CheckResult> {
        let mut checks = Vec::new();
        let token = random_token();
        let target = match Target::start(token.clone()) {
            Ok(t) => t,
            Err(e) => return vec![unreachable("host-target", format!("cannot listen: {e}"))],
        };
        let bystander = TcpListener::bind("0.0.0.0:0");
        let bystander6 = TcpListener::bind("[::]:0");
        let udp = UdpSocket::bind("127.0.0.1:0");
        let port = |l: &std::io::Result<TcpListener>| {
            l.as_ref()
                .ok()
                .and_then(|l| l.local_addr().ok())
                .map_or(0, |a| a.port())
        };
        let by_port = port(&bystander);
        let addrs = ctx.conditions.addrs.clone();
        let args = vec![
            ("target".to_string(), target.port.to_string()),
            ("token".to_string(), token.clone()),
            ("bystander".to_string(), by_port.to_string()),
            ("bystander6".to_string(), port(&bystander6).to_string()),
            (
                "udp".to_string(),
                udp.as_ref()
                    .ok()
                    .and_then(|u| u.local_addr().ok())
                    .map_or(0, |a| a.port())
                    .to_string(),
            ),
            ("addrs".to_string(), addrs.join(",")),
        ];
        let allow: Result<Vec<HostPattern>, _> = [
            format!("localhost:{}", target.port),
            format!("127.1:{by_port}"),
        ]
        .iter()
        .map(|p| p.parse())
        .collect();
        let allow = match allow {
            Ok(a) => a,
            Err(e) => return vec![unreachable("setup", e.to_string())],
        };
        let run = ctx
            .run_with_network("P8", &args, Network::Allow(allow))
            .await;
        let requests = target
            .requests
            .lock()
            .map(|r| r.clone())
            .unwrap_or_default();
        let want = format!("GET /{token} HTTP/1.1");
        checks.push(if requests == [want.clone()] {
            pass(
                "host-listed-target-reached",
                "the listed target got the one request sent through the proxy",
            )
        } else if requests.is_empty() {
            unreachable(
                "host-listed-target-reached",
                "nothing reached the listed target: the allowlist lets nothing through",
            )
        } else {
            fail(
                "host-listed-target-reached",
                format!("the listed target got {requests:?}, not just {want:?}"),
            )
        });
        checks.push(arrived("host-bystander-tcp", bystander));
        checks.push(arrived("host-bystander-tcp6", bystander6));
        checks.push(match udp {
            Ok(u) => {
                let _ = u.set_nonblocking(true);
                let mut buf = [0u8; 16];
                match u.recv_from(&mut buf) {
                    Ok((_, from)) => fail("host-udp-socket", format!("a datagram from {from} arrived")),
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        pass("host-udp-socket", "no datagram arrived")
                    }
                    Err(e) => unreachable("host-udp-socket", e.to_string()),
                }
            }
            Err(e) => unreachable("host-udp-socket", format!("the host cannot bind: {e}")),
        });
        checks.extend(run.into_checks());
        // The second run: the same allowlist with the credential broker,
        // in a build that has it (a report without these checks does not
        // prove the broker: `ConformanceReport::proves_credential_broker`).
        #[cfg(all(target_os = "linux", feature = "broker"))]
        checks.extend(super::p8_broker::host(ctx, target.port, &target.requests).await);
        checks
    }

    fn child(&self, r: &mut Reporter, args: &ProbeArgs) {
        #[cfg(all(target_os = "linux", feature = "broker"))]
        if args.contains_key("broker") {
            return super::p8_broker::child(r, args);
        }
        let port = |k: &str| args.get(k).and_then(|p| p.parse::<u16>().ok()).unwrap_or(0);
        let (target, bystander) = (port("target"), port("bystander"));
        let token = args.get("token").cloned().unwrap_or_default();
        match proxy_addr() {
            None => {
                for name in [
                    "control-proxy",
                    "proxy-unlisted-port",
                    "proxy-ip-literal",
                    "proxy-private-name",
                ] {
                    r.check(
                        name,
                        ProbeStatus::Unreachable,
                        "no http_proxy=http://HOST:PORT in the environment",
                    )
                }
            }
            Some(proxy) => {
                let get = format!("GET /{token} HTTP/1.1\r\nHost: localhost\r\n\r\n");
                match through_proxy(proxy, &format!("localhost:{target}"), &get) {
                    Ok((status, body)) if status.contains(" 200 ") && body.ends_with(&token) => r
                        .check(
                            "control-proxy",
                            ProbeStatus::Pass,
                            "the listed target answered",
                        ),
                    Ok((status, _)) => r.check("control-proxy", ProbeStatus::Unreachable, status),
                    Err(e) => r.check("control-proxy", ProbeStatus::Unreachable, e),
                }
                for (name, what) in [
                    ("proxy-unlisted-port", format!("localhost:{bystander}")),
                    ("proxy-ip-literal", format!("127.0.0.1:{target}")),
                    ("proxy-private-name", format!("127.1:{bystander}")),
                ] {
                    match through_proxy(proxy, &what, "") {
                        Ok((status, _)) if status.contains(" 403 ") => {
                            r.check(name, ProbeStatus::Pass, format!("{what}: {status}"))
                        }
                        Ok((status, _)) if status.contains(" 200 ") => {
                            r.check(name, ProbeStatus::Fail, format!("{what}: {status}"))
                        }
                        Ok((status, _)) => r.check(name, ProbeStatus::Unreachable, status),
                        Err(e) => r.check(name, ProbeStatus::Unreachable, e),
                    }
                }
            }
        }
        // Direct connects: only a denial, or no route at all, counts; the
        // host's bystanders say whether anything arrived.
        let addrs: Vec<crate::inspect::HostAddr> = args
            .get("addrs")
            .map(String::as_str)
            .unwrap_or("")
            .split(',')
            .filter_map(crate::inspect::HostAddr::parse)
            .collect();
        let bystander6 = port("bystander6");
        let mut direct_targets = vec![
            (
                "direct-tcp4".to_string(),
                SocketAddr::from(([127, 0, 0, 1], bystander)),
            ),
            (
                "direct-tcp6".to_string(),
                SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, bystander6)),
            ),
        ];
        for a in &addrs {
            let p = if a.ip.is_ipv4() {
                bystander
            } else {
                bystander6
            };
            direct_targets.push((format!("direct-{}", a.name()), a.with_port(p)));
        }
        for (name, addr) in direct_targets {
            r.forbidden(&name, direct(addr), &NO_WAY);
        }
        // The proxy's port on the host's own addresses: a port rule that lets
        // the proxy through lets these through too, so only a denial or a
        // missing route counts; `ECONNREFUSED` means the host's stack answered.
        for a in &addrs {
            let name = format!("proxy-port-{}", a.name());
            match proxy_addr() {
                Some(p) => r.forbidden(&name, direct(a.with_port(p.port())), &NO_WAY),
                None => r.check(
                    &name,
                    ProbeStatus::Unreachable,
                    "no http_proxy to take the port from",
                ),
            }
        }
        // TCP Fast Open connects inside `sendto`, where Landlock's
        // connect-port rule does not look (landlock-lsm/linux#41).
        r.forbidden(
            "tcp-fast-open",
            fast_open(SocketAddr::from(([127, 0, 0, 1], bystander))),
            &DENIED,
        );
        r.forbidden(
            "udp-send",
            udp_send(SocketAddr::from(([127, 0, 0, 1], port("udp")))),
            &DENIED,
        );
        r.forbidden("dns-udp", udp_send(resolver()), &DENIED);
        r.forbidden(
            "raw-socket",
            socket(libc::AF_INET, libc::SOCK_RAW, libc::IPPROTO_ICMP),
            &DENIED,
        );
        r.forbidden(
            "packet-socket",
            socket(libc::AF_PACKET, libc::SOCK_RAW, 0),
            &DENIED,
        );
        r.forbidden(
            "netlink-socket",
            socket(libc::AF_NETLINK, libc::SOCK_RAW, 0),
            &DENIED,
        );
    }
}

/// P8's checks of its run with the credential broker (`p8_broker.rs`).
#[cfg(all(target_os = "linux", feature = "broker"))]
const BROKER_CHECKS: &[(&str, Evidence)] = &[
    ("broker-control", Evidence::Child),
    ("broker-unbound", Evidence::Child),
    ("broker-tunnel-other-port", Evidence::Child),
    ("broker-direct", Evidence::Child),
    ("host-broker-injected", Evidence::Host),
    ("host-broker-unbound-clean", Evidence::Host),
];

/// Every check P8 makes on any host (those of some hosts only are added
/// in [`P8::checks`]).
const CHECKS: &[(&str, Evidence)] = &[
    ("host-listed-target-reached", Evidence::Host),
    ("host-bystander-tcp", Evidence::Host),
    ("host-bystander-tcp6", Evidence::Host),
    ("host-udp-socket", Evidence::Host),
    ("control-proxy", Evidence::Child),
    ("proxy-unlisted-port", Evidence::Child),
    ("proxy-ip-literal", Evidence::Child),
    ("proxy-private-name", Evidence::Child),
    ("direct-tcp4", Evidence::Child),
    ("direct-tcp6", Evidence::Child),
    ("tcp-fast-open", Evidence::Child),
    ("udp-send", Evidence::Child),
    ("dns-udp", Evidence::Child),
    ("raw-socket", Evidence::Child),
    ("packet-socket", Evidence::Child),
    ("netlink-socket", Evidence::Child),
];

/// The host's listed target: answers each request with `token`, and
/// records the request lines that arrived.
struct Target {
    port: u16,
    requests: Arc<Mutex<Vec<String>>>,
    stop: Arc<AtomicBool>,
}

impl Target {
    fn start(token: String) -> std::io::Result<Target> {
        let l = TcpListener::bind("127.0.0.1:0")?;
        l.set_nonblocking(true)?;
        let port = l.local_addr()?.port();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (seen, stopped) = (Arc::clone(&requests), Arc::clone(&stop));
        std::thread::spawn(move || {
            while !stopped.load(Ordering::Relaxed) {
                match l.accept() {
                    Ok((c, _)) => answer(c, &token, &seen),
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        Ok(Target {
            port,
            requests,
            stop,
        })
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn answer(mut c: TcpStream, token: &str, seen: &Mutex<Vec<String>>) {
    let _ = c.set_nonblocking(false);
    let _ = c.set_read_timeout(Some(Duration::from_secs(5)));
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") && head.len() < 8192 {
        match c.read(&mut b) {
            Ok(1) => head.push(b[0]),
            _ => break,
        }
    }
    let line = String::from_utf8_lossy(&head)
        .lines()
        .next()
        .unwrap_or_default()
        .to_owned();
    if let Ok(mut s) = seen.lock() {
        s.push(line);
    }
    let _ = write!(
        c,
        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{token}",
        token.len()
    );
}

/// Whether `l` (non-blocking) has a connection waiting.
fn arrived(name: &str, l: std::io::Result<TcpListener>) -> CheckResult {
    match l {
        Ok(l) => {
            let _ = l.set_nonblocking(true);
            match l.accept() {
                Ok((_, from)) => fail(name, format!("a connection from {from} arrived")),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    pass(name, "no connection arrived")
                }
                Err(e) => unreachable(name, e.to_string()),
            }
        }
        Err(e) => unreachable(name, format!("the host cannot listen: {e}")),
    }
}

const DENIED: [i32; 2] = [libc::EPERM, libc::EACCES];

/// What a direct connect may end in to count as held: a denial, or no
/// route at all. In a network namespace of the sandbox's own, whose only
/// interface is its loopback, every other address is unroutable
/// (`ENETUNREACH`/`EHOSTUNREACH` from the routing lookup, before any
/// packet): the namespace is the denial. `ECONNREFUSED` is not: something
/// answered.
#[cfg_attr(not(all(target_os = "linux", feature = "broker")), allow(dead_code))]
pub(super) const NO_WAY: [i32; 4] = [
    libc::EPERM,
    libc::EACCES,
    libc::ENETUNREACH,
    libc::EHOSTUNREACH,
];

/// The proxy's address from `http_proxy` (`http://HOST:PORT`).
pub(super) fn proxy_addr() -> Option<SocketAddr> {
    let v = std::env::var("http_proxy").ok()?;
    v.strip_prefix("http://")?
        .trim_end_matches('/')
        .parse()
        .ok()
}

/// Sends a `CONNECT` for `target` through the proxy (then `then`), and
/// returns the status line and everything that came back.
fn through_proxy(proxy: SocketAddr, target: &str, then: &str) -> Result<(String, String), String> {
    let mut s = TcpStream::connect_timeout(&proxy, Duration::from_secs(2))
        .map_err(|e| format!("cannot reach the proxy at {proxy}: {e}"))?;
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    write!(s, "CONNECT {target} HTTP/1.1\r\n\r\n{then}").map_err(|e| e.to_string())?;
    // The status line decides; only with a request sent through is the
    // rest read (a tunnel to a listener that never answers would
    // otherwise hold the child until its deadline).
    let mut out = Vec::new();
    let mut b = [0u8; 1];
    while !out.ends_with(b"\r\n") && out.len() < 1024 {
        match s.read(&mut b) {
            Ok(1) => out.push(b[0]),
            _ => break,
        }
    }
    if !then.is_empty() {
        let _ = s.read_to_end(&mut out);
    }
    let out = String::from_utf8_lossy(&out).into_owned();
    let status = out.lines().next().unwrap_or_default().to_owned();
    Ok((status, out))
}

/// A direct TCP connect that must fail: `Ok` names what connected.
pub(super) fn direct(addr: SocketAddr) -> Result<String, i32> {
    match TcpStream::connect_timeout(&addr, Duration::from_secs(3)) {
        Ok(_) => Ok(format!("connected to {addr}")),
        Err(e) => Err(e.raw_os_error().unwrap_or(libc::EIO)),
    }
}

fn socket(domain: i32, ty: i32, proto: i32) -> Result<String, i32> {
    // SAFETY: socket() with integer arguments; closed at once.
    let fd = unsafe { libc::socket(domain, ty | libc::SOCK_CLOEXEC, proto) };
    if fd >= 0 {
        crate::child::close(fd);
        Ok("created".into())
    } else {
        Err(errno())
    }
}

/// A `sendto(MSG_FASTOPEN)` on a fresh TCP socket: a connect and a send
/// in one call.
fn fast_open(to: SocketAddr) -> Result<String, i32> {
    let SocketAddr::V4(v4) = to else {
        return Err(libc::EINVAL);
    };
    // SAFETY: sockaddr_in is plain data.
    let mut a: libc::sockaddr_in = unsafe { std::mem::zeroed() };
    a.sin_family = libc::AF_INET as libc::sa_family_t;
    a.sin_port = v4.port().to_be();
    a.sin_addr.s_addr = u32::from(*v4.ip()).to_be();
    // SAFETY: socket/sendto/close with a valid sockaddr and buffer.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return Err(errno());
        }
        let msg = b"GET /fast-open HTTP/1.0\r\n\r\n";
        let n = libc::sendto(
            fd,
            msg.as_ptr().cast(),
            msg.len(),
            libc::MSG_FASTOPEN,
            (&a as *const libc::sockaddr_in).cast(),
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        );
        let e = errno();
        crate::child::close(fd);
        if n >= 0 {
            Ok(format!("sent {n} bytes to {to} with MSG_FASTOPEN"))
        } else {
            Err(e)
        }
    }
}

fn udp_send(to: SocketAddr) -> Result<String, i32> {
    let s = UdpSocket::bind("0.0.0.0:0").map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))?;
    s.send_to(b"x", to)
        .map(|_| format!("sent a datagram to {to}"))
        .map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))
}

/// The first nameserver of /etc/resolv.conf (else 127.0.0.53), port 53.
fn resolver() -> SocketAddr {
    std::fs::read_to_string("/etc/resolv.conf")
        .ok()
        .and_then(|c| {
            c.lines().find_map(|l| {
                let ip = l.strip_prefix("nameserver")?.trim().parse().ok()?;
                Some(SocketAddr::new(ip, 53))
            })
        })
        .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 53], 53)))
}

