//! # cordon-starlark-protocol
//!
//! The lowest layer of Cordon's Starlark host: what crosses the pipe
//! between the host (`cordon-starlark`) and a worker process
//! (`cordon-starlark-worker`), specified in `docs/protocol.md`, and the
//! types both sides read. No interpreter and no HTTP client.
//!
//! * [`frame`]: length-prefixed JSON frames, the [`frame::Message`] enum,
//!   version negotiation, and the errors that end a session;
//! * [`wire`]: the bodies of the methods (`load_package`, `call`,
//!   `module`), [`wire::ErrorCode`], and the module errors' codes;
//! * `calls`: the module set ([`ModuleSet`]) and the module-call types
//!   ([`ModuleCall`], [`ModuleReply`], [`ModuleError`], the [`ModuleCalls`]
//!   trait) the bindings produce, the host's broker serves, and the worker
//!   forwards;
//! * `package`: the package model ([`Package`], [`Manifest`],
//!   [`Permission`]) that `load_package` carries, and the `load()` path
//!   rule ([`normalize_load_path`]);
//! * `limits`: [`EvalLimits`] (with [`HttpLimits`] and
//!   [`NotificationLimits`], which the host's broker enforces) and
//!   [`LimitKind`], which limit stopped an evaluation.
//!
//! A worker's first frame, as the host reads it off the pipe and checks
//! it (an instance id that is not the one the host gave is refused):
//!
//! ```
//! use cordon_starlark_protocol::frame::*;
//!
//! let hello = Message::Hello {
//!     protocol_min: PROTOCOL_VERSION,
//!     protocol_max: PROTOCOL_VERSION,
//!     worker: "example/0.1".into(),
//!     instance_id: "i-42".into(),
//! };
//! let mut pipe = Vec::new();
//! write_message(&mut pipe, &hello, DEFAULT_MAX_FRAME).unwrap();
//! let read = read_message(&mut pipe.as_slice(), DEFAULT_MAX_FRAME).unwrap();
//! assert_eq!(negotiate(&read, "i-42").unwrap(), PROTOCOL_VERSION);
//! assert!(negotiate(&read, "i-43").is_err());
//! ```

#![deny(missing_docs)]

mod calls;
pub mod frame;
mod limits;
mod package;
pub mod wire;

pub use calls::*;
pub use limits::{EvalLimits, HttpLimits, LimitKind, NotificationLimits};
pub use package::{
    normalize_load_path, Manifest, Package, PackageStatus, PackageTier, Permission,
    ProviderRequirement,
};
