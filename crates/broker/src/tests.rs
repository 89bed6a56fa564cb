//! The broker's parts against real TLS on 127.0.0.1 and hostile heads.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;

use rustls::pki_types::ServerName;

use super::*;

const HOST: &str = "api.cordon.test";

fn secret(header: Option<&str>) -> Secret {
    Secret::new(
        "API",
        "s3cret-value-0123".into(),
        vec![HOST.parse().unwrap()],
        header.map(|h| h.parse().unwrap()),
    )
    .unwrap()
}

/// Serves one TLS connection with `config` on a fresh port: reads
/// `ping`, answers `pong`. Returns the port and the server's thread.
fn serve_once(
    config: Arc<rustls::ServerConfig>,
) -> (u16, std::thread::JoinHandle<Result<(), String>>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let t = std::thread::spawn(move || {
        let (sock, _) = l.accept().map_err(|e| e.to_string())?;
        let conn = rustls::ServerConnection::new(config).map_err(|e| e.to_string())?;
        let mut tls = rustls::StreamOwned::new(conn, sock);
        let mut ping = [0u8; 4];
        tls.read_exact(&mut ping).map_err(|e| e.to_string())?;
        tls.write_all(b"pong").map_err(|e| e.to_string())?;
        tls.conn.send_close_notify();
        let _ = tls.flush();
        Ok(())
    });
    (port, t)
}

/// Connects to `port` as `name` with `config`; the answer to `ping`.
fn ask(config: Arc<rustls::ClientConfig>, port: u16, name: &str) -> Result<String, String> {
    let sock = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let conn =
        rustls::ClientConnection::new(config, ServerName::try_from(name.to_owned()).unwrap())
            .map_err(|e| e.to_string())?;
    let mut tls = rustls::StreamOwned::new(conn, sock);
    tls.write_all(b"ping").map_err(|e| e.to_string())?;
    let mut pong = [0u8; 4];
    tls.read_exact(&mut pong).map_err(|e| e.to_string())?;
    Ok(String::from_utf8_lossy(&pong).into_owned())
}

/// A client that takes any certificate: what a server shows is then the
/// server's decision alone.
fn accepting_anything() -> Arc<rustls::ClientConfig> {
    use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
    #[derive(Debug)]
    struct Any;
    impl ServerCertVerifier for Any {
        fn verify_server_cert(
            &self,
            _: &rustls::pki_types::CertificateDer<'_>,
            _: &[rustls::pki_types::CertificateDer<'_>],
            _: &ServerName<'_>,
            _: &[u8],
            _: rustls::pki_types::UnixTime,
        ) -> Result<ServerCertVerified, rustls::Error> {
            Ok(ServerCertVerified::assertion())
        }
        fn verify_tls12_signature(
            &self,
            _: &[u8],
            _: &rustls::pki_types::CertificateDer<'_>,
            _: &rustls::DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            Ok(HandshakeSignatureValid::assertion())
        }
        fn verify_tls13_signature(
            &self,
            _: &[u8],
            _: &rustls::pki_types::CertificateDer<'_>,
            _: &rustls::DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            Ok(HandshakeSignatureValid::assertion())
        }
        fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
            rustls::crypto::ring::default_provider()
                .signature_verification_algorithms
                .supported_schemes()
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Arc::new(
        rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(Any))
            .with_no_client_auth(),
    )
}

/// A client that trusts only `ca`.
fn trusting(ca: &RunCa) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca.certificate_der()).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Arc::new(
        rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth(),
    )
}

#[test]
fn a_client_trusting_the_run_ca_gets_the_leaf_for_the_connect_host_only() {
    let ca = Arc::new(RunCa::new().unwrap());
    // Control: the name the CONNECT asked for.
    let (port, server) = serve_once(ca.server_config(HOST).unwrap());
    assert_eq!(ask(trusting(&ca), port, HOST).unwrap(), "pong");
    server.join().unwrap().unwrap();
    // Another name in the client hello (a fronted domain): no leaf, even
    // for a client that would take any certificate (so it is the server
    // that refuses, not the client's own name check).
    let (port, server) = serve_once(ca.server_config(HOST).unwrap());
    let err = ask(accepting_anything(), port, "other.cordon.test").unwrap_err();
    assert!(
        server.join().unwrap().is_err(),
        "the server finished a handshake: {err}"
    );
    // Control: that client does finish a handshake for the CONNECT's name.
    let (port, server) = serve_once(ca.server_config(HOST).unwrap());
    assert_eq!(ask(accepting_anything(), port, HOST).unwrap(), "pong");
    server.join().unwrap().unwrap();
    // A client that does not trust the run's CA (the default roots).
    let (port, server) = serve_once(ca.server_config(HOST).unwrap());
    let err = ask(upstream::client_config(None).unwrap(), port, HOST).unwrap_err();
    assert!(err.contains("UnknownIssuer"), "{err}");
    let _ = server.join();
    // Another run's CA does not vouch for this run's leaves.
    let other = RunCa::new().unwrap();
    let (port, server) = serve_once(ca.server_config(HOST).unwrap());
    assert!(ask(trusting(&other), port, HOST).is_err());
    let _ = server.join();
}

#[test]
fn leaves_are_bounded_per_run() {
    let ca = RunCa::new().unwrap();
    for bad in ["*.cordon.test", "127.0.0.1", "a..b", "", "a b.test"] {
        assert!(ca.leaf(bad).is_err(), "a leaf for {bad:?}");
    }
    for i in 0..MAX_LEAVES {
        ca.leaf(&format!("n{i}.cordon.test")).unwrap();
    }
    // The same names again are kept, a new one refused.
    ca.leaf("n0.cordon.test").unwrap();
    assert!(matches!(
        ca.leaf("one-more.cordon.test"),
        Err(BrokerError::TooManyNames(MAX_LEAVES))
    ));
}

#[test]
fn the_upstream_is_verified_with_the_operators_ca() {
    // The upstream's own CA, as a private host's would be.
    let private = Arc::new(RunCa::new().unwrap());
    let pem = private.certificate_pem();
    let (port, server) = serve_once(private.server_config(HOST).unwrap());
    let with = upstream::client_config(Some(pem.as_bytes())).unwrap();
    assert_eq!(ask(with, port, HOST).unwrap(), "pong");
    server.join().unwrap().unwrap();
    // Control: without it, the WebPKI roots alone refuse the server.
    let (port, server) = serve_once(private.server_config(HOST).unwrap());
    let err = ask(upstream::client_config(None).unwrap(), port, HOST).unwrap_err();
    assert!(err.contains("UnknownIssuer"), "{err}");
    let _ = server.join();
    // A file with no certificate is refused, not ignored.
    assert!(matches!(
        upstream::client_config(Some(b"not a certificate")),
        Err(BrokerError::UpstreamCa(_))
    ));
}

#[test]
fn secrets_are_checked_and_never_printed() {
    let hosts = || vec![HOST.parse().unwrap()];
    assert!(Secret::new("A", "short".into(), hosts(), None).is_err());
    assert!(Secret::new("A", "line\r\nX-Evil: 1".into(), hosts(), None).is_err());
    assert!(Secret::new("A", "long-enough-value".into(), vec![], None).is_err());
    assert!(Secret::new("a b", "long-enough-value".into(), hosts(), None).is_err());
    for bad in [
        "Authorization Bearer {}",
        "Auth: {} {}",
        "Auth: none",
        "Bad Name: {}",
        "A: {}\r\n",
    ] {
        assert!(bad.parse::<HeaderTemplate>().is_err(), "{bad:?}");
    }
    // Exact names over HTTPS only.
    for bad in ["*.cordon.test", "http://api.cordon.test", "127.0.0.1"] {
        let h = vec![bad.parse().unwrap()];
        assert!(
            Secret::new("A", "long-enough-value".into(), h, None).is_err(),
            "{bad}"
        );
    }
    let on_port = Secret::new(
        "A",
        "long-enough-value".into(),
        vec!["https://api.cordon.test:8443".parse().unwrap()],
        None,
    )
    .unwrap();
    assert!(on_port.bound_to(HOST, 8443) && !on_port.bound_to(HOST, 443));
    let (a, b) = (secret(None), secret(None));
    assert_ne!(
        a.placeholder(),
        b.placeholder(),
        "placeholders are per secret and run"
    );
    assert!(!a.placeholder().contains("s3cret"));
    assert!(!format!("{a:?}").contains("s3cret-value"), "{a:?}");
}

fn text(r: Rewritten) -> String {
    String::from_utf8(r.head).unwrap()
}

#[test]
fn a_placeholder_is_swapped_toward_its_hosts_only() {
    let s = secret(None);
    let p = s.placeholder().to_owned();
    let head = format!("GET /v1 HTTP/1.1\r\nHost: {HOST}\r\nX-Api-Key: key={p}\r\n\r\n");
    let out = rewrite(head.as_bytes(), HOST, 443, std::slice::from_ref(&s)).unwrap();
    assert_eq!(out.carries, vec!["API"]);
    assert!(!format!("{out:?}").contains("s3cret"), "{out:?}");
    let t = text(out);
    assert!(
        t.contains("X-Api-Key: key=s3cret-value-0123\r\n") && !t.contains(&p),
        "{t}"
    );

    // The same head to a host the secret is not bound to.
    let other = head.replace(HOST, "evil.cordon.test");
    let why = rewrite(
        other.as_bytes(),
        "evil.cordon.test",
        443,
        std::slice::from_ref(&s),
    )
    .unwrap_err();
    assert!(why.0.contains("not bound to"), "{why}");
    // By IP: the binding names the host by name only.
    let by_ip = head.replace(HOST, "127.0.0.1");
    assert!(rewrite(by_ip.as_bytes(), "127.0.0.1", 443, std::slice::from_ref(&s)).is_err());
    // In the URL.
    let in_url = format!("GET /v1?key={p} HTTP/1.1\r\nHost: {HOST}\r\n\r\n");
    let why = rewrite(in_url.as_bytes(), HOST, 443, std::slice::from_ref(&s)).unwrap_err();
    assert!(why.0.contains("request line"), "{why}");
    // Another port than the binding's (443 when it names none).
    assert!(rewrite(
        head.replace(HOST, &format!("{HOST}:8443")).as_bytes(),
        HOST,
        8443,
        std::slice::from_ref(&s)
    )
    .is_err());
    // No placeholder: sent as it came but for the answer's encoding,
    // nothing carried.
    let plain = format!(
        "GET / HTTP/1.1\r\nHost: {HOST}\r\nAccept-Encoding: gzip\r\nRange: bytes=0-3\r\n\r\n"
    );
    let out = rewrite(plain.as_bytes(), HOST, 443, &[s]).unwrap();
    assert!(out.carries.is_empty());
    assert_eq!(
        text(out),
        format!("GET / HTTP/1.1\r\nHost: {HOST}\r\nAccept-Encoding: identity\r\n\r\n"),
        "the answer comes back whole and unencoded, for the scrubber"
    );
}

#[test]
fn a_binding_with_a_header_sets_it_and_allows_no_other_place() {
    let s = secret(Some("Authorization: Bearer {}"));
    let p = s.placeholder().to_owned();
    // The program's own Authorization is replaced.
    let head = format!("GET / HTTP/1.1\r\nHost: {HOST}\r\nauthorization: Basic Zm9v\r\n\r\n");
    let t = text(rewrite(head.as_bytes(), HOST, 443, std::slice::from_ref(&s)).unwrap());
    assert!(
        t.contains("Authorization: Bearer s3cret-value-0123\r\n"),
        "{t}"
    );
    assert!(!t.contains("Basic"), "{t}");
    // The placeholder in a header the binding does not name.
    let elsewhere = format!("GET / HTTP/1.1\r\nHost: {HOST}\r\nX-Other: {p}\r\n\r\n");
    let why = rewrite(elsewhere.as_bytes(), HOST, 443, std::slice::from_ref(&s)).unwrap_err();
    assert!(why.0.contains("names no other place"), "{why}");
    // Not set toward other hosts.
    let other = "GET / HTTP/1.1\r\nHost: else.cordon.test\r\n\r\n";
    let t = text(rewrite(other.as_bytes(), "else.cordon.test", 443, &[s]).unwrap());
    assert!(!t.contains("s3cret"), "{t}");
}

#[test]
fn heads_the_server_could_read_otherwise_are_refused() {
    let s = secret(None);
    let refused = |head: String| {
        rewrite(head.as_bytes(), HOST, 443, std::slice::from_ref(&s))
            .expect_err(&format!("sent on: {head:?}"))
    };
    let h = |rest: &str| format!("POST / HTTP/1.1\r\nHost: {HOST}\r\n{rest}\r\n");
    // Smuggling: two framings, two lengths, an unknown coding.
    refused(h("Content-Length: 4\r\nTransfer-Encoding: chunked\r\n"));
    refused(h("Content-Length: 4\r\nContent-Length: 5\r\n"));
    refused(h("Transfer-Encoding: gzip, chunked\r\n"));
    refused(h("Content-Length: +4\r\n"));
    // A fronted domain: Host is not the CONNECT's.
    refused("GET / HTTP/1.1\r\nHost: other.cordon.test\r\n\r\n".into());
    refused(format!("GET / HTTP/1.1\r\nHost: {HOST}:8443\r\n\r\n"));
    refused(format!(
        "GET / HTTP/1.1\r\nHost: {HOST}\r\nHost: {HOST}\r\n\r\n"
    ));
    refused("GET / HTTP/1.1\r\n\r\n".into());
    // Header injection and lines the parser must not guess at.
    refused(h("X-A: one\rX-B: two\r\n"));
    refused(h("X-A: one\r\n two\r\n"));
    refused(h("X-A: o\0ne\r\n"));
    // A target a server would route by: a URL, an authority, a
    // network-path; and methods that leave HTTP.
    refused(format!(
        "GET https://evil.cordon.test/x HTTP/1.1\r\nHost: {HOST}\r\n\r\n"
    ));
    refused(format!(
        "GET //evil.cordon.test/x HTTP/1.1\r\nHost: {HOST}\r\n\r\n"
    ));
    refused(format!(
        "CONNECT evil.cordon.test:443 HTTP/1.1\r\nHost: {HOST}\r\n\r\n"
    ));
    refused(format!("GET * HTTP/1.1\r\nHost: {HOST}\r\n\r\n"));
    refused(h(
        "Connection: Upgrade\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\n",
    ));
    refused(h("Upgrade: websocket\r\n"));
    refused(h("Connection: keep-alive, Upgrade\r\n"));
    refused(format!("GET / HTTP/1.1\r\nHost: {HOST}:+443\r\n\r\n"));
    refused(h(&format!("Content-Length: {}\r\n", s.placeholder())));
    // HTTP/1.0, and bytes past the head.
    refused(format!("GET / HTTP/1.0\r\nHost: {HOST}\r\n\r\n"));
    refused(format!(
        "GET / HTTP/1.1\r\nHost: {HOST}\r\n\r\nGET /second HTTP/1.1\r\n"
    ));
    // Controls: the framings the broker reads the one way.
    for (rest, body) in [
        ("Content-Length: 4\r\n", Body::Length(4)),
        ("Transfer-Encoding: chunked\r\n", Body::Chunked),
        ("", Body::None),
    ] {
        assert_eq!(
            rewrite(h(rest).as_bytes(), HOST, 443, std::slice::from_ref(&s))
                .unwrap()
                .body,
            body
        );
    }
    assert!(rewrite(
        format!("GET / HTTP/1.1\r\nHost: {HOST}:443\r\n\r\n").as_bytes(),
        HOST,
        443,
        std::slice::from_ref(&s)
    )
    .is_ok());
    for ok in [
        format!("OPTIONS * HTTP/1.1\r\nHost: {HOST}\r\n\r\n"),
        format!("GET /a//b?c=//d HTTP/1.1\r\nHost: {HOST}\r\nConnection: keep-alive\r\n\r\n"),
    ] {
        assert!(
            rewrite(ok.as_bytes(), HOST, 443, std::slice::from_ref(&s)).is_ok(),
            "{ok:?}"
        );
    }
}

#[test]
fn the_value_is_scrubbed_however_the_pieces_fall() {
    let s = secret(None);
    let value = b"s3cret-value-0123".to_vec();
    let body = [b"echo: ".as_slice(), &value, b" and again ", &value, b"!"].concat();
    let want = format!("echo: {p} and again {p}!", p = s.placeholder());
    for split in 1..body.len() {
        let mut sc = Scrubber::new(vec![(value.clone(), s.placeholder().as_bytes().to_vec())]);
        let mut out = Vec::new();
        for piece in body.chunks(split) {
            out.extend(sc.push(piece));
        }
        out.extend(sc.finish());
        assert_eq!(String::from_utf8(out).unwrap(), want, "pieces of {split}");
    }
    // One value the start of another: the longer is replaced whole.
    let mut sc = Scrubber::new(vec![
        (b"0123456789abcdef".to_vec(), b"<short>".to_vec()),
        (b"0123456789abcdef-longer".to_vec(), b"<long>".to_vec()),
    ]);
    let mut out = sc.push(b"x 0123456789abcdef-longer y");
    out.extend(sc.finish());
    assert_eq!(out, b"x <long> y");
    assert!(!format!("{sc:?}").contains("0123"), "{sc:?}");
    // The shorter value ending a piece is not replaced early: the rest
    // of the longer one must not go out in clear.
    for split in 1..27 {
        let mut sc = Scrubber::new(vec![
            (b"0123456789abcdef".to_vec(), b"<short>".to_vec()),
            (b"0123456789abcdef-longer".to_vec(), b"<long>".to_vec()),
        ]);
        let mut out = Vec::new();
        for piece in b"x 0123456789abcdef-longer y".chunks(split) {
            out.extend(sc.push(piece));
        }
        out.extend(sc.finish());
        assert_eq!(out, b"x <long> y", "pieces of {split}");
    }
    // Parts of a value pass as they are: replacing them would tell a
    // program which of its guesses of the next byte matched (an oracle
    // that reads the value byte by byte through any echo).
    let mut sc = Scrubber::new(vec![(value.clone(), b"X".to_vec())]);
    let mut out = Vec::new();
    for guess in [b"s3cret-va".as_slice(), b"s3cret-vb", b"s3cret-value-012"] {
        out.extend(sc.push(guess));
    }
    out.extend(sc.finish());
    assert_eq!(out, b"s3cret-vas3cret-vbs3cret-value-012");
}
