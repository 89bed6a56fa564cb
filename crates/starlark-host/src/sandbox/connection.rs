//! One host ⇄ worker session over any async byte streams: the handshake,
//! `load_package`, `call`, and brokering the worker's `module` requests
//! (`docs/protocol.md`). Anything unexpected ends the session.

use std::time::Duration;

use cordon_starlark_protocol::frame::{
    decode_body, encode_frame, negotiate, Message, ProtocolError,
};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use cordon_starlark_protocol::wire::{self, ErrorCode};
use cordon_starlark_protocol::{LimitKind, ModuleCall, ModuleError, ModuleSet};
use cordon_starlark_worker::CancelToken;

use crate::broker::ModuleBroker;

/// Why a [`WorkerConnection`] request did not produce a result.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SessionError {
    /// The worker answered the request with an `Error`; the connection is
    /// still healthy.
    #[error("worker reported {code}: {message}")]
    Reported {
        /// The error code (see `docs/protocol.md`).
        code: String,
        /// The message.
        message: String,
        /// What the evaluation printed before it failed (its `output`
        /// frame; empty without one).
        output: String,
    },
    /// The pipe closed or failed: the worker most likely died.
    #[error("{0}")]
    Closed(String),
    /// The worker broke the protocol (malformed, oversize or unsolicited
    /// frame, unknown method, failed handshake). Terminal.
    #[error("{0}")]
    Violation(String),
    /// The host's hard deadline passed without an answer. Terminal.
    #[error("no answer before the deadline")]
    Deadline,
    /// The request was cancelled and the worker did not answer within the
    /// grace period. Terminal.
    #[error("cancelled, and the worker did not stop in time")]
    Cancelled,
}

impl SessionError {
    fn from_protocol(e: ProtocolError) -> Self {
        match e {
            ProtocolError::Closed | ProtocolError::Io(_) | ProtocolError::Truncated { .. } => {
                SessionError::Closed(e.to_string())
            }
            other => SessionError::Violation(other.to_string()),
        }
    }

    /// True when the worker must be killed and discarded.
    pub fn is_terminal(&self) -> bool {
        !matches!(self, SessionError::Reported { .. })
    }
}

/// Cancel-safe frame reader: all state lives in `self`, so a `select!`
/// that drops `next()` loses no bytes.
struct FrameReader<R> {
    inner: R,
    buf: Vec<u8>,
    max: usize,
}

impl<R: AsyncRead + Unpin> FrameReader<R> {
    async fn next(&mut self) -> Result<Message, ProtocolError> {
        loop {
            if self.buf.len() >= 4 {
                let len = u32::from_be_bytes([self.buf[0], self.buf[1], self.buf[2], self.buf[3]])
                    as usize;
                if len > self.max {
                    return Err(ProtocolError::Oversize { len, max: self.max });
                }
                if self.buf.len() >= 4 + len {
                    let msg = decode_body(&self.buf[4..4 + len]);
                    self.buf.drain(..4 + len);
                    return msg;
                }
            }
            self.buf.reserve(64 * 1024);
            let n = self.inner.read_buf(&mut self.buf).await?;
            if n == 0 {
                return Err(match self.buf.len() {
                    0 => ProtocolError::Closed,
                    got @ 1..=3 => ProtocolError::Truncated { expected: 4, got },
                    got => ProtocolError::Truncated {
                        expected: u32::from_be_bytes([
                            self.buf[0],
                            self.buf[1],
                            self.buf[2],
                            self.buf[3],
                        ]) as usize,
                        got: got - 4,
                    },
                });
            }
        }
    }
}

/// Is `call`'s module in `modules`?
fn module_granted(modules: ModuleSet, call: &ModuleCall) -> bool {
    match call {
        ModuleCall::SecretGet(_) => modules.secrets,
        ModuleCall::Notify(_) => modules.notifications,
        ModuleCall::Http(_) => modules.http,
        ModuleCall::Complete(_) => modules.provider,
    }
}

/// The host's end of one worker connection, over any async streams (a
/// worker's stdout/stdin, or an in-memory duplex in tests).
pub struct WorkerConnection<R, W> {
    reader: FrameReader<R>,
    writer: W,
    max_frame: usize,
    next_id: u64,
    last_module_id: Option<u64>,
    pub(super) package: String,
}

impl<R, W> std::fmt::Debug for WorkerConnection<R, W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerConnection")
            .field("package", &self.package)
            .field("next_id", &self.next_id)
            .finish()
    }
}

impl<R: AsyncRead + Unpin, W: AsyncWrite + Unpin> WorkerConnection<R, W> {
    /// Reads the worker's `Hello`, checks the instance id, the protocol
    /// range and the worker identity ([`wire::worker_identity`]), and
    /// answers `Welcome` — or a terminal `Error` and [`SessionError::Violation`].
    /// The caller bounds the wait (e.g. with `tokio::time::timeout`).
    pub async fn handshake(
        reader: R,
        writer: W,
        instance_id: &str,
        max_frame: usize,
        package: &str,
    ) -> Result<Self, SessionError> {
        let mut conn = WorkerConnection {
            reader: FrameReader {
                inner: reader,
                buf: Vec::new(),
                max: max_frame,
            },
            writer,
            max_frame,
            next_id: 1,
            last_module_id: None,
            package: package.to_owned(),
        };
        let hello = conn
            .reader
            .next()
            .await
            .map_err(|e| match SessionError::from_protocol(e) {
                SessionError::Closed(m) => {
                    SessionError::Closed(format!("closed the connection before its hello ({m})"))
                }
                other => {
                    SessionError::Violation(format!("broke the protocol in its hello: {other}"))
                }
            })?;
        let protocol = match negotiate(&hello, instance_id) {
            Ok(v) => v,
            Err(e) => {
                let code = match e {
                    ProtocolError::Version { .. } => ErrorCode::Version,
                    _ => ErrorCode::Protocol,
                };
                conn.send_terminal(code, &e.to_string()).await;
                return Err(SessionError::Violation(format!(
                    "failed the handshake: {e}"
                )));
            }
        };
        if let Message::Hello { worker, .. } = &hello {
            if *worker != wire::worker_identity() {
                let m = format!(
                    "identifies as {worker:?}, expected {:?} (is the worker program the same build as the host?)",
                    wire::worker_identity()
                );
                conn.send_terminal(ErrorCode::Identity, &m).await;
                return Err(SessionError::Violation(m));
            }
        }
        conn.send(&Message::Welcome { protocol }).await?;
        Ok(conn)
    }

    async fn send(&mut self, msg: &Message) -> Result<(), SessionError> {
        let frame = encode_frame(msg, self.max_frame).map_err(|e| match e {
            ProtocolError::Oversize { len, max } => SessionError::Reported {
                code: ErrorCode::Limit(LimitKind::ValueSize).as_wire(),
                message: format!(
                    "the request is {len} bytes, more than the {max}-byte frame limit; \
                     raise WorkerConfig::max_frame or send less data"
                ),
                output: String::new(),
            },
            other => SessionError::Violation(other.to_string()),
        })?;
        self.writer
            .write_all(&frame)
            .await
            .map_err(|e| SessionError::Closed(format!("worker pipe I/O failed: {e}")))?;
        self.writer
            .flush()
            .await
            .map_err(|e| SessionError::Closed(format!("worker pipe I/O failed: {e}")))
    }

    /// [`Self::send`], bounded by `deadline`: a worker that stops reading
    /// its stdin (so the pipe fills) cannot block the host past it.
    async fn send_before(
        &mut self,
        deadline: tokio::time::Instant,
        msg: &Message,
    ) -> Result<(), SessionError> {
        match tokio::time::timeout_at(deadline, self.send(msg)).await {
            Ok(r) => r,
            Err(_) => Err(SessionError::Deadline),
        }
    }

    /// Best effort: the connection is being abandoned anyway.
    async fn send_terminal(&mut self, code: ErrorCode, message: &str) {
        let msg = Message::Error {
            id: None,
            code: code.as_wire(),
            message: message.to_owned(),
        };
        let _ = tokio::time::timeout(Duration::from_millis(500), self.send(&msg)).await;
    }

    /// Sends `load_package` and waits for the answer until `deadline`.
    pub async fn load(
        &mut self,
        body: &wire::LoadPackage,
        deadline: tokio::time::Instant,
    ) -> Result<wire::Loaded, SessionError> {
        let body = serde_json::to_value(body)
            .map_err(|e| SessionError::Violation(format!("cannot encode load_package: {e}")))?;
        let v = self
            .request(
                wire::METHOD_LOAD_PACKAGE,
                body,
                None,
                deadline,
                None,
                Duration::ZERO,
            )
            .await?;
        serde_json::from_value(v).map_err(|e| {
            SessionError::Violation(format!("sent a malformed load_package answer: {e}"))
        })
    }

    /// Sends `call`, serves the worker's `module` requests with `broker`
    /// until the answer arrives, and enforces `hard_deadline` and `cancel`
    /// (on cancel: sends `Cancel`, then waits at most `grace`).
    pub async fn call(
        &mut self,
        call: &wire::Call,
        broker: &ModuleBroker,
        hard_deadline: tokio::time::Instant,
        cancel: &CancelToken,
        grace: Duration,
    ) -> Result<wire::CallResult, SessionError> {
        let body = serde_json::to_value(call)
            .map_err(|e| SessionError::Violation(format!("cannot encode call: {e}")))?;
        let v = self
            .request(
                wire::METHOD_CALL,
                body,
                Some(broker),
                hard_deadline,
                Some(cancel),
                grace,
            )
            .await?;
        serde_json::from_value(v)
            .map_err(|e| SessionError::Violation(format!("sent a malformed call answer: {e}")))
    }

    async fn request(
        &mut self,
        method: &str,
        body: serde_json::Value,
        broker: Option<&ModuleBroker>,
        hard_deadline: tokio::time::Instant,
        cancel: Option<&CancelToken>,
        grace: Duration,
    ) -> Result<serde_json::Value, SessionError> {
        let id = self.next_id;
        self.next_id += 1;
        self.send_before(
            hard_deadline,
            &Message::Request {
                id,
                method: method.to_owned(),
                body,
            },
        )
        .await?;
        let mut cancel_deadline: Option<tokio::time::Instant> = None;
        // The request's `output` frame, if the worker sent one before its
        // error.
        let mut printed: Option<String> = None;
        let cancelled = || async move {
            match cancel {
                Some(c) => c.cancelled().await,
                None => std::future::pending().await,
            }
        };
        loop {
            let limit = cancel_deadline.map_or(hard_deadline, |c| c.min(hard_deadline));
            let msg = tokio::select! {
                m = self.reader.next() => m,
                _ = tokio::time::sleep_until(limit) => {
                    return Err(if cancel_deadline.is_some() {
                        SessionError::Cancelled
                    } else {
                        SessionError::Deadline
                    });
                }
                _ = cancelled(), if cancel_deadline.is_none() => {
                    self.send_before(hard_deadline, &Message::Cancel { id }).await?;
                    cancel_deadline = Some(tokio::time::Instant::now() + grace);
                    continue;
                }
            };
            let msg = msg.map_err(SessionError::from_protocol)?;
            match msg {
                Message::Response { id: rid, body } if rid == id => return Ok(body),
                Message::Error {
                    id: Some(rid),
                    code,
                    message,
                } if rid == id => {
                    return Err(SessionError::Reported {
                        code,
                        message,
                        output: printed.unwrap_or_default(),
                    })
                }
                Message::Output { id: rid, output } if rid == id && printed.is_none() => {
                    printed = Some(output);
                }
                Message::Error {
                    id: None,
                    code,
                    message,
                } => {
                    return Err(SessionError::Violation(format!(
                        "ended the session: {code}: {message}"
                    )))
                }
                Message::Request {
                    id: mid,
                    method,
                    body,
                } if method == wire::METHOD_MODULE => {
                    let Some(broker) = broker else {
                        return Err(SessionError::Violation(format!(
                            "sent a module request ({mid}) while no call was running"
                        )));
                    };
                    if self.last_module_id.is_some_and(|last| mid <= last) {
                        return Err(SessionError::Violation(format!(
                            "reused module request id {mid}"
                        )));
                    }
                    self.last_module_id = Some(mid);
                    if cancel_deadline.is_some() {
                        // Cancelled: the worker is told; don't start new work.
                        continue;
                    }
                    let call: ModuleCall = serde_json::from_value(body).map_err(|e| {
                        SessionError::Violation(format!("sent a malformed module request: {e}"))
                    })?;
                    let name = call.name();
                    if !module_granted(broker.modules(), &call) {
                        tracing::warn!(
                            package = %self.package,
                            module = name,
                            "worker asked for a module its package was not granted; refused"
                        );
                    }
                    let reply = tokio::select! {
                        r = broker.handle(call) => Some(r),
                        _ = tokio::time::sleep_until(hard_deadline) => {
                            return Err(SessionError::Deadline);
                        }
                        _ = cancelled() => None,
                    };
                    let answer = match reply {
                        None => {
                            self.send_before(hard_deadline, &Message::Cancel { id })
                                .await?;
                            cancel_deadline = Some(tokio::time::Instant::now() + grace);
                            continue;
                        }
                        Some(Ok(reply)) => match serde_json::to_value(&reply) {
                            Ok(body) => Message::Response { id: mid, body },
                            Err(e) => Message::Error {
                                id: Some(mid),
                                code: "upstream".into(),
                                message: format!("cannot encode the reply: {e}"),
                            },
                        },
                        Some(Err(e)) => {
                            let (code, message) = wire::module_error_code(&e);
                            Message::Error {
                                id: Some(mid),
                                code: code.into(),
                                message,
                            }
                        }
                    };
                    match self.send_before(hard_deadline, &answer).await {
                        Err(SessionError::Reported { message, .. }) => {
                            // The reply does not fit in a frame: tell the
                            // script instead.
                            let (code, message) =
                                wire::module_error_code(&ModuleError::LimitExceeded(message));
                            self.send_before(
                                hard_deadline,
                                &Message::Error {
                                    id: Some(mid),
                                    code: code.into(),
                                    message,
                                },
                            )
                            .await?;
                        }
                        other => other?,
                    }
                }
                Message::Request {
                    id: rid, method, ..
                } => {
                    self.send_terminal(
                        ErrorCode::UnknownMethod,
                        &format!("unknown method {method:?}"),
                    )
                    .await;
                    return Err(SessionError::Violation(format!(
                        "sent request {rid} with unknown method {method:?}"
                    )));
                }
                other => {
                    return Err(SessionError::Violation(format!(
                        "sent an unsolicited {}",
                        describe(&other)
                    )))
                }
            }
        }
    }
}

fn describe(m: &Message) -> String {
    match m {
        Message::Hello { .. } => "hello".into(),
        Message::Welcome { .. } => "welcome".into(),
        Message::Request { id, method, .. } => format!("request {id} ({method})"),
        Message::Response { id, .. } => format!("response to request {id}"),
        Message::Error { id, code, .. } => format!("error for request {id:?} ({code})"),
        Message::Output { id, .. } => format!("output for request {id}"),
        Message::Cancel { id } => format!("cancel {id}"),
    }
}
