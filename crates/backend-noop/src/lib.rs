//! # cordon-backend-noop
//!
//! A [`SandboxBackend`] that is available everywhere and confines nothing.
//! It exists to show the gate closing: the conformance suite reports every
//! probe failing under it, so a
//! [`SandboxRunner`](cordon_core::SandboxRunner) over it cannot be built.
//! Tests use it to exercise runner selection and hygiene. It does not
//! claim the egress allowlist, and its `wrap` refuses
//! [`Network::Allow`](cordon_core::Network::Allow), as every backend that
//! does not claim it must.
//!
//! ```
//! use cordon_core::SandboxBackend;
//! let noop = cordon_backend_noop::NoopBackend;
//! assert_eq!(noop.name(), "noop");
//! assert!(noop.availability().is_available());
//!
//! // An allowlist it cannot hold is refused, never ignored.
//! let mut policy = cordon_core::SandboxPolicy::new("/tmp", cordon_core::Limits::default());
//! policy.network = cordon_core::Network::Allow(vec!["example.com:443".parse().unwrap()]);
//! let mut cmd = cordon_core::ChildCommand::for_backend_tests("/bin/true", "/tmp");
//! assert!(noop.wrap(&mut cmd, &policy).is_err());
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
        policy: &SandboxPolicy,
    ) -> Result<cordon_core::WrapResources, WrapError> {
        if !matches!(policy.network, cordon_core::Network::Deny) {
            return Err(WrapError::new(
                "noop",
                "the no-op backend holds no egress allowlist: any network but Network::Deny is \
                 refused",
            ));
        }
        if policy.seccomp.is_some() {
            return Err(WrapError::new(
                "noop",
                "the no-op backend has no filter to stack a seccomp profile on: refused",
            ));
        }
        if policy.container.is_some() {
            return Err(WrapError::new(
                "noop",
                "the no-op backend cannot enter a container's root: a policy with one is refused",
            ));
        }
        if !policy.reviewed.is_empty() {
            return Err(WrapError::new(
                "noop",
                "the no-op backend cannot put a layer over a directory: a policy with a reviewed \
                 directory is refused",
            ));
        }
        if !policy.placed.is_empty() {
            return Err(WrapError::new(
                "noop",
                "the no-op backend has no view of its own to place a file in: a policy with \
                 placed files is refused",
            ));
        }
        if !policy.masked.is_empty() {
            return Err(WrapError::new(
                "noop",
                "the no-op backend hides nothing: a policy with masks is refused",
            ));
        }
        Ok(None)
    }
}
