//! Bodies of the host ⇄ worker protocol methods (`docs/protocol.md`).
//!
//! Frames, the `Hello`/`Welcome` handshake and the [`Message`] envelope come
//! from [`frame`](super::frame); this module defines what goes in the
//! `body` of each `Request`/`Response` and the `code` strings of `Error`s.
//! Structs only (no internally tagged enums), so they survive serde_json's
//! `arbitrary_precision`.
//!
//! [`Message`]: crate::frame::Message

use serde::{Deserialize, Serialize};

use crate::{EvalLimits, LimitKind, ModuleError, ModuleSet, Package};

/// The worker's identity prefix in `Hello.worker`; the full string is
/// [`worker_identity`].
pub const WORKER_NAME: &str = "cordon-starlark-worker";

/// `cordon-starlark-worker/<version>` (the workspace's one version): what
/// a worker built with this protocol sends, and the only identity the host
/// accepts.
pub fn worker_identity() -> String {
    format!("{WORKER_NAME}/{}", env!("CARGO_PKG_VERSION"))
}

/// Method `load_package` (host → worker, once per worker).
pub const METHOD_LOAD_PACKAGE: &str = "load_package";
/// Method `call` (host → worker, one at a time).
pub const METHOD_CALL: &str = "call";
/// Method `module` (worker → host, only while a `call` is in flight).
pub const METHOD_MODULE: &str = "module";

/// The `code` of an `Error` frame about the session or a `call`: every
/// such code either side sends, in one place (`docs/protocol.md` lists
/// them). A `module` error's code is its [`ModuleError`] variant instead
/// ([`module_error_code`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorCode {
    /// The peer broke the protocol (terminal).
    Protocol,
    /// No common protocol version (terminal, handshake).
    Version,
    /// The worker is not the expected program/version (terminal).
    Identity,
    /// A request named a method the receiver does not know (terminal).
    UnknownMethod,
    /// A request body did not parse (answers that request).
    BadRequest,
    /// `call` before a successful `load_package`.
    NotLoaded,
    /// The script failed.
    Script,
    /// A limit ended the evaluation: `limit.<kind>`.
    Limit(LimitKind),
    /// The call was cancelled.
    Cancelled,
    /// The package has no such function.
    NoSuchEntryPoint,
    /// A value did not convert to or from JSON.
    Conversion,
    /// The package is not valid.
    InvalidPackage,
    /// The interpreter gave up on the script by panicking: the script's
    /// error, but the worker's state is suspect (the host retires it).
    Panic,
    /// Anything else (an encoding failure, a leaked forwarder).
    Internal,
}

impl ErrorCode {
    const PLAIN: [(ErrorCode, &'static str); 13] = [
        (ErrorCode::Protocol, "protocol"),
        (ErrorCode::Version, "version"),
        (ErrorCode::Identity, "identity"),
        (ErrorCode::UnknownMethod, "unknown_method"),
        (ErrorCode::BadRequest, "bad_request"),
        (ErrorCode::NotLoaded, "not_loaded"),
        (ErrorCode::Script, "script"),
        (ErrorCode::Cancelled, "cancelled"),
        (ErrorCode::NoSuchEntryPoint, "no_such_entry_point"),
        (ErrorCode::Conversion, "conversion"),
        (ErrorCode::InvalidPackage, "invalid_package"),
        (ErrorCode::Panic, "panic"),
        (ErrorCode::Internal, "internal"),
    ];

    /// The code as it goes on the wire.
    pub fn as_wire(self) -> String {
        match self {
            ErrorCode::Limit(kind) => format!("limit.{}", kind.as_str()),
            plain => Self::PLAIN
                .iter()
                .find(|(c, _)| *c == plain)
                .map(|(_, s)| (*s).to_owned())
                .unwrap_or_default(),
        }
    }

    /// The code a peer sent, if it is one of ours.
    pub fn parse(code: &str) -> Option<Self> {
        if let Some(kind) = code.strip_prefix("limit.") {
            return LimitKind::parse(kind).map(ErrorCode::Limit);
        }
        Self::PLAIN
            .iter()
            .find(|(_, s)| *s == code)
            .map(|(c, _)| *c)
    }
}

/// Evaluation limits sent with `load_package`: [`EvalLimits`] without the HTTP
/// caps (those are enforced by the host's broker, not the worker).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireLimits {
    /// [`EvalLimits::max_ticks`].
    pub max_ticks: u64,
    /// [`EvalLimits::timeout`], in milliseconds.
    pub timeout_ms: u64,
    /// [`EvalLimits::max_heap_bytes`].
    pub max_heap_bytes: u64,
    /// [`EvalLimits::max_call_depth`].
    pub max_call_depth: u64,
    /// [`EvalLimits::max_output_bytes`].
    pub max_output_bytes: u64,
    /// [`EvalLimits::max_source_bytes`].
    pub max_source_bytes: u64,
    /// [`EvalLimits::max_nesting_depth`].
    pub max_nesting_depth: u64,
    /// [`EvalLimits::max_expression_depth`].
    pub max_expression_depth: u64,
    /// [`EvalLimits::max_value_depth`].
    pub max_value_depth: u64,
    /// [`EvalLimits::max_value_bytes`].
    pub max_value_bytes: u64,
    /// [`EvalLimits::max_load_depth`].
    pub max_load_depth: u64,
    /// [`EvalLimits::eval_stack_bytes`]: the worker's evaluation thread stack.
    pub eval_stack_bytes: u64,
}

impl From<&EvalLimits> for WireLimits {
    fn from(l: &EvalLimits) -> Self {
        WireLimits {
            max_ticks: l.max_ticks,
            timeout_ms: l.timeout.as_millis().min(u64::MAX as u128) as u64,
            max_heap_bytes: l.max_heap_bytes as u64,
            max_call_depth: l.max_call_depth as u64,
            max_output_bytes: l.max_output_bytes as u64,
            max_source_bytes: l.max_source_bytes as u64,
            max_nesting_depth: l.max_nesting_depth as u64,
            max_expression_depth: l.max_expression_depth as u64,
            max_value_depth: l.max_value_depth as u64,
            max_value_bytes: l.max_value_bytes as u64,
            max_load_depth: l.max_load_depth as u64,
            eval_stack_bytes: l.eval_stack_bytes as u64,
        }
    }
}

impl WireLimits {
    /// Back to [`EvalLimits`] (HTTP caps and the notification budget at
    /// their defaults: the host's broker enforces them, not the worker).
    pub fn to_limits(&self) -> EvalLimits {
        let z = |v: u64| usize::try_from(v).unwrap_or(usize::MAX);
        EvalLimits {
            max_ticks: self.max_ticks,
            timeout: std::time::Duration::from_millis(self.timeout_ms),
            max_heap_bytes: z(self.max_heap_bytes),
            max_call_depth: z(self.max_call_depth),
            max_output_bytes: z(self.max_output_bytes),
            max_source_bytes: z(self.max_source_bytes),
            max_nesting_depth: z(self.max_nesting_depth),
            max_expression_depth: z(self.max_expression_depth),
            max_value_depth: z(self.max_value_depth),
            max_value_bytes: z(self.max_value_bytes),
            max_load_depth: z(self.max_load_depth),
            eval_stack_bytes: z(self.eval_stack_bytes),
            http: Default::default(),
            notifications: Default::default(),
        }
    }
}

/// Body of `load_package`: the whole package (every source file; the
/// worker reads no files), the modules its globals get, and the limits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoadPackage {
    /// The package, sources included.
    pub package: Package,
    /// Host modules present in the globals (the host re-checks every call).
    pub modules: ModuleSet,
    /// Evaluation limits.
    pub limits: WireLimits,
}

/// Response body of `load_package`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Loaded {
    /// Public functions (entry points), sorted.
    pub functions: Vec<String>,
    /// Public globals that convert to JSON.
    pub globals: serde_json::Map<String, serde_json::Value>,
    /// What the top level printed (empty when it calls a module and so
    /// runs at the start of every call instead).
    pub output: String,
}

/// Body of `call`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Call {
    /// Function name.
    pub entry: String,
    /// Positional arguments.
    #[serde(default)]
    pub args: Vec<serde_json::Value>,
    /// Keyword arguments.
    #[serde(default)]
    pub kwargs: serde_json::Map<String, serde_json::Value>,
    /// Deadline of this call, from the worker's receipt of the request, in
    /// milliseconds (the host kills the worker a grace period after its own
    /// copy of the deadline).
    pub timeout_ms: u64,
}

/// Response body of `call`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallResult {
    /// Return value as JSON.
    pub value: serde_json::Value,
    /// What the call printed.
    pub output: String,
}

/// Error `code` of a [`ModuleError`] (the variant name in `snake_case`) and
/// its message.
pub fn module_error_code(e: &ModuleError) -> (&'static str, String) {
    match e {
        ModuleError::PermissionDenied(m) => ("permission_denied", m.clone()),
        ModuleError::NetworkDenied(m) => ("network_denied", m.clone()),
        ModuleError::LimitExceeded(m) => ("limit_exceeded", m.clone()),
        ModuleError::Timeout(m) => ("timeout", m.clone()),
        ModuleError::Cancelled => ("cancelled", String::new()),
        ModuleError::InvalidArgument(m) => ("invalid_argument", m.clone()),
        ModuleError::Unavailable(m) => ("unavailable", m.clone()),
        ModuleError::Upstream(m) => ("upstream", m.clone()),
    }
}

/// Rebuilds a [`ModuleError`] from its code; an unknown code becomes
/// `Upstream` with the code in the message.
pub fn module_error_from_code(code: &str, message: String) -> ModuleError {
    match code {
        "permission_denied" => ModuleError::PermissionDenied(message),
        "network_denied" => ModuleError::NetworkDenied(message),
        "limit_exceeded" => ModuleError::LimitExceeded(message),
        "timeout" => ModuleError::Timeout(message),
        "cancelled" => ModuleError::Cancelled,
        "invalid_argument" => ModuleError::InvalidArgument(message),
        "unavailable" => ModuleError::Unavailable(message),
        "upstream" => ModuleError::Upstream(message),
        other => ModuleError::Upstream(format!("{other}: {message}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_round_trip() {
        let l = EvalLimits::default();
        let w = WireLimits::from(&l);
        let s = serde_json::to_string(&w).unwrap();
        let back: WireLimits = serde_json::from_str(&s).unwrap();
        assert_eq!(back.to_limits(), l);
    }

    #[test]
    fn error_codes_round_trip() {
        for kind in LimitKind::ALL {
            let code = ErrorCode::Limit(kind);
            assert_eq!(code.as_wire(), format!("limit.{}", kind.as_str()));
            assert_eq!(ErrorCode::parse(&code.as_wire()), Some(code));
        }
        for (code, wire) in ErrorCode::PLAIN {
            assert_eq!(code.as_wire(), wire);
            assert_eq!(ErrorCode::parse(wire), Some(code));
        }
        assert_eq!(ErrorCode::parse("limit.nonsense"), None);
        assert_eq!(ErrorCode::parse("nonsense"), None);
        for e in [
            ModuleError::PermissionDenied("x".into()),
            ModuleError::Cancelled,
            ModuleError::Upstream("u".into()),
        ] {
            let (c, m) = module_error_code(&e);
            let back = module_error_from_code(c, m);
            assert_eq!(back.to_string(), e.to_string());
        }
    }
}
