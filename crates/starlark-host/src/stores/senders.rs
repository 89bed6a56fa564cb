//! Notification senders that deliver: JSON lines to a writer (the CLI's
//! default, on stderr or a file) and a webhook (an HTTP POST per
//! notification, with a timeout, retries and a size cap).

use std::io::Write;
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;

use super::{NotificationSender, StoreError};
use crate::protocol::Notification;

/// Writes each notification as one line of JSON to a writer.
pub struct JsonLinesNotifier {
    out: Mutex<Box<dyn Write + Send>>,
}

impl std::fmt::Debug for JsonLinesNotifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("JsonLinesNotifier")
    }
}

impl JsonLinesNotifier {
    /// Lines to `out` (e.g. `std::io::stderr()` or a file opened to append).
    pub fn new(out: impl Write + Send + 'static) -> Self {
        JsonLinesNotifier {
            out: Mutex::new(Box::new(out)),
        }
    }
}

#[async_trait]
impl NotificationSender for JsonLinesNotifier {
    async fn send(&self, notification: &Notification) -> Result<(), StoreError> {
        let mut line =
            serde_json::to_vec(notification).map_err(|e| format!("cannot encode: {e}"))?;
        line.push(b'\n');
        let mut out = self.out.lock().unwrap_or_else(|e| e.into_inner());
        out.write_all(&line)
            .and_then(|_| out.flush())
            .map_err(|e| format!("cannot write the notification: {e}"))
    }
}

/// POSTs each notification as a JSON body to one URL the host configured
/// (not a script: it is not subject to any package's allowlist). A 2xx
/// answer delivers it; a network error, a 429 or a 5xx is retried with
/// exponential backoff; any other answer fails at once. Bodies larger
/// than [`WebhookNotifier::MAX_BODY_BYTES`] are refused.
#[derive(Debug, Clone)]
pub struct WebhookNotifier {
    client: reqwest::Client,
    url: reqwest::Url,
    attempts: u32,
    backoff: Duration,
}

impl WebhookNotifier {
    /// The largest notification body sent (a package controls its title
    /// and body, within `EvalLimits`' value limits).
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
        Ok(WebhookNotifier {
            client,
            url,
            attempts: attempts.max(1),
            backoff,
        })
    }
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
        let mut wait = self.backoff;
        let mut last = String::new();
        for attempt in 1..=self.attempts {
            let r = self
                .client
                .post(self.url.clone())
                .header("content-type", "application/json")
                .body(body.clone())
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
            if attempt < self.attempts {
                tokio::time::sleep(wait).await;
                wait = wait.saturating_mul(2);
            }
        }
        Err(format!("{last} (after {} attempts)", self.attempts))
    }
}
