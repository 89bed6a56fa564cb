//! # cordon-starlark-worker
//!
//! The interpreter layer of Cordon's Starlark host, between the protocol
//! (`cordon-starlark-protocol`) and the host (`cordon-starlark`):
//!
//! * [`compile_package`] parses a package, runs its top level once and
//!   freezes it ([`CompiledPackage`]); [`CompiledPackage::call`] runs an
//!   entry point on a fresh heap. Both hold the evaluation to its
//!   `EvalLimits` and say why they failed with an [`EvalFailure`];
//! * the bindings ([`globals_for`]) give a script the modules of its
//!   `ModuleSet`; a builtin only turns its arguments into a `ModuleCall` for
//!   the evaluation's `ModuleCalls` (no I/O here);
//! * [`dispatch_worker`] / [`run_worker`] serve one host over stdin and
//!   stdout as a worker process (`docs/protocol.md`), forwarding every
//!   module call to the host; the `cordon-star-worker` binary is just that.
//!
//! The host uses the same evaluator in process for trusted packages it is
//! told to run there. No HTTP client is linked: the worker opens no
//! sockets.

#![deny(missing_docs)]

mod bindings;
mod cancel;
mod eval;
mod failure;
mod serve;
mod value_limits;

pub use bindings::globals_for;
pub use cancel::CancelToken;
pub use eval::{compile_package, CompiledPackage};
pub use failure::EvalFailure;
pub use serve::{dispatch_worker, run_worker, RlimitName, WORKER_ARG};
