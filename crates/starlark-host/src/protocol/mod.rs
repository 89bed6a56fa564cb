//! The host ⇄ worker protocol (`docs/protocol.md`), in one place:
//!
//! * [`frame`]: length-prefixed JSON frames, the [`frame::Message`] enum,
//!   version negotiation, and the errors that end a session;
//! * [`wire`]: the bodies of the methods (`load_package`, `call`,
//!   `module`) and [`wire::ErrorCode`];
//! * `calls`: the module-call types ([`ModuleCall`], [`ModuleReply`],
//!   [`ModuleError`]) the bindings produce, the broker serves, and the
//!   worker forwards.

mod calls;
pub mod frame;
pub mod wire;

pub use calls::*;
