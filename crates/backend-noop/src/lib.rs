//! # cordon-backend-noop
//!
//! A [`SandboxBackend`] that is available everywhere and confines nothing.
//! It exists to show the gate closing: the conformance suite reports all
//! seven probes failing under it, so a
//! [`SandboxRunner`](cordon_core::SandboxRunner) over it cannot be built.
//! Tests use it to exercise runner selection and hygiene.
//!
//! ```
//! use cordon_core::SandboxBackend;
//! let noop = cordon_backend_noop::NoopBackend;
//! assert_eq!(noop.name(), "noop");
//! assert!(noop.availability().is_available());
//! ```

use cordon_core::ChildCommand;

use cordon_core::{Availability, SandboxBackend, SandboxPolicy, WrapError};

/// The backend that does nothing. See the crate docs.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoopBackend;

impl SandboxBackend for NoopBackend {
    fn name(&self) -> &str {
        "noop"
    }

    fn availability(&self) -> Availability {
        Availability::Available
    }

    fn wrap(
        &self,
        _cmd: &mut ChildCommand,
        _policy: &SandboxPolicy,
    ) -> Result<cordon_core::WrapResources, WrapError> {
        Ok(None)
    }
}
