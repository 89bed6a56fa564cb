//! The worker's evaluation thread: compiles the package once, runs each
//! call, and forwards the script's module calls to the host (the
//! [`Forwarder`] blocks until the host's answer, the call's cancellation or
//! its deadline).

use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cordon_starlark_protocol::frame::Message;
use cordon_starlark_protocol::wire::{self, ErrorCode};
use cordon_starlark_protocol::{
    EvalLimits, LimitKind, ModuleCall, ModuleCalls, ModuleError, ModuleReply,
};

use crate::cancel::CancelToken;
use crate::eval::{compile_package, CompiledPackage};

use super::{Answer, Job, Shared};

/// Sends module calls to the host and waits for the answers.
pub(super) struct Forwarder {
    shared: Arc<Shared>,
    answers: Mutex<mpsc::Receiver<Answer>>,
    cancel: CancelToken,
    deadline: Instant,
}

impl Forwarder {
    fn stop_waiting(&self) {
        self.shared.state().waiting = None;
    }
}

impl ModuleCalls for Forwarder {
    fn call(&self, call: ModuleCall) -> Result<ModuleReply, ModuleError> {
        let answers = self.answers.lock().unwrap_or_else(|e| e.into_inner());
        // Anything queued now is stale (a cancel that raced a reply).
        while answers.try_recv().is_ok() {}
        if self.cancel.is_cancelled() {
            return Err(ModuleError::Cancelled);
        }
        let body = serde_json::to_value(&call)
            .map_err(|e| ModuleError::InvalidArgument(format!("cannot encode the call: {e}")))?;
        let id = {
            let mut st = self.shared.state();
            let id = st.next_module_id;
            st.next_module_id += 1;
            st.waiting = Some(id);
            id
        };
        self.shared.send(&Message::Request {
            id,
            method: wire::METHOD_MODULE.into(),
            body,
        });
        let result = loop {
            let now = Instant::now();
            if now >= self.deadline {
                break Err(ModuleError::Timeout(
                    "the invocation deadline was reached while waiting for the host".into(),
                ));
            }
            match answers.recv_timeout(self.deadline - now) {
                Ok(Answer::Reply(Message::Response { id: rid, body })) if rid == id => {
                    break serde_json::from_value::<ModuleReply>(body).map_err(|e| {
                        ModuleError::Upstream(format!("the host sent an unreadable reply: {e}"))
                    });
                }
                Ok(Answer::Reply(Message::Error {
                    id: Some(rid),
                    code,
                    message,
                })) if rid == id => break Err(wire::module_error_from_code(&code, message)),
                Ok(Answer::Reply(_)) => continue,
                Ok(Answer::Cancelled) => break Err(ModuleError::Cancelled),
                Err(mpsc::RecvTimeoutError::Timeout) => continue,
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    break Err(ModuleError::Unavailable(
                        "the host connection is gone".into(),
                    ))
                }
            }
        };
        self.stop_waiting();
        result
    }
}

/// The error code for a panic in the interpreter: an allocation failure
/// it reports by panicking ("out of memory", "capacity overflow") is the
/// memory limit; anything else is the script's error (the interpreter gave
/// up on it), never an internal one.
pub(super) fn panic_code(p: &(dyn std::any::Any + Send)) -> (ErrorCode, String) {
    let msg = cordon_core::panic_message(p);
    if msg.contains("out of memory") || msg.contains("capacity overflow") {
        (
            ErrorCode::Limit(LimitKind::Memory),
            format!("an allocation failed ({msg})"),
        )
    } else {
        (
            ErrorCode::Panic,
            format!("the interpreter gave up on this script (it panicked: {msg})"),
        )
    }
}

pub(super) fn eval_thread(
    shared: Arc<Shared>,
    jobs: mpsc::Receiver<Job>,
    answers: mpsc::Receiver<Answer>,
) {
    let answers = Arc::new(Mutex::new(Some(answers)));
    let mut compiled: Option<(CompiledPackage, EvalLimits)> = None;
    while let Ok(job) = jobs.recv() {
        match job {
            Job::Load { id, body } => {
                let limits = body.limits.to_limits();
                let cancel = CancelToken::new();
                let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    compile_package(&body.package, body.modules, &limits, &cancel)
                }));
                let reply = match r {
                    Ok(Ok(c)) => {
                        let loaded = wire::Loaded {
                            functions: c.functions().to_vec(),
                            globals: c.globals().clone(),
                            output: c.load_output().to_owned(),
                        };
                        compiled = Some((c, limits));
                        Ok(serde_json::to_value(&loaded))
                    }
                    Ok(Err((e, output))) => {
                        send_output(&shared, id, output);
                        Err(e.wire_code())
                    }
                    Err(p) => Err(panic_code(p.as_ref())),
                };
                finish(&shared, id, reply);
            }
            Job::Call {
                id,
                body,
                received,
                cancel,
            } => {
                let Some((pkg, limits)) = compiled.as_ref() else {
                    finish(
                        &shared,
                        id,
                        Err((ErrorCode::NotLoaded, "the package failed to load".into())),
                    );
                    continue;
                };
                let deadline = received + Duration::from_millis(body.timeout_ms);
                let rx = answers
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .take()
                    .expect("receiver returned after each call");
                let forwarder = Arc::new(Forwarder {
                    shared: Arc::clone(&shared),
                    answers: Mutex::new(rx),
                    cancel: cancel.clone(),
                    deadline,
                });
                let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    pkg.call(
                        &body.entry,
                        &body.args,
                        &body.kwargs,
                        forwarder.clone(),
                        limits,
                        deadline,
                        &cancel,
                    )
                }));
                // Take the receiver back for the next call.
                match Arc::try_unwrap(forwarder) {
                    Ok(f) => {
                        *answers.lock().unwrap_or_else(|e| e.into_inner()) =
                            Some(f.answers.into_inner().unwrap_or_else(|e| e.into_inner()));
                    }
                    Err(_) => {
                        // A value kept the forwarder alive; the worker can
                        // no longer serve module calls: end it.
                        finish(
                            &shared,
                            id,
                            Err((ErrorCode::Internal, "module forwarder leaked".into())),
                        );
                        std::process::exit(2);
                    }
                }
                let reply = match r {
                    Ok(Ok((value, output))) => {
                        Ok(serde_json::to_value(&wire::CallResult { value, output }))
                    }
                    Ok(Err((e, output))) => {
                        send_output(&shared, id, output);
                        Err(e.wire_code())
                    }
                    Err(p) => Err(panic_code(p.as_ref())),
                };
                finish(&shared, id, reply);
            }
        }
    }
}

/// Sends what a failed request printed, before its error (nothing when it
/// printed nothing), cut to fit one frame: its error must follow.
fn send_output(shared: &Shared, id: u64, output: String) {
    const CUT: &str = "\n[output cut to fit one protocol frame]\n";
    let mut keep = output.len();
    while keep > 0 {
        let mut text = output[..keep].to_owned();
        if keep < output.len() {
            text.push_str(CUT);
        }
        let msg = Message::Output { id, output: text };
        if cordon_starlark_protocol::frame::encode_frame(&msg, shared.max_frame).is_ok() {
            shared.send(&msg);
            return;
        }
        keep /= 2;
        while !output.is_char_boundary(keep) {
            keep -= 1;
        }
    }
}

/// Clears the in-flight request, then answers it (in that order, so the
/// host's next request never finds the worker busy).
pub(super) fn finish(
    shared: &Shared,
    id: u64,
    reply: Result<serde_json::Result<serde_json::Value>, (ErrorCode, String)>,
) {
    shared.state().in_flight = None;
    match reply {
        Ok(Ok(body)) => shared.send(&Message::Response { id, body }),
        Ok(Err(e)) => {
            shared.send_error(Some(id), ErrorCode::Internal, format!("cannot encode: {e}"))
        }
        Err((code, message)) => shared.send_error(Some(id), code, message),
    }
}
