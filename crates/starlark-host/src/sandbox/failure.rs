//! Turning a worker that died or was killed into an error that says why
//! (a limit, a crash, its stderr tail).

use std::time::Duration;

use cordon_core::ExitOutcome;

use super::{SessionError, WorkerLimits};
use cordon_starlark_protocol::LimitKind;

use crate::error::StarlarkHostError;

pub(super) fn memory_message(package: &str, limits: &WorkerLimits, detail: &str) -> String {
    format!(
        "package {package:?} exceeded its memory limit of {} MiB ({detail}); \
         allocate less, or raise WorkerLimits::memory_bytes if the package is legitimate",
        limits.memory_bytes >> 20
    )
}

/// Turns a terminal session failure plus the worker's exit into an error
/// that says what happened.
pub(super) fn describe_failure(
    package: &str,
    e: SessionError,
    outcome: Option<ExitOutcome>,
    stderr: &str,
    limits: &WorkerLimits,
    timeout: Duration,
) -> StarlarkHostError {
    let package = package.to_owned();
    let worker = |message: String| StarlarkHostError::Worker {
        package: package.clone(),
        message,
    };
    match e {
        SessionError::Reported { code, message, .. } => {
            StarlarkHostError::from_worker_code(&package, &code, message, &[])
        }
        SessionError::Deadline => StarlarkHostError::Limit {
            kind: LimitKind::Time,
            message: format!(
                "package {package:?} ran past its {} ms deadline and did not stop; its worker was killed",
                timeout.as_millis()
            ),
            package,
        },
        SessionError::Cancelled => StarlarkHostError::Cancelled { package },
        SessionError::Violation(m) => worker(format!("broke the protocol: {m}")),
        SessionError::Closed(m) => {
            let oom = stderr.contains("memory allocation of")
                || stderr.contains("memory allocation failed")
                || stderr.contains("out of memory");
            if oom {
                return StarlarkHostError::Limit {
                    kind: LimitKind::Memory,
                    message: memory_message(&package, limits, "an allocation failed and its worker aborted"),
                    package,
                };
            }
            let stack = stderr.contains("overflowed its stack");
            match outcome {
                Some(ExitOutcome::MemoryExceeded) => StarlarkHostError::Limit {
                    kind: LimitKind::Memory,
                    message: memory_message(&package, limits, "the kernel killed its worker"),
                    package,
                },
                Some(ExitOutcome::CpuTimeExceeded) => StarlarkHostError::Limit {
                    kind: LimitKind::Cpu,
                    message: format!(
                        "package {package:?} used up its worker's {} s of CPU time",
                        limits.cpu_seconds
                    ),
                    package,
                },
                Some(ExitOutcome::Signaled(sig)) if sig == libc::SIGXCPU => {
                    StarlarkHostError::Limit {
                        kind: LimitKind::Cpu,
                        message: format!(
                            "package {package:?} used up its worker's {} s of CPU time",
                            limits.cpu_seconds
                        ),
                        package,
                    }
                }
                // The script nested values (or source) deeper than the
                // interpreter's native stack: the package's own doing, so a
                // limit, like the nesting checks made before parsing.
                Some(ExitOutcome::Signaled(sig)) if stack => StarlarkHostError::Limit {
                    kind: LimitKind::Nesting,
                    message: format!(
                        "the interpreter overflowed its native stack (signal {sig}) on too deeply \
                         nested values or source; its worker was killed and the next call starts \
                         a fresh one"
                    ),
                    package,
                },
                Some(ExitOutcome::Signaled(sig)) if sig == libc::SIGKILL => worker(format!(
                    "was killed (signal {sig}) by a resource limit or from outside"
                )),
                Some(ExitOutcome::Signaled(sig)) => worker(format!("crashed (signal {sig})")),
                Some(ExitOutcome::Exited(code)) => {
                    worker(format!("exited unexpectedly with code {code} ({m})"))
                }
                Some(ExitOutcome::DeadlineExceeded) => worker(format!(
                    "outlived its {} s lifetime and was killed",
                    limits.lifetime.as_secs()
                )),
                None => worker(format!("stopped answering ({m}) and could not be reaped")),
            }
        }
    }
}
