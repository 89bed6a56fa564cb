//! One terminated connection's HTTP/1.1, as the broker reads and writes
//! it: the buffered sides, one exchange (a request judged, rewritten and
//! re-framed; its answer scrubbed and re-framed), and the refusals.

use std::io::{self, Read, Write};

use cordon_egress::{GuardedStream, TargetHost};
use rustls::{ClientConnection, ServerConnection, StreamOwned};

use crate::body::{chunk_size, Watch};
use crate::broker::suggestion;
use crate::head::{rewrite, Body, MAX_HEAD, MAX_HEADERS};
use crate::Broker;

/// Completes a TLS handshake over a blocking stream.
pub(crate) fn handshake<D>(
    conn: &mut rustls::ConnectionCommon<D>,
    sock: &mut GuardedStream,
) -> io::Result<()> {
    while conn.is_handshaking() {
        conn.complete_io(sock)?;
    }
    Ok(())
}

/// Why an exchange ended the connection.
pub(crate) enum Stop {
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

pub(crate) enum Next {
    Again,
    Close,
}

/// One side of a terminated connection, with what was read from it but
/// not yet used.
pub(crate) struct Buffered<S> {
    stream: S,
    buf: Vec<u8>,
    pos: usize,
    /// What is queued to go out.
    out: Vec<u8>,
}

/// The longest chunk-size or trailer line the broker reads.
const MAX_LINE: usize = 4096;

impl<S: Read + Write + Closing> Buffered<S> {
    pub(crate) fn new(stream: S) -> Self {
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

    pub(crate) fn close(mut self) {
        self.stream.close();
    }
}

/// A TLS stream's orderly end: `close_notify`, then the socket's.
pub(crate) trait Closing {
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
pub(crate) fn answer<S: Read + Write + Closing>(
    to: &mut Buffered<S>,
    code: u16,
    status: &str,
    why: &str,
) {
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
pub(crate) struct Session<'a> {
    pub(crate) broker: &'a Broker,
    pub(crate) host: &'a TargetHost,
    pub(crate) name: &'a str,
    pub(crate) port: u16,
}

impl Session<'_> {
    /// One request and its answer.
    pub(crate) fn exchange<P, U>(
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

#[cfg(test)]
#[path = "wire_tests.rs"]
mod tests;
