//! Tests of the allowlist, the address guard and the proxy (a real proxy
//! between real sockets on 127.0.0.1).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex};

use super::*;

fn pats(list: &[&str]) -> Vec<HostPattern> {
    list.iter().map(|s| s.parse().unwrap()).collect()
}

#[test]
fn patterns_parse_print_and_refuse_junk() {
    for (raw, shown) in [
        ("api.example.com:443", "api.example.com:443"),
        ("API.Example.COM.", "api.example.com"),
        ("*.example.org:8080", "*.example.org:8080"),
        ("10.0.0.5:80", "10.0.0.5:80"),
        ("[::1]:8080", "[::1]:8080"),
        ("[::1]", "[::1]"),
        ("localhost:3000", "localhost:3000"),
    ] {
        let p: HostPattern = raw.parse().unwrap();
        assert_eq!(p.to_string(), shown, "{raw}");
        let back: HostPattern = p.to_string().parse().unwrap();
        assert_eq!(back, p);
    }
    for bad in [
        "",
        "*",
        "*.",
        "a.*.com",
        "http://a.com",
        "a.com/x",
        "u@a.com",
        "a.com:0",
        "a.com:70000",
        "a.com:x",
        "[::1",
        "[nothost]:80",
        "a..com",
        "-_-",
        "::1",
    ] {
        let e = bad.parse::<HostPattern>().unwrap_err().to_string();
        assert!(e.contains("HOST[:PORT]"), "{bad}: {e}");
    }
    let json = serde_json::to_string(&pats(&["*.a.com:1"])).unwrap();
    assert_eq!(json, r#"["*.a.com:1"]"#);
    assert!(serde_json::from_str::<Vec<HostPattern>>(r#"["a b"]"#).is_err());
}

#[test]
fn targets_match_by_name_suffix_ip_and_port() {
    let allow = pats(&[
        "api.example.com",
        "*.svc.example.org:8443",
        "10.0.0.5:80",
        "[::1]:9",
    ]);
    let ok = |h: &str, port| match_target(&allow, &TargetHost::parse(h).unwrap(), port).is_ok();
    assert!(ok("api.example.com", 443));
    assert!(ok("API.example.com.", 80));
    assert!(!ok("api.example.com", 8443), "no port: 80 and 443 only");
    assert!(ok("a.b.svc.example.org", 8443));
    assert!(
        !ok("svc.example.org", 8443),
        "a wildcard never matches the apex"
    );
    assert!(!ok("evilsvc.example.org", 8443));
    assert!(!ok("a.svc.example.org", 443));
    assert!(ok("10.0.0.5", 80));
    assert!(!ok("10.0.0.6", 80));
    assert!(ok("[::1]", 9));
    assert!(!ok("example.com", 443));
    let e = match_target(&allow, &TargetHost::parse("1.2.3.4").unwrap(), 80).unwrap_err();
    assert!(e.0.contains("literally"), "{e}");
}

#[test]
fn the_guard_refuses_non_public_addresses_unless_named() {
    let at = |ip: &str| vec![SocketAddr::new(ip.parse().unwrap(), 80)];
    let name = TargetHost::Name("svc.example.com".into());
    let by_name: HostPattern = "svc.example.com".parse().unwrap();
    assert!(check_addresses(&by_name, &name, &at("93.184.216.34")).is_ok());
    for private in [
        "127.0.0.1",
        "10.0.0.1",
        "169.254.169.254",
        "::1",
        "::ffff:10.0.0.1",
    ] {
        let e = check_addresses(&by_name, &name, &at(private)).unwrap_err();
        assert!(
            e.0.contains("only an allowlist entry naming"),
            "{private}: {e}"
        );
    }
    // One bad address among good ones refuses the name.
    let mut mixed = at("93.184.216.34");
    mixed.extend(at("10.1.1.1"));
    assert!(check_addresses(&by_name, &name, &mixed).is_err());
    assert!(check_addresses(&by_name, &name, &[]).is_err());
    // `localhost` may be loopback, and only loopback.
    let lh: HostPattern = "localhost:80".parse().unwrap();
    let lname = TargetHost::Name("localhost".into());
    assert!(check_addresses(&lh, &lname, &at("127.0.0.1")).is_ok());
    assert!(check_addresses(&lh, &lname, &at("::1")).is_ok());
    assert!(check_addresses(&lh, &lname, &at("10.0.0.1")).is_err());
    // An IP literal named in the list is its own permission.
    let lit: HostPattern = "10.0.0.5:80".parse().unwrap();
    let ip = TargetHost::Ip("10.0.0.5".parse().unwrap());
    assert!(check_addresses(&lit, &ip, &at("10.0.0.5")).is_ok());
}

#[test]
fn private_addresses_are_not_public() {
    for s in [
        "127.0.0.1",
        "10.1.2.3",
        "172.16.0.1",
        "192.168.1.1",
        "169.254.169.254",
        "0.0.0.0",
        "100.100.100.200",
        "::1",
        "fe80::1",
        "fd00:ec2::254",
        "::ffff:127.0.0.1",
        "64:ff9b::a9fe:a9fe",
        "224.0.0.1",
        "255.255.255.255",
        "64:ff9b:1::a9fe:a9fe",
        "::ffff:0:a9fe:a9fe",
        "2001:0:4136:e378:8000:63bf:3fff:fdd2",
        "2001:2::1",
        "100::1",
    ] {
        assert!(!is_public_ip(s.parse().unwrap()), "{s} should be refused");
    }
    for s in ["93.184.216.34", "1.1.1.1", "2606:4700:4700::1111"] {
        assert!(is_public_ip(s.parse().unwrap()), "{s} should be allowed");
    }
}

/// A real upstream on 127.0.0.1 that answers each connection with the
/// request head it got, and records every head.
fn upstream() -> (u16, Arc<Mutex<Vec<String>>>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = Arc::clone(&seen);
    std::thread::spawn(move || {
        for c in l.incoming() {
            let Ok(mut c) = c else { return };
            let mut buf = Vec::new();
            let mut chunk = [0u8; 1024];
            while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                match c.read(&mut chunk) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => buf.extend_from_slice(&chunk[..n]),
                }
            }
            let head = String::from_utf8_lossy(&buf).into_owned();
            s.lock().unwrap().push(head.clone());
            let _ = write!(
                c,
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{head}",
                head.len()
            );
        }
    });
    (port, seen)
}

fn proxy(allow: &[&str], limits: EgressLimits) -> (EgressProxy, u16) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let p = EgressProxy::serve(OwnedFd::from(l), pats(allow), limits).unwrap();
    (p, port)
}

/// Sends `request` to the proxy and returns everything it answers.
fn ask(proxy_port: u16, request: &str) -> String {
    let mut c = TcpStream::connect(("127.0.0.1", proxy_port)).unwrap();
    c.write_all(request.as_bytes()).unwrap();
    let mut out = String::new();
    let _ = c.read_to_string(&mut out);
    out
}

#[test]
fn the_proxy_relays_listed_targets_and_refuses_the_rest() {
    let (up, seen) = upstream();
    let (p, port) = proxy(&[&format!("localhost:{up}")], EgressLimits::default());

    // Plain HTTP: origin form, proxy headers dropped, Connection: close.
    let got = ask(
        port,
        &format!(
            "GET http://localhost:{up}/x?y=1 HTTP/1.1\r\nHost: metadata.internal\r\n\
             Proxy-Authorization: secret\r\nConnection: keep-alive\r\n\r\n"
        ),
    );
    assert!(got.starts_with("HTTP/1.1 200 OK"), "{got}");
    assert!(got.contains("GET /x?y=1 HTTP/1.1\r\n"), "{got}");
    // The target's Host replaces the program's.
    assert!(got.contains(&format!("Host: localhost:{up}\r\n")), "{got}");
    assert!(!got.contains("metadata"), "{got}");
    assert!(
        !got.contains("secret") && !got.contains("keep-alive"),
        "{got}"
    );

    // CONNECT, then bytes of any protocol.
    let got = ask(
        port,
        &format!("CONNECT localhost:{up} HTTP/1.1\r\n\r\nPING / HTTP/1.1\r\n\r\n"),
    );
    assert!(
        got.starts_with("HTTP/1.1 200 Connection established\r\n\r\nHTTP/1.1 200 OK"),
        "{got}"
    );
    assert!(got.contains("PING / HTTP/1.1"), "{got}");

    let refused = [
        // Another port, the IP literal, a name that is not listed.
        format!("CONNECT localhost:{} HTTP/1.1\r\n\r\n", up + 1),
        format!("CONNECT 127.0.0.1:{up} HTTP/1.1\r\n\r\n"),
        format!("GET http://127.0.0.1:{up}/ HTTP/1.1\r\n\r\n"),
        format!("CONNECT example.com:{up} HTTP/1.1\r\n\r\n"),
    ];
    for r in &refused {
        let got = ask(port, r);
        assert!(got.starts_with("HTTP/1.1 403 Forbidden"), "{r}: {got}");
    }
    for bad in [
        "GET / HTTP/1.1\r\n\r\n",
        "BREW coffee\r\n\r\n",
        "GET ftp://localhost/ HTTP/1.1\r\n\r\n",
        "GET http://u:p@localhost/ HTTP/1.1\r\n\r\n",
        "CONNECT localhost HTTP/1.1\r\n\r\n",
        "GET http://localhost/a\nHost:x HTTP/1.1\r\n\r\n",
        "GET http://localhost/ HTTP/1.1\r\nX-A: b\nHost: evil\r\n\r\n",
        "GET http://localhost/ HTTP/1.1\r\nno colon\r\n\r\n",
    ] {
        let got = ask(port, bad);
        assert!(
            got.starts_with("HTTP/1.1 400 Bad Request"),
            "{bad:?}: {got}"
        );
    }
    // Only the two allowed requests reached the upstream.
    assert_eq!(seen.lock().unwrap().len(), 2, "{:?}", seen.lock().unwrap());
    let s = p.stats();
    assert_eq!((s.allowed, s.refused), (2, 12), "{s:?}");
    assert!(s.bytes > 0);
}

#[test]
fn a_listed_name_that_resolves_to_loopback_is_refused() {
    // A name other than `localhost` that the host resolves to a non-public
    // address; the machines this runs on have their hostname in
    // /etc/hosts with a loopback address.
    let Some(name) = private_alias() else {
        panic!(
            "no name other than localhost in /etc/hosts resolves to a non-public address; \
             add one (e.g. `127.0.1.1 cordon-test-alias`) to run this test"
        )
    };
    let (up, seen) = upstream();
    let (_p, port) = proxy(&[&format!("{name}:{up}")], EgressLimits::default());
    let got = ask(port, &format!("CONNECT {name}:{up} HTTP/1.1\r\n\r\n"));
    assert!(got.starts_with("HTTP/1.1 403 Forbidden"), "{got}");
    assert!(got.contains("only an allowlist entry naming"), "{got}");
    assert!(seen.lock().unwrap().is_empty());
}

/// A name from /etc/hosts, not `localhost`, with a non-public address.
pub(crate) fn private_alias() -> Option<String> {
    let hosts = std::fs::read_to_string("/etc/hosts").ok()?;
    hosts.lines().find_map(|l| {
        let mut words = l.split('#').next()?.split_whitespace();
        let ip: std::net::IpAddr = words.next()?.parse().ok()?;
        if is_public_ip(ip) {
            return None;
        }
        words
            .find(|w| *w != "localhost" && normalise_name(w).is_some())
            .map(str::to_owned)
    })
}

#[test]
fn limits_refuse_connections_past_the_cap_and_stop_ends_everything() {
    let (up, _) = upstream();
    let limits = EgressLimits {
        max_connections: 2,
        ..EgressLimits::default()
    };
    let (p, port) = proxy(&[&format!("localhost:{up}")], limits);
    let req = format!("GET http://localhost:{up}/ HTTP/1.1\r\n\r\n");
    assert!(ask(port, &req).starts_with("HTTP/1.1 200"));
    assert!(ask(port, &req).starts_with("HTTP/1.1 200"));
    let got = ask(port, &req);
    assert!(got.starts_with("HTTP/1.1 503"), "{got}");
    // Past the cap the listener is closed: connects are refused outright.
    let mut closed = false;
    for _ in 0..100 {
        if TcpStream::connect(("127.0.0.1", port)).is_err() {
            closed = true;
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(closed, "the listener still accepts past the cap");
    // An open tunnel is closed when the proxy is dropped.
    let (p2, port2) = proxy(&[&format!("localhost:{up}")], EgressLimits::default());
    let mut c = TcpStream::connect(("127.0.0.1", port2)).unwrap();
    c.write_all(format!("CONNECT localhost:{up} HTTP/1.1\r\n\r\n").as_bytes())
        .unwrap();
    let mut first = [0u8; 12];
    c.read_exact(&mut first).unwrap();
    assert_eq!(&first, b"HTTP/1.1 200");
    drop(p2);
    c.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    let mut rest = Vec::new();
    let r = c.read_to_end(&mut rest);
    assert!(
        r.is_ok(),
        "the tunnel should be closed, not time out: {r:?}"
    );
    drop(p);
}
