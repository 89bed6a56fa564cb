//! Who a sandbox is ([`SandboxIds`]).

use super::{UidLease, UidPool};

/// Who a sandbox is: its ids in its own user namespace and on the host,
/// and on a root host the lease that keeps its uid its own.
pub(crate) struct SandboxIds {
    /// The host runs as root (the launcher changes its uid).
    pub(crate) root_host: bool,
    /// The program's uid and gid inside its user namespace.
    pub(crate) inside: (u32, u32),
    /// The same ids as the host sees them.
    pub(crate) host: (u32, u32),
    /// The uid's lease (`Layers::own_uid` on a root host), held by the
    /// sandbox's resources until every process of it is gone.
    pub(crate) lease: Option<UidLease>,
}

impl SandboxIds {
    /// An unprivileged host's sandbox is the caller (no other uid can be
    /// had); a root host's gets a uid of its own from `pool`, and is
    /// `nobody` inside its user namespace, where tools find a user
    /// database entry for it.
    pub(crate) fn choose(
        caller: (u32, u32),
        layers: crate::Layers,
        pool: Result<&UidPool, &str>,
    ) -> Result<SandboxIds, String> {
        if caller.0 != 0 {
            return Ok(SandboxIds {
                root_host: false,
                inside: caller,
                host: caller,
                lease: None,
            });
        }
        let nobody = (crate::SANDBOX_UID, crate::SANDBOX_GID);
        if !layers.own_uid {
            return Ok(SandboxIds {
                root_host: true,
                inside: nobody,
                host: nobody,
                lease: None,
            });
        }
        let lease = UidLease::acquire(pool?)?;
        let own = (lease.uid(), lease.uid());
        Ok(SandboxIds {
            root_host: true,
            inside: nobody,
            host: own,
            lease: Some(lease),
        })
    }
}

impl SandboxIds {
    /// A running container's, entered: `nobody` inside on a root host
    /// (what its maps map to its uid), the caller's ids otherwise; its
    /// lease is the container's. `host` is not known here and is set to
    /// `inside` (it is used for nothing when entering).
    pub(crate) fn of_running(caller: (u32, u32)) -> SandboxIds {
        let root_host = caller.0 == 0;
        let inside = if root_host {
            (crate::SANDBOX_UID, crate::SANDBOX_GID)
        } else {
            caller
        };
        SandboxIds {
            root_host,
            inside,
            host: inside,
            lease: None,
        }
    }
}
