//! The limits of one evaluation ([`EvalLimits`], with the host-enforced
//! [`HttpLimits`] and [`NotificationLimits`]), and [`LimitKind`], which of
//! them stopped one: the host configures them, the worker enforces the
//! interpreter's, and both name them on the wire.

use std::time::Duration;

/// The limits of one **evaluation** (loading a package, or one
/// entry-point call), wherever it runs: ticks, wall clock, Starlark heap,
/// stack depth, output, source shape, JSON value sizes, and the `http`
/// module's caps. Not process limits: those of a worker process are the
/// host's `WorkerLimits` (crate `cordon-starlark`), checked against the
/// sandbox runner's `cordon_core::Limits`. All have safe defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EvalLimits {
    /// Instruction budget: one tick is a function call or a loop iteration.
    /// The default (10 M) is roughly 0.15–0.25 s of tight looping.
    pub max_ticks: u64,
    /// Wall-clock deadline per evaluation, including the time spent
    /// waiting on module calls; a call of a package that has `provider`
    /// gets the host's `Services::provider_timeout` on top (a model often
    /// takes 20–60 s). Waiting uses no ticks (`max_ticks` counts
    /// interpreter steps) and no CPU time (a worker's
    /// `WorkerLimits::cpu_seconds`).
    pub timeout: Duration,
    /// Starlark heap size, checked periodically by the interpreter. The
    /// interpreter does not collect garbage during a call, so this bounds
    /// everything a call allocates (including temporaries), not just what
    /// is live.
    pub max_heap_bytes: usize,
    /// Starlark call-stack depth.
    pub max_call_depth: usize,
    /// Captured `print` output, in bytes.
    pub max_output_bytes: usize,
    /// Size of one source file, in bytes.
    pub max_source_bytes: usize,
    /// Bracket nesting depth of source, checked before parsing.
    pub max_nesting_depth: usize,
    /// Estimated expression-tree depth of source (operator chains), checked
    /// before parsing (by the worker's source-shape scanner,
    /// `crates/starlark-worker/src/value_limits.rs`).
    pub max_expression_depth: usize,
    /// Nesting depth of values converted to/from JSON.
    pub max_value_depth: usize,
    /// Approximate JSON size of a converted value, in bytes.
    pub max_value_bytes: usize,
    /// Nested `load()` depth.
    pub max_load_depth: usize,
    /// Native stack of the evaluation thread.
    pub eval_stack_bytes: usize,
    /// Caps of the `http` module.
    pub http: HttpLimits,
    /// The budget of the `notifications` module.
    pub notifications: NotificationLimits,
}

/// The `notifications` module's budget, per evaluation: how many a
/// package may send and how large. The host's broker counts them (in
/// process and for a worker alike), so the memory a package's
/// notifications take in the host, and in a sink's queue, is bounded; past
/// the budget `notifications.send` fails with a limit error the package
/// sees.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotificationLimits {
    /// Notifications per evaluation (default 100).
    pub max_per_invocation: u32,
    /// Bytes of one notification: title, body, level and URL (default
    /// 64 KiB, what a webhook accepts).
    pub max_bytes: usize,
    /// Bytes of all notifications of one evaluation (default 512 KiB).
    pub max_bytes_per_invocation: usize,
}

impl Default for NotificationLimits {
    fn default() -> Self {
        NotificationLimits {
            max_per_invocation: 100,
            max_bytes: 64 * 1024,
            max_bytes_per_invocation: 512 * 1024,
        }
    }
}

impl Default for EvalLimits {
    fn default() -> Self {
        EvalLimits {
            max_ticks: 10_000_000,
            timeout: Duration::from_secs(10),
            max_heap_bytes: 64 * 1024 * 1024,
            max_call_depth: 200,
            max_output_bytes: 64 * 1024,
            max_source_bytes: 512 * 1024,
            max_nesting_depth: 64,
            max_expression_depth: 2000,
            max_value_depth: 64,
            max_value_bytes: 4 * 1024 * 1024,
            max_load_depth: 16,
            eval_stack_bytes: 64 * 1024 * 1024,
            http: HttpLimits::default(),
            notifications: NotificationLimits::default(),
        }
    }
}

/// Caps for the `http` module, per request and per invocation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpLimits {
    /// Largest response body read (bytes); bigger responses are an error.
    pub max_response_bytes: usize,
    /// Largest request body (bytes).
    pub max_request_bytes: usize,
    /// Longest single request, including redirects and body read.
    pub max_request_time: Duration,
    /// Requests (every redirect hop counts) per invocation.
    pub max_requests_per_invocation: u32,
    /// Redirect hops followed per request.
    pub max_redirects: u32,
}

impl Default for HttpLimits {
    fn default() -> Self {
        HttpLimits {
            max_response_bytes: 1024 * 1024,
            max_request_bytes: 256 * 1024,
            max_request_time: Duration::from_secs(10),
            max_requests_per_invocation: 20,
            max_redirects: 5,
        }
    }
}

/// Which per-call limit stopped an evaluation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LimitKind {
    /// Instruction budget (`EvalLimits::max_ticks`).
    Ticks,
    /// Wall-clock deadline (`EvalLimits::timeout`).
    Time,
    /// Starlark heap size (`EvalLimits::max_heap_bytes`).
    Heap,
    /// Call-stack depth (`EvalLimits::max_call_depth`).
    CallStack,
    /// Captured print output (`EvalLimits::max_output_bytes`).
    Output,
    /// Source size (`EvalLimits::max_source_bytes`).
    SourceSize,
    /// Bracket nesting or operator-chain depth in source
    /// (`EvalLimits::max_nesting_depth`, `EvalLimits::max_expression_depth`).
    Nesting,
    /// Depth or size of a value converted to JSON.
    ValueSize,
    /// The sandboxed worker's memory limit (`WorkerLimits::memory_bytes`):
    /// an allocation failed and the worker aborted, or (where the backend
    /// limits the sandbox as a whole, with a cgroup) the kernel killed it.
    Memory,
    /// The sandboxed worker's CPU-time limit (`WorkerLimits::cpu_seconds`).
    Cpu,
}

impl LimitKind {
    /// Every kind, in a stable order.
    pub const ALL: [LimitKind; 10] = [
        LimitKind::Ticks,
        LimitKind::Time,
        LimitKind::Heap,
        LimitKind::CallStack,
        LimitKind::Output,
        LimitKind::SourceSize,
        LimitKind::Nesting,
        LimitKind::ValueSize,
        LimitKind::Memory,
        LimitKind::Cpu,
    ];

    /// The wire name (`snake_case`), as used in worker error codes
    /// (`limit.<name>`).
    pub fn as_str(self) -> &'static str {
        match self {
            LimitKind::Ticks => "ticks",
            LimitKind::Time => "time",
            LimitKind::Heap => "heap",
            LimitKind::CallStack => "call_stack",
            LimitKind::Output => "output",
            LimitKind::SourceSize => "source_size",
            LimitKind::Nesting => "nesting",
            LimitKind::ValueSize => "value_size",
            LimitKind::Memory => "memory",
            LimitKind::Cpu => "cpu",
        }
    }

    /// The setting that raises it (`EvalLimits::max_ticks`, …).
    pub fn setting(self) -> &'static str {
        match self {
            LimitKind::Ticks => "EvalLimits::max_ticks",
            LimitKind::Time => "EvalLimits::timeout",
            LimitKind::Heap => "EvalLimits::max_heap_bytes",
            LimitKind::CallStack => "EvalLimits::max_call_depth",
            LimitKind::Output => "EvalLimits::max_output_bytes",
            LimitKind::SourceSize => "EvalLimits::max_source_bytes",
            LimitKind::Nesting => "EvalLimits::max_nesting_depth or max_expression_depth",
            LimitKind::ValueSize => "EvalLimits::max_value_depth or max_value_bytes",
            LimitKind::Memory => "WorkerLimits::memory_bytes",
            LimitKind::Cpu => "WorkerLimits::cpu_seconds",
        }
    }

    /// Parses a wire name.
    pub fn parse(s: &str) -> Option<LimitKind> {
        LimitKind::ALL.into_iter().find(|k| k.as_str() == s)
    }
}
