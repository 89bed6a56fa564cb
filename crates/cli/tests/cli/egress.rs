//! `cordon run --allow-host`: the listed host is reachable through the
//! proxy, real programs use it, and every way around it fails, as root and
//! as uid 65534. Servers the tests start on the host record what arrived,
//! so "it failed" is checked where it counts: nothing reached them.

use std::net::{TcpListener, UdpSocket};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crate::common::as_each_uid;
use crate::common::http::{git_repo, HostServer, GREETING};
use crate::common::{cordon, run, text};

/// A TCP listener on every address of the host and a UDP socket on
/// 127.0.0.1, counting what reaches them: the victims of the bypasses.
struct Bystanders {
    tcp_port: u16,
    tcp_accepted: Arc<AtomicUsize>,
    udp_port: u16,
    udp: UdpSocket,
}

impl Bystanders {
    fn start() -> Bystanders {
        let l = TcpListener::bind("0.0.0.0:0").unwrap();
        let tcp_port = l.local_addr().unwrap().port();
        let tcp_accepted = Arc::new(AtomicUsize::new(0));
        let n = Arc::clone(&tcp_accepted);
        std::thread::spawn(move || {
            for c in l.incoming() {
                if c.is_ok() {
                    n.fetch_add(1, Ordering::SeqCst);
                }
            }
        });
        let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
        udp.set_nonblocking(true).unwrap();
        let udp_port = udp.local_addr().unwrap().port();
        Bystanders {
            tcp_port,
            tcp_accepted,
            udp_port,
            udp,
        }
    }

    fn udp_received(&self) -> usize {
        let mut n = 0;
        let mut buf = [0u8; 512];
        while self.udp.recv(&mut buf).is_ok() {
            n += 1;
        }
        n
    }
}

/// The host's own non-loopback IPv4 addresses (what a program that skips
/// the proxy would try to reach the host's services on).
fn host_addresses() -> Vec<String> {
    let mut out = Vec::new();
    let mut ifs: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills a list we free below; we read only AF_INET
    // entries as sockaddr_in.
    unsafe {
        if libc::getifaddrs(&mut ifs) != 0 {
            return out;
        }
        let mut p = ifs;
        while !p.is_null() {
            let a = (*p).ifa_addr;
            if !a.is_null() && i32::from((*a).sa_family) == libc::AF_INET {
                let sin = &*(a as *const libc::sockaddr_in);
                let ip = std::net::Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr));
                if !ip.is_loopback() {
                    out.push(ip.to_string());
                }
            }
            p = (*p).ifa_next;
        }
        libc::freeifaddrs(ifs);
    }
    out
}

/// A name other than `localhost` that the host resolves (through
/// /etc/hosts) to a non-public address.
fn private_alias() -> String {
    let hosts = std::fs::read_to_string("/etc/hosts").unwrap_or_default();
    hosts
        .lines()
        .find_map(|l| {
            let mut words = l.split('#').next()?.split_whitespace();
            let ip: std::net::IpAddr = words.next()?.parse().ok()?;
            let private = ip.is_loopback()
                || matches!(ip, std::net::IpAddr::V4(v4) if v4.is_private() || v4.is_link_local());
            if !private {
                return None;
            }
            words
                .find(|w| *w != "localhost" && !w.contains(':'))
                .map(str::to_owned)
        })
        .expect(
            "no name other than localhost in /etc/hosts has a private address; add one (e.g. \
             `127.0.1.1 cordon-test-alias`) to run this test",
        )
}

/// The hostile program: tries the listed host through the proxy (the
/// positive control) and then every way around the allowlist, printing one
/// JSON object of outcomes.
const HOSTILE: &str = r#"
import json, socket, sys
port, bystander, udp_port, alias = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
host_ips = sys.argv[5:]
out = {}
def attempt(name, f):
    try:
        out[name] = "ok: " + str(f())
    except Exception as e:
        out[name] = "failed: " + repr(e)
def via_proxy(target, request=b""):
    s = socket.create_connection(("127.0.0.1", 3128), timeout=10)
    s.sendall(b"CONNECT " + target.encode() + b" HTTP/1.1\r\n\r\n" + request)
    data = b""
    while True:
        chunk = s.recv(4096)
        if not chunk:
            break
        data += chunk
    status = data.split(b"\r\n")[0].decode()
    if " 200 " not in status:
        raise Exception(status)
    return data.decode(errors="replace").splitlines()[-1]
def direct(addr, family=socket.AF_INET):
    s = socket.socket(family, socket.SOCK_STREAM)
    s.settimeout(5)
    s.connect(addr)
    return "connected"
attempt("listed", lambda: via_proxy("localhost:%d" % port, b"GET / HTTP/1.0\r\n\r\n"))
attempt("unlisted_port", lambda: via_proxy("localhost:%d" % bystander))
attempt("ip_literal", lambda: via_proxy("127.0.0.1:%d" % port))
attempt("private_name", lambda: via_proxy("%s:%d" % (alias, port)))
attempt("direct_loopback", lambda: direct(("127.0.0.1", port)))
attempt("direct_loopback_v6", lambda: direct(("::1", port), socket.AF_INET6))
for ip in host_ips:
    attempt("direct_" + ip, lambda: direct((ip, bystander)))
    # The proxy's port is the one Landlock lets through: only the missing
    # route stops this one.
    attempt("no_route_" + ip, lambda: direct((ip, 3128)))
attempt("fast_open", lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM).sendto(b"GET / HTTP/1.0\r\n\r\n", socket.MSG_FASTOPEN, ("127.0.0.1", bystander)))
attempt("udp", lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"x", ("127.0.0.1", udp_port)))
attempt("dns_udp", lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"\0" * 12, ("8.8.8.8", 53)))
attempt("dns_lookup", lambda: socket.getaddrinfo("example.com", 80))
attempt("raw", lambda: socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP))
attempt("packet", lambda: socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0))
attempt("netlink", lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0))
attempt("unix", lambda: socket.socket(socket.AF_UNIX, socket.SOCK_STREAM))
attempt("bind", lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM).bind(("127.0.0.1", 0)))
print(json.dumps(out))
"#;

#[test]
fn the_listed_host_is_reachable_and_every_bypass_fails() {
    let dir = tempfile::tempdir().unwrap();
    let server = HostServer::start(dir.path().to_path_buf());
    let by = Bystanders::start();
    let alias = private_alias();
    let ips = host_addresses();
    as_each_uid(dir.path(), |who, cmd| {
        let before = server.requests().len();
        let allow = format!("localhost:{}", server.port);
        let out = run(cmd()
            .args(["run", "--allow-host", &allow, "--", "/usr/bin/curl", "-sS"])
            .arg(format!("http://localhost:{}/", server.port)));
        assert_eq!(text(&out.stdout), GREETING, "{who}: {}", text(&out.stderr));
        assert_eq!(out.status.code(), Some(0));

        let out = run(cmd()
            .args(["run", "--allow-host", &allow, "--allow-host"])
            .arg(format!("{alias}:{}", server.port))
            .args(["--", "/usr/bin/python3", "-c", HOSTILE])
            .arg(server.port.to_string())
            .arg(by.tcp_port.to_string())
            .arg(by.udp_port.to_string())
            .arg(&alias)
            .args(&ips));
        let outcomes: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{who}: {e}: {} {}", text(&out.stdout), text(&out.stderr)));
        let get = |k: &str| outcomes[k].as_str().unwrap_or("missing").to_owned();
        assert_eq!(
            get("listed"),
            format!("ok: {}", GREETING.trim()),
            "{who}: {outcomes}"
        );
        for (name, outcome) in outcomes.as_object().unwrap() {
            if name != "listed" {
                let o = outcome.as_str().unwrap();
                assert!(
                    o.starts_with("failed"),
                    "{who}: the bypass {name} worked: {o}"
                );
            }
        }
        for k in ["unlisted_port", "ip_literal", "private_name"] {
            assert!(
                get(k).contains("403"),
                "{who}: the proxy must refuse {k}: {outcomes}"
            );
        }
        // Fast Open connects where Landlock does not look: seccomp refuses it.
        assert!(
            get("fast_open").contains("PermissionError(1,"),
            "{who}: {outcomes}"
        );
        // The proxy's port is the one Landlock lets through: only the
        // missing route stops a connect to it on a host address.
        for ip in &ips {
            let o = get(&format!("no_route_{ip}"));
            assert!(
                o.contains("101"),
                "{who}: {ip}:3128 must have no route (ENETUNREACH): {o}"
            );
        }
        // What reached the host: the two allowed requests, nothing else.
        assert_eq!(
            server.requests()[before..],
            ["GET / HTTP/1.1".to_owned(), "GET / HTTP/1.0".to_owned()],
            "{who}"
        );
        assert_eq!(by.tcp_accepted.load(Ordering::SeqCst), 0, "{who}");
        assert_eq!(by.udp_received(), 0, "{who}");
    });

    // The control: the same program without the sandbox gets through, so
    // the checks above can fail.
    let cache = crate::common::shared_cache();
    let out = run(cordon(cache.path())
        .args(["run", "--trusted", "--", "/usr/bin/python3", "-c", HOSTILE])
        .arg(server.port.to_string())
        .arg(by.tcp_port.to_string())
        .arg(by.udp_port.to_string())
        .arg(&alias)
        .args(&ips));
    let outcomes: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    for k in ["direct_loopback", "udp", "unix", "fast_open"] {
        let o = outcomes[k].as_str().unwrap();
        assert!(o.starts_with("ok"), "unconfined, {k} should work: {o}");
    }
    assert_eq!(by.udp_received(), 1);
    // One connection per host address, and the Fast Open one.
    for _ in 0..100 {
        if by.tcp_accepted.load(Ordering::SeqCst) == ips.len() + 1 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(by.tcp_accepted.load(Ordering::SeqCst), ips.len() + 1);
}

#[test]
fn real_programs_use_the_proxy() {
    let dir = tempfile::tempdir().unwrap();
    git_repo(dir.path());
    let server = HostServer::start(dir.path().to_path_buf());
    let allow = format!("localhost:{}", server.port);
    let url = format!("http://localhost:{}", server.port);
    as_each_uid(dir.path(), |who, cmd| {
        let out = run(cmd().args(["run", "--allow-host", &allow, "--", "/usr/bin/python3", "-c"]).arg(
            format!(
                "import urllib.request\nprint(urllib.request.urlopen('{url}/').read().decode(), end='')"
            ),
        ));
        assert_eq!(text(&out.stdout), GREETING, "{who}: {}", text(&out.stderr));

        let out = run(cmd()
            .args(["run", "--allow-host", &allow, "--", "/bin/sh", "-c"])
            .arg(format!(
                "/usr/bin/git clone -q {url}/repo.git out && cat out/file.txt"
            )));
        assert_eq!(
            text(&out.stdout),
            "cloned through the proxy\n",
            "{who}: {}",
            text(&out.stderr)
        );
    });
    assert!(
        server
            .requests()
            .iter()
            .any(|r| r.contains("/repo.git/info/refs")),
        "{:?}",
        server.requests()
    );
}

/// A corporate host: a listed name that resolves to a private address
/// (here a name of /etc/hosts on loopback, where the test's server is) is
/// refused with advice that works, and reached once `--allow-private`
/// names a range holding its address; as root and as uid 65534.
#[test]
fn a_private_name_is_reached_inside_the_range_allowed_for_it() {
    let dir = tempfile::tempdir().unwrap();
    let server = HostServer::start(dir.path().to_path_buf());
    let alias = private_alias();
    as_each_uid(dir.path(), |who, cmd| {
        let allow = format!("{alias}:{}", server.port);
        let url = format!("http://{alias}:{}/", server.port);
        let before = server.requests().len();
        let out = run(cmd()
            .args(["run", "--allow-host", &allow, "--", "/usr/bin/curl", "-sS"])
            .arg(&url));
        let said = text(&out.stdout);
        assert!(
            said.contains("--allow-private 127.0.0.1/32"),
            "{who}: the refusal's advice: {said}"
        );
        assert_eq!(
            server.requests().len(),
            before,
            "{who}: refused, nothing arrived"
        );
        // The advice works.
        let out = run(cmd()
            .args([
                "run",
                "--allow-host",
                &allow,
                "--allow-private",
                "127.0.0.1/32",
            ])
            .args(["--", "/usr/bin/curl", "-sS"])
            .arg(&url));
        assert_eq!(text(&out.stdout), GREETING, "{who}: {}", text(&out.stderr));
        assert_eq!(out.status.code(), Some(0));
        // A range that does not hold the address does not help.
        let out = run(cmd()
            .args([
                "run",
                "--allow-host",
                &allow,
                "--allow-private",
                "10.0.0.0/8",
            ])
            .args(["--", "/usr/bin/curl", "-sS"])
            .arg(&url));
        assert!(
            text(&out.stdout).contains("--allow-private 127.0.0.1/32"),
            "{who}: {}",
            text(&out.stdout)
        );
        assert_eq!(server.requests().len(), before + 1, "{who}");
    });
}

#[test]
fn bad_allow_host_flags_are_usage_errors() {
    let cache = crate::common::shared_cache();
    for bad in ["ftp://a.com", "a.com:0", "*", "a b", "10.0.0.0/8"] {
        let out = run(cordon(cache.path()).args(["run", "--allow-host", bad, "--", "true"]));
        assert_eq!(out.status.code(), Some(125), "{bad}: {}", text(&out.stderr));
        assert!(
            text(&out.stderr).contains("HOST[:PORT]"),
            "{bad}: {}",
            text(&out.stderr)
        );
    }
    let out = run(cordon(cache.path()).args(["run", "--allow-host", "10.0.0.0/8", "--", "true"]));
    assert!(
        text(&out.stderr).contains("--allow-private"),
        "{}",
        text(&out.stderr)
    );
    for bad in ["10.0.0.0/33", "a.com", "10/8"] {
        let out = run(cordon(cache.path()).args([
            "run",
            "--allow-host",
            "a.com",
            "--allow-private",
            bad,
            "--",
            "true",
        ]));
        assert_eq!(out.status.code(), Some(125), "{bad}: {}", text(&out.stderr));
        assert!(
            text(&out.stderr).contains("ADDRESS/PREFIX"),
            "{bad}: {}",
            text(&out.stderr)
        );
    }
    let out =
        run(cordon(cache.path()).args(["run", "--trusted", "--allow-host", "a.com", "--", "true"]));
    assert_ne!(out.status.code(), Some(0));
    assert!(
        text(&out.stderr).contains("--allow-host needs the sandbox"),
        "{}",
        text(&out.stderr)
    );
}

/// `-v` prints the proxy's summary line when the sandbox ends.
#[test]
fn verbose_run_reports_what_the_proxy_did() {
    let dir = tempfile::tempdir().unwrap();
    let server = HostServer::start(dir.path().to_path_buf());
    let cache = crate::common::shared_cache();
    let out = run(cordon(cache.path())
        .args(["-v", "run", "--allow-host"])
        .arg(format!("localhost:{}", server.port))
        .args(["--", "/bin/sh", "-c"])
        .arg(format!(
            "/usr/bin/curl -s http://localhost:{}/ >/dev/null; /usr/bin/curl -s https://example.com/",
            server.port
        )));
    let err = text(&out.stderr);
    assert!(
        err.contains("egress: 1 connection(s) allowed, 1 refused"),
        "{err}"
    );
}
