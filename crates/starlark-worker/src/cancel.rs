//! [`CancelToken`]: the cooperative cancellation of one evaluation, shared
//! by its caller, the interpreter (which checks it between steps) and
//! blocking module calls (in the host's broker, and in the worker's
//! forwarder).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio::sync::Notify;

/// Cooperative cancellation shared by the caller, the interpreter and
/// blocking module calls.
#[derive(Clone, Default, Debug)]
pub struct CancelToken(Arc<CancelInner>);

#[derive(Default, Debug)]
struct CancelInner {
    flag: AtomicBool,
    notify: Notify,
}

impl CancelToken {
    /// A fresh, not-cancelled token.
    pub fn new() -> Self {
        Self::default()
    }
    /// Cancel: the interpreter stops at its next check, and a blocking
    /// module call returns `Cancelled` at once.
    pub fn cancel(&self) {
        self.0.flag.store(true, Ordering::SeqCst);
        self.0.notify.notify_waiters();
    }
    /// Whether `cancel` was called.
    pub fn is_cancelled(&self) -> bool {
        self.0.flag.load(Ordering::SeqCst)
    }
    /// Resolves once cancelled.
    pub async fn cancelled(&self) {
        loop {
            let notified = self.0.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.is_cancelled() {
                return;
            }
            notified.await;
        }
    }
}
