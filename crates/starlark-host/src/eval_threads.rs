//! The evaluation threads: warm threads with a large native stack that
//! run the synchronous, recursive evaluation for async callers.

use crate::error::StarlarkHostError;

/// Run `f` on an evaluation thread with `stack_bytes` of native stack and
/// await its result. A panic in `f` (the interpreter giving up on a
/// script: an allocation it cannot make, say) becomes a script error,
/// [`StarlarkHostError::Script`] with an empty package (the caller names
/// it, `name_panicked`): it is the script's doing, never an internal
/// error of the host.
///
/// Threads are kept warm in a small pool per stack size (at most
/// `MAX_IDLE_EVAL_THREADS` idle ones): starting a thread with a 64 MiB
/// stack costs tens of microseconds, more than a trivial call itself. A
/// thread whose job panicked is not reused.
pub async fn run_on_eval_thread<F, R>(stack_bytes: usize, f: F) -> Result<R, StarlarkHostError>
where
    F: FnOnce() -> R + Send + 'static,
    R: Send + 'static,
{
    let (tx, rx) = tokio::sync::oneshot::channel();
    let job: EvalJob = Box::new(move || {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
        let healthy = r.is_ok();
        let deliver: Box<dyn FnOnce() + Send> = Box::new(move || {
            let _ = tx.send(r);
        });
        (healthy, deliver)
    });
    eval_pool::submit(stack_bytes, job)?;
    let mut rx = rx;
    // A trivial call is done in a few microseconds, while parking this
    // task and waking it from another thread costs tens of microseconds on
    // an idle (virtual) machine: poll briefly before parking.
    let spin_until = std::time::Instant::now() + SPIN;
    let received = loop {
        match rx.try_recv() {
            Ok(r) => break Ok(r),
            Err(tokio::sync::oneshot::error::TryRecvError::Closed) => break Err(()),
            Err(tokio::sync::oneshot::error::TryRecvError::Empty) => {
                if std::time::Instant::now() >= spin_until {
                    break rx.await.map_err(|_| ());
                }
                std::hint::spin_loop();
            }
        }
    };
    match received {
        Ok(Ok(r)) => Ok(r),
        Ok(Err(p)) => {
            let msg = cordon_core::panic_message(p.as_ref());
            Err(StarlarkHostError::Script {
                package: String::new(),
                message: format!(
                    "the interpreter gave up on this script (it panicked: {msg}); in process \
                     nothing but the size checks bounds a script: run it in a worker \
                     (Isolation::Process, or the sandbox) to hold it to memory limits"
                ),
            })
        }
        Err(()) => Err(StarlarkHostError::Internal(
            "evaluation thread vanished".to_owned(),
        )),
    }
}

/// Names the package of a panic's script error from [`run_on_eval_thread`].
pub fn name_panicked(e: StarlarkHostError, package: &str) -> StarlarkHostError {
    match e {
        StarlarkHostError::Script {
            package: p,
            message,
        } if p.is_empty() => StarlarkHostError::Script {
            package: package.to_owned(),
            message,
        },
        other => other,
    }
}

/// Idle evaluation threads kept per stack size.
pub const MAX_IDLE_EVAL_THREADS: usize = 8;

/// How long a caller polls for a result, and an evaluation thread for its
/// next job, before parking (spin, then sleep).
const SPIN: std::time::Duration = std::time::Duration::from_micros(30);

/// A job for an evaluation thread. It returns whether the thread may be
/// reused, and how to deliver the result: the thread first puts itself
/// back in the pool, then delivers, so the caller's next call finds it.
type EvalJob = Box<dyn FnOnce() -> (bool, Box<dyn FnOnce() + Send>) + Send>;

mod eval_pool {
    use std::collections::HashMap;
    use std::sync::mpsc::{channel, Receiver, Sender, TryRecvError};
    use std::sync::{Mutex, OnceLock};
    use std::time::Instant;

    use super::{EvalJob, MAX_IDLE_EVAL_THREADS, SPIN};

    /// The next job: polled briefly (back-to-back calls skip a thread
    /// wake-up), then waited for.
    fn next_job(rx: &Receiver<EvalJob>) -> Option<EvalJob> {
        let until = Instant::now() + SPIN;
        loop {
            match rx.try_recv() {
                Ok(job) => return Some(job),
                Err(TryRecvError::Disconnected) => return None,
                Err(TryRecvError::Empty) if Instant::now() < until => std::hint::spin_loop(),
                Err(TryRecvError::Empty) => return rx.recv().ok(),
            }
        }
    }
    use crate::error::StarlarkHostError;

    /// Idle threads by stack size, each reachable through its own channel.
    fn idle() -> &'static Mutex<HashMap<usize, Vec<Sender<EvalJob>>>> {
        static IDLE: OnceLock<Mutex<HashMap<usize, Vec<Sender<EvalJob>>>>> = OnceLock::new();
        IDLE.get_or_init(Default::default)
    }

    fn take(stack: usize) -> Option<Sender<EvalJob>> {
        idle()
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_mut(&stack)
            .and_then(Vec::pop)
    }

    /// Puts a thread back; false when enough are idle already (it exits).
    fn give_back(stack: usize, tx: Sender<EvalJob>) -> bool {
        let mut map = idle().lock().unwrap_or_else(|e| e.into_inner());
        let list = map.entry(stack).or_default();
        if list.len() >= MAX_IDLE_EVAL_THREADS {
            return false;
        }
        list.push(tx);
        true
    }

    pub(super) fn submit(stack: usize, mut job: EvalJob) -> Result<(), StarlarkHostError> {
        // An idle thread may have exited since it was put back: its channel
        // then hands the job back and we try the next one.
        while let Some(tx) = take(stack) {
            match tx.send(job) {
                Ok(()) => return Ok(()),
                Err(returned) => job = returned.0,
            }
        }
        let (tx, rx) = channel::<EvalJob>();
        let me = tx.clone();
        std::thread::Builder::new()
            .name("starlark-eval".to_owned())
            .stack_size(stack)
            .spawn(move || {
                while let Some(job) = next_job(&rx) {
                    let (healthy, deliver) = job();
                    let reuse = healthy && give_back(stack, me.clone());
                    deliver();
                    if !reuse {
                        break;
                    }
                }
            })
            .map_err(|e| {
                StarlarkHostError::Internal(format!("cannot spawn evaluation thread: {e}"))
            })?;
        tx.send(job)
            .map_err(|_| StarlarkHostError::Internal("evaluation thread vanished".to_owned()))
    }
}
