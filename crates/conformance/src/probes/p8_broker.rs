//! P8's second run: the credential broker (`Network::Brokered`), which a
//! backend that claims the egress allowlist holds too (it is the
//! allowlist with an interceptor: the backend's proxy must hand the
//! interceptor's `CONNECT`s to it).
//!
//! The host starts an HTTPS target on 127.0.0.1 (a CA of its own, which
//! the broker is told to trust) that echoes the header it is sent, binds
//! a fresh random secret to it as that header, and runs the child with
//! the placeholder and the run's CA. The child:
//!
//! - calls the target through the proxy, trusting only the run's CA (the
//!   positive control: a backend whose proxy tunnelled instead would show
//!   it the target's own certificate, which it does not trust); the echo
//!   must come back as the placeholder;
//! - sends the placeholder to the listed plain-HTTP target, unbound (must
//!   be refused, `403`);
//! - reports its environment (an `INFO` line).
//!
//! The host then checks that the target got the value (never the
//! placeholder), that the plain target got no placeholder, and that
//! nothing the child reported holds the value.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cordon_broker::{Broker, Secret};
use cordon_core::{BrokeredNetwork, CheckResult, Network, ProbeStatus};
use cordon_egress::{HostPattern, Intercept};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};

use crate::child::Reporter;
use crate::harness::{fail, pass, random_token, unreachable, ProbeContext};
use crate::registry::ProbeArgs;

/// The header the secret is set as.
const HEADER: &str = "X-Cordon-Probe";

/// The HTTPS target: echoes the probe header's value, records each.
struct Echo {
    port: u16,
    ca_pem: String,
    seen: Arc<Mutex<Vec<String>>>,
    /// Connections accepted (a handshake tried or not).
    accepted: Arc<std::sync::atomic::AtomicUsize>,
    /// Set on drop: the accepting thread ends (its listener with it).
    stop: Arc<std::sync::atomic::AtomicBool>,
}

impl Drop for Echo {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

impl Echo {
    fn start() -> Result<Echo, String> {
        let e = |e: rcgen::Error| e.to_string();
        let mut ca = rcgen::CertificateParams::default();
        ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca = rcgen::CertifiedIssuer::self_signed(ca, rcgen::KeyPair::generate().map_err(e)?)
            .map_err(e)?;
        let key = rcgen::KeyPair::generate().map_err(e)?;
        let leaf = rcgen::CertificateParams::new(vec!["localhost".to_owned()])
            .map_err(e)?
            .signed_by(&key, &ca)
            .map_err(e)?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_no_client_auth()
            .with_single_cert(
                vec![leaf.der().clone()],
                PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
            )
            .map_err(|e| e.to_string())?;
        let config = Arc::new(config);
        let l = TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
        let port = l.local_addr().map_err(|e| e.to_string())?.port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        l.set_nonblocking(true).map_err(|e| e.to_string())?;
        let (s, a, stopped) = (Arc::clone(&seen), Arc::clone(&accepted), Arc::clone(&stop));
        std::thread::spawn(move || {
            // Until the probe is done: each connection on a thread of its
            // own with a read timeout, so no one peer holds the rest.
            while !stopped.load(std::sync::atomic::Ordering::Relaxed) {
                let Ok((c, _)) = l.accept() else {
                    std::thread::sleep(Duration::from_millis(5));
                    continue;
                };
                a.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let _ = c.set_nonblocking(false);
                let _ = c.set_read_timeout(Some(Duration::from_secs(5)));
                let _ = c.set_write_timeout(Some(Duration::from_secs(5)));
                let (config, s) = (Arc::clone(&config), Arc::clone(&s));
                std::thread::spawn(move || {
                    if let Ok(tls) = rustls::ServerConnection::new(config) {
                        echo(rustls::StreamOwned::new(tls, c), &s);
                    }
                });
            }
        });
        Ok(Echo {
            port,
            ca_pem: ca.pem(),
            seen,
            accepted,
            stop,
        })
    }
}

fn echo<S: Read + Write>(mut s: S, seen: &Mutex<Vec<String>>) {
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") && head.len() < 16 * 1024 {
        match s.read(&mut b) {
            Ok(1) => head.push(b[0]),
            _ => return,
        }
    }
    let head = String::from_utf8_lossy(&head).into_owned();
    let value = head
        .lines()
        .find_map(|l| {
            l.split_once(':')
                .filter(|(n, _)| n.eq_ignore_ascii_case(HEADER))
                .map(|(_, v)| v.trim().to_owned())
        })
        .unwrap_or_default();
    if let Ok(mut seen) = seen.lock() {
        seen.push(value.clone());
    }
    let _ = write!(
        s,
        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{value}",
        value.len()
    );
    let _ = s.flush();
}

/// The host side: the brokered run and its checks. `plain` is P8's listed
/// plain-HTTP target (`localhost:PORT`) and the request lines it got.
pub(crate) async fn host(
    ctx: &ProbeContext,
    plain_port: u16,
    plain_seen: &Arc<Mutex<Vec<String>>>,
) -> Vec<CheckResult> {
    let echo = match Echo::start() {
        Ok(e) => e,
        Err(e) => {
            return vec![unreachable(
                "host-broker-injected",
                format!("no target: {e}"),
            )]
        }
    };
    let value = format!("p8-{}", random_token());
    let bound: Result<HostPattern, _> = format!("localhost:{}", echo.port).parse();
    let broker = bound
        .map_err(|e| e.to_string())
        .and_then(|h| {
            let header = format!("{HEADER}: {{}}")
                .parse()
                .map_err(|e| format!("{e}"))?;
            Secret::new("PROBE", value.clone(), vec![h], Some(header)).map_err(|e| e.to_string())
        })
        .and_then(|s| {
            Broker::new(vec![s], Vec::new(), Some(echo.ca_pem.as_bytes()))
                .map_err(|e| e.to_string())
        });
    let broker = match broker {
        Ok(b) => Arc::new(b),
        Err(e) => return vec![unreachable("host-broker-injected", e)],
    };
    let placeholder = broker.secrets()[0].placeholder().to_owned();
    let mut hosts: Vec<HostPattern> = broker.hosts();
    match format!("http://localhost:{plain_port}").parse() {
        Ok(h) => hosts.push(h),
        Err(e) => return vec![unreachable("host-broker-injected", format!("{e}"))],
    }
    let args = vec![
        ("broker".to_string(), echo.port.to_string()),
        ("plain".to_string(), plain_port.to_string()),
        ("placeholder".to_string(), placeholder.clone()),
        ("ca".to_string(), broker.ca().certificate_pem()),
    ];
    let network = Network::Brokered(BrokeredNetwork {
        hosts,
        intercept: broker as Arc<dyn Intercept>,
    });
    let run = ctx.run_with_network("P8", &args, network).await;
    let mut checks = Vec::new();
    let got = echo.seen.lock().map(|s| s.clone()).unwrap_or_default();
    let accepted = echo.accepted.load(std::sync::atomic::Ordering::Relaxed);
    // The value in anything the child reported (its environment, the echo
    // it got back) is a leak into the sandbox.
    let leaked = run.checks.iter().any(|c| c.detail.contains(&value))
        || run.info.values().any(|v| v.contains(&value))
        || run.stderr.contains(&value);
    let environment = run.info.contains_key("broker-environment");
    checks.push(if leaked {
        fail(
            "host-broker-injected",
            "the value appeared in what the sandboxed child read",
        )
    } else if got.iter().any(|v| v.contains(&placeholder)) {
        fail(
            "host-broker-injected",
            "the bound target got the placeholder: the proxy did not swap it in",
        )
    } else if got.contains(&value) && environment {
        pass(
            "host-broker-injected",
            "the bound target got the value, set by the broker; the child's environment and \
             the echo it got back hold no value",
        )
    } else if accepted > 0 {
        fail(
            "host-broker-injected",
            format!(
                "{accepted} connection(s) reached the bound target and none carried the value: \
                 the proxy tunnelled instead of the broker"
            ),
        )
    } else {
        unreachable("host-broker-injected", "nothing reached the bound target")
    });
    let plain = plain_seen.lock().map(|s| s.clone()).unwrap_or_default();
    checks.push(if plain.iter().any(|l| l.contains(&placeholder)) {
        fail(
            "host-broker-unbound-clean",
            "the unbound target got the placeholder",
        )
    } else {
        pass(
            "host-broker-unbound-clean",
            "no request with the placeholder reached the unbound target",
        )
    });
    // The child's controls were checked in P8's first run.
    checks.extend(
        run.into_checks()
            .into_iter()
            .filter(|c| !c.name.starts_with("control-")),
    );
    checks
}

/// The child side (with `broker` in its arguments).
pub(crate) fn child(r: &mut Reporter, args: &ProbeArgs) {
    let port = |k: &str| args.get(k).and_then(|p| p.parse::<u16>().ok()).unwrap_or(0);
    let placeholder = args.get("placeholder").cloned().unwrap_or_default();
    let ca = args.get("ca").cloned().unwrap_or_default();
    match call_bound(port("broker"), &ca) {
        Ok(answer) if answer.contains(" 200 ") && answer.ends_with(&placeholder) => r.check(
            "broker-control",
            ProbeStatus::Pass,
            "the bound target answered through the broker; its echo came back as the placeholder",
        ),
        Ok(answer) => r.check("broker-control", ProbeStatus::Fail, answer),
        Err(Bound::NotTerminated(e)) => r.check("broker-control", ProbeStatus::Fail, e),
        Err(Bound::Other(e)) => r.check("broker-control", ProbeStatus::Unreachable, e),
    }
    let get = format!(
        "GET http://localhost:{plain}/{placeholder} HTTP/1.1\r\nHost: localhost:{plain}\r\n\r\n",
        plain = port("plain")
    );
    match plain(&get) {
        Ok(status) if status.contains(" 403 ") => {
            r.check("broker-unbound", ProbeStatus::Pass, status)
        }
        Ok(status) if status.contains(" 200 ") => {
            r.check("broker-unbound", ProbeStatus::Fail, status)
        }
        Ok(status) => r.check("broker-unbound", ProbeStatus::Unreachable, status),
        Err(e) => r.check("broker-unbound", ProbeStatus::Unreachable, e),
    }
    // Another port of the bound host, through the proxy: refused (the
    // broker claims the host), never a plain tunnel.
    let other = format!("CONNECT localhost:{} HTTP/1.1\r\n\r\n", port("plain"));
    match plain(&other) {
        Ok(status) if status.contains(" 403 ") => {
            r.check("broker-tunnel-other-port", ProbeStatus::Pass, status)
        }
        Ok(status) if status.contains(" 200 ") => {
            r.check("broker-tunnel-other-port", ProbeStatus::Fail, status)
        }
        Ok(status) => r.check("broker-tunnel-other-port", ProbeStatus::Unreachable, status),
        Err(e) => r.check("broker-tunnel-other-port", ProbeStatus::Unreachable, e),
    }
    // The bound host directly, around the proxy: no way.
    let bound = std::net::SocketAddr::from(([127, 0, 0, 1], port("broker")));
    r.forbidden(
        "broker-direct",
        super::p8::direct(bound),
        &super::p8::NO_WAY,
    );
    // For the host to search: everything in the environment.
    let env: Vec<String> = std::env::vars_os()
        .map(|(k, v)| format!("{}={}", k.to_string_lossy(), v.to_string_lossy()))
        .collect();
    r.info("broker-environment", env.join(" "));
}

/// Why the call to the bound target did not answer.
enum Bound {
    /// TLS met a certificate not of the run's CA: no broker in the way.
    NotTerminated(String),
    /// Anything else (no proxy, a refused CONNECT, a socket error).
    Other(String),
}

/// A GET to the bound target through the proxy's `CONNECT`, trusting
/// only `ca_pem`: the status line and the body.
fn call_bound(port: u16, ca_pem: &str) -> Result<String, Bound> {
    let other = |e: String| Bound::Other(e);
    let proxy =
        super::p8::proxy_addr().ok_or(Bound::Other("no http_proxy in the environment".into()))?;
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots
            .add(c.map_err(|e| other(e.to_string()))?)
            .map_err(|e| other(e.to_string()))?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| other(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let mut tcp = TcpStream::connect_timeout(&proxy, Duration::from_secs(2))
        .map_err(|e| other(format!("cannot reach the proxy: {e}")))?;
    let _ = tcp.set_read_timeout(Some(Duration::from_secs(5)));
    write!(tcp, "CONNECT localhost:{port} HTTP/1.1\r\n\r\n").map_err(|e| other(e.to_string()))?;
    let mut line = Vec::new();
    let mut b = [0u8; 1];
    while !line.ends_with(b"\r\n\r\n") && line.len() < 1024 {
        match tcp.read(&mut b) {
            Ok(1) => line.push(b[0]),
            _ => break,
        }
    }
    let status = String::from_utf8_lossy(&line).into_owned();
    if !status.contains(" 200 ") {
        return Err(other(format!("the proxy answered {}", status.trim())));
    }
    let name = ServerName::try_from("localhost").map_err(|e| other(e.to_string()))?;
    let conn =
        rustls::ClientConnection::new(Arc::new(config), name).map_err(|e| other(e.to_string()))?;
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    write!(
        tls,
        "GET /probe HTTP/1.1\r\nHost: localhost:{port}\r\nConnection: close\r\n\r\n"
    )
    .map_err(|e| {
        // A certificate not of the run's CA: the proxy tunnelled.
        if e.to_string().contains("certificate") || e.to_string().contains("UnknownIssuer") {
            Bound::NotTerminated(format!(
                "the connection through the proxy was not the broker's (its certificate is \
                     not of the run's CA: the proxy tunnelled it): {e}"
            ))
        } else {
            other(format!("TLS through the proxy failed: {e}"))
        }
    })?;
    let mut out = Vec::new();
    match tls.read_to_end(&mut out) {
        Ok(_) => {}
        // A server that ends without close_notify: what came is the answer.
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && !out.is_empty() => {}
        Err(e) => return Err(other(format!("reading the answer failed: {e}"))),
    }
    let out = String::from_utf8_lossy(&out).into_owned();
    let (head, body) = out.split_once("\r\n\r\n").unwrap_or((&out, ""));
    // The broker re-frames the answer as chunks: the body is their data.
    let mut data = String::new();
    let mut rest = body;
    while let Some((size, after)) = rest.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 || after.len() < n {
            break;
        }
        data.push_str(&after[..n]);
        rest = after[n..].trim_start_matches("\r\n");
    }
    let status = head.lines().next().unwrap_or_default();
    Ok(format!("{status} {data}"))
}

/// Sends `request` to the proxy as plain HTTP: the status line.
fn plain(request: &str) -> Result<String, String> {
    let proxy = super::p8::proxy_addr().ok_or("no http_proxy in the environment")?;
    let mut s = TcpStream::connect_timeout(&proxy, Duration::from_secs(2))
        .map_err(|e| format!("cannot reach the proxy: {e}"))?;
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    s.write_all(request.as_bytes()).map_err(|e| e.to_string())?;
    // The status line only (a tunnel that opens stays open; a proxy that
    // trickles is cut at 1 KiB).
    let mut out = Vec::new();
    let mut b = [0u8; 1];
    while !out.ends_with(b"\r\n") && out.len() < 1024 {
        match s.read(&mut b) {
            Ok(1) => out.push(b[0]),
            _ => break,
        }
    }
    Ok(String::from_utf8_lossy(&out).trim_end().to_owned())
}
