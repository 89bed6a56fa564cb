//! The proxy's reading of a request: the head, and what it asks for.
//!
//! Only what a forward proxy needs: the request line (`CONNECT host:port`
//! or an absolute `http://` URL) and, for plain HTTP, the header lines to
//! pass on. Anything else is a [`Refusal`] the program is answered with.

use std::io::{self, Read};
use std::net::TcpStream;
use std::os::fd::{AsRawFd, RawFd};
use std::time::{Duration, Instant};

use super::proxy::wait;
use super::{Refusal, TargetHost};

/// The longest request head the proxy reads.
const MAX_HEAD: usize = 16 * 1024;

/// A parsed proxy request.
pub(super) struct Request {
    pub(super) connect: bool,
    pub(super) host: TargetHost,
    pub(super) port: u16,
    /// For plain HTTP: the head to send to the target (origin form, no
    /// proxy headers, `Connection: close`).
    pub(super) upstream_head: Vec<u8>,
}

/// A request head and the bytes that came after it.
pub(super) type HeadAndRest = (Vec<u8>, Vec<u8>);

/// Reads up to the end of the request head; returns it and what followed.
/// `Ok(None)`: the proxy stopped or the client left.
pub(super) fn read_head(
    client: &TcpStream,
    stop: RawFd,
    timeout: Duration,
) -> Result<Option<HeadAndRest>, Refusal> {
    let deadline = Instant::now() + timeout;
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    let mut c = client;
    loop {
        match wait(client.as_raw_fd(), libc::POLLIN, stop, Some(deadline)) {
            Ok(true) => {}
            Ok(false) if Instant::now() >= deadline => {
                return Err(Refusal("the request head did not arrive in time".into()))
            }
            Ok(false) | Err(_) => return Ok(None),
        }
        // Only the new bytes (and the 3 before them) can complete the
        // blank line: a byte-at-a-time sender costs linear time, not square.
        let from = buf.len().saturating_sub(3);
        match c.read(&mut chunk) {
            Ok(0) => return Ok(None),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(_) => return Ok(None),
        }
        if let Some(end) = buf[from..].windows(4).position(|w| w == b"\r\n\r\n") {
            let rest = buf.split_off(from + end + 4);
            return Ok(Some((buf, rest)));
        }
        if buf.len() > MAX_HEAD {
            return Err(Refusal(format!(
                "the request head is over {MAX_HEAD} bytes"
            )));
        }
    }
}

/// Hop-by-hop and proxy headers not passed on to the target.
const DROPPED_HEADERS: [&str; 5] = [
    "proxy-connection",
    "proxy-authorization",
    "connection",
    "keep-alive",
    "proxy-authenticate",
];

pub(super) fn parse_request(head: &[u8]) -> Result<Request, Refusal> {
    let text =
        std::str::from_utf8(head).map_err(|_| Refusal("the request head is not UTF-8".into()))?;
    let mut lines = text.split("\r\n");
    let line = lines.next().unwrap_or_default();
    if line.bytes().any(|b| b.is_ascii_control()) {
        return Err(Refusal("the request line has control characters".into()));
    }
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(Refusal(format!("`{line}` is not an HTTP request line")));
    };
    if !version.starts_with("HTTP/1.") || method.is_empty() {
        return Err(Refusal(format!("`{line}` is not an HTTP/1.x request line")));
    }
    let split_authority =
        |auth: &str, default: Option<u16>| -> Result<(TargetHost, u16), Refusal> {
            let bad = || Refusal(format!("`{auth}` is not HOST:PORT"));
            let (host, port) = match auth.rfind(':') {
                Some(i) if !auth[i..].contains(']') => {
                    (&auth[..i], auth[i + 1..].parse::<u16>().map_err(|_| bad())?)
                }
                _ => (auth, default.ok_or_else(bad)?),
            };
            let host = TargetHost::parse(host).ok_or_else(bad)?;
            Ok((host, port))
        };
    if method.eq_ignore_ascii_case("CONNECT") {
        let (host, port) = split_authority(target, None)?;
        return Ok(Request {
            connect: true,
            host,
            port,
            upstream_head: Vec::new(),
        });
    }
    let lower = target.get(..7).map(str::to_ascii_lowercase);
    if lower.as_deref() != Some("http://") {
        return Err(Refusal(format!(
            "`{target}` is not an absolute http:// URL; a proxy request names its target \
             (https goes through CONNECT)"
        )));
    }
    let after = &target[7..];
    let (authority, path) = match after.find(['/', '?']) {
        Some(i) => (&after[..i], &after[i..]),
        None => (after, "/"),
    };
    if authority.contains('@') {
        return Err(Refusal("credentials in the URL are not passed on".into()));
    }
    let (host, port) = split_authority(authority, Some(80))?;
    let path = if path.starts_with('?') {
        format!("/{path}")
    } else {
        path.to_owned()
    };
    // The target named in the URL is the one reached: its `Host` replaces
    // the program's (RFC 9112, 3.2.2), so no other site on that address is
    // asked for by name.
    let mut out = format!("{method} {path} {version}\r\nHost: {authority}\r\n");
    for h in lines.filter(|l| !l.is_empty()) {
        let Some((name, _)) = h.split_once(':') else {
            return Err(Refusal(format!("`{h}` is not a header line")));
        };
        let token = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
        if name.is_empty()
            || !name.bytes().all(token)
            || h.bytes().any(|b| b == b'\r' || b == b'\n')
        {
            return Err(Refusal(format!(
                "`{}` is not a header line",
                h.escape_debug()
            )));
        }
        if name.eq_ignore_ascii_case("host")
            || DROPPED_HEADERS.iter().any(|d| name.eq_ignore_ascii_case(d))
        {
            continue;
        }
        out.push_str(h);
        out.push_str("\r\n");
    }
    out.push_str("Connection: close\r\n\r\n");
    Ok(Request {
        connect: false,
        host,
        port,
        upstream_head: out.into_bytes(),
    })
}
