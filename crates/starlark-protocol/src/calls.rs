//! Serializable module-call protocol.
//!
//! Every call a script makes into a host module (`secrets.get`, `http.get`,
//! `provider.complete`, …) is expressed as a [`ModuleCall`] and answered by a
//! [`ModuleReply`] or a [`ModuleError`]. The Starlark bindings only convert
//! values to and from these types and hand them to a [`ModuleCalls`]
//! implementation. In process that is the host's `ModuleBroker`; in a
//! worker it is the forwarder
//! (`crates/starlark-worker/src/serve/eval_thread.rs`) that sends the call
//! to the host over the protocol. All types are `serde` (externally tagged
//! enums only, so they survive serde_json's `arbitrary_precision`, which
//! `starlark` turns on where it is in the build).
//!
//! [`ModuleSet`] is here too: which modules a script's globals hold, sent
//! with `load_package` and checked by the host on every call.

use serde::{Deserialize, Serialize};

/// One module call made by a script.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ModuleCall {
    /// `secrets.get(name)`.
    SecretGet(SecretGet),
    /// `notifications.send(title, body, ...)`.
    Notify(Notification),
    /// `http.get/post/request(...)`.
    Http(HttpRequest),
    /// `provider.complete(...)`.
    Complete(CompletionRequest),
}

impl ModuleCall {
    /// Short name of the call, for logs and error messages.
    pub fn name(&self) -> &'static str {
        match self {
            ModuleCall::SecretGet(_) => "secrets.get",
            ModuleCall::Notify(_) => "notifications.send",
            ModuleCall::Http(_) => "http.request",
            ModuleCall::Complete(_) => "provider.complete",
        }
    }
}

/// The successful answer to a [`ModuleCall`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ModuleReply {
    /// The package's own secret, or `None` when it is not set.
    Secret(Option<String>),
    /// The notification was accepted by the sender.
    Notified,
    /// The final HTTP response (after redirects).
    Http(HttpResponse),
    /// The provider's completion.
    Completion(CompletionResponse),
}

/// `secrets.get(name)`: the package is implied by the broker, never chosen by
/// the script.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SecretGet {
    /// Secret name inside the package's namespace.
    pub name: String,
}

/// A notification sent by a package.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Notification {
    /// Package the notification is attributed to. Filled in by the broker;
    /// whatever a forwarder sends here is overwritten.
    #[serde(default)]
    pub package_id: String,
    /// Acting user, from the run context, if any (filled in by the broker).
    #[serde(default)]
    pub user_id: Option<String>,
    /// Channel, from the run context, if any (filled in by the broker).
    #[serde(default)]
    pub channel_id: Option<String>,
    /// Short title.
    pub title: String,
    /// Body text.
    pub body: String,
    /// Severity: `info`, `warning` or `error`.
    #[serde(default = "default_level")]
    pub level: String,
    /// Optional link.
    #[serde(default)]
    pub url: Option<String>,
}

fn default_level() -> String {
    "info".to_owned()
}

/// An HTTP request made by a script.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HttpRequest {
    /// Method, upper case (`GET`, `POST`, …).
    pub method: String,
    /// Absolute `http://` or `https://` URL.
    pub url: String,
    /// Request headers in order.
    #[serde(default)]
    pub headers: Vec<(String, String)>,
    /// Request body (UTF-8 text; `json=` is encoded by the binding).
    #[serde(default)]
    pub body: Option<String>,
    /// Per-request timeout asked for by the script, in milliseconds. The
    /// broker clamps it to its own cap and to the invocation deadline.
    #[serde(default)]
    pub timeout_ms: Option<u64>,
}

/// The response handed back to the script.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HttpResponse {
    /// HTTP status code.
    pub status: u16,
    /// Final URL after redirects.
    pub url: String,
    /// Response headers (names lower case).
    pub headers: Vec<(String, String)>,
    /// Body decoded as UTF-8 (lossy).
    pub body: String,
}

/// One chat message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatMessage {
    /// `system`, `user` or `assistant`.
    pub role: String,
    /// Message text.
    pub content: String,
}

/// `provider.complete(...)`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompletionRequest {
    /// Conversation; a bare `prompt` becomes one `user` message.
    pub messages: Vec<ChatMessage>,
    /// Model override; defaults to the manifest's / provider's model.
    #[serde(default)]
    pub model: Option<String>,
    /// Upper bound on generated tokens.
    #[serde(default)]
    pub max_tokens: Option<u32>,
    /// Sampling temperature.
    #[serde(default)]
    pub temperature: Option<f64>,
}

/// Token accounting reported by the provider.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Prompt tokens.
    #[serde(default)]
    pub prompt_tokens: u64,
    /// Completion tokens.
    #[serde(default)]
    pub completion_tokens: u64,
    /// Total tokens.
    #[serde(default)]
    pub total_tokens: u64,
}

/// The completion handed back to the script. Never contains the key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompletionResponse {
    /// Generated text.
    pub content: String,
    /// Model that answered.
    pub model: String,
    /// Why generation stopped, if reported.
    #[serde(default)]
    pub finish_reason: Option<String>,
    /// Token usage, if reported.
    #[serde(default)]
    pub usage: Option<Usage>,
    /// Where the key came from (`user`, `channel`, `package`, `host`).
    pub key_source: String,
}

/// Why a module call failed. Carried across the process boundary and turned
/// into a Starlark error with [`std::fmt::Display`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[serde(rename_all = "snake_case")]
pub enum ModuleError {
    /// The package lacks the permission (not granted, or not requested).
    #[error("permission denied: {0}")]
    PermissionDenied(String),
    /// The URL or address is not allowed by the package's `network_access`
    /// or by the private-address guard.
    #[error("network access denied: {0}")]
    NetworkDenied(String),
    /// A per-invocation cap was reached (requests, bytes, …).
    #[error("limit exceeded: {0}")]
    LimitExceeded(String),
    /// The call ran past its timeout or the invocation deadline.
    #[error("timed out: {0}")]
    Timeout(String),
    /// The invocation was cancelled.
    #[error("cancelled")]
    Cancelled,
    /// The script passed bad arguments.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// A required service is not configured or not available.
    #[error("unavailable: {0}")]
    Unavailable(String),
    /// The remote side failed (connection refused, provider error, …).
    #[error("upstream error: {0}")]
    Upstream(String),
}

/// What the Starlark bindings call for every module call.
///
/// In-process runs plug in a `ModuleBroker`; a sandboxed worker
/// plugs in a forwarder that ships the call to the host. Implementations are
/// called from the evaluation thread and may block, but must honour the
/// invocation's deadline and cancellation themselves.
pub trait ModuleCalls: Send + Sync {
    /// Perform one module call.
    fn call(&self, call: ModuleCall) -> Result<ModuleReply, ModuleError>;
}

/// A [`ModuleCalls`] that refuses everything. Used while a package's top
/// level runs once for the cache (see `cordon-starlark`'s crate docs:
/// cached frozen state never depends on an invoker; a top level that calls
/// a module runs per call instead).
#[derive(Debug, Default, Clone, Copy)]
pub struct DenyAllCalls;

impl ModuleCalls for DenyAllCalls {
    fn call(&self, call: ModuleCall) -> Result<ModuleReply, ModuleError> {
        Err(ModuleError::PermissionDenied(format!(
            "{} cannot be called while the package's top level is loading; \
             call it from inside a function (an entry point)",
            call.name()
        )))
    }
}

/// Which host modules are present in a script's globals.
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    serde::Serialize,
    serde::Deserialize,
)]
pub struct ModuleSet {
    /// `secrets`
    pub secrets: bool,
    /// `notifications`
    pub notifications: bool,
    /// `http`
    pub http: bool,
    /// `provider`
    pub provider: bool,
}

impl ModuleSet {
    /// No host modules.
    pub const NONE: ModuleSet = ModuleSet {
        secrets: false,
        notifications: false,
        http: false,
        provider: false,
    };

    /// Each module: its name, whether it is present, and the permission
    /// that unlocks it.
    pub fn with_permissions(self) -> [(&'static str, bool, crate::Permission); 4] {
        use crate::Permission as P;
        [
            ("secrets", self.secrets, P::SecretsRead),
            ("notifications", self.notifications, P::NotificationsSend),
            ("http", self.http, P::ApiHttp),
            ("provider", self.provider, P::ProviderComplete),
        ]
    }

    /// Names of the present modules.
    pub fn names(self) -> Vec<&'static str> {
        let mut v = Vec::new();
        if self.secrets {
            v.push("secrets");
        }
        if self.notifications {
            v.push("notifications");
        }
        if self.http {
            v.push("http");
        }
        if self.provider {
            v.push("provider");
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every variant survives a JSON round trip (what the worker protocol
    /// will do), with `arbitrary_precision` on.
    #[test]
    fn all_variants_round_trip() {
        let calls = vec![
            ModuleCall::SecretGet(SecretGet { name: "k".into() }),
            ModuleCall::Notify(Notification {
                package_id: "p".into(),
                user_id: Some("u".into()),
                channel_id: None,
                title: "t".into(),
                body: "b".into(),
                level: "info".into(),
                url: None,
            }),
            ModuleCall::Http(HttpRequest {
                method: "POST".into(),
                url: "https://x.example/".into(),
                headers: vec![("a".into(), "b".into())],
                body: Some("{}".into()),
                timeout_ms: Some(1500),
            }),
            ModuleCall::Complete(CompletionRequest {
                messages: vec![ChatMessage {
                    role: "user".into(),
                    content: "hi".into(),
                }],
                model: Some("m".into()),
                max_tokens: Some(10),
                temperature: Some(0.1),
            }),
        ];
        for c in calls {
            let s = serde_json::to_string(&c).unwrap();
            assert_eq!(serde_json::from_str::<ModuleCall>(&s).unwrap(), c, "{s}");
        }
        let replies = vec![
            ModuleReply::Secret(None),
            ModuleReply::Secret(Some("v".into())),
            ModuleReply::Notified,
            ModuleReply::Http(HttpResponse {
                status: 200,
                url: "https://x.example/".into(),
                headers: vec![],
                body: "ok".into(),
            }),
            ModuleReply::Completion(CompletionResponse {
                content: "c".into(),
                model: "m".into(),
                finish_reason: None,
                usage: Some(Usage {
                    prompt_tokens: 1,
                    completion_tokens: 2,
                    total_tokens: 3,
                }),
                key_source: "host".into(),
            }),
        ];
        for r in replies {
            let s = serde_json::to_string(&r).unwrap();
            assert_eq!(serde_json::from_str::<ModuleReply>(&s).unwrap(), r, "{s}");
        }
        let errors = vec![
            ModuleError::PermissionDenied("x".into()),
            ModuleError::NetworkDenied("x".into()),
            ModuleError::LimitExceeded("x".into()),
            ModuleError::Timeout("x".into()),
            ModuleError::Cancelled,
            ModuleError::InvalidArgument("x".into()),
            ModuleError::Unavailable("x".into()),
            ModuleError::Upstream("x".into()),
        ];
        for e in errors {
            let s = serde_json::to_string(&e).unwrap();
            assert_eq!(serde_json::from_str::<ModuleError>(&s).unwrap(), e, "{s}");
        }
    }

    #[test]
    fn deny_all_explains_itself() {
        let e = DenyAllCalls
            .call(ModuleCall::SecretGet(SecretGet { name: "a".into() }))
            .unwrap_err();
        assert!(e.to_string().contains("secrets.get"), "{e}");
    }
}
