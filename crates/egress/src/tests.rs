//! Tests of the allowlist, the address guard and the proxy (a real proxy
//! between real sockets on 127.0.0.1).

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex};

use super::pattern::normalise_name;
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
        ("::1", "[::1]"),
        ("localhost:3000", "localhost:3000"),
        ("https://a.com", "https://a.com"),
        ("HTTP://127.0.0.1:8080/", "http://127.0.0.1:8080"),
        ("http://[::1]:9", "http://[::1]:9"),
    ] {
        let p: HostPattern = raw.parse().unwrap();
        assert_eq!(p.to_string(), shown, "{raw}");
        let back: HostPattern = p.to_string().parse().unwrap();
        assert_eq!(back, p);
        assert!(p.is_target());
    }
    for bad in [
        "",
        "*",
        "*.",
        "a.*.com",
        "ftp://a.com",
        "a.com/x",
        "https://a.com/x",
        "u@a.com",
        "a.com:0",
        "a.com:70000",
        "a.com:x",
        "[::1",
        "[nothost]:80",
        "a..com",
        "-_-",
        "::1]",
        // A range is never a target: a manifest cannot approve one.
        "10.0.0.0/8",
    ] {
        let e = bad.parse::<HostPattern>().unwrap_err().to_string();
        assert!(e.contains("HOST[:PORT]"), "{bad}: {e}");
    }
    let e = "10.0.0.0/8".parse::<HostPattern>().unwrap_err().to_string();
    assert!(e.contains("--allow-private"), "{e}");
    let json = serde_json::to_string(&pats(&["*.a.com:1"])).unwrap();
    assert_eq!(json, r#"["*.a.com:1"]"#);
    assert!(serde_json::from_str::<Vec<HostPattern>>(r#"["a b"]"#).is_err());
    // A private range round-trips through a policy's JSON, as a range.
    let range = HostPattern::private_range("10.1.2.3/8".parse().unwrap());
    assert_eq!(range.to_string(), "10.0.0.0/8");
    let json = serde_json::to_string(&range).unwrap();
    let back: HostPattern = serde_json::from_str(&json).unwrap();
    assert_eq!(back, range);
    assert!(!back.is_target());
}

#[test]
fn ranges_parse_and_hold_their_addresses() {
    let r = |s: &str| s.parse::<IpRange>().unwrap();
    assert_eq!(r("10.1.2.3").to_string(), "10.1.2.3/32");
    assert_eq!(r("172.20.1.1/12").to_string(), "172.16.0.0/12");
    assert_eq!(r("[::1]").to_string(), "::1/128");
    assert_eq!(r("fd00::1/8").to_string(), "fd00::/8");
    let ip = |s: &str| s.parse::<IpAddr>().unwrap();
    assert!(r("10.0.0.0/8").contains(ip("10.255.0.1")));
    assert!(!r("10.0.0.0/8").contains(ip("11.0.0.1")));
    assert!(r("10.0.0.0/8").contains(ip("::ffff:10.1.1.1")), "mapped v4");
    assert!(!r("10.0.0.0/8").contains(ip("fd00::1")));
    assert!(r("0.0.0.0/0").contains(ip("1.2.3.4")));
    assert!(r("fd00::/8").contains(ip("fd12::5")));
    assert!(r("127.0.0.1/32").contains(ip("127.0.0.1")));
    assert!(!r("127.0.0.1/32").contains(ip("127.0.0.2")));
    for bad in [
        "",
        "10.0.0.0/33",
        "::/129",
        "10.0.0.0/",
        "10.0.0.0/+8",
        "a.com/8",
        "10/8",
    ] {
        assert!(bad.parse::<IpRange>().is_err(), "{bad}");
    }
}

fn process(list: &[&str]) -> Allowlist {
    Allowlist::for_process(pats(list))
}

fn package(list: &[&str], approved: &[&str]) -> Allowlist {
    Allowlist::for_package(
        pats(list),
        approved.iter().map(|r| r.parse().unwrap()),
        Advice {
            list: "the package's network_access".into(),
            add_target: "add {target} to network_access".into(),
            allow_private: "grant with".into(),
        },
    )
}

#[test]
fn targets_match_by_name_suffix_ip_and_port() {
    let allow = process(&[
        "api.example.com",
        "*.svc.example.org:8443",
        "10.0.0.5:80",
        "[::1]:9",
    ]);
    let ok = |h: &str, port, a| {
        allow
            .match_target(&TargetHost::parse(h).unwrap(), port, a)
            .is_ok()
    };
    use Access::{Http, Https, Tunnel};
    assert!(ok("api.example.com", 443, Tunnel));
    assert!(ok("API.example.com.", 80, Http));
    assert!(
        !ok("api.example.com", 8443, Tunnel),
        "no port: 80 and 443 only"
    );
    assert!(ok("a.b.svc.example.org", 8443, Tunnel));
    assert!(ok("a.b.svc.example.org", 8443, Http));
    assert!(
        !ok("svc.example.org", 8443, Tunnel),
        "a wildcard never matches the apex"
    );
    assert!(!ok("evilsvc.example.org", 8443, Tunnel));
    assert!(!ok("a.svc.example.org", 443, Tunnel));
    assert!(ok("10.0.0.5", 80, Http));
    assert!(!ok("10.0.0.6", 80, Http));
    assert!(ok("[::1]", 9, Https));
    assert!(!ok("example.com", 443, Https));
    let e = allow
        .match_target(&TargetHost::parse("1.2.3.4").unwrap(), 80, Http)
        .unwrap_err();
    assert!(e.0.contains("literally"), "{e}");
    assert!(e.0.contains("--allow-host http://1.2.3.4:80"), "{e}");
    let e = allow
        .match_target(&TargetHost::parse("a.org").unwrap(), 8443, Tunnel)
        .unwrap_err();
    assert!(e.0.contains("--allow-host a.org:8443"), "{e}");
}

#[test]
fn schemes_decide_plain_http_the_same_way_in_both_lists() {
    use Access::{Http, Https, Tunnel};
    let name = |n: &str| TargetHost::Name(n.into());
    for allow in [
        process(&["https://a.com", "http://b.com:8080", "c.com:9000"]),
        package(&["https://a.com", "http://b.com:8080", "c.com:9000"], &[]),
    ] {
        let ok = |h: &str, port, a| allow.match_target(&name(h), port, a).is_ok();
        // https:// never allows plain HTTP; http:// allows both on its port.
        assert!(ok("a.com", 443, Https) && ok("a.com", 443, Tunnel));
        assert!(!ok("a.com", 443, Http) && !ok("a.com", 80, Http));
        let e = allow.match_target(&name("a.com"), 443, Http).unwrap_err();
        assert!(e.0.contains("http://a.com:443"), "{e}");
        assert!(ok("b.com", 8080, Http) && ok("b.com", 8080, Https));
        assert!(!ok("b.com", 80, Http));
        assert!(ok("c.com", 9000, Https));
    }
    // Without a scheme: a process may speak plain HTTP, a package may not.
    assert!(process(&["c.com:9000"])
        .match_target(&name("c.com"), 9000, Http)
        .is_ok());
    assert!(process(&["c.com"])
        .match_target(&name("c.com"), 80, Http)
        .is_ok());
    let pkg = package(&["c.com:9000", "d.com"], &[]);
    let e = pkg.match_target(&name("c.com"), 9000, Http).unwrap_err();
    assert!(e.0.contains("use https, or add http://c.com:9000"), "{e}");
    assert!(pkg.match_target(&name("d.com"), 443, Https).is_ok());
    assert!(
        pkg.match_target(&name("d.com"), 80, Https).is_err(),
        "443 only"
    );
    // An http:// entry without a port is port 80.
    let pkg = package(&["http://e.com"], &[]);
    assert!(pkg.match_target(&name("e.com"), 80, Http).is_ok());
    assert!(pkg.match_target(&name("e.com"), 443, Https).is_err());
}

fn at(ip: &str) -> Vec<SocketAddr> {
    vec![SocketAddr::new(ip.parse().unwrap(), 80)]
}

#[test]
fn the_guard_refuses_non_public_addresses_unless_a_range_holds_them() {
    let name = TargetHost::Name("svc.example.com".into());
    let allow = process(&["svc.example.com"]);
    let by_name = &allow.entries()[0];
    assert!(allow
        .check_addresses(Some(by_name), &name, &at("93.184.216.34"))
        .is_ok());
    for private in [
        "127.0.0.1",
        "10.0.0.1",
        "169.254.169.254",
        "::1",
        "::ffff:10.0.0.1",
    ] {
        let e = allow
            .check_addresses(Some(by_name), &name, &at(private))
            .unwrap_err();
        assert!(e.0.contains("--allow-private"), "{private}: {e}");
    }
    // The advice works: the range it names lets the name through.
    let e = allow
        .check_addresses(Some(by_name), &name, &at("10.0.0.1"))
        .unwrap_err();
    assert!(e.0.contains("add --allow-private 10.0.0.1/32"), "{e}");
    assert!(
        e.0.contains("10.0.0.0/8"),
        "a wider range is suggested: {e}"
    );
    let mut entries = pats(&["svc.example.com"]);
    entries.push(HostPattern::private_range("10.0.0.0/8".parse().unwrap()));
    let corp = Allowlist::for_process(entries);
    let p = &corp.entries()[0];
    assert!(corp
        .check_addresses(Some(p), &name, &at("10.0.0.1"))
        .is_ok());
    assert!(corp
        .check_addresses(Some(p), &name, &at("::ffff:10.9.9.9"))
        .is_ok());
    // Only that range: loopback and metadata stay refused.
    for other in ["127.0.0.1", "169.254.169.254", "192.168.0.1"] {
        assert!(
            corp.check_addresses(Some(p), &name, &at(other)).is_err(),
            "{other}"
        );
    }
    // Link-local advice names the one address, never its /16.
    let e = corp
        .check_addresses(Some(p), &name, &at("169.254.169.254"))
        .unwrap_err();
    assert!(!e.0.contains("169.254.0.0/16"), "{e}");
    // One bad address among good ones refuses the name, and each is named.
    let mut mixed = at("93.184.216.34");
    mixed.extend(at("10.1.1.1"));
    mixed.extend(at("192.168.5.5"));
    let e = allow
        .check_addresses(Some(by_name), &name, &mixed)
        .unwrap_err();
    assert!(
        e.0.contains("--allow-private 10.1.1.1/32 --allow-private 192.168.5.5/32"),
        "{e}"
    );
    assert!(allow.check_addresses(Some(by_name), &name, &[]).is_err());
    // An operator's `localhost` may be loopback, and only loopback.
    let lh = process(&["localhost:80"]);
    let lname = TargetHost::Name("localhost".into());
    let p = Some(&lh.entries()[0]);
    assert!(lh.check_addresses(p, &lname, &at("127.0.0.1")).is_ok());
    assert!(lh.check_addresses(p, &lname, &at("::1")).is_ok());
    assert!(lh.check_addresses(p, &lname, &at("10.0.0.1")).is_err());
    // An operator's IP literal is its own permission.
    let lit = process(&["10.0.0.5:80"]);
    let ip = TargetHost::Ip("10.0.0.5".parse().unwrap());
    assert!(lit
        .check_addresses(Some(&lit.entries()[0]), &ip, &at("10.0.0.5"))
        .is_ok());
}

/// A package's list is the package's word, not the operator's: its IP
/// literals and `localhost` reach only what an approved range holds.
#[test]
fn a_package_list_vouches_for_no_address() {
    let pkg = package(
        &["http://127.0.0.1:8080", "localhost:8080", "git.corp"],
        &[],
    );
    let ip = TargetHost::Ip("127.0.0.1".parse().unwrap());
    let p = pkg.match_target(&ip, 8080, Access::Http).unwrap();
    let e = pkg
        .check_addresses(Some(p), &ip, &at("127.0.0.1"))
        .unwrap_err();
    assert!(
        e.0.contains("grant with --allow-private 127.0.0.1/32"),
        "{e}"
    );
    let lname = TargetHost::Name("localhost".into());
    let p = pkg.match_target(&lname, 8080, Access::Https).unwrap();
    assert!(pkg
        .check_addresses(Some(p), &lname, &at("127.0.0.1"))
        .is_err());
    // Approved ranges, and only those, let them through.
    let pkg = package(
        &["http://127.0.0.1:8080", "localhost:8080", "git.corp"],
        &["127.0.0.0/8", "10.0.0.0/8"],
    );
    let p = pkg.match_target(&ip, 8080, Access::Http).unwrap();
    assert!(pkg.check_addresses(Some(p), &ip, &at("127.0.0.1")).is_ok());
    let corp = TargetHost::Name("git.corp".into());
    let p = pkg.match_target(&corp, 443, Access::Https).unwrap();
    assert!(pkg.check_addresses(Some(p), &corp, &at("10.4.4.4")).is_ok());
    assert!(pkg
        .check_addresses(Some(p), &corp, &at("172.16.0.1"))
        .is_err());
    // A manifest cannot slip a range in among its targets.
    let sneaky = Allowlist::for_package(
        vec![HostPattern::private_range("0.0.0.0/0".parse().unwrap())],
        [],
        Advice::for_process(),
    );
    assert_eq!(sneaky.private_ranges().count(), 0);
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
    assert_eq!(
        address_class("127.0.0.1".parse().unwrap()),
        Some("loopback")
    );
    assert_eq!(
        address_class("fe80::1".parse().unwrap()),
        Some("link-local")
    );
    assert_eq!(address_class("10.1.1.1".parse().unwrap()), Some("private"));
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
    assert!(got.contains("--allow-private"), "{got}");
    assert!(seen.lock().unwrap().is_empty());
}

/// The corporate host: a listed name that resolves to a non-public
/// address is reached once the list also names a range holding it, and
/// the proxy connects to exactly that address.
#[test]
fn a_listed_name_is_reached_inside_its_private_range() {
    let Some(name) = private_alias() else {
        panic!("no name other than localhost in /etc/hosts resolves to a non-public address")
    };
    let (up, seen) = upstream();
    let target = format!("{name}:{up}");
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let mut allow = pats(&[&target]);
    let resolved: Vec<SocketAddr> = std::net::ToSocketAddrs::to_socket_addrs(&(name.as_str(), up))
        .unwrap()
        .collect();
    for a in &resolved {
        allow.push(HostPattern::private_range(IpRange::single(a.ip())));
    }
    let _p = EgressProxy::serve(OwnedFd::from(l), allow, EgressLimits::default()).unwrap();
    let got = ask(
        port,
        &format!("CONNECT {target} HTTP/1.1\r\n\r\nPING / HTTP/1.1\r\n\r\n"),
    );
    assert!(
        got.starts_with("HTTP/1.1 200 Connection established"),
        "{got}"
    );
    assert_eq!(seen.lock().unwrap().len(), 1);
    // Another port of the same name is still not listed.
    let got = ask(port, &format!("CONNECT {name}:{} HTTP/1.1\r\n\r\n", up + 1));
    assert!(got.starts_with("HTTP/1.1 403 Forbidden"), "{got}");
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

/// `/proc/net/sockstat`'s TCP `mem`: the pages TCP holds for the whole
/// host (`net.ipv4.tcp_mem` counts against it).
fn tcp_pages() -> u64 {
    let s = std::fs::read_to_string("/proc/net/sockstat").unwrap();
    let tcp = s.lines().find(|l| l.starts_with("TCP:")).unwrap();
    let mut w = tcp.split_whitespace();
    while let Some(k) = w.next() {
        if k == "mem" {
            return w.next().unwrap().parse().unwrap();
        }
    }
    panic!("no mem in {tcp:?}")
}

/// The bytes queued in the fuller direction (send or receive) of each of
/// this network namespace's IPv4 TCP sockets whose local port is `local`
/// or remote port `remote` (`/proc/net/tcp`: `tx_queue:rx_queue`, in hex).
fn queued_on(local: u16, remote: u16) -> Vec<u64> {
    let s = std::fs::read_to_string("/proc/net/tcp").unwrap();
    let port = |addr: &str| u16::from_str_radix(addr.rsplit(':').next().unwrap(), 16).unwrap();
    s.lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let (l_port, r_port) = (port(f[1]), port(f[2]));
            (l_port == local || r_port == remote).then(|| {
                let (tx, rx) = f[4].split_once(':').unwrap();
                u64::from_str_radix(tx, 16)
                    .unwrap()
                    .max(u64::from_str_radix(rx, 16).unwrap())
            })
        })
        .collect()
}

/// Opens tunnels through the proxy at `port` to `up` (as many as it
/// lets be open), each then handed to `fill`; returns them.
fn tunnels(port: u16, up: u16, n: usize, fill: impl Fn(&mut TcpStream)) -> Vec<TcpStream> {
    let mut out = Vec::new();
    for _ in 0..n {
        let Ok(mut c) = TcpStream::connect(("127.0.0.1", port)) else {
            break;
        };
        c.write_all(format!("CONNECT localhost:{up} HTTP/1.1\r\n\r\n").as_bytes())
            .unwrap();
        let mut head = Vec::new();
        let mut b = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") && c.read(&mut b).unwrap_or(0) == 1 {
            head.push(b[0]);
        }
        if head.starts_with(b"HTTP/1.1 200") {
            fill(&mut c);
            out.push(c);
        }
    }
    out
}

/// TCP memory is one pool for the host (`net.ipv4.tcp_mem`), and a
/// sandbox with an egress allowlist reaches it only through its proxy,
/// which holds at most `max_open` tunnels and fixes its own sockets'
/// buffers ([`SOCKET_BUFFER`]), so no autotuning grows them. Both ways a
/// program can pin buffers: tunnels to a target that never reads, each
/// written to until the send blocks; and downloads from a target that
/// never stops, each read fast (so that autotuning would grow the
/// buffers) and then left unread. Each of the proxy's sockets then holds
/// at most its fixed buffer, and the host's own TCP still carries a MiB.
#[test]
fn tunnels_hold_the_tcp_pool_to_the_proxys_fixed_buffers() {
    let limits = EgressLimits::default();
    // A target that accepts and never reads, and one that never stops
    // writing.
    let hole = TcpListener::bind("127.0.0.1:0").unwrap();
    let hose = TcpListener::bind("127.0.0.1:0").unwrap();
    let (hole_port, hose_port) = (
        hole.local_addr().unwrap().port(),
        hose.local_addr().unwrap().port(),
    );
    let held = Arc::new(Mutex::new(Vec::new()));
    let h = Arc::clone(&held);
    std::thread::spawn(move || {
        for c in hole.incoming().flatten() {
            h.lock().unwrap().push(c);
        }
    });
    std::thread::spawn(move || {
        for mut c in hose.incoming().flatten() {
            std::thread::spawn(move || {
                let chunk = vec![0u8; 1 << 16];
                while c.write_all(&chunk).is_ok() {}
            });
        }
    });
    let before = tcp_pages();
    let mut report = Vec::new();
    for (what, up, upload) in [("upload", hole_port, true), ("download", hose_port, false)] {
        let (p, port) = proxy(&[&format!("localhost:{up}")], limits);
        let open = tunnels(port, up, 2 * limits.max_open, |c| {
            let chunk = vec![0u8; 1 << 16];
            let started = std::time::Instant::now();
            if upload {
                c.set_nonblocking(true).unwrap();
                let mut idle = 0;
                while idle < 20 && started.elapsed() < std::time::Duration::from_secs(3) {
                    if c.write(&chunk).is_ok() {
                        idle = 0;
                    } else {
                        idle += 1;
                        std::thread::sleep(std::time::Duration::from_millis(5));
                    }
                }
            } else {
                // Read fast for a moment (16 MiB: within the proxy's
                // byte limit for every tunnel), then never again.
                let mut buf = vec![0u8; 1 << 16];
                let mut got = 0;
                while got < 16 << 20 && started.elapsed() < std::time::Duration::from_secs(3) {
                    got += c.read(&mut buf).unwrap_or(0);
                }
            }
        });
        std::thread::sleep(std::time::Duration::from_millis(500));
        let proxy_side = queued_on(port, up);
        let most = proxy_side.iter().copied().max().unwrap_or(0);
        report.push(format!(
            "{what}: {} tunnels; the proxy's {} sockets hold {} bytes, at most {most} one way; \
             TCP memory {} pages",
            open.len(),
            proxy_side.len(),
            proxy_side.iter().sum::<u64>(),
            tcp_pages()
        ));
        assert!(
            open.len() <= limits.max_open,
            "{what}: more tunnels than max_open"
        );
        // The kernel counts a buffer's overhead in it: the data queued one
        // way stays under the fixed size.
        assert!(
            most <= SOCKET_BUFFER as u64,
            "{what}: a proxy socket holds {most} bytes one way, past its fixed buffer: \
             {report:?}"
        );
        drop(open);
        drop(p);
    }
    // The host's own TCP meanwhile: a MiB there and back on loopback.
    let echo = TcpListener::bind("127.0.0.1:0").unwrap();
    let echo_port = echo.local_addr().unwrap().port();
    std::thread::spawn(move || {
        if let Ok((mut c, _)) = echo.accept() {
            let mut buf = vec![0u8; 1 << 20];
            let _ = c.read_exact(&mut buf);
            let _ = c.write_all(&buf);
        }
    });
    let mut own = TcpStream::connect(("127.0.0.1", echo_port)).unwrap();
    own.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    own.write_all(&vec![7u8; 1 << 20]).unwrap();
    let mut back = vec![0u8; 1 << 20];
    own.read_exact(&mut back)
        .expect("the host's own TCP was starved");
    println!("TCP memory before: {before} pages; {}", report.join("; "));
}

/// The byte cap: a tunnel that relays past `max_bytes` is closed, having
/// carried no more than the cap (plus one read), and the next connection
/// is refused; the control is the same relay under the default cap.
#[test]
fn the_byte_cap_closes_the_tunnel_and_refuses_the_next() {
    // A target that sends without end.
    let hose = TcpListener::bind("127.0.0.1:0").unwrap();
    let up = hose.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut c in hose.incoming().flatten() {
            std::thread::spawn(move || {
                let chunk = vec![7u8; 1 << 16];
                while c.write_all(&chunk).is_ok() {}
            });
        }
    });
    let carried = |limits: EgressLimits, want: u64| -> u64 {
        let (p, port) = proxy(&[&format!("localhost:{up}")], limits);
        let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
        c.set_read_timeout(Some(std::time::Duration::from_secs(10)))
            .unwrap();
        c.write_all(format!("CONNECT localhost:{up} HTTP/1.1\r\n\r\n").as_bytes())
            .unwrap();
        let mut got = 0u64;
        let mut buf = vec![0u8; 1 << 16];
        while got < want {
            match c.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => got += n as u64,
            }
        }
        let next = ask(port, &format!("CONNECT localhost:{up} HTTP/1.1\r\n\r\n"));
        drop(p);
        if limits.max_bytes < want {
            assert!(next.starts_with("HTTP/1.1 503"), "after the cap: {next:?}");
        }
        got
    };
    let cap = 1 << 20;
    let limited = carried(
        EgressLimits {
            max_bytes: cap,
            ..EgressLimits::default()
        },
        8 << 20,
    );
    assert!(
        limited <= cap + (1 << 16) + 64,
        "the tunnel carried {limited} bytes past a {cap}-byte cap"
    );
    // Control: the same tunnel under the default cap carries 8 MiB.
    let unlimited = carried(EgressLimits::default(), 8 << 20);
    assert!(unlimited >= 8 << 20, "control: only {unlimited} bytes");
}

/// The head timeout: a connection that sends no request head is answered
/// and closed once `head_timeout` has passed, not held for ever; the
/// control is a head sent in time, which is served.
#[test]
fn a_connection_without_a_head_is_closed_at_the_head_timeout() {
    let (up, _) = upstream();
    let limits = EgressLimits {
        head_timeout: std::time::Duration::from_millis(300),
        ..EgressLimits::default()
    };
    let (p, port) = proxy(&[&format!("localhost:{up}")], limits);
    let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
    c.set_read_timeout(Some(std::time::Duration::from_secs(20)))
        .unwrap();
    let started = std::time::Instant::now();
    let mut out = Vec::new();
    let r = c.read_to_end(&mut out);
    let took = started.elapsed();
    assert!(r.is_ok(), "the proxy held a silent connection: {r:?}");
    assert!(
        took >= limits.head_timeout && took < std::time::Duration::from_secs(10),
        "closed after {took:?}, the timeout is {:?}",
        limits.head_timeout
    );
    // Control: a head sent at once is served.
    let served = ask(
        port,
        &format!("GET http://localhost:{up}/ HTTP/1.1\r\n\r\n"),
    );
    assert!(served.starts_with("HTTP/1.1 200"), "{served}");
    drop(p);
}

// What the proxy does with a name's answer, through the real resolver.
#[cfg(target_os = "linux")]
mod resolver;

#[test]
fn request_rules_parse_print_and_match() {
    use crate::RequestRule;
    let name = |n: &str| TargetHost::Name(n.into());
    let r: RequestRule = "GET,HEAD https://api.github.com/repos/acme/*"
        .parse()
        .unwrap();
    assert_eq!(
        r.to_string(),
        "GET,HEAD https://api.github.com/repos/acme/*"
    );
    let gh = name("api.github.com");
    assert!(r.allows("GET", &gh, 443, true, "/repos/acme/widget"));
    assert!(r.allows("HEAD", &gh, 443, true, "/repos/acme/widget?page=2"));
    // `*` is one segment; another method, host, port or scheme is not it.
    assert!(!r.allows("GET", &gh, 443, true, "/repos/acme/widget/issues"));
    assert!(!r.allows("POST", &gh, 443, true, "/repos/acme/widget"));
    assert!(!r.allows("GET", &name("github.com"), 443, true, "/repos/acme/widget"));
    assert!(!r.allows("GET", &gh, 8443, true, "/repos/acme/widget"));
    assert!(!r.allows("GET", &gh, 443, false, "/repos/acme/widget"));
    // A path a server could read as another is never allowed.
    for sly in [
        "/repos/acme/../other",
        "/repos/acme/./x",
        "/repos//acme/x",
        "/repos/acme/x%2f..%2fy",
        "/repos/acme/%2e%2e",
        "/repos/acme/x\\y",
        "repos/acme/x",
        "/repos/acme/..;/other",
        "/repos/acme/%252e%252e/other",
        "/repos/acme/%u002e%u002e",
    ] {
        assert!(!r.allows("GET", &gh, 443, true, sly), "{sly}");
    }
    let any: RequestRule = "* http://*.example.org:8080/v1/**".parse().unwrap();
    let api = name("api.example.org");
    assert!(any.allows("DELETE", &api, 8080, false, "/v1/a/b/c"));
    assert!(!any.allows("DELETE", &api, 8080, false, "/v2/a"));
    assert!(!any.allows("GET", &name("example.org"), 8080, false, "/v1/a"));
    // Many `**` against a long hostile path: linear, not exponential.
    let many: RequestRule = "GET https://h.example/**a**a**a**a**a**a**b"
        .parse()
        .unwrap();
    let long = format!("/{}", "a".repeat(20_000));
    assert!(!many.allows("GET", &name("h.example"), 443, true, &long));
    for bad in [
        "GET",
        "get https://a.example/x",
        "GET ftp://a.example/x",
        "GET https://a.example",
        "GET https://a.example/x?y",
        "GET https://a.example/../x",
        "GET https://10.0.0.1/x",
        "GET, https://a.example/x",
    ] {
        assert!(bad.parse::<RequestRule>().is_err(), "{bad}");
    }
}
