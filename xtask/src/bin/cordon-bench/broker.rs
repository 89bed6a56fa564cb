//! The credential broker's cost: an HTTPS GET of 1 KiB from a server on
//! 127.0.0.1 (a test CA of its own), with no proxy, through the egress
//! proxy's plain `CONNECT` tunnel, and through the proxy with the broker
//! terminating it (a secret injected as a header, the answer scrubbed and
//! re-framed). Once the connection is up (keep-alive GETs), and the
//! connection's set-up (connect, `CONNECT`, handshake, first GET) in rows
//! of their own. In process, no sandbox: the sandbox's own cost is the
//! spawn rows'.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cordon_broker::{Broker, Secret};
use cordon_egress::{EgressLimits, EgressProxy, HostPattern, Intercept};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};

use crate::stats::{not_built, row, Row};
use crate::Plan;

const S: &str = "6. Credential broker: HTTPS GET of 1 KiB";

/// A keep-alive HTTPS server answering every request with 1 KiB.
fn server() -> (u16, CertificateDer<'static>, String) {
    let mut ca = rcgen::CertificateParams::default();
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca = rcgen::CertifiedIssuer::self_signed(ca, rcgen::KeyPair::generate().unwrap()).unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let leaf = rcgen::CertificateParams::new(vec!["localhost".to_owned()])
        .unwrap()
        .signed_by(&key, &ca)
        .unwrap();
    let config = Arc::new(
        rustls::ServerConfig::builder()
            .with_no_client_auth()
            .with_single_cert(
                vec![leaf.der().clone()],
                PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
            )
            .unwrap(),
    );
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for c in l.incoming().flatten() {
            let config = Arc::clone(&config);
            std::thread::spawn(move || {
                let _ = c.set_nodelay(true);
                let tls = rustls::ServerConnection::new(config).unwrap();
                let mut s = BufReader::new(rustls::StreamOwned::new(tls, c));
                let body = [b'x'; 1024];
                loop {
                    let mut line = String::new();
                    loop {
                        line.clear();
                        match s.read_line(&mut line) {
                            Ok(0) | Err(_) => return,
                            Ok(_) if line == "\r\n" => break,
                            Ok(_) => {}
                        }
                    }
                    let out = s.get_mut();
                    let _ = out.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 1024\r\n\r\n");
                    let _ = out.write_all(&body);
                    let _ = out.flush();
                }
            });
        }
    });
    (port, ca.der().clone(), ca.pem())
}

/// One GET over `s`, its answer read whole (by length or chunks).
fn get(s: &mut BufReader<rustls::StreamOwned<rustls::ClientConnection, TcpStream>>, port: u16) {
    s.get_mut()
        .write_all(format!("GET /kib HTTP/1.1\r\nHost: localhost:{port}\r\n\r\n").as_bytes())
        .unwrap();
    let mut length = None;
    let mut chunked = false;
    let mut line = String::new();
    loop {
        line.clear();
        s.read_line(&mut line).unwrap();
        let l = line.to_ascii_lowercase();
        if let Some(n) = l.strip_prefix("content-length:") {
            length = n.trim().parse::<usize>().ok();
        }
        chunked |= l.starts_with("transfer-encoding:") && l.contains("chunked");
        if line == "\r\n" {
            break;
        }
    }
    let mut got = 0;
    if chunked {
        loop {
            line.clear();
            s.read_line(&mut line).unwrap();
            let n = usize::from_str_radix(line.trim(), 16).unwrap();
            let mut buf = vec![0u8; n + 2];
            s.read_exact(&mut buf).unwrap();
            got += n;
            if n == 0 {
                break;
            }
        }
    } else {
        let mut buf = vec![0u8; length.unwrap()];
        s.read_exact(&mut buf).unwrap();
        got = buf.len();
    }
    assert_eq!(got, 1024);
}

/// How a client reaches the server.
#[derive(Clone, Copy)]
enum Way {
    Direct,
    Proxy(u16),
}

/// Connects (through the proxy's `CONNECT` if any) and shakes hands,
/// trusting `root`.
fn connect(
    way: Way,
    port: u16,
    root: &CertificateDer<'static>,
) -> BufReader<rustls::StreamOwned<rustls::ClientConnection, TcpStream>> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(root.clone()).unwrap();
    let config = Arc::new(
        rustls::ClientConfig::builder()
            .with_root_certificates(roots)
            .with_no_client_auth(),
    );
    let tcp = match way {
        Way::Direct => TcpStream::connect(("127.0.0.1", port)).unwrap(),
        Way::Proxy(proxy) => {
            let mut t = TcpStream::connect(("127.0.0.1", proxy)).unwrap();
            t.write_all(format!("CONNECT localhost:{port} HTTP/1.1\r\n\r\n").as_bytes())
                .unwrap();
            let mut answer = [0u8; 39];
            t.read_exact(&mut answer).unwrap();
            assert!(
                answer.starts_with(b"HTTP/1.1 200"),
                "{}",
                String::from_utf8_lossy(&answer)
            );
            t
        }
    };
    tcp.set_nodelay(true).unwrap();
    let name = ServerName::try_from("localhost").unwrap();
    let mut tls =
        rustls::StreamOwned::new(rustls::ClientConnection::new(config, name).unwrap(), tcp);
    while tls.conn.is_handshaking() {
        tls.conn.complete_io(&mut tls.sock).unwrap();
    }
    BufReader::new(tls)
}

fn proxy(port: u16, intercept: Option<Arc<dyn Intercept>>) -> (EgressProxy, u16) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let at = l.local_addr().unwrap().port();
    let allow: Vec<HostPattern> = vec![format!("localhost:{port}").parse().unwrap()];
    let p = EgressProxy::serve_intercepted(
        OwnedFd::from(l),
        allow,
        EgressLimits::default(),
        None,
        intercept,
    )
    .unwrap();
    (p, at)
}

/// Per-GET times once up, and set-up times, for one way.
fn measure(
    plan: &Plan,
    way: Way,
    port: u16,
    root: &CertificateDer<'static>,
) -> (Vec<Duration>, Vec<Duration>) {
    let n = if plan.quick { 200 } else { 2000 };
    let mut s = connect(way, port, root);
    for _ in 0..50 {
        get(&mut s, port);
    }
    let mut up = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        get(&mut s, port);
        up.push(t.elapsed());
    }
    let m = if plan.quick { 20 } else { 200 };
    let mut setup = Vec::with_capacity(m);
    for _ in 0..m {
        let t = Instant::now();
        let mut s = connect(way, port, root);
        get(&mut s, port);
        setup.push(t.elapsed());
    }
    (up, setup)
}

pub fn bench(plan: &Plan) -> Vec<Row> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let (port, server_ca, ca_pem) = server();
    let secret = Secret::new(
        "BENCH",
        "bench-secret-value-0123456789".into(),
        vec![format!("localhost:{port}").parse().unwrap()],
        Some("Authorization: Bearer {}".parse().unwrap()),
    );
    let broker =
        match secret.and_then(|s| Broker::new(vec![s], Vec::new(), Some(ca_pem.as_bytes()))) {
            Ok(b) => Arc::new(b),
            Err(e) => {
                return vec![not_built(S, "HTTPS GET through the broker", e.to_string())];
            }
        };
    let run_ca = broker.ca().certificate_der();
    let (_tunnel, tunnel_port) = proxy(port, None);
    let (_terminating, term_port) = proxy(port, Some(broker as Arc<dyn Intercept>));
    let (direct_up, direct_setup) = measure(plan, Way::Direct, port, &server_ca);
    let (tunnel_up, tunnel_setup) = measure(plan, Way::Proxy(tunnel_port), port, &server_ca);
    let (term_up, term_setup) = measure(plan, Way::Proxy(term_port), port, &run_ca);

    let direct = row(S, "GET, connection up: no proxy", direct_up).keyed("broker.get_direct");
    let mut tunnel =
        row(S, "GET, connection up: CONNECT tunnel", tunnel_up).keyed("broker.get_tunnel");
    tunnel.ratio = Some(tunnel.median / direct.median);
    let mut term = row(
        S,
        "GET, connection up: broker terminating (goal ≤ 1.5× tunnel)",
        term_up,
    )
    .keyed("broker.get_terminated");
    term.ratio = Some(term.median / tunnel.median);
    term.note = "ratio to the tunnel".into();
    term.extra
        .push(("broker.terminated_to_direct", term.median / direct.median));
    let setup_direct =
        row(S, "set-up + first GET: no proxy", direct_setup).keyed("broker.setup_direct");
    let mut setup_tunnel =
        row(S, "set-up + first GET: CONNECT tunnel", tunnel_setup).keyed("broker.setup_tunnel");
    setup_tunnel.ratio = Some(setup_tunnel.median / setup_direct.median);
    let mut setup_term = row(
        S,
        "set-up + first GET: broker (two handshakes, a leaf)",
        term_setup,
    )
    .keyed("broker.setup_terminated");
    setup_term.ratio = Some(setup_term.median / setup_tunnel.median);
    setup_term.note = "ratio to the tunnel".into();
    vec![direct, tunnel, term, setup_direct, setup_tunnel, setup_term]
}
