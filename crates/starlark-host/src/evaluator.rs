//! The seam between the host and where a package runs: the [`Evaluator`]
//! trait (implemented in process, `in_process.rs`, and by the worker pool,
//! `sandbox/`), the [`Call`] it is given, and what it gives back
//! ([`ExecOutcome`], [`CallOutcome`]). Neither implementation imports the
//! other, nor `host.rs`, which chooses between them.

use std::sync::Arc;
use std::time::{Duration, Instant};

use cordon_core::explain::{DenialKind, DenialLog, Explanation, Remedy};
use cordon_starlark_protocol::{EvalLimits, LimitKind, ModuleSet, Package};
use cordon_starlark_worker::CancelToken;

use crate::broker::{Admitted, Capabilities, ModuleBroker};
use crate::error::{EvalError, StarlarkHostError};
use crate::stores::RunContext;

/// One entry-point call: the function, its JSON arguments, who calls
/// (for the provider key chain) and a token to cancel it with.
///
/// ```
/// use cordon_starlark::{Call, CancelToken, RunContext};
/// let cancel = CancelToken::new();
/// let call = Call::new("main")
///     .args(vec![serde_json::json!("world")])
///     .context(RunContext::for_user("u1"))
///     .cancel(cancel.clone());
/// assert_eq!(call.entry, "main");
/// ```
#[derive(Debug, Clone)]
pub struct Call {
    /// The package function to call.
    pub entry: String,
    /// Positional arguments.
    pub args: Vec<serde_json::Value>,
    /// Keyword arguments.
    pub kwargs: serde_json::Map<String, serde_json::Value>,
    /// The invocation's context (a user is needed for `provider`).
    pub context: Option<RunContext>,
    /// Cancels the call when cancelled; dropping the call's future cancels
    /// it too (in a worker: the worker is killed).
    pub cancel: CancelToken,
}

impl Call {
    /// A call of `entry` with no arguments, no context and its own token.
    pub fn new(entry: impl Into<String>) -> Self {
        Call {
            entry: entry.into(),
            args: Vec::new(),
            kwargs: serde_json::Map::new(),
            context: None,
            cancel: CancelToken::new(),
        }
    }

    /// Sets the positional arguments.
    pub fn args(mut self, args: Vec<serde_json::Value>) -> Self {
        self.args = args;
        self
    }

    /// Sets the keyword arguments.
    pub fn kwargs(mut self, kwargs: serde_json::Map<String, serde_json::Value>) -> Self {
        self.kwargs = kwargs;
        self
    }

    /// Sets the invocation context.
    pub fn context(mut self, context: RunContext) -> Self {
        self.context = Some(context);
        self
    }

    /// Uses a caller-held cancellation token.
    pub fn cancel(mut self, cancel: CancelToken) -> Self {
        self.cancel = cancel;
        self
    }

    /// Starts the call's clock, for an evaluator about to run it: its
    /// deadline and the broker that serves its module calls until then.
    /// The deadline is `limits.timeout` from now, plus
    /// [`Services::provider_timeout`](crate::Services::provider_timeout)
    /// when the package has `provider`: a model often answers in 20–60 s,
    /// and one such call must not eat the script's own time.
    pub(crate) fn broker(
        &self,
        caps: &Arc<Capabilities>,
        pkg: &Package,
        admitted: Admitted,
        limits: &EvalLimits,
    ) -> Result<(ModuleBroker, Instant), StarlarkHostError> {
        let waits = if admitted.modules.provider {
            caps.services().provider_timeout
        } else {
            Duration::ZERO
        };
        let deadline = Instant::now() + limits.timeout + waits;
        let broker = ModuleBroker::new(
            caps.clone(),
            pkg,
            admitted,
            self.context.as_ref(),
            limits,
            deadline,
            self.cancel.clone(),
        )?;
        Ok((broker, deadline))
    }
}

/// What loading a package gave: [`StarlarkHost::load`](crate::StarlarkHost::load).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ExecOutcome {
    /// Public globals that convert to JSON (functions are in `functions`).
    pub globals: serde_json::Map<String, serde_json::Value>,
    /// Public functions (entry points).
    pub functions: Vec<String>,
    /// Output printed by the top level (when it was first compiled; empty
    /// for a package whose top level calls a module and so runs per call).
    pub output: String,
    /// Host modules present for this package and context.
    pub modules: Vec<String>,
    /// Whether the compiled package came from the cache.
    pub cached: bool,
}

/// What calling an entry point gave: [`StarlarkHost::call`](crate::StarlarkHost::call).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct CallOutcome {
    /// Return value as JSON.
    pub value: serde_json::Value,
    /// Output printed during the call.
    pub output: String,
    /// Whether the compiled package came from the cache.
    pub cached: bool,
    /// What the call was refused: module calls its grants, allowlist or
    /// limits refused (recorded by the host's broker, never by the
    /// script or the worker), bounded and escaped like a sandbox's.
    #[serde(default)]
    pub denials: Explanation,
}

/// Sets the call's [`CallOutcome::denials`] (or [`EvalError::denials`]):
/// what its broker refused (`log`; a fresh one where the call failed
/// before it had a broker), a module absent from `modules` that the
/// script named, and the evaluation limit that ended it.
pub(crate) fn with_denials(
    r: &mut Result<CallOutcome, EvalError>,
    log: &DenialLog,
    modules: ModuleSet,
    limits: &EvalLimits,
) {
    let e = match r {
        Ok(outcome) => {
            outcome.denials = log.finish();
            return;
        }
        Err(e) => e,
    };
    if let StarlarkHostError::Script { message, .. } = &e.error {
        // A module the package was not given is not in its globals: the
        // script fails to resolve the name (the interpreter's diagnostic
        // is the message's first line; a script's own `fail()` text comes
        // after "error: fail: ", so it cannot pose as one).
        let first = message.lines().next().unwrap_or("");
        for (name, present, permission) in modules.with_permissions() {
            if !present && first == format!("error: Variable `{name}` not found") {
                log.record(
                    DenialKind::Module,
                    name,
                    "use",
                    Remedy::GrantPermission(permission.to_string()),
                );
            }
        }
    }
    if let StarlarkHostError::Limit { kind, .. } = &e.error {
        let object = match limit_value(*kind, limits) {
            Some(v) => format!("{} {v}", kind.as_str()),
            None => kind.as_str().to_string(),
        };
        log.record(
            DenialKind::Limit,
            &object,
            "reached",
            Remedy::RaiseLimit(kind.setting().into()),
        );
    }
    e.denials = log.finish();
}

/// The configured value of the evaluation limit `kind` (the worker's own
/// limits are not in [`EvalLimits`]).
fn limit_value(kind: LimitKind, l: &EvalLimits) -> Option<String> {
    Some(match kind {
        LimitKind::Ticks => l.max_ticks.to_string(),
        LimitKind::Time => format!("{} ms", l.timeout.as_millis()),
        LimitKind::Heap => l.max_heap_bytes.to_string(),
        LimitKind::CallStack => l.max_call_depth.to_string(),
        LimitKind::Output => l.max_output_bytes.to_string(),
        LimitKind::SourceSize => l.max_source_bytes.to_string(),
        LimitKind::Nesting => l.max_nesting_depth.to_string(),
        LimitKind::ValueSize => l.max_value_bytes.to_string(),
        LimitKind::Memory | LimitKind::Cpu => return None,
    })
}

/// How a package is evaluated: load it (compile, run its top level once,
/// freeze) and call its entry points. Implemented in process
/// (`InProcess`, `in_process.rs`) and by the worker pool ([`WorkerPool`](crate::WorkerPool)). The host has
/// checked the package already: it is runnable, and `modules` is what its
/// grants, its manifest and the call's context allow.
#[async_trait::async_trait]
pub(crate) trait Evaluator: Send + Sync {
    /// Loads `pkg` (or finds it loaded) and returns its globals and the
    /// output of its top level.
    async fn load(&self, pkg: &Package, modules: ModuleSet) -> Result<ExecOutcome, EvalError>;

    /// Calls an entry point of `pkg` on a fresh heap, with what the host
    /// admitted for it (its modules, and the ranges its `http` may reach).
    async fn call(
        &self,
        pkg: &Package,
        admitted: Admitted,
        call: Call,
    ) -> Result<CallOutcome, EvalError>;
}
