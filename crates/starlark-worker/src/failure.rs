//! [`EvalFailure`]: why compiling a package or calling one of its
//! functions failed, as the interpreter side knows it, and the wire code a
//! worker reports it with. The host turns it (in process) or the code (from
//! a worker) into its own `StarlarkHostError`.

use cordon_starlark_protocol::wire::ErrorCode;
use cordon_starlark_protocol::LimitKind;

/// Why an evaluation failed. Each variant has a `StarlarkHostError`
/// namesake in the host with the same fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EvalFailure {
    /// Parsing, compiling or running the script failed (or the
    /// interpreter gave up on it).
    Script {
        /// Package id.
        package: String,
        /// Starlark's diagnostic (with file and line).
        message: String,
    },
    /// A limit stopped the evaluation.
    Limit {
        /// Package id.
        package: String,
        /// Which limit.
        kind: LimitKind,
        /// Details.
        message: String,
    },
    /// The evaluation's cancel token was cancelled.
    Cancelled {
        /// Package id.
        package: String,
    },
    /// The package has no public function of that name.
    NoSuchEntryPoint {
        /// Package id.
        package: String,
        /// Requested name.
        name: String,
        /// Comma separated public functions.
        available: String,
    },
    /// A value did not convert to or from JSON.
    Conversion {
        /// Package id.
        package: String,
        /// Details.
        message: String,
    },
}

impl EvalFailure {
    /// The `code` of the `Error` frame a worker answers with, and the
    /// message to send with it (limit kinds become `limit.<kind>`; for
    /// `no_such_entry_point` the message is the name, the host knows the
    /// package's functions).
    pub fn wire_code(&self) -> (ErrorCode, String) {
        match self {
            EvalFailure::Script { message, .. } => (ErrorCode::Script, message.clone()),
            EvalFailure::Limit { kind, message, .. } => (ErrorCode::Limit(*kind), message.clone()),
            EvalFailure::Cancelled { .. } => (ErrorCode::Cancelled, "cancelled".into()),
            EvalFailure::NoSuchEntryPoint { name, .. } => {
                (ErrorCode::NoSuchEntryPoint, name.clone())
            }
            EvalFailure::Conversion { message, .. } => (ErrorCode::Conversion, message.clone()),
        }
    }
}
