//! One HTTP/1.1 request head inside a terminated connection: checked,
//! the placeholders of the secrets bound to its host swapped for their
//! values, and rebuilt. Everything the broker cannot read the same way
//! the server will is refused rather than passed on.

use crate::secret::Secret;

/// The most header fields a request head may have.
pub const MAX_HEADERS: usize = 100;

/// The largest head the broker sends on, its values in.
pub const MAX_HEAD: usize = 64 * 1024;

/// Request headers the broker drops: what would have the answer encoded
/// or cut up so that the value could come back without the scrubber
/// seeing it whole (`Accept-Encoding` is then set to `identity`).
const DROPPED: [&str; 3] = ["accept-encoding", "range", "if-range"];

/// Headers in which no placeholder may be: those the broker reads itself.
const READ_BY_THE_BROKER: [&str; 3] = ["host", "content-length", "transfer-encoding"];

/// Why a request was not sent on: a sentence for the program's 403 and
/// the `--explain` line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused(pub String);

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// How the request's body is framed, as read from its head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Body {
    /// No body.
    None,
    /// `Content-Length` bytes.
    Length(u64),
    /// `Transfer-Encoding: chunked`.
    Chunked,
}

/// A head the broker will send on. Its `Debug` leaves the head out: it
/// holds secret values.
pub struct Rewritten {
    /// The head's bytes, CRLF line ends, ending in the empty line.
    pub head: Vec<u8>,
    /// How its body is framed.
    pub body: Body,
    /// The secrets whose values it carries.
    pub carries: Vec<String>,
    /// The request's method.
    pub method: String,
    /// The request target, as sent (a path, or `*`).
    pub target: String,
    /// The program sent `Expect: 100-continue` (dropped from the head:
    /// the broker answers `100 Continue` itself, since it reads the body
    /// only after sending the head).
    pub expects_continue: bool,
}

impl std::fmt::Debug for Rewritten {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rewritten")
            .field("head", &format_args!("<{} bytes>", self.head.len()))
            .field("body", &self.body)
            .field("carries", &self.carries)
            .field("method", &self.method)
            .field("target", &self.target)
            .finish()
    }
}

/// Checks the request head `raw` (up to and with its empty line) sent to
/// `host`:`port` through a terminated `CONNECT`, and returns it rebuilt
/// with the placeholders of the secrets bound to that host replaced by
/// their values and each such binding's header set.
///
/// `Accept-Encoding` is set to `identity` and `Range`/`If-Range` are
/// dropped, so an answer comes back whole and unencoded for the scrubber.
///
/// Refused: a request target other than a path (an absolute URL or an
/// authority, which a server routes by), `CONNECT`, `Upgrade`,
/// `HTTP2-Settings` and `Connection` tokens other than `keep-alive` and
/// `close` (the connection would leave HTTP/1.1), a placeholder in
/// `Host` or the framing headers, a head that does not parse strictly (a bare CR, an obsolete
/// folded line, a NUL), a `Host` other than the `CONNECT`'s (a fronted
/// domain), ambiguous framing (`Content-Length` with `Transfer-Encoding`,
/// two lengths, a transfer coding other than `chunked`), and any
/// placeholder in the request line, in a header a binding does not name,
/// or bound to other hosts.
pub fn rewrite(
    raw: &[u8],
    host: &str,
    port: u16,
    secrets: &[Secret],
) -> Result<Rewritten, Refused> {
    let mut fields = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut fields);
    match req.parse(raw) {
        Ok(httparse::Status::Complete(n)) if n == raw.len() => {}
        Ok(httparse::Status::Complete(_)) => {
            return Err(Refused(
                "bytes after the request head's end were passed as its head".into(),
            ))
        }
        Ok(httparse::Status::Partial) => {
            return Err(Refused("the request head is incomplete".into()))
        }
        Err(e) => return Err(Refused(format!("the request head does not parse: {e}"))),
    }
    let (Some(method), Some(target), Some(1)) = (req.method, req.path, req.version) else {
        return Err(Refused(
            "only HTTP/1.1 requests go through the broker".into(),
        ));
    };
    // Origin-form only: a server routes an absolute-form target (or an
    // authority) by the name in it, whatever `Host` says.
    let origin_form = target.starts_with('/') && !target.starts_with("//");
    if method == "CONNECT" || !(origin_form || (method == "OPTIONS" && target == "*")) {
        return Err(Refused(format!(
            "request target {target:?}: only a path (`/…`) goes through the broker, never a URL \
             or an authority, which the server could route by"
        )));
    }
    for s in secrets {
        if target.contains(s.placeholder()) || method.contains(s.placeholder()) {
            return Err(Refused(format!(
                "secret {}'s placeholder is in the request line: a secret goes in headers only",
                s.name()
            )));
        }
    }

    let mut hosts = 0;
    let mut lengths: Vec<&[u8]> = Vec::new();
    let mut codings = 0;
    let mut out_fields: Vec<(String, String)> = Vec::new();
    let mut carries: Vec<String> = Vec::new();
    let mut expects_continue = false;
    for f in req.headers.iter() {
        let value = std::str::from_utf8(f.value)
            .map_err(|_| Refused(format!("header {} is not UTF-8", f.name)))?;
        if value.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0) {
            return Err(Refused(format!("header {} holds CR, LF or NUL", f.name)));
        }
        let name = f.name;
        if secrets.iter().any(|s| value.contains(s.placeholder()))
            && READ_BY_THE_BROKER
                .iter()
                .any(|r| name.eq_ignore_ascii_case(r))
        {
            return Err(Refused(format!("a placeholder in header {name}")));
        }
        if let Some(why) = crate::broker::overriding(name) {
            return Err(Refused(why));
        }
        if name.eq_ignore_ascii_case("upgrade") || name.eq_ignore_ascii_case("http2-settings") {
            return Err(Refused(format!(
                "header {name}: the connection would stop being HTTP/1.1 the broker reads"
            )));
        }
        if name.eq_ignore_ascii_case("connection")
            && value.split(',').any(|t| {
                let t = t.trim();
                !(t.eq_ignore_ascii_case("keep-alive") || t.eq_ignore_ascii_case("close"))
            })
        {
            return Err(Refused(format!(
                "Connection {value:?}: only `keep-alive` and `close` go through the broker"
            )));
        }
        if DROPPED.iter().any(|d| name.eq_ignore_ascii_case(d)) {
            continue;
        }
        if name.eq_ignore_ascii_case("expect") {
            if !value.trim().eq_ignore_ascii_case("100-continue") || expects_continue {
                return Err(Refused(format!(
                    "Expect {value:?}: only one `100-continue` goes through the broker"
                )));
            }
            expects_continue = true;
            continue;
        }
        if name.eq_ignore_ascii_case("host") {
            hosts += 1;
            if !same_authority(value, host, port) {
                return Err(Refused(format!(
                    "Host {value:?} is not {host}, which the connection was opened to"
                )));
            }
        } else if name.eq_ignore_ascii_case("content-length") {
            lengths.push(f.value);
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            codings += 1;
            if !value.trim().eq_ignore_ascii_case("chunked") {
                return Err(Refused(format!(
                    "Transfer-Encoding {value:?}: only `chunked` goes through the broker"
                )));
            }
        }
        let mut value = value.to_owned();
        for s in secrets {
            if !value.contains(s.placeholder()) {
                continue;
            }
            if !s.bound_to(host, port) {
                return Err(Refused(format!(
                    "secret {}'s placeholder was sent to {host}:{port}, which it is not bound to",
                    s.name()
                )));
            }
            if let Some(h) = s.header() {
                return Err(Refused(format!(
                    "secret {}'s placeholder is in header {name}; its binding sets {} itself and \
                     names no other place",
                    s.name(),
                    h.name()
                )));
            }
            value = value.replace(s.placeholder(), s.value());
            carries.push(s.name().to_owned());
        }
        out_fields.push((name.to_owned(), value));
    }
    if hosts != 1 {
        return Err(Refused(format!(
            "the request has {hosts} Host headers, not one"
        )));
    }
    let body = match (lengths.as_slice(), codings) {
        ([], 0) => Body::None,
        ([], 1) => Body::Chunked,
        ([n], 0) => Body::Length(
            std::str::from_utf8(n)
                .ok()
                .filter(|t| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|t| t.parse().ok())
                .ok_or_else(|| Refused("Content-Length is not a number".into()))?,
        ),
        _ => {
            return Err(Refused(
                "the body's framing is ambiguous (Content-Length with Transfer-Encoding, or \
                 either twice)"
                    .into(),
            ))
        }
    };
    // The bindings that set a header set it on every request to their
    // hosts, over any the program sent.
    for s in secrets {
        if let (true, Some((name, line))) = (s.bound_to(host, port), s.header_line()) {
            out_fields.retain(|(n, _)| !n.eq_ignore_ascii_case(&name));
            out_fields.push((name, line));
            carries.push(s.name().to_owned());
        }
    }
    out_fields.push(("Accept-Encoding".into(), "identity".into()));
    let mut head = format!("{method} {target} HTTP/1.1\r\n").into_bytes();
    for (n, v) in out_fields {
        head.extend_from_slice(format!("{n}: {v}\r\n").as_bytes());
    }
    head.extend_from_slice(b"\r\n");
    if head.len() > MAX_HEAD {
        return Err(Refused(format!(
            "the request head would be {} bytes with the secrets in; the most is {MAX_HEAD}",
            head.len()
        )));
    }
    Ok(Rewritten {
        head,
        body,
        carries,
        method: method.to_owned(),
        target: target.to_owned(),
        expects_continue,
    })
}

/// Whether a `Host` value names `host` (and `port`, or the default 443).
fn same_authority(value: &str, host: &str, port: u16) -> bool {
    let value = value.trim();
    let (name, given) = if let Some(rest) = value.strip_prefix('[') {
        match rest.split_once(']') {
            Some((n, "")) => (n, None),
            Some((n, p)) => match p.strip_prefix(':') {
                Some(p) => (n, Some(p)),
                None => return false,
            },
            None => return false,
        }
    } else {
        match value.split_once(':') {
            Some((n, p)) if !p.contains(':') => (n, Some(p)),
            Some(_) => return false,
            None => (value, None),
        }
    };
    let port_ok = match given {
        None => port == 443,
        Some(p) => p.bytes().all(|b| b.is_ascii_digit()) && p.parse::<u16>().ok() == Some(port),
    };
    port_ok && name.eq_ignore_ascii_case(host.trim_matches(|c| c == '[' || c == ']'))
}
