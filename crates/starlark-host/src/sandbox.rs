//! The host side of sandboxed evaluation: [`SandboxedRunner`] runs each
//! package in a pool of worker processes started through an admitted
//! [`cordon_core::SandboxRunner`], and serves their module calls with the
//! same [`ModuleBroker`] code as in-process runs.
//!
//! * [`WorkerConnection`] speaks the protocol (`docs/protocol.md`) over any
//!   async byte streams: handshake, `load_package`, `call`, and brokering
//!   `module` requests. Anything unexpected is terminal.
//! * [`SandboxedRunner`] owns the pool: per (source hash, module set) a few
//!   warm workers with the package loaded and frozen, reused across calls,
//!   retired after a failure, after [`PoolConfig::max_calls_per_worker`]
//!   calls, when their CPU budget runs low, or when idle for
//!   [`PoolConfig::idle_timeout`].
//!
//! The wall-clock deadline is enforced twice: the worker's interpreter
//! stops at [`Limits::timeout`] by itself, and the host kills the worker's
//! process group [`WorkerConfig::kill_grace`] later if it has not answered.

use std::collections::HashMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use cordon_core::protocol::{
    decode_body, encode_frame, negotiate, Message, ProtocolError, DEFAULT_MAX_FRAME,
};
use cordon_core::{ChildSpec, ExitOutcome, Runner as _, RunningChild, SandboxRunner, Scratch};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::process::{ChildStdin, ChildStdout};

use crate::bindings::ModuleSet;
use crate::broker::{ensure_runnable, CancelToken, Capabilities, ModuleBroker};
use crate::error::{LimitKind, StarlarkHostError};
use crate::eval::CallOutcome;
use crate::limits::Limits;
use crate::package::Package;
use crate::protocol::{ModuleCall, ModuleError};
use crate::runner::ExecOutcome;
use crate::stores::RunContext;
use crate::wire;
use crate::worker::WORKER_ARG;

/// The program a worker runs: by default the host's own executable with
/// [`WORKER_ARG`] (its `main` must call
/// [`dispatch_worker`](crate::worker::dispatch_worker)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerProgram {
    /// The executable. It is copied ("staged") into a private 0755 temp
    /// dir, which becomes the worker's only package dir.
    pub path: PathBuf,
    /// Arguments before the host's `--instance <id> --max-frame <n>`.
    pub args: Vec<OsString>,
}

impl WorkerProgram {
    /// The running executable in worker mode.
    pub fn current_exe() -> std::io::Result<Self> {
        Ok(WorkerProgram::path(std::env::current_exe()?))
    }

    /// An explicit worker binary (e.g. this crate's `cordon-star-worker`),
    /// started with [`WORKER_ARG`].
    pub fn path(path: impl Into<PathBuf>) -> Self {
        WorkerProgram {
            path: path.into(),
            args: vec![WORKER_ARG.into()],
        }
    }
}

/// Resource limits of one worker process (rlimits set by the sandbox
/// backend; each is clamped to the [`SandboxRunner`]'s ceiling, which only
/// ever makes it stricter).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkerLimits {
    /// The worker's memory ([`cordon_core::Limits::memory_bytes`]: the
    /// whole worker's pages where the backend has a cgroup, else its
    /// private writable memory per process). Must cover the binary's mappings, the evaluation
    /// thread's stack ([`Limits::eval_stack_bytes`]) and the Starlark heap
    /// ([`Limits::max_heap_bytes`]) with room to spare. Default 512 MiB:
    /// a warm worker peaks at ~87 MiB of address space with the default
    /// 64 MiB evaluation stack (measured, see the README), and the 64 MiB
    /// Starlark heap limit is checked only periodically, so one large
    /// allocation can overshoot it before the check.
    pub memory_bytes: u64,
    /// `RLIMIT_NPROC`, which counts threads: the worker has two (the
    /// protocol reader and the evaluation thread) plus a short-lived
    /// warm-up thread at start. Default 4.
    pub max_processes: u64,
    /// `RLIMIT_NOFILE`. The worker needs 0–2 and a few of its own.
    /// Default 16.
    pub open_files: u64,
    /// `RLIMIT_CPU` over the worker's whole life. The pool retires a
    /// worker before its accumulated busy time plus one call's timeout
    /// could reach it. Default 60 s.
    pub cpu_seconds: u64,
    /// `RLIMIT_FSIZE` (the worker writes no files). Default 1 MiB.
    pub file_size_bytes: u64,
    /// Longest life of one worker (the spec's wall-clock deadline; the pool
    /// retires it earlier). Default 10 minutes.
    pub lifetime: Duration,
}

impl Default for WorkerLimits {
    fn default() -> Self {
        WorkerLimits {
            memory_bytes: 512 << 20,
            max_processes: 4,
            open_files: 16,
            cpu_seconds: 60,
            file_size_bytes: 1 << 20,
            lifetime: Duration::from_secs(600),
        }
    }
}

/// Pool settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolConfig {
    /// Idle warm workers kept per (package sources, module set). Default 2.
    pub max_idle_per_package: usize,
    /// Idle warm workers kept in total. Default 16.
    pub max_idle_total: usize,
    /// Workers running calls at once (further calls wait). Default 16.
    pub max_concurrent_calls: usize,
    /// An idle worker older than this is killed. Default 60 s.
    pub idle_timeout: Duration,
    /// A worker is retired after this many calls. Default 1000.
    pub max_calls_per_worker: u64,
    /// Started-and-greeted workers with no package yet, kept ready so a
    /// package without a warm worker pays only `load_package` instead of
    /// spawn + process start-up + interpreter set-up. Topped up in the
    /// background after one is used (the first cold start after creation
    /// or [`SandboxedRunner::shutdown`] is a full one); idle spares expire
    /// like idle workers. Default 0 (off: no process runs that was not
    /// asked for); 1 cuts a new package's first call from a full cold start
    /// (~5 ms) to ~0.7 ms (see the README's figures).
    pub spare_workers: usize,
}

impl Default for PoolConfig {
    fn default() -> Self {
        PoolConfig {
            max_idle_per_package: 2,
            max_idle_total: 16,
            max_concurrent_calls: 16,
            idle_timeout: Duration::from_secs(60),
            max_calls_per_worker: 1000,
            spare_workers: 0,
        }
    }
}

/// How sandboxed workers are started and pooled.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// What to execute.
    pub program: WorkerProgram,
    /// Per-worker rlimits.
    pub limits: WorkerLimits,
    /// Pool settings.
    pub pool: PoolConfig,
    /// Largest protocol frame, both directions. Package sources must fit
    /// in one `load_package` frame, a call's return value and output in
    /// one response. Default 1 MiB ([`DEFAULT_MAX_FRAME`]).
    pub max_frame: usize,
    /// Longest wait for the worker's `Hello`. Default 5 s.
    pub handshake_timeout: Duration,
    /// How long after the deadline (or a cancel) the host waits for the
    /// worker's own answer before it kills the process group. Default 250 ms.
    pub kill_grace: Duration,
}

impl WorkerConfig {
    /// Defaults with the given worker program.
    pub fn new(program: WorkerProgram) -> Self {
        WorkerConfig {
            program,
            limits: WorkerLimits::default(),
            pool: PoolConfig::default(),
            max_frame: DEFAULT_MAX_FRAME,
            handshake_timeout: Duration::from_secs(5),
            kill_grace: Duration::from_millis(250),
        }
    }
}

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
    package: String,
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
                    ProtocolError::Version { .. } => wire::CODE_VERSION,
                    _ => wire::CODE_PROTOCOL,
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
                conn.send_terminal(wire::CODE_IDENTITY, &m).await;
                return Err(SessionError::Violation(m));
            }
        }
        conn.send(&Message::Welcome { protocol }).await?;
        Ok(conn)
    }

    async fn send(&mut self, msg: &Message) -> Result<(), SessionError> {
        let frame = encode_frame(msg, self.max_frame).map_err(|e| match e {
            ProtocolError::Oversize { len, max } => SessionError::Reported {
                code: format!("limit.{}", LimitKind::ValueSize.as_str()),
                message: format!(
                    "the request is {len} bytes, more than the {max}-byte frame limit; \
                     raise WorkerConfig::max_frame or send less data"
                ),
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
    async fn send_terminal(&mut self, code: &str, message: &str) {
        let msg = Message::Error {
            id: None,
            code: code.to_owned(),
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
                } if rid == id => return Err(SessionError::Reported { code, message }),
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
                        wire::CODE_UNKNOWN_METHOD,
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
        Message::Cancel { id } => format!("cancel {id}"),
    }
}

type PoolKey = (String, ModuleSet);

type Pids = Arc<Mutex<std::collections::BTreeSet<u32>>>;

struct Worker {
    /// The live-worker registry; the worker removes itself on drop.
    pids: Pids,
    child: RunningChild,
    conn: WorkerConnection<ChildStdout, ChildStdin>,
    loaded: wire::Loaded,
    loaded_key: String,
    loaded_modules: ModuleSet,
    calls: u64,
    busy: Duration,
    idle_since: Instant,
}

impl Drop for Worker {
    fn drop(&mut self) {
        // The RunningChild kills the process group when dropped unreaped.
        self.pids
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.child.pid());
    }
}

/// A started worker outside the pool (see
/// [`SandboxedRunner::time_cold_start`]). Dropping it kills the process.
pub struct ColdWorker(Worker);

impl std::fmt::Debug for ColdWorker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ColdWorker")
            .field("pid", &self.0.child.pid())
            .finish()
    }
}

/// Pool counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PoolStats {
    /// Workers started (spawn + handshake attempted).
    pub started: u64,
    /// Calls served by an already-warm worker.
    pub reused: u64,
    /// Workers killed and reaped (failure, retirement, idle timeout).
    pub retired: u64,
    /// Workers currently idle in the pool.
    pub idle: usize,
    /// Spare workers (no package yet) ready.
    pub spares: usize,
}

struct Staged {
    _dir: tempfile::TempDir,
    program: PathBuf,
    dir: PathBuf,
}

/// Puts `program` into a fresh 0755 temp dir (so uid 65534 can execute it,
/// and the sandbox grants that dir only). A program that anyone may already
/// read and execute is hard-linked (copying a 20 MB binary dominated
/// `cordon star run`); otherwise, or across filesystems, it is copied.
fn stage(program: &Path) -> std::io::Result<Staged> {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::Builder::new()
        .prefix("cordon-star-worker-")
        .permissions(std::fs::Permissions::from_mode(0o755))
        .tempdir()?;
    let name = program
        .file_name()
        .map(|n| n.to_os_string())
        .unwrap_or_else(|| "cordon-star-worker".into());
    let dst = dir.path().join(name);
    // link(2) does not follow symlinks: link the file itself.
    let target = program.canonicalize()?;
    let meta = std::fs::metadata(&target)?;
    let world_runnable = meta.is_file() && meta.permissions().mode() & 0o005 == 0o005;
    if !(world_runnable && std::fs::hard_link(&target, &dst).is_ok()) {
        std::fs::copy(program, &dst)?;
        std::fs::set_permissions(&dst, std::fs::Permissions::from_mode(0o755))?;
    }
    let dir_path = dir.path().canonicalize()?;
    Ok(Staged {
        program: dir_path.join(dst.file_name().unwrap_or_default()),
        dir: dir_path,
        _dir: dir,
    })
}

struct Inner {
    runner: SandboxRunner,
    caps: Arc<Capabilities>,
    limits: Limits,
    config: WorkerConfig,
    staged: Staged,
    idle: Mutex<HashMap<PoolKey, Vec<Worker>>>,
    permits: tokio::sync::Semaphore,
    started: AtomicU64,
    reused: AtomicU64,
    retired: AtomicU64,
    instance_seq: AtomicU64,
    pids: Pids,
    spares: Mutex<Vec<Worker>>,
    replenishing: std::sync::atomic::AtomicBool,
    paused: std::sync::atomic::AtomicBool,
    me: Weak<Inner>,
}

/// Runs packages in sandboxed worker processes: the executor for
/// [`Isolation::Sandboxed`](crate::Isolation::Sandboxed). Cheap to clone.
///
/// Must be created inside a tokio runtime (an idle sweeper task runs there).
#[derive(Clone)]
pub struct SandboxedRunner {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for SandboxedRunner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SandboxedRunner")
            .field("runner", &self.inner.runner)
            .field("program", &self.inner.staged.program)
            .field("stats", &self.pool_stats())
            .finish()
    }
}

/// Kills a worker and reaps it; returns how it ended and its stderr tail.
async fn kill_and_reap(mut w: Worker) -> (Option<ExitOutcome>, String) {
    w.child.kill();
    let outcome = tokio::time::timeout(Duration::from_secs(5), w.child.wait())
        .await
        .ok()
        .and_then(Result::ok);
    let tail = String::from_utf8_lossy(&w.child.stderr_tail()).into_owned();
    (outcome, tail)
}

/// Reaps a worker whose pipe closed (it is dying or dead), then kills
/// whatever is left.
async fn reap_dead(mut w: Worker) -> (Option<ExitOutcome>, String) {
    let outcome = match tokio::time::timeout(Duration::from_millis(500), w.child.wait()).await {
        Ok(r) => r.ok(),
        Err(_) => {
            w.child.kill();
            tokio::time::timeout(Duration::from_secs(5), w.child.wait())
                .await
                .ok()
                .and_then(Result::ok)
        }
    };
    let tail = String::from_utf8_lossy(&w.child.stderr_tail()).into_owned();
    (outcome, tail)
}

impl SandboxedRunner {
    /// A sandboxed runner over an admitted `runner`, serving module calls
    /// with `caps`, evaluating under `limits`. Stages the worker program.
    pub fn new(
        runner: SandboxRunner,
        caps: Arc<Capabilities>,
        limits: Limits,
        config: WorkerConfig,
    ) -> Result<Self, StarlarkHostError> {
        let staged = stage(&config.program.path).map_err(|e| StarlarkHostError::WorkerStart {
            package: String::new(),
            message: format!(
                "cannot stage worker program {}: {e}",
                config.program.path.display()
            ),
        })?;
        tracing::debug!(program = %staged.program.display(), "staged the Starlark worker program");
        let inner = Arc::new_cyclic(|me| Inner {
            permits: tokio::sync::Semaphore::new(config.pool.max_concurrent_calls.max(1)),
            runner,
            caps,
            limits,
            config,
            staged,
            idle: Mutex::new(HashMap::new()),
            started: AtomicU64::new(0),
            reused: AtomicU64::new(0),
            retired: AtomicU64::new(0),
            instance_seq: AtomicU64::new(0),
            pids: Pids::default(),
            spares: Mutex::new(Vec::new()),
            replenishing: Default::default(),
            paused: Default::default(),
            me: me.clone(),
        });
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            let weak = Arc::downgrade(&inner);
            let period = (inner.config.pool.idle_timeout / 2).max(Duration::from_millis(100));
            rt.spawn(sweep_idle(weak, period));
        }
        Ok(SandboxedRunner { inner })
    }

    /// The evaluation limits.
    pub fn limits(&self) -> &Limits {
        &self.inner.limits
    }

    /// The worker configuration.
    pub fn config(&self) -> &WorkerConfig {
        &self.inner.config
    }

    /// The capabilities module calls are served with.
    pub fn capabilities(&self) -> &Arc<Capabilities> {
        &self.inner.caps
    }

    /// The staged worker executable.
    pub fn staged_program(&self) -> &Path {
        &self.inner.staged.program
    }

    /// Pool counters.
    pub fn pool_stats(&self) -> PoolStats {
        let idle = self
            .inner
            .idle
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .map(Vec::len)
            .sum();
        PoolStats {
            spares: self
                .inner
                .spares
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .len(),
            started: self.inner.started.load(Ordering::Relaxed),
            reused: self.inner.reused.load(Ordering::Relaxed),
            retired: self.inner.retired.load(Ordering::Relaxed),
            idle,
        }
    }

    /// Process ids of the live workers (idle and busy), for diagnostics.
    pub fn worker_pids(&self) -> Vec<u32> {
        self.inner
            .pids
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .copied()
            .collect()
    }

    /// Starts a worker for `pkg` outside the pool and returns how long
    /// that took; for benchmarks. With `use_spare` a ready spare is used if
    /// there is one (then only `load_package` is timed); without, it is a
    /// full cold start (spawn, handshake, `load_package`). Hand the worker
    /// to [`SandboxedRunner::discard`].
    pub async fn time_cold_start(
        &self,
        pkg: &Package,
        modules: ModuleSet,
        use_spare: bool,
    ) -> Result<(Duration, ColdWorker), StarlarkHostError> {
        let t = Instant::now();
        let w = self.inner.start_worker(pkg, modules, use_spare).await?;
        Ok((t.elapsed(), ColdWorker(w)))
    }

    /// Waits (up to `timeout`) until at least `n` spare workers are ready.
    pub async fn wait_for_spares(&self, n: usize, timeout: Duration) -> bool {
        let end = Instant::now() + timeout;
        loop {
            if self.pool_stats().spares >= n {
                return true;
            }
            if Instant::now() >= end {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    /// Kills and reaps a worker from [`SandboxedRunner::time_cold_start`].
    pub async fn discard(&self, worker: ColdWorker) {
        self.inner.retire(worker.0).await;
    }

    /// Kills and reaps every idle worker (in-flight calls are unaffected).
    /// Spare workers are killed too (after any spare being started has
    /// finished starting); new spares are started again on later calls.
    pub async fn shutdown(&self) {
        let inner = &self.inner;
        inner.paused.store(true, Ordering::SeqCst);
        for _ in 0..1000 {
            if !inner.replenishing.load(Ordering::SeqCst) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let mut all: Vec<Worker> = {
            let mut idle = inner.idle.lock().unwrap_or_else(|e| e.into_inner());
            idle.drain().flat_map(|(_, v)| v).collect()
        };
        all.extend(
            inner
                .spares
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .drain(..),
        );
        for w in all {
            inner.retire(w).await;
        }
        inner.paused.store(false, Ordering::SeqCst);
    }

    /// Loads the package in a worker (or reuses a warm one) and returns its
    /// globals and top-level output, like [`crate::Runner::exec_package`].
    pub async fn exec_package(
        &self,
        pkg: &Package,
        ctx: Option<&RunContext>,
    ) -> Result<ExecOutcome, StarlarkHostError> {
        ensure_runnable(pkg)?;
        let modules = self.inner.caps.module_set(pkg, ctx).await?;
        let _permit = self
            .inner
            .permits
            .acquire()
            .await
            .map_err(|_| StarlarkHostError::Internal("the worker pool is closed".into()))?;
        let (worker, cached) = self.inner.checkout(pkg, modules).await?;
        let out = ExecOutcome {
            globals: worker.loaded.globals.clone(),
            functions: worker.loaded.functions.clone(),
            output: worker.loaded.output.clone(),
            modules: modules.names().into_iter().map(str::to_owned).collect(),
            cached,
        };
        self.inner.check_in(worker).await;
        tracing::info!(package = %pkg.id, cached, modules = ?modules.names(), "package executed in a sandboxed worker");
        Ok(out)
    }

    /// Calls a function of the package in a sandboxed worker, like
    /// [`crate::Runner::call_entry_point`]. `cached` in the outcome means a
    /// warm worker served it.
    pub async fn call_entry_point(
        &self,
        pkg: &Package,
        name: &str,
        args: Vec<serde_json::Value>,
        kwargs: serde_json::Map<String, serde_json::Value>,
        ctx: Option<&RunContext>,
    ) -> Result<CallOutcome, StarlarkHostError> {
        self.call_entry_point_with_cancel(pkg, name, args, kwargs, ctx, CancelToken::new())
            .await
    }

    /// [`SandboxedRunner::call_entry_point`] with a caller-held
    /// [`CancelToken`]. Dropping the future kills the worker.
    pub async fn call_entry_point_with_cancel(
        &self,
        pkg: &Package,
        name: &str,
        args: Vec<serde_json::Value>,
        kwargs: serde_json::Map<String, serde_json::Value>,
        ctx: Option<&RunContext>,
        cancel: CancelToken,
    ) -> Result<CallOutcome, StarlarkHostError> {
        let start = Instant::now();
        ensure_runnable(pkg)?;
        let inner = &self.inner;
        let modules = inner.caps.module_set(pkg, ctx).await?;
        let _permit = inner
            .permits
            .acquire()
            .await
            .map_err(|_| StarlarkHostError::Internal("the worker pool is closed".into()))?;
        let (mut worker, cached) = inner.checkout(pkg, modules).await?;
        let timeout = inner.limits.timeout;
        let deadline = Instant::now() + timeout;
        let broker = ModuleBroker::new(
            inner.caps.clone(),
            pkg,
            modules,
            ctx,
            inner.limits.http.clone(),
            deadline,
            cancel.clone(),
        );
        let broker = match broker {
            Ok(b) => b,
            Err(e) => {
                inner.check_in(worker).await;
                return Err(e);
            }
        };
        let call = wire::Call {
            entry: name.to_owned(),
            args,
            kwargs,
            timeout_ms: timeout.as_millis().min(u64::MAX as u128) as u64,
        };
        let hard = tokio::time::Instant::from_std(deadline) + inner.config.kill_grace;
        let began = Instant::now();
        let r = worker
            .conn
            .call(&call, &broker, hard, &cancel, inner.config.kill_grace)
            .await;
        worker.busy += began.elapsed();
        worker.calls += 1;
        let elapsed_us = start.elapsed().as_micros() as u64;
        match r {
            Ok(res) => {
                inner.check_in(worker).await;
                tracing::debug!(package = %pkg.id, entry = name, cached, elapsed_us, "sandboxed entry point returned");
                Ok(CallOutcome {
                    value: res.value,
                    output: res.output,
                    cached,
                })
            }
            Err(SessionError::Reported { code, message }) => {
                let memory = code == format!("limit.{}", LimitKind::Memory.as_str());
                let message = if memory {
                    memory_message(&pkg.id, &inner.config.limits, &message)
                } else {
                    message
                };
                let e = wire::error_from_code(&pkg.id, &code, message, &worker.loaded.functions);
                // After an internal error or an allocation failure the
                // worker's state is suspect: do not reuse it.
                if memory || code == "internal" || code == wire::CODE_NOT_LOADED {
                    inner.retire(worker).await;
                } else {
                    inner.check_in(worker).await;
                }
                tracing::warn!(package = %pkg.id, entry = name, cached, elapsed_us, error = %e, "sandboxed entry point failed");
                Err(e)
            }
            Err(e) => {
                let err = inner.fail(worker, &pkg.id, e).await;
                tracing::warn!(package = %pkg.id, entry = name, cached, elapsed_us, error = %err, "sandboxed worker failed");
                Err(err)
            }
        }
    }
}

async fn sweep_idle(weak: Weak<Inner>, period: Duration) {
    loop {
        tokio::time::sleep(period).await;
        let Some(inner) = weak.upgrade() else { return };
        let expired = inner.take_expired();
        for w in expired {
            inner.retire(w).await;
        }
    }
}

impl Inner {
    fn take_expired(&self) -> Vec<Worker> {
        let timeout = self.config.pool.idle_timeout;
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = Vec::new();
        for list in idle.values_mut() {
            let (old, keep): (Vec<Worker>, Vec<Worker>) = std::mem::take(list)
                .into_iter()
                .partition(|w| w.idle_since.elapsed() >= timeout);
            *list = keep;
            out.extend(old);
        }
        idle.retain(|_, v| !v.is_empty());
        drop(idle);
        let mut spares = self.spares.lock().unwrap_or_else(|e| e.into_inner());
        let (old, keep): (Vec<Worker>, Vec<Worker>) = std::mem::take(&mut *spares)
            .into_iter()
            .partition(|w| w.idle_since.elapsed() >= timeout);
        *spares = keep;
        out.extend(old);
        out
    }

    async fn retire(&self, w: Worker) {
        let pid = w.child.pid();
        let _ = kill_and_reap(w).await;
        self.retired.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(pid, "retired a Starlark worker");
    }

    /// A warm worker for `(pkg, modules)`, or a fresh one.
    async fn checkout(
        &self,
        pkg: &Package,
        modules: ModuleSet,
    ) -> Result<(Worker, bool), StarlarkHostError> {
        let key = (pkg.script_hash(), modules);
        let warm = {
            let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
            let w = idle.get_mut(&key).and_then(Vec::pop);
            if idle.get(&key).is_some_and(Vec::is_empty) {
                idle.remove(&key);
            }
            w
        };
        if let Some(w) = warm {
            if w.idle_since.elapsed() < self.config.pool.idle_timeout {
                self.reused.fetch_add(1, Ordering::Relaxed);
                return Ok((w, true));
            }
            self.retire(w).await;
        }
        Ok((self.start_worker(pkg, modules, true).await?, false))
    }

    /// Returns a healthy worker to the pool, or retires it.
    async fn check_in(&self, mut w: Worker) {
        let cfg = &self.config;
        let cpu_budget = Duration::from_secs(cfg.limits.cpu_seconds);
        let worn = w.calls >= cfg.pool.max_calls_per_worker
            || w.busy + self.limits.timeout + cfg.kill_grace >= cpu_budget;
        if !worn {
            w.idle_since = Instant::now();
            let key = (w.loaded_key.clone(), w.loaded_modules);
            let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
            let total: usize = idle.values().map(Vec::len).sum();
            let list = idle.entry(key).or_default();
            if list.len() < cfg.pool.max_idle_per_package && total < cfg.pool.max_idle_total {
                list.push(w);
                return;
            }
        }
        self.retire(w).await;
    }

    /// Kills a failed worker and turns what happened into an error.
    async fn fail(&self, w: Worker, package: &str, e: SessionError) -> StarlarkHostError {
        let pid = w.child.pid();
        let (outcome, tail) = match &e {
            SessionError::Closed(_) => reap_dead(w).await,
            _ => kill_and_reap(w).await,
        };
        self.retired.fetch_add(1, Ordering::Relaxed);
        if !tail.trim().is_empty() {
            tracing::warn!(package, pid, stderr = %tail.trim_end(), "failed Starlark worker's stderr");
        }
        describe_failure(
            package,
            e,
            outcome,
            &tail,
            &self.config.limits,
            self.limits.timeout,
        )
    }

    fn instance_id(&self) -> String {
        let n = self.instance_seq.fetch_add(1, Ordering::Relaxed);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        format!("{}-{n}-{nanos:08x}", std::process::id())
    }

    fn spec(&self, package: &str, instance: &str) -> ChildSpec {
        let want = &self.config.limits;
        let ceil = self.runner.config().ceilings;
        let clamp = |w: u64, c: Option<u64>| Some(c.map_or(w, |c| w.min(c)));
        let limits = cordon_core::Limits {
            max_processes: clamp(want.max_processes, ceil.max_processes),
            memory_bytes: clamp(want.memory_bytes, ceil.memory_bytes),
            open_files: clamp(want.open_files, ceil.open_files),
            cpu_seconds: clamp(want.cpu_seconds, ceil.cpu_seconds),
            file_size_bytes: clamp(want.file_size_bytes, ceil.file_size_bytes),
            disk_bytes: ceil.disk_bytes,
            deadline: Some(
                ceil.deadline
                    .map_or(want.lifetime, |c| want.lifetime.min(c)),
            ),
        };
        let mut spec = ChildSpec::new(&self.staged.program)
            .args(self.config.program.args.iter().cloned())
            .arg("--instance")
            .arg(instance)
            .arg("--max-frame")
            .arg(self.config.max_frame.to_string())
            .limits(limits)
            .scratch(Scratch::Fresh);
        spec.package_dir = Some(self.staged.dir.clone());
        spec.label = Some(format!("starlark:{package}"));
        spec
    }

    /// Spawns a worker and completes the handshake; it has no package yet.
    async fn spawn_worker(&self, package: &str) -> Result<Worker, StarlarkHostError> {
        self.started.fetch_add(1, Ordering::Relaxed);
        let instance = self.instance_id();
        let start_err = |message: String| StarlarkHostError::WorkerStart {
            package: package.to_owned(),
            message,
        };
        let t0 = Instant::now();
        let mut child = self
            .runner
            .start(self.spec(package, &instance))
            .await
            .map_err(|e| start_err(e.to_string()))?;
        tracing::debug!(
            package,
            pid = child.pid(),
            spawn_us = t0.elapsed().as_micros() as u64,
            "spawned a Starlark worker"
        );
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            child.kill();
            let _ = child.wait().await;
            return Err(start_err("the worker's stdio is not piped".into()));
        };
        let handshake = tokio::time::timeout(
            self.config.handshake_timeout,
            WorkerConnection::handshake(stdout, stdin, &instance, self.config.max_frame, package),
        )
        .await;
        let conn = match handshake {
            Ok(Ok(c)) => c,
            Ok(Err(e)) => {
                child.kill();
                let _ = tokio::time::timeout(Duration::from_secs(5), child.wait()).await;
                self.retired.fetch_add(1, Ordering::Relaxed);
                let tail = String::from_utf8_lossy(&child.stderr_tail()).into_owned();
                if !tail.trim().is_empty() {
                    tracing::warn!(package, stderr = %tail.trim_end(), "Starlark worker failed its handshake");
                }
                return Err(StarlarkHostError::Worker {
                    package: package.to_owned(),
                    message: format!("did not start: {e}"),
                });
            }
            Err(_) => {
                child.kill();
                let _ = tokio::time::timeout(Duration::from_secs(5), child.wait()).await;
                self.retired.fetch_add(1, Ordering::Relaxed);
                return Err(StarlarkHostError::Worker {
                    package: package.to_owned(),
                    message: format!(
                        "did not say hello within {} ms",
                        self.config.handshake_timeout.as_millis()
                    ),
                });
            }
        };
        tracing::debug!(
            package,
            pid = child.pid(),
            hello_us = t0.elapsed().as_micros() as u64,
            "Starlark worker said hello"
        );
        self.pids
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(child.pid());
        Ok(Worker {
            pids: self.pids.clone(),
            child,
            conn,
            loaded: wire::Loaded {
                functions: Vec::new(),
                globals: Default::default(),
                output: String::new(),
            },
            loaded_key: String::new(),
            loaded_modules: ModuleSet::NONE,
            calls: 0,
            busy: Duration::ZERO,
            idle_since: Instant::now(),
        })
    }

    /// A ready spare (spawned and greeted, no package), if one is kept.
    fn take_spare(&self) -> Option<Worker> {
        let mut spares = self.spares.lock().unwrap_or_else(|e| e.into_inner());
        while let Some(w) = spares.pop() {
            if w.idle_since.elapsed() < self.config.pool.idle_timeout {
                return Some(w);
            }
            // Expired: dropping it kills it (the sweeper normally got it).
            drop(w);
        }
        None
    }

    /// Starts a background task that tops up the spare workers.
    fn replenish_spares(&self) {
        if self.config.pool.spare_workers == 0 || self.paused.load(Ordering::SeqCst) {
            return;
        }
        if self.replenishing.swap(true, Ordering::SeqCst) {
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            self.replenishing.store(false, Ordering::SeqCst);
            return;
        };
        let weak = self.me.clone();
        rt.spawn(async move {
            loop {
                let Some(inner) = weak.upgrade() else { return };
                let have = inner.spares.lock().unwrap_or_else(|e| e.into_inner()).len();
                if have >= inner.config.pool.spare_workers || inner.paused.load(Ordering::SeqCst) {
                    inner.replenishing.store(false, Ordering::SeqCst);
                    return;
                }
                match inner.spawn_worker("(spare)").await {
                    Ok(w) if !inner.paused.load(Ordering::SeqCst) => {
                        inner
                            .spares
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .push(w);
                    }
                    Ok(w) => inner.retire(w).await,
                    Err(e) => {
                        tracing::warn!(error = %e, "could not start a spare Starlark worker");
                        inner.replenishing.store(false, Ordering::SeqCst);
                        return;
                    }
                }
            }
        });
    }

    async fn start_worker(
        &self,
        pkg: &Package,
        modules: ModuleSet,
        use_spare: bool,
    ) -> Result<Worker, StarlarkHostError> {
        let spare = if use_spare { self.take_spare() } else { None };
        let mut worker = match spare {
            Some(w) => w,
            None => self.spawn_worker(&pkg.id).await?,
        };

        worker.conn.package = pkg.id.clone();
        worker.loaded_key = pkg.script_hash();
        worker.loaded_modules = modules;
        let body = wire::LoadPackage {
            package: pkg.clone(),
            modules,
            limits: wire::WireLimits::from(&self.limits),
        };
        let began = Instant::now();
        let hard = tokio::time::Instant::now() + self.limits.timeout + self.config.kill_grace;
        let r = worker.conn.load(&body, hard).await;
        worker.busy += began.elapsed();
        match r {
            Ok(loaded) => {
                // Top up spares after the load, so the new spare's start-up
                // does not compete with this load for the CPU.
                if use_spare {
                    self.replenish_spares();
                }
                worker.loaded = loaded;
                tracing::debug!(package = %pkg.id, pid = worker.child.pid(), load_us = began.elapsed().as_micros() as u64, "started a Starlark worker");
                Ok(worker)
            }
            Err(SessionError::Reported { code, message }) => {
                self.retire(worker).await;
                Err(wire::error_from_code(&pkg.id, &code, message, &[]))
            }
            Err(e) => Err(self.fail(worker, &pkg.id, e).await),
        }
    }
}

fn memory_message(package: &str, limits: &WorkerLimits, detail: &str) -> String {
    format!(
        "package {package:?} exceeded its memory limit of {} MiB ({detail}); \
         allocate less, or raise WorkerLimits::memory_bytes if the package is legitimate",
        limits.memory_bytes >> 20
    )
}

/// Turns a terminal session failure plus the worker's exit into an error
/// that says what happened.
fn describe_failure(
    package: &str,
    e: SessionError,
    outcome: Option<ExitOutcome>,
    stderr: &str,
    limits: &WorkerLimits,
    timeout: Duration,
) -> StarlarkHostError {
    let package = package.to_owned();
    let worker = |message: String| StarlarkHostError::Worker {
        package: package.clone(),
        message,
    };
    match e {
        SessionError::Reported { code, message } => {
            wire::error_from_code(&package, &code, message, &[])
        }
        SessionError::Deadline => StarlarkHostError::Limit {
            kind: LimitKind::Time,
            message: format!(
                "package {package:?} ran past its {} ms deadline and did not stop; its worker was killed",
                timeout.as_millis()
            ),
            package,
        },
        SessionError::Cancelled => StarlarkHostError::Cancelled { package },
        SessionError::Violation(m) => worker(format!("broke the protocol: {m}")),
        SessionError::Closed(m) => {
            let oom = stderr.contains("memory allocation of")
                || stderr.contains("memory allocation failed")
                || stderr.contains("out of memory");
            if oom {
                return StarlarkHostError::Limit {
                    kind: LimitKind::Memory,
                    message: memory_message(&package, limits, "an allocation failed and its worker aborted"),
                    package,
                };
            }
            let stack = stderr.contains("overflowed its stack");
            match outcome {
                Some(ExitOutcome::MemoryExceeded) => StarlarkHostError::Limit {
                    kind: LimitKind::Memory,
                    message: memory_message(&package, limits, "the kernel killed its worker"),
                    package,
                },
                Some(ExitOutcome::CpuTimeExceeded) => StarlarkHostError::Limit {
                    kind: LimitKind::Cpu,
                    message: format!(
                        "package {package:?} used up its worker's {} s of CPU time",
                        limits.cpu_seconds
                    ),
                    package,
                },
                Some(ExitOutcome::Signaled(sig)) if sig == libc::SIGXCPU => {
                    StarlarkHostError::Limit {
                        kind: LimitKind::Cpu,
                        message: format!(
                            "package {package:?} used up its worker's {} s of CPU time",
                            limits.cpu_seconds
                        ),
                        package,
                    }
                }
                // The script nested values (or source) deeper than the
                // interpreter's native stack: the package's own doing, so a
                // limit, like the nesting checks made before parsing.
                Some(ExitOutcome::Signaled(sig)) if stack => StarlarkHostError::Limit {
                    kind: LimitKind::Nesting,
                    message: format!(
                        "the interpreter overflowed its native stack (signal {sig}) on too deeply \
                         nested values or source; its worker was killed and the next call starts \
                         a fresh one"
                    ),
                    package,
                },
                Some(ExitOutcome::Signaled(sig)) if sig == libc::SIGKILL => worker(format!(
                    "was killed (signal {sig}) by a resource limit or from outside"
                )),
                Some(ExitOutcome::Signaled(sig)) => worker(format!("crashed (signal {sig})")),
                Some(ExitOutcome::Exited(code)) => {
                    worker(format!("exited unexpectedly with code {code} ({m})"))
                }
                Some(ExitOutcome::DeadlineExceeded) => worker(format!(
                    "outlived its {} s lifetime and was killed",
                    limits.lifetime.as_secs()
                )),
                None => worker(format!("stopped answering ({m}) and could not be reaped")),
            }
        }
    }
}
