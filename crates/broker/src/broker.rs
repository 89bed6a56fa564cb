//! [`Broker`]: the parts put together as the egress proxy's interceptor.
//! A `CONNECT` to a host a secret is bound to, or a request rule is for,
//! is terminated with a leaf of the run's CA; the upstream is verified;
//! then each HTTP/1.1 request is judged, rewritten and sent, its body
//! re-framed, and the answer sent back with the values scrubbed.
//!
//! Blocking I/O on the proxy's connection thread, as the rest of the
//! proxy (the egress crate says why): rustls's `StreamOwned` over the
//! proxy's [`GuardedStream`]s, which end every wait when the proxy stops.

use std::io::{self, Read, Write};
use std::sync::Arc;

use cordon_egress::{
    GuardedStream, HostPattern, Intercept, Intercepted, RefusedRequest, RequestRule, TargetHost,
};
use rustls::pki_types::ServerName;
use rustls::{ClientConnection, ServerConnection, StreamOwned};

use crate::head::{rewrite, Body, MAX_HEAD, MAX_HEADERS};
use crate::{BrokerError, RunCa, Scrubber, Secret};

/// The credential broker of one run: its CA, the upstream TLS client, the
/// secrets and the request rules. What the egress proxy is given as its
/// [`Intercept`].
pub struct Broker {
    ca: Arc<RunCa>,
    upstream: Arc<rustls::ClientConfig>,
    secrets: Vec<Secret>,
    rules: Vec<RequestRule>,
}

impl std::fmt::Debug for Broker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Broker")
            .field("secrets", &self.secrets)
            .field("rules", &self.rules)
            .finish_non_exhaustive()
    }
}

impl Broker {
    /// A broker for `secrets` and `rules`, with a fresh CA; the upstream
    /// is verified against the WebPKI roots and `upstream_ca_pem` (an
    /// operator's PEM bundle, for private hosts).
    pub fn new(
        secrets: Vec<Secret>,
        rules: Vec<RequestRule>,
        upstream_ca_pem: Option<&[u8]>,
    ) -> Result<Broker, BrokerError> {
        let mut names: Vec<&str> = secrets.iter().map(Secret::name).collect();
        names.sort_unstable();
        if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
            return Err(BrokerError::Secret(format!(
                "secret {:?} is named twice",
                w[0]
            )));
        }
        Ok(Broker {
            ca: Arc::new(RunCa::new()?),
            upstream: crate::upstream::client_config(upstream_ca_pem)?,
            secrets,
            rules,
        })
    }

    /// The run's CA (its certificate goes into the sandbox's trust
    /// bundle).
    pub fn ca(&self) -> &RunCa {
        &self.ca
    }

    /// The secrets (names and placeholders for the program).
    pub fn secrets(&self) -> &[Secret] {
        &self.secrets
    }

    /// The request rules.
    pub fn rules(&self) -> &[RequestRule] {
        &self.rules
    }

    /// The allowlist entries the broker's bindings and rules need: each
    /// secret's hosts and each rule's host, over HTTPS. A binding or a
    /// rule is the operator's word that the host is reached.
    pub fn hosts(&self) -> Vec<HostPattern> {
        let mut out: Vec<HostPattern> = self.rules.iter().map(|r| r.host().clone()).collect();
        for s in &self.secrets {
            for (h, p) in s.hosts() {
                if let Ok(pattern) = format!("https://{h}:{p}").parse() {
                    out.push(pattern);
                }
            }
        }
        out
    }

    /// Whether an `https://` rule is for `host`:`port`.
    fn ruled_tls(&self, host: &TargetHost, port: u16) -> bool {
        self.rules.iter().any(|r| r.covers(host, port, true))
    }

    /// Why `host` is reached only through the broker, if it is: a secret
    /// is bound to it, or a request rule is for it (on any port).
    fn claimed_host(&self, host: &TargetHost) -> Option<String> {
        if let TargetHost::Name(name) = host {
            if let Some(s) = self
                .secrets
                .iter()
                .find(|s| s.hosts().iter().any(|(h, _)| h == name))
            {
                return Some(format!("secret {} is bound to {host}", s.name()));
            }
        }
        self.rules
            .iter()
            .find(|r| r.names(host))
            .map(|r| format!("request rule `{r}` is for {host}"))
    }

    fn scrubber(&self) -> Scrubber {
        Scrubber::new(
            self.secrets
                .iter()
                .map(|s| {
                    (
                        s.value().as_bytes().to_vec(),
                        s.placeholder().as_bytes().to_vec(),
                    )
                })
                .collect(),
        )
    }

    fn scrub(&self, bytes: &[u8]) -> Vec<u8> {
        let mut s = self.scrubber();
        let mut out = s.push(bytes);
        out.extend(s.finish());
        out
    }
}

impl Intercept for Broker {
    fn terminates(&self, host: &TargetHost, port: u16) -> bool {
        let TargetHost::Name(name) = host else {
            return false;
        };
        self.secrets.iter().any(|s| s.bound_to(name, port)) || self.ruled_tls(host, port)
    }

    fn check_tunnel(&self, host: &TargetHost, port: u16) -> Result<(), RefusedRequest> {
        if let Some(why) = self.claimed_host(host) {
            return Err(RefusedRequest {
                target: Some(format!("{host}:{port}")),
                allow_with: None,
                reason: format!(
                    "a tunnel to {host}:{port}: {why}, so it is reached only as that says, \
                     through the broker"
                ),
                allow_rule: None,
            });
        }
        Ok(())
    }

    fn check_plain(
        &self,
        host: &TargetHost,
        port: u16,
        head: &[u8],
    ) -> Result<Option<u64>, RefusedRequest> {
        let refused = |reason: String, allow_rule: Option<String>| RefusedRequest {
            target: Some(format!("{host}:{port}")),
            allow_with: None,
            reason,
            allow_rule,
        };
        for s in &self.secrets {
            if contains(head, s.placeholder().as_bytes()) {
                return Err(refused(
                    format!(
                        "secret {}'s placeholder was sent to {host}:{port} over plain HTTP; it \
                         goes to its bound hosts over HTTPS only",
                        s.name()
                    ),
                    None,
                ));
            }
        }
        let plain_rules = self.rules.iter().any(|r| r.covers(host, port, false));
        if !plain_rules {
            return match self.claimed_host(host) {
                Some(why) => Err(refused(
                    format!("plain HTTP to {host}:{port}: {why}, which plain HTTP there is not"),
                    None,
                )),
                None => Ok(None),
            };
        }
        // The head the proxy sends: origin form, as the server reads it.
        let mut fields = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut req = httparse::Request::new(&mut fields);
        let (Ok(httparse::Status::Complete(_)), Some(method), Some(target)) =
            (req.parse(head), req.method, req.path)
        else {
            return Err(refused("the request head does not parse".into(), None));
        };
        let mut length = None;
        for f in req.headers.iter() {
            if f.name.eq_ignore_ascii_case("transfer-encoding")
                || length.is_some() && f.name.eq_ignore_ascii_case("content-length")
            {
                return Err(refused(
                    "a chunked or doubly framed body to a host with request rules: send one \
                     Content-Length"
                        .into(),
                    None,
                ));
            }
            if f.name.eq_ignore_ascii_case("content-length") {
                let n = std::str::from_utf8(f.value)
                    .ok()
                    .filter(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
                    .and_then(|v| v.parse::<u64>().ok())
                    .ok_or_else(|| refused("Content-Length is not a number".into(), None))?;
                length = Some(n);
            }
            if let Some(why) = overriding(f.name) {
                return Err(refused(why, None));
            }
        }
        if self
            .rules
            .iter()
            .any(|r| r.allows(method, host, port, false, target))
        {
            return Ok(Some(length.unwrap_or(0)));
        }
        let path = target.split_once('?').map_or(target, |(p, _)| p);
        let shown = if port == 80 {
            host.to_string()
        } else {
            format!("{host}:{port}")
        };
        Err(refused(
            format!("no request rule allows {method} {target} on {host}"),
            suggestion(method, &format!("http://{shown}"), path),
        ))
    }

    fn serve(&self, conn: Intercepted) {
        let Intercepted {
            client,
            upstream,
            host,
            port,
            refusals,
        } = conn;
        let TargetHost::Name(name) = &host else {
            return;
        };
        let target = format!("{host}:{port}");
        let refuse = |reason: String, allow_rule: Option<String>| {
            refusals.refused(RefusedRequest {
                target: Some(target.clone()),
                allow_with: None,
                reason,
                allow_rule,
            })
        };
        // The program's side: a leaf for the CONNECT's name only.
        let server = self
            .ca
            .server_config(name)
            .map_err(|e| e.to_string())
            .and_then(|c| ServerConnection::new(c).map_err(|e| e.to_string()));
        let mut program = match server {
            Ok(s) => StreamOwned::new(s, client),
            Err(e) => return refuse(format!("no TLS toward the program: {e}"), None),
        };
        if let Err(e) = handshake(&mut program.conn, &mut program.sock) {
            return refuse(
                format!(
                    "the program's TLS handshake with the broker failed ({e}): a client that \
                     pins its certificate, names another server, or does not trust the run's CA \
                     cannot reach {host} through it"
                ),
                None,
            );
        }
        let mut program = Buffered::new(program);
        // The server's side, verified.
        let client = ServerName::try_from(name.clone())
            .map_err(|e| e.to_string())
            .and_then(|n| {
                ClientConnection::new(self.upstream.clone(), n).map_err(|e| e.to_string())
            });
        let mut server = match client {
            Ok(c) => StreamOwned::new(c, upstream),
            Err(e) => {
                let why = format!("no TLS toward {host}: {e}");
                answer(&mut program, 502, "Bad Gateway", &why);
                return refuse(why, None);
            }
        };
        if let Err(e) = handshake(&mut server.conn, &mut server.sock) {
            let why = format!(
                "{host}'s certificate or TLS was not accepted ({e}); for a private CA give it \
                 with --upstream-ca FILE (network.upstream_ca)"
            );
            answer(&mut program, 502, "Bad Gateway", &why);
            return refuse(why, None);
        }
        let mut server = Buffered::new(server);
        let session = Session {
            broker: self,
            host: &host,
            name,
            port,
        };
        loop {
            match session.exchange(&mut program, &mut server) {
                Ok(Next::Again) => {}
                Ok(Next::Close) => break,
                Err(Stop::Refused(reason, allow_with)) => {
                    answer(&mut program, 403, "Forbidden", &reason);
                    refuse(reason, allow_with);
                    break;
                }
                Err(Stop::BadAnswer(reason)) => {
                    answer(&mut program, 502, "Bad Gateway", &reason);
                    refuse(reason, None);
                    break;
                }
                Err(Stop::Io) => return,
            }
        }
        program.close();
        server.close();
    }
}

/// Completes a TLS handshake over a blocking stream.
fn handshake<D>(
    conn: &mut rustls::ConnectionCommon<D>,
    sock: &mut GuardedStream,
) -> io::Result<()> {
    while conn.is_handshaking() {
        conn.complete_io(sock)?;
    }
    Ok(())
}

/// Why an exchange ended the connection.
enum Stop {
    /// The program's request is refused: the reason, and the rule that
    /// would allow it.
    Refused(String, Option<String>),
    /// The server's answer cannot go through the broker.
    BadAnswer(String),
    /// A socket failed or closed mid-message, or the proxy stopped.
    Io,
}

impl From<io::Error> for Stop {
    fn from(_: io::Error) -> Stop {
        Stop::Io
    }
}

enum Next {
    Again,
    Close,
}

/// One side of a terminated connection, with what was read from it but
/// not yet used.
struct Buffered<S> {
    stream: S,
    buf: Vec<u8>,
    pos: usize,
    /// What is queued to go out.
    out: Vec<u8>,
}

/// The longest chunk-size or trailer line the broker reads.
const MAX_LINE: usize = 4096;

impl<S: Read + Write + Closing> Buffered<S> {
    fn new(stream: S) -> Self {
        Buffered {
            stream,
            buf: Vec::new(),
            pos: 0,
            out: Vec::new(),
        }
    }

    fn available(&self) -> &[u8] {
        &self.buf[self.pos..]
    }

    /// Reads more; `false` at the end of the stream.
    fn fill(&mut self) -> Result<bool, Stop> {
        // What was used goes first: a peer whose pieces never line up
        // with what the broker reads must not grow the buffer.
        self.buf.drain(..self.pos);
        self.pos = 0;
        let mut chunk = [0u8; 16 * 1024];
        match self.stream.read(&mut chunk) {
            Ok(0) => Ok(false),
            Ok(n) => {
                self.buf.extend_from_slice(&chunk[..n]);
                Ok(true)
            }
            // A peer that ends TLS without close_notify is an end too.
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Ok(false),
            Err(_) => Err(Stop::Io),
        }
    }

    /// Up to and with the empty line; `None` at a clean end before any
    /// byte of it.
    fn head(&mut self, max: usize, too_long: impl Fn() -> Stop) -> Result<Option<Vec<u8>>, Stop> {
        let mut searched: usize = 0;
        loop {
            let from = searched.saturating_sub(3);
            if let Some(end) = self.available()[from..]
                .windows(4)
                .position(|w| w == b"\r\n\r\n")
            {
                let end = from + end + 4;
                let head = self.available()[..end].to_vec();
                self.pos += end;
                return Ok(Some(head));
            }
            searched = self.available().len();
            if searched > max {
                return Err(too_long());
            }
            if !self.fill()? {
                return if self.available().is_empty() {
                    Ok(None)
                } else {
                    Err(Stop::Io)
                };
            }
        }
    }

    /// One line, without its CRLF (a bare LF is not a line end).
    fn line(&mut self) -> Result<Vec<u8>, Stop> {
        loop {
            if let Some(end) = self.available().windows(2).position(|w| w == b"\r\n") {
                let line = self.available()[..end].to_vec();
                self.pos += end + 2;
                return Ok(line);
            }
            if self.available().len() > MAX_LINE || !self.fill()? {
                return Err(Stop::Io);
            }
        }
    }

    /// The next at most `max` bytes (at least one), or `None` at the end.
    fn some(&mut self, max: usize) -> Result<Option<Vec<u8>>, Stop> {
        if self.available().is_empty() && !self.fill()? {
            return Ok(None);
        }
        let n = self.available().len().min(max);
        let piece = self.available()[..n].to_vec();
        self.pos += n;
        Ok(Some(piece))
    }

    fn send(&mut self, bytes: &[u8]) -> Result<(), Stop> {
        self.queue(bytes)?;
        self.flush()
    }

    /// Adds to what goes out with the next [`flush`](Self::flush) (sent
    /// now if it is large): an answer's head and body leave in as few
    /// records and segments as they can.
    fn queue(&mut self, bytes: &[u8]) -> Result<(), Stop> {
        self.out.extend_from_slice(bytes);
        if self.out.len() >= 64 * 1024 {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), Stop> {
        self.stream.write_all(&self.out)?;
        self.out.clear();
        self.stream.flush()?;
        Ok(())
    }

    fn close(mut self) {
        self.stream.close();
    }
}

/// A TLS stream's orderly end: `close_notify`, then the socket's.
trait Closing {
    fn close(&mut self);
}

impl<C> Closing for StreamOwned<C, GuardedStream>
where
    C: std::ops::DerefMut<Target = rustls::ConnectionCommon<<C as SideOf>::Data>> + SideOf,
{
    fn close(&mut self) {
        self.conn.send_close_notify();
        let _ = self.conn.complete_io(&mut self.sock);
        self.sock.shutdown_write();
    }
}

/// The connection data type of each side (to name its `ConnectionCommon`).
trait SideOf {
    type Data;
}
impl SideOf for ServerConnection {
    type Data = rustls::server::ServerConnectionData;
}
impl SideOf for ClientConnection {
    type Data = rustls::client::ClientConnectionData;
}

/// Answers the program with an error status and the reason.
fn answer<S: Read + Write + Closing>(to: &mut Buffered<S>, code: u16, status: &str, why: &str) {
    let body = format!("cordon credential broker: {why}\n");
    let _ = to.send(
        format!(
            "HTTP/1.1 {code} {status}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\
             Connection: close\r\n\r\n{body}",
            body.len()
        )
        .as_bytes(),
    );
}

/// One terminated connection's requests.
struct Session<'a> {
    broker: &'a Broker,
    host: &'a TargetHost,
    name: &'a str,
    port: u16,
}

impl Session<'_> {
    /// One request and its answer.
    fn exchange<P, U>(
        &self,
        program: &mut Buffered<P>,
        server: &mut Buffered<U>,
    ) -> Result<Next, Stop>
    where
        P: Read + Write + Closing,
        U: Read + Write + Closing,
    {
        let too_long = || {
            Stop::Refused(
                format!("the request head is longer than {MAX_HEAD} bytes"),
                None,
            )
        };
        let Some(raw) = program.head(MAX_HEAD, too_long)? else {
            return Ok(Next::Close);
        };
        let req = rewrite(&raw, self.name, self.port, &self.broker.secrets)
            .map_err(|r| Stop::Refused(r.0, None))?;
        if self.broker.ruled_tls(self.host, self.port)
            && !self
                .broker
                .rules
                .iter()
                .any(|r| r.allows(&req.method, self.host, self.port, true, &req.target))
        {
            let path = req
                .target
                .split_once('?')
                .map_or(req.target.as_str(), |(p, _)| p);
            let port = if self.port == 443 {
                String::new()
            } else {
                format!(":{}", self.port)
            };
            return Err(Stop::Refused(
                format!(
                    "no request rule allows {} {} on {}",
                    req.method, req.target, self.host
                ),
                suggestion(&req.method, &format!("https://{}{port}", self.host), path),
            ));
        }
        // A body where a server may ignore it would be read by that server
        // as a second request, unjudged, on this kept-alive connection.
        let bodiless = ["GET", "HEAD", "OPTIONS", "TRACE"].contains(&req.method.as_str());
        if bodiless && !matches!(req.body, Body::None | Body::Length(0)) {
            return Err(Stop::Refused(
                format!(
                    "a body on {}: a server that ignores it would read it as another request",
                    req.method
                ),
                None,
            ));
        }
        if req.expects_continue {
            program.send(b"HTTP/1.1 100 Continue\r\n\r\n")?;
        }
        server.send(&req.head)?;
        self.request_body(program, server, req.body)?;
        if !program.available().is_empty() {
            return Err(Stop::Refused(
                "a second request came before the first one's answer (pipelining): the broker \
                 takes one request at a time"
                    .into(),
                None,
            ));
        }
        self.answer(program, server, req.method == "HEAD")
    }

    /// Sends the request's body on, re-framed the one way the broker
    /// reads it, refusing any placeholder in it.
    fn request_body<P, U>(
        &self,
        program: &mut Buffered<P>,
        server: &mut Buffered<U>,
        body: Body,
    ) -> Result<(), Stop>
    where
        P: Read + Write + Closing,
        U: Read + Write + Closing,
    {
        let mut watch = Watch::new(&self.broker.secrets);
        match body {
            Body::None => Ok(()),
            Body::Length(n) => copy_watched(program, server, n, &mut watch),
            Body::Chunked => loop {
                let line = program.line()?;
                let size = chunk_size(&line, false).ok_or_else(|| {
                    Stop::Refused(
                        "a chunk size line is not bare hex digits (no extensions go through \
                         the broker)"
                            .into(),
                        None,
                    )
                })?;
                if size == 0 {
                    if !program.line()?.is_empty() {
                        return Err(Stop::Refused(
                            "a chunked body with trailers: none go through the broker".into(),
                            None,
                        ));
                    }
                    server.send(b"0\r\n\r\n")?;
                    return Ok(());
                }
                server.send(format!("{size:x}\r\n").as_bytes())?;
                copy_watched(program, server, size, &mut watch)?;
                if !program.line()?.is_empty() {
                    return Err(Stop::Refused("a chunk does not end with CRLF".into(), None));
                }
                server.send(b"\r\n")?;
            },
        }
    }

    /// Reads the server's answer and sends it to the program, the values
    /// scrubbed and the body re-framed as chunks.
    fn answer<P, U>(
        &self,
        program: &mut Buffered<P>,
        server: &mut Buffered<U>,
        head_request: bool,
    ) -> Result<Next, Stop>
    where
        P: Read + Write + Closing,
        U: Read + Write + Closing,
    {
        loop {
            let too_long =
                || Stop::BadAnswer(format!("the answer's head is over {MAX_HEAD} bytes"));
            let Some(raw) = server.head(MAX_HEAD, too_long)? else {
                return Err(Stop::BadAnswer(format!(
                    "{} closed the connection without an answer",
                    self.host
                )));
            };
            let raw = self.broker.scrub(&raw);
            let mut fields = [httparse::EMPTY_HEADER; MAX_HEADERS];
            let mut res = httparse::Response::new(&mut fields);
            if !matches!(res.parse(&raw), Ok(httparse::Status::Complete(_))) {
                return Err(Stop::BadAnswer(format!(
                    "{}'s answer head does not parse",
                    self.host
                )));
            }
            let code = res.code.unwrap_or(0);
            if code == 101 {
                return Err(Stop::BadAnswer(
                    "the server switched protocols; the broker reads HTTP/1.1 only".into(),
                ));
            }
            if (100..200).contains(&code) {
                program.send(&raw)?;
                continue;
            }
            if code == 206 {
                return Err(Stop::BadAnswer(
                    "the server sent part of a resource (206); the broker scrubs whole answers \
                     only"
                        .into(),
                ));
            }
            let mut length = None;
            let mut chunked = false;
            let mut close = false;
            let mut out = format!("HTTP/1.1 {code} {}\r\n", res.reason.unwrap_or("")).into_bytes();
            let no_body = head_request || code == 204 || code == 304;
            for f in res.headers.iter() {
                let value = String::from_utf8_lossy(f.value);
                let n = f.name;
                if n.eq_ignore_ascii_case("content-encoding")
                    && !value.trim().eq_ignore_ascii_case("identity")
                {
                    return Err(Stop::BadAnswer(format!(
                        "the server encoded its answer ({value}) though identity was asked; the \
                         broker cannot scrub an encoded answer"
                    )));
                }
                if n.eq_ignore_ascii_case("connection")
                    && value.to_ascii_lowercase().contains("close")
                {
                    close = true;
                }
                let framing = n.eq_ignore_ascii_case("content-length")
                    || n.eq_ignore_ascii_case("transfer-encoding");
                if n.eq_ignore_ascii_case("content-length") {
                    if length.is_some() {
                        return Err(Stop::BadAnswer("two Content-Length headers".into()));
                    }
                    length =
                        Some(value.trim().parse::<u64>().map_err(|_| {
                            Stop::BadAnswer("Content-Length is not a number".into())
                        })?);
                }
                if n.eq_ignore_ascii_case("transfer-encoding") {
                    if !value.trim().eq_ignore_ascii_case("chunked") || chunked {
                        return Err(Stop::BadAnswer(format!(
                            "Transfer-Encoding {value}: only one `chunked` goes through the broker"
                        )));
                    }
                    chunked = true;
                }
                if framing && !no_body {
                    continue;
                }
                out.extend_from_slice(n.as_bytes());
                out.extend_from_slice(b": ");
                out.extend_from_slice(f.value);
                out.extend_from_slice(b"\r\n");
            }
            if chunked && length.is_some() {
                return Err(Stop::BadAnswer(
                    "an answer framed by both Content-Length and Transfer-Encoding".into(),
                ));
            }
            if no_body {
                out.extend_from_slice(b"\r\n");
                program.send(&out)?;
                return Ok(if close { Next::Close } else { Next::Again });
            }
            let until_close = !chunked && length.is_none();
            out.extend_from_slice(b"Transfer-Encoding: chunked\r\n");
            if until_close {
                out.extend_from_slice(b"Connection: close\r\n");
            }
            out.extend_from_slice(b"\r\n");
            program.queue(&out)?;
            let mut scrub = self.broker.scrubber();
            // What is queued goes out before the broker waits on the
            // server again: a slow answer reaches the program as it comes.
            let mut emit =
                |program: &mut Buffered<P>, piece: &[u8], more_ready: bool| -> Result<(), Stop> {
                    let clean = scrub.push(piece);
                    send_chunk(program, &clean)?;
                    if !more_ready {
                        program.flush()?;
                    }
                    Ok(())
                };
            if chunked {
                loop {
                    let line = server.line()?;
                    let size = chunk_size(&line, true).ok_or_else(|| {
                        Stop::BadAnswer("a chunk size line of the answer does not parse".into())
                    })?;
                    if size == 0 {
                        // Trailers are read and dropped.
                        while !server.line()?.is_empty() {}
                        break;
                    }
                    let mut left = size;
                    while left > 0 {
                        let Some(piece) = server.some(left.min(64 * 1024) as usize)? else {
                            return Err(Stop::Io);
                        };
                        left -= piece.len() as u64;
                        emit(program, &piece, !server.available().is_empty())?;
                    }
                    if !server.line()?.is_empty() {
                        return Err(Stop::Io);
                    }
                }
            } else if let Some(mut left) = length {
                while left > 0 {
                    let Some(piece) = server.some(left.min(64 * 1024) as usize)? else {
                        return Err(Stop::Io);
                    };
                    left -= piece.len() as u64;
                    emit(program, &piece, left == 0 || !server.available().is_empty())?;
                }
            } else {
                while let Some(piece) = server.some(64 * 1024)? {
                    emit(program, &piece, !server.available().is_empty())?;
                }
            }
            send_chunk(program, &scrub.finish())?;
            program.send(b"0\r\n\r\n")?;
            return Ok(if close || until_close {
                Next::Close
            } else {
                Next::Again
            });
        }
    }
}

/// Sends the next `n` bytes of the program's body on, each piece watched
/// for placeholders before it goes.
fn copy_watched<P, U>(
    program: &mut Buffered<P>,
    server: &mut Buffered<U>,
    mut n: u64,
    watch: &mut Watch<'_>,
) -> Result<(), Stop>
where
    P: Read + Write + Closing,
    U: Read + Write + Closing,
{
    while n > 0 {
        let Some(piece) = program.some(n.min(64 * 1024) as usize)? else {
            return Err(Stop::Io);
        };
        watch.check(&piece)?;
        server.send(&piece)?;
        n -= piece.len() as u64;
    }
    Ok(())
}

fn send_chunk<P: Read + Write + Closing>(to: &mut Buffered<P>, bytes: &[u8]) -> Result<(), Stop> {
    if bytes.is_empty() {
        return Ok(());
    }
    let mut framed = format!("{:x}\r\n", bytes.len()).into_bytes();
    framed.extend_from_slice(bytes);
    framed.extend_from_slice(b"\r\n");
    to.queue(&framed)
}

/// A chunk-size line: hex digits (at most 15), and, when
/// `extensions` (an answer's, which are dropped), `;…` after them.
fn chunk_size(line: &[u8], extensions: bool) -> Option<u64> {
    let digits = match line.iter().position(|&b| b == b';') {
        Some(i) if extensions => &line[..i],
        Some(_) => return None,
        None => line,
    };
    let digits = std::str::from_utf8(digits).ok()?;
    let digits = if extensions {
        digits.trim_end()
    } else {
        digits
    };
    if digits.is_empty() || digits.len() > 15 || !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u64::from_str_radix(digits, 16).ok()
}

/// Watches a request body for any secret's placeholder, across pieces.
struct Watch<'a> {
    placeholders: Vec<&'a [u8]>,
    tail: Vec<u8>,
    keep: usize,
}

impl<'a> Watch<'a> {
    fn new(secrets: &'a [Secret]) -> Watch<'a> {
        let placeholders: Vec<&[u8]> = secrets.iter().map(|s| s.placeholder().as_bytes()).collect();
        let keep = placeholders.iter().map(|p| p.len()).max().unwrap_or(1) - 1;
        Watch {
            placeholders,
            tail: Vec::new(),
            keep,
        }
    }

    /// `Err` when a placeholder ends in `piece` (so the piece that would
    /// complete it is never sent).
    fn check(&mut self, piece: &[u8]) -> Result<(), Stop> {
        self.tail.extend_from_slice(piece);
        if let Some(p) = self.placeholders.iter().find(|p| contains(&self.tail, p)) {
            let name = String::from_utf8_lossy(p);
            return Err(Stop::Refused(
                format!(
                    "a placeholder ({name}) is in the request body: a secret goes in headers \
                     only"
                ),
                None,
            ));
        }
        let cut = self.tail.len().saturating_sub(self.keep);
        self.tail.drain(..cut);
        Ok(())
    }
}

/// The rule that would allow `method` on `path` at `origin`, as
/// `--explain` suggests it: none for a path with `*` (the rule would read
/// it as a wildcard and allow far more than was asked).
fn suggestion(method: &str, origin: &str, path: &str) -> Option<String> {
    (!path.contains('*')).then(|| format!("{method} {origin}{path}"))
}

/// Headers some servers and frameworks route or dispatch by instead of
/// the request line or `Host`: a request rule could not see what they
/// ask for.
const OVERRIDING: [&str; 10] = [
    "x-original-url",
    "x-rewrite-url",
    "x-http-method-override",
    "x-http-method",
    "x-method-override",
    "x-forwarded-host",
    "x-forwarded-prefix",
    "x-forwarded-path",
    "x-forwarded-uri",
    "forwarded",
];

/// Why a header named `name` is refused toward a host the broker judges
/// (a bound host, or one a request rule is for): `None` for any other.
pub fn overriding(name: &str) -> Option<String> {
    OVERRIDING
        .iter()
        .any(|o| name.eq_ignore_ascii_case(o))
        .then(|| {
            format!(
                "header {name}: some servers route or dispatch by it instead of the request \
                 line, which is what the broker judges"
            )
        })
}

/// Whether `needle` is in `hay`.
fn contains(hay: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && hay.windows(needle.len()).any(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A peer whose pieces never end where a line does.
    struct Misaligned(usize);

    impl Read for Misaligned {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            if self.0 == 0 {
                return Ok(0);
            }
            self.0 -= 1;
            let piece = b"D\r\nC";
            buf[..piece.len()].copy_from_slice(piece);
            Ok(piece.len())
        }
    }

    impl Write for Misaligned {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            Ok(b.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    impl Closing for Misaligned {
        fn close(&mut self) {}
    }

    /// What was read and used is dropped before the next read: a peer
    /// that always leaves part of a line unread does not grow the buffer
    /// (it grew by every piece before).
    #[test]
    fn the_read_buffer_stays_small_however_the_pieces_fall() {
        let mut b = Buffered::new(Misaligned(100_000));
        while let Ok(line) = b.line() {
            assert_eq!(line.len(), if line.starts_with(b"C") { 2 } else { 1 });
        }
        assert!(b.buf.capacity() < 64 * 1024, "{}", b.buf.capacity());
    }
}
