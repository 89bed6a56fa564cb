//! # cordon-core
//!
//! The contracts and runners of Cordon, a toolkit for running untrusted code
//! on a host:
//!
//! - [`SandboxBackend`]: an OS sandbox (Landlock + seccomp, Seatbelt, ...)
//!   that confines a [`ChildCommand`] in place;
//! - [`SandboxPolicy`] and [`Limits`]: what a child may touch and use;
//! - [`ChildSpec`] and [`TrustTier`]: what to run and how far it is trusted;
//! - [`Spawner`]: the one spawn path, with baseline hygiene for every child;
//! - [`TrustedProcessRunner`], [`SandboxRunner`] and [`select_runner`]: the
//!   fail-closed choice between them;
//! - [`ConformanceReport`] and [`ConformanceSuite`]: the gate a backend must
//!   pass (probes P1–P8 live in `cordon-conformance`).
//!
//! Core depends on no backend: embedders add the backend crates they need.
//!
//! ## Fail closed
//! An untrusted spec runs only under a [`SandboxRunner`], which can only be
//! built for a backend that passed P1–P7 (and P8, if it claims the egress
//! allowlist) in this process. A `wrap` error or
//! panic means the child is never spawned. The trusted runner refuses
//! untrusted specs.
//!
//! ## Example
//! ```
//! use cordon_core::{ChildSpec, ExitOutcome, Runner, TrustTier, TrustedProcessRunner};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let runner = TrustedProcessRunner::default();
//! let spec = ChildSpec::new("/bin/sh")
//!     .args(["-c", "echo \"$GREETING\" >&2; exit 3"])
//!     .env("GREETING", "hello")
//!     .trust(TrustTier::Trusted);
//! let mut child = runner.start(spec).await?;
//! assert_eq!(child.wait().await?, ExitOutcome::Exited(3));
//! assert_eq!(child.stderr_tail(), b"hello\n");
//! # Ok(())
//! # }
//! ```

#![warn(missing_docs)]

mod backend;
mod child;
mod command;
mod error;
pub mod explain;
pub mod hostfs;
mod launch;
pub mod mountinfo;
pub mod policy;
mod probe_id;
mod program;
mod protected;
mod relay;
mod report;
mod runner;
mod spawn;
mod spec;
#[cfg(target_os = "linux")]
pub mod sys;

pub use backend::{Availability, SandboxBackend, SandboxResources, WrapError, WrapResources};
pub use child::{CpuWatchStats, ExitOutcome, RunningChild, SCRATCH_PREFIX};
pub use command::{ChildCommand, ChildContext};
pub use error::{panic_message, SandboxUnavailable, SpawnError};
pub use launch::LaunchError;
pub use policy::{
    BrokeredNetwork, LimitRaiseError, LimitScope, LimitScopeError, LimitScopes, Limits, Network,
    ReviewedDir, SandboxPolicy,
};
pub use program::{resolve_program, LoadRequirements};
pub use relay::WINDOW_SIZE_POLL;
pub use report::{
    kernel_release, CheckResult, ConformanceReport, ConformanceSuite, Evidence, HostFacts, ProbeId,
    ProbeResult, ProbeStatus, REPORT_SCHEMA,
};
pub use runner::{select_runner, NoRunner, Runner, SandboxRunner, TrustedProcessRunner};
#[cfg(feature = "test-hooks")]
pub use spawn::HygieneOverrides;
pub use spawn::{RunnerConfig, Spawner, DEFAULT_ENV_ALLOWLIST, DEFAULT_SETUP_TIMEOUT};
pub use spec::{ChildSpec, Scratch, Sha256Pin, StdioMode, TrustTier};

/// Counts live (non-zombie) processes in a process group: for tests that
/// prove nothing outlived its child (feature `test-hooks`).
#[cfg(feature = "test-hooks")]
pub fn live_process_group_members(pgid: u32) -> usize {
    child::live_group_members(pgid)
}
