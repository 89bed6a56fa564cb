//! Notification senders that deliver, each from a bounded queue served by
//! a thread of its own, so that a slow, stuck or closed sink never holds a
//! package's call: JSON lines to a writer (the CLI's default, on stderr or
//! a file) and a webhook (an HTTP POST per notification, with a timeout,
//! retries and a size cap). [`LineQueue`] is the queue, usable for any
//! line-oriented writer (the CLI puts its own stderr behind one).

use std::collections::VecDeque;
use std::io::Write;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use serde::Serialize;

use super::{NotificationSender, StoreError};
use cordon_starlark_protocol::Notification;

/// How much a queue holds before it refuses more.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueLimits {
    /// Items waiting (default 1024).
    pub max_items: usize,
    /// Bytes waiting (default 1 MiB, twice one evaluation's notification
    /// budget).
    pub max_bytes: usize,
}

impl Default for QueueLimits {
    fn default() -> Self {
        QueueLimits {
            max_items: 1024,
            max_bytes: 1024 * 1024,
        }
    }
}

/// What a queue did: delivered, failed to deliver, refused (full) and
/// still waiting (or being delivered).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct DeliveryStats {
    /// Delivered.
    pub delivered: u64,
    /// Given to the sink, which failed.
    pub failed: u64,
    /// Refused: the queue was full.
    pub refused: u64,
    /// Waiting, or being delivered, when the stats were taken.
    pub pending: u64,
}

impl DeliveryStats {
    /// Whether everything queued was delivered and nothing was refused.
    pub fn all_delivered(&self) -> bool {
        self.failed == 0 && self.refused == 0 && self.pending == 0
    }
}

struct State {
    items: VecDeque<Vec<u8>>,
    bytes: usize,
    busy: bool,
    closed: bool,
    stats: DeliveryStats,
    last_error: Option<String>,
}

struct Inner {
    state: Mutex<State>,
    changed: Condvar,
    limits: QueueLimits,
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Closes the queue when the last handle goes (the thread then ends once
/// the queue is empty).
struct Handle(Arc<Inner>);

impl Drop for Handle {
    fn drop(&mut self) {
        self.0.lock().closed = true;
        self.0.changed.notify_all();
    }
}

/// A bounded queue of byte strings (lines) delivered one at a time by a
/// thread of its own. [`LineQueue::push`] never blocks: a full queue
/// refuses, and counts it. A delivery that blocks (a pipe nobody reads)
/// blocks only that thread; [`LineQueue::flush`] waits for the queue at
/// most as long as it is told. As a [`Write`], each `write` is one item.
#[derive(Clone)]
pub struct LineQueue(Arc<Handle>);

impl std::fmt::Debug for LineQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("LineQueue").field(&self.stats()).finish()
    }
}

/// Why [`LineQueue::push`] refused an item.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the sink is not keeping up: its queue is full ({items} items, {bytes} bytes waiting; it \
     holds at most {max_items} and {max_bytes} bytes), so this was not delivered"
)]
pub struct QueueFull {
    items: usize,
    bytes: usize,
    max_items: usize,
    max_bytes: usize,
}

impl LineQueue {
    /// A queue whose thread (named `name`) hands each item to `deliver`.
    pub fn with_delivery(
        name: &str,
        limits: QueueLimits,
        mut deliver: impl FnMut(&[u8]) -> Result<(), String> + Send + 'static,
    ) -> Result<LineQueue, StoreError> {
        let inner = Arc::new(Inner {
            state: Mutex::new(State {
                items: VecDeque::new(),
                bytes: 0,
                busy: false,
                closed: false,
                stats: DeliveryStats::default(),
                last_error: None,
            }),
            changed: Condvar::new(),
            limits,
        });
        let worker = inner.clone();
        std::thread::Builder::new()
            .name(name.to_owned())
            .spawn(move || loop {
                let item = {
                    let mut s = worker.lock();
                    loop {
                        if let Some(item) = s.items.pop_front() {
                            s.busy = true;
                            break item;
                        }
                        if s.closed {
                            return;
                        }
                        s = worker.changed.wait(s).unwrap_or_else(|e| e.into_inner());
                    }
                };
                let r = deliver(&item);
                let mut s = worker.lock();
                s.busy = false;
                s.bytes -= item.len();
                match r {
                    Ok(()) => s.stats.delivered += 1,
                    Err(e) => {
                        s.stats.failed += 1;
                        s.last_error = Some(e);
                    }
                }
                drop(s);
                worker.changed.notify_all();
            })
            .map_err(|e| format!("cannot start the {name} thread: {e}"))?;
        Ok(LineQueue(Arc::new(Handle(inner))))
    }

    /// A queue whose thread writes each item to `out` (and flushes it).
    pub fn new(
        name: &str,
        limits: QueueLimits,
        mut out: impl Write + Send + 'static,
    ) -> Result<LineQueue, StoreError> {
        Self::with_delivery(name, limits, move |item| {
            out.write_all(item)
                .and_then(|_| out.flush())
                .map_err(|e| format!("cannot write: {e}"))
        })
    }

    fn inner(&self) -> &Inner {
        &self.0 .0
    }

    /// Queues `item`, or refuses it when the queue is full.
    pub fn push(&self, item: Vec<u8>) -> Result<(), QueueFull> {
        let inner = self.inner();
        let mut s = inner.lock();
        let l = inner.limits;
        if s.items.len() >= l.max_items || s.bytes.saturating_add(item.len()) > l.max_bytes {
            s.stats.refused += 1;
            return Err(QueueFull {
                items: s.items.len(),
                bytes: s.bytes,
                max_items: l.max_items,
                max_bytes: l.max_bytes,
            });
        }
        s.bytes += item.len();
        s.items.push_back(item);
        drop(s);
        inner.changed.notify_all();
        Ok(())
    }

    /// What the queue did so far.
    pub fn stats(&self) -> DeliveryStats {
        let s = self.inner().lock();
        let mut stats = s.stats;
        stats.pending = s.items.len() as u64 + u64::from(s.busy);
        stats
    }

    /// The last delivery error, if any.
    pub fn last_error(&self) -> Option<String> {
        self.inner().lock().last_error.clone()
    }

    /// Waits until everything queued is delivered, or `timeout` passed;
    /// then returns the stats (`pending` is what was still waiting).
    pub fn flush(&self, timeout: Duration) -> DeliveryStats {
        let inner = self.inner();
        let until = Instant::now() + timeout;
        let mut s = inner.lock();
        while !s.items.is_empty() || s.busy {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            s = inner
                .changed
                .wait_timeout(s, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        drop(s);
        self.stats()
    }
}

impl Write for LineQueue {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.push(buf.to_vec())
            .map(|_| buf.len())
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::WouldBlock, e))
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Writes each notification as one line of JSON, from a [`LineQueue`]: a
/// sink that does not keep up (stderr on a pipe nobody reads) makes
/// `send` fail once the queue is full, never wait.
#[derive(Debug, Clone)]
pub struct JsonLinesNotifier {
    queue: LineQueue,
}

impl JsonLinesNotifier {
    /// Lines to `out` (e.g. a file opened to append), from a queue of its
    /// own with the default limits.
    pub fn new(out: impl Write + Send + 'static) -> Result<Self, StoreError> {
        Ok(Self::on(LineQueue::new(
            "cordon-notify",
            QueueLimits::default(),
            out,
        )?))
    }

    /// Lines into `queue`, shared with other writers of the same sink (the
    /// CLI's own stderr messages, say), so that lines never interleave.
    pub fn on(queue: LineQueue) -> Self {
        JsonLinesNotifier { queue }
    }

    /// Waits at most `timeout` for the queue to drain; see [`LineQueue::flush`].
    pub fn flush(&self, timeout: Duration) -> DeliveryStats {
        self.queue.flush(timeout)
    }
}

#[async_trait]
impl NotificationSender for JsonLinesNotifier {
    async fn send(&self, notification: &Notification) -> Result<(), StoreError> {
        let mut line =
            serde_json::to_vec(notification).map_err(|e| format!("cannot encode: {e}"))?;
        line.push(b'\n');
        self.queue
            .push(line)
            .map_err(|e| format!("the notification was not sent: {e}"))
    }
}

/// POSTs each notification as a JSON body to one URL the host configured
/// (not a script: it is not subject to any package's allowlist), from a
/// queue served by a thread of its own: `send` only queues (and fails when
/// the queue is full), so a slow or failing webhook never holds a call. A
/// 2xx answer delivers it; a network error, a 429 or a 5xx is retried with
/// exponential backoff; any other answer fails at once. Bodies larger
/// than [`WebhookNotifier::MAX_BODY_BYTES`] are refused.
#[derive(Debug, Clone)]
pub struct WebhookNotifier {
    queue: LineQueue,
}

impl WebhookNotifier {
    /// The largest notification body sent (a package controls its title
    /// and body, within `EvalLimits`' notification budget).
    pub const MAX_BODY_BYTES: usize = 64 * 1024;

    /// A sender to `url` with a per-attempt `timeout`, up to `attempts`
    /// tries, waiting `backoff`, then twice that, and so on, in between.
    pub fn new(
        url: &str,
        timeout: Duration,
        attempts: u32,
        backoff: Duration,
    ) -> Result<Self, StoreError> {
        let url = reqwest::Url::parse(url).map_err(|e| format!("webhook URL {url:?}: {e}"))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(format!("webhook URL {url} is not http(s)"));
        }
        let client = reqwest::Client::builder()
            .timeout(timeout)
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .build()
            .map_err(|e| format!("cannot build the webhook client: {e}"))?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("cannot start the webhook's runtime: {e}"))?;
        let attempts = attempts.max(1);
        let queue =
            LineQueue::with_delivery("cordon-webhook", QueueLimits::default(), move |body| {
                runtime.block_on(post(&client, &url, body, attempts, backoff))
            })?;
        Ok(WebhookNotifier { queue })
    }

    /// Waits at most `timeout` for queued notifications to be delivered;
    /// see [`LineQueue::flush`].
    pub fn flush(&self, timeout: Duration) -> DeliveryStats {
        self.queue.flush(timeout)
    }

    /// Why the last delivery failed, if one did.
    pub fn last_error(&self) -> Option<String> {
        self.queue.last_error()
    }
}

async fn post(
    client: &reqwest::Client,
    url: &reqwest::Url,
    body: &[u8],
    attempts: u32,
    backoff: Duration,
) -> Result<(), String> {
    let mut wait = backoff;
    let mut last = String::new();
    for attempt in 1..=attempts {
        let r = client
            .post(url.clone())
            .header("content-type", "application/json")
            .body(body.to_vec())
            .send()
            .await;
        match r {
            Ok(resp) if resp.status().is_success() => return Ok(()),
            Ok(resp)
                if resp.status().is_server_error()
                    || resp.status() == reqwest::StatusCode::TOO_MANY_REQUESTS =>
            {
                last = format!("the webhook answered {}", resp.status());
            }
            Ok(resp) => {
                return Err(format!(
                    "the webhook refused the notification: {}",
                    resp.status()
                ))
            }
            Err(e) => last = format!("the webhook is unreachable: {e}"),
        }
        if attempt < attempts {
            tokio::time::sleep(wait).await;
            wait = wait.saturating_mul(2);
        }
    }
    Err(format!("{last} (after {attempts} attempts)"))
}

#[async_trait]
impl NotificationSender for WebhookNotifier {
    async fn send(&self, notification: &Notification) -> Result<(), StoreError> {
        let body = serde_json::to_vec(notification).map_err(|e| format!("cannot encode: {e}"))?;
        if body.len() > Self::MAX_BODY_BYTES {
            return Err(format!(
                "notification of {} bytes is larger than the webhook's {} byte cap",
                body.len(),
                Self::MAX_BODY_BYTES
            ));
        }
        self.queue
            .push(body)
            .map_err(|e| format!("the notification was not sent: {e}"))
    }
}
