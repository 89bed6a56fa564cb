//! The sandboxed worker: the worker side of the host ⇄ worker protocol
//! (`docs/protocol.md`).
//!
//! The worker is the host application's own executable re-invoked with
//! [`WORKER_ARG`] as `argv[1]`. Call [`dispatch_worker`] first thing in
//! `main` (before any thread starts), the same way as
//! `cordon_conformance::dispatch_probe_child()`:
//!
//! ```no_run
//! # #[allow(clippy::needless_doctest_main)]
//! fn main() {
//!     cordon_starlark_worker::dispatch_worker();
//!     // ... the application ...
//! }
//! ```
//!
//! The worker is synchronous and has two threads:
//!
//! * the **main thread** reads frames from stdin. It hands `load_package`
//!   and `call` to the evaluation thread, turns `Cancel` into the running
//!   call's [`CancelToken`], and routes the host's answers to `module`
//!   requests to the waiting forwarder;
//! * the **evaluation thread** (stack [`EvalLimits::eval_stack_bytes`],
//!   started on `load_package`) compiles the package once, then runs each
//!   call. Its Starlark builtins call a [`ModuleCalls`] forwarder that sends
//!   `Request{method: "module"}` to the host and blocks until the matching
//!   answer, the call's cancellation or its deadline.
//!
//! The worker opens no files and no sockets: the package's sources arrive
//! in `load_package`, every module call goes to the host. Any protocol
//! violation by the host ends the worker (exit code 2) after a best-effort
//! terminal `Error`; EOF on stdin ends it with exit code 0.

use std::ffi::OsStr;
use std::fs::File;
use std::io::{BufReader, Write};
use std::os::fd::FromRawFd;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cordon_starlark_protocol::frame::{
    encode_frame, read_message, Message, ProtocolError, PROTOCOL_VERSION,
};
use cordon_starlark_protocol::wire::{self, ErrorCode};
use cordon_starlark_protocol::{DenyAllCalls, EvalLimits, LimitKind, ModuleSet, Package};

use crate::cancel::CancelToken;
use crate::eval::compile_package;

mod args;
mod eval_thread;

pub use args::RlimitName;
use args::{apply_rlimits, parse_args};
use eval_thread::eval_thread;

/// A diagnostic line on the worker's stderr. Only worker-mode code uses it:
/// the worker's stderr is not the host's, it is the bounded ring the host
/// reads (and logs with the package id) when a worker fails.
macro_rules! diag {
    ($($arg:tt)*) => {{
        let mut err = std::io::stderr().lock();
        let _ = writeln!(err, "cordon-starlark worker: {}", format_args!($($arg)*));
    }};
}

/// `argv[1]` that makes [`dispatch_worker`] run the worker.
pub const WORKER_ARG: &str = "__cordon-star-worker";

/// Longest error message a worker sends (longer ones are truncated).
const MAX_ERROR_MESSAGE: usize = 64 * 1024;

/// If this process was started as a Starlark worker (`argv[1]` is
/// [`WORKER_ARG`]), runs the worker loop and exits; otherwise returns.
///
/// Call it first thing in `main`, before any thread exists.
pub fn dispatch_worker() {
    let mut args = std::env::args_os();
    let _program = args.next();
    if args.next().as_deref() != Some(OsStr::new(WORKER_ARG)) {
        return;
    }
    let rest: Vec<String> = args.map(|a| a.to_string_lossy().into_owned()).collect();
    std::process::exit(run_worker(&rest));
}

/// What the main thread hands to the evaluation thread.
enum Job {
    Load {
        id: u64,
        body: Box<wire::LoadPackage>,
    },
    Call {
        id: u64,
        body: wire::Call,
        received: Instant,
        cancel: CancelToken,
    },
}

/// What the main thread hands to a waiting forwarder.
enum Answer {
    Reply(Message),
    Cancelled,
}

#[derive(Default)]
struct State {
    /// A `load_package` was accepted (the evaluation thread exists).
    loaded: bool,
    /// The request being evaluated (load or call) and its cancel token.
    in_flight: Option<(u64, CancelToken)>,
    /// The `module` request id the forwarder waits for.
    waiting: Option<u64>,
    /// Next `module` request id.
    next_module_id: u64,
}

struct Shared {
    out: Mutex<File>,
    max_frame: usize,
    state: Mutex<State>,
}

impl Shared {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Writes one frame; a broken pipe means the host is gone: exit.
    fn send(&self, msg: &Message) {
        let frame = match encode_frame(msg, self.max_frame) {
            Ok(f) => f,
            Err(e) => {
                // Only answers can be too big; say so instead.
                let id = match msg {
                    Message::Response { id, .. } | Message::Request { id, .. } => Some(*id),
                    Message::Error { id, .. } => *id,
                    _ => None,
                };
                let fallback = Message::Error {
                    id,
                    code: ErrorCode::Limit(LimitKind::ValueSize).as_wire(),
                    message: format!(
                        "the answer does not fit in one protocol frame ({e}); return less data"
                    ),
                };
                match encode_frame(&fallback, self.max_frame) {
                    Ok(f) => f,
                    Err(_) => std::process::exit(2),
                }
            }
        };
        let mut out = self.out.lock().unwrap_or_else(|e| e.into_inner());
        if out.write_all(&frame).and_then(|_| out.flush()).is_err() {
            std::process::exit(0);
        }
    }

    fn send_error(&self, id: Option<u64>, code: ErrorCode, message: impl Into<String>) {
        let mut message = message.into();
        if message.len() > MAX_ERROR_MESSAGE {
            let mut cut = MAX_ERROR_MESSAGE;
            while !message.is_char_boundary(cut) {
                cut -= 1;
            }
            message.truncate(cut);
            message.push_str(" [truncated]");
        }
        self.send(&Message::Error {
            id,
            code: code.as_wire(),
            message,
        });
    }

    /// A terminal complaint, then exit.
    fn fail(&self, code: ErrorCode, message: impl Into<String>) -> i32 {
        let message = message.into();
        diag!("{}: {message}", code.as_wire());
        self.send_error(None, code, message);
        2
    }
}

/// Caps malloc at one arena: every glibc arena reserves 64 MiB of address
/// space, which would count against `RLIMIT_AS` for nothing.
fn limit_malloc_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only adjusts allocator parameters.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
    }
}

/// Builds the Starlark globals of every module set and compiles and calls a
/// tiny script on a short-lived thread, while the main thread does the
/// handshake. The first globals build in a fresh process costs ~2.5 ms (the
/// interpreter's one-time set-up); every further set then takes ~10 µs, and
/// the evaluation thread finds its set ready (or waits for it). For a spare
/// worker (`PoolConfig::spare_workers`) all of this is done before a
/// package arrives.
fn warm_up_globals() {
    let _ = std::thread::Builder::new()
        .name("starlark-warmup".into())
        .stack_size(8 << 20)
        .spawn(|| {
            for bits in 0u8..16 {
                let _ = crate::bindings::globals_for(ModuleSet {
                    secrets: bits & 1 != 0,
                    notifications: bits & 2 != 0,
                    http: bits & 4 != 0,
                    provider: bits & 8 != 0,
                });
            }
            // Fault in the parser, compiler and evaluator once, too.
            let pkg = Package::from_script(
                "(warm-up)",
                "X = {'a': [1, 2.5, 'x']}\ndef f(n = 1):\n    return [json.encode(X), n + 1]\n",
            );
            let limits = EvalLimits::default();
            let cancel = CancelToken::new();
            if let Ok(c) = compile_package(&pkg, ModuleSet::NONE, &limits, &cancel) {
                let _ = c.call(
                    "f",
                    &[],
                    &Default::default(),
                    Arc::new(DenyAllCalls),
                    &limits,
                    Instant::now() + Duration::from_secs(1),
                    &cancel,
                );
            }
        });
}

/// Runs the worker loop on stdin/stdout. Returns the process exit code.
/// `args` are the arguments after [`WORKER_ARG`].
pub fn run_worker(args: &[String]) -> i32 {
    let args = match parse_args(args) {
        Ok(a) => a,
        Err(e) => {
            diag!("{e}");
            return 2;
        }
    };
    if let Err(e) = apply_rlimits(&args.rlimits) {
        diag!("{e}");
        return 2;
    }
    limit_malloc_arenas();
    warm_up_globals();
    // SAFETY: fds 0 and 1 are the pipes the host gave us; nothing else in
    // this process uses them (the worker never touches std's stdin/stdout).
    let (input, output) = unsafe { (File::from_raw_fd(0), File::from_raw_fd(1)) };
    let mut input = BufReader::with_capacity(64 * 1024, input);
    let shared = Arc::new(Shared {
        out: Mutex::new(output),
        max_frame: args.max_frame,
        state: Mutex::new(State::default()),
    });
    shared.send(&Message::Hello {
        protocol_min: PROTOCOL_VERSION,
        protocol_max: PROTOCOL_VERSION,
        worker: wire::worker_identity(),
        instance_id: args.instance.clone(),
    });
    match read_message(&mut input, args.max_frame) {
        Ok(Message::Welcome { protocol }) if protocol == PROTOCOL_VERSION => {}
        Ok(Message::Welcome { protocol }) => {
            return shared.fail(
                ErrorCode::Version,
                format!("host chose protocol {protocol}, this worker speaks {PROTOCOL_VERSION}"),
            )
        }
        Ok(Message::Error { code, message, .. }) => {
            diag!("host refused the handshake: {code}: {message}");
            return 3;
        }
        Ok(other) => {
            return shared.fail(
                ErrorCode::Protocol,
                format!("expected welcome, got {}", describe(&other)),
            )
        }
        Err(ProtocolError::Closed) => return 0,
        Err(e) => return shared.fail(ErrorCode::Protocol, e.to_string()),
    }
    main_loop(&shared, &mut input)
}

fn describe(m: &Message) -> String {
    match m {
        Message::Hello { .. } => "hello".into(),
        Message::Welcome { .. } => "welcome".into(),
        Message::Request { id, method, .. } => format!("request {id} ({method})"),
        Message::Response { id, .. } => format!("response {id}"),
        Message::Error { id, code, .. } => format!("error {id:?} ({code})"),
        Message::Output { id, .. } => format!("output {id}"),
        Message::Cancel { id } => format!("cancel {id}"),
    }
}

fn main_loop(shared: &Arc<Shared>, input: &mut BufReader<File>) -> i32 {
    let (answers_tx, answers_rx) = mpsc::channel::<Answer>();
    let mut answers_rx = Some(answers_rx);
    let mut jobs: Option<mpsc::Sender<Job>> = None;
    loop {
        let msg = match read_message(input, shared.max_frame) {
            Ok(m) => m,
            Err(ProtocolError::Closed) => return 0,
            Err(e) => return shared.fail(ErrorCode::Protocol, e.to_string()),
        };
        match msg {
            Message::Request { id, method, body } => match method.as_str() {
                wire::METHOD_LOAD_PACKAGE => {
                    let mut st = shared.state();
                    if st.loaded || st.in_flight.is_some() {
                        drop(st);
                        return shared.fail(
                            ErrorCode::Protocol,
                            "load_package sent twice (one package per worker)",
                        );
                    }
                    let body: wire::LoadPackage = match serde_json::from_value(body) {
                        Ok(b) => b,
                        Err(e) => {
                            drop(st);
                            shared.send_error(
                                Some(id),
                                ErrorCode::BadRequest,
                                format!("load_package body: {e}"),
                            );
                            continue;
                        }
                    };
                    let stack = usize::try_from(body.limits.eval_stack_bytes)
                        .unwrap_or(usize::MAX)
                        .max(1 << 20);
                    let (tx, rx) = mpsc::channel::<Job>();
                    let forwarder_rx = answers_rx.take().expect("one evaluation thread");
                    let s2 = Arc::clone(shared);
                    let spawned = std::thread::Builder::new()
                        .name("starlark-eval".into())
                        .stack_size(stack)
                        .spawn(move || eval_thread(s2, rx, forwarder_rx));
                    if let Err(e) = spawned {
                        drop(st);
                        return shared.fail(
                            ErrorCode::Internal,
                            format!("cannot start the evaluation thread: {e}"),
                        );
                    }
                    st.loaded = true;
                    st.in_flight = Some((id, CancelToken::new()));
                    drop(st);
                    let _ = tx.send(Job::Load {
                        id,
                        body: Box::new(body),
                    });
                    jobs = Some(tx);
                }
                wire::METHOD_CALL => {
                    let received = Instant::now();
                    let mut st = shared.state();
                    if let Some((busy, _)) = &st.in_flight {
                        let busy = *busy;
                        drop(st);
                        return shared.fail(
                            ErrorCode::Protocol,
                            format!("call {id} sent while request {busy} is still running"),
                        );
                    }
                    let Some(tx) = jobs.as_ref() else {
                        drop(st);
                        shared.send_error(
                            Some(id),
                            ErrorCode::NotLoaded,
                            "call before load_package",
                        );
                        continue;
                    };
                    let body: wire::Call = match serde_json::from_value(body) {
                        Ok(b) => b,
                        Err(e) => {
                            drop(st);
                            shared.send_error(
                                Some(id),
                                ErrorCode::BadRequest,
                                format!("call body: {e}"),
                            );
                            continue;
                        }
                    };
                    let cancel = CancelToken::new();
                    st.in_flight = Some((id, cancel.clone()));
                    drop(st);
                    let _ = tx.send(Job::Call {
                        id,
                        body,
                        received,
                        cancel,
                    });
                }
                other => {
                    return shared.fail(
                        ErrorCode::UnknownMethod,
                        format!("unknown method {other:?} (request {id})"),
                    )
                }
            },
            Message::Cancel { id } => {
                let st = shared.state();
                if let Some((current, token)) = &st.in_flight {
                    if *current == id {
                        token.cancel();
                        if st.waiting.is_some() {
                            let _ = answers_tx.send(Answer::Cancelled);
                        }
                    }
                }
                // A cancel for a request that already finished is a race,
                // not an error.
            }
            Message::Response { id, .. } | Message::Error { id: Some(id), .. } => {
                let st = shared.state();
                if st.waiting == Some(id) {
                    let _ = answers_tx.send(Answer::Reply(msg));
                } else if id >= st.next_module_id {
                    drop(st);
                    return shared.fail(
                        ErrorCode::Protocol,
                        format!("answer to request {id}, which this worker never sent"),
                    );
                }
                // Otherwise: a late answer to a module request that was
                // abandoned (cancelled or timed out); ignore it.
            }
            Message::Error {
                id: None,
                code,
                message,
            } => {
                diag!("host ended the session: {code}: {message}");
                return 3;
            }
            other @ (Message::Hello { .. } | Message::Welcome { .. } | Message::Output { .. }) => {
                return shared.fail(
                    ErrorCode::Protocol,
                    format!("unsolicited {}", describe(&other)),
                )
            }
        }
    }
}
