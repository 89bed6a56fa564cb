//! A fresh scratch the sandbox's leased uid owns while it runs (tier
//! landlock, and the test layers without a mount namespace, on a root
//! host): given to the uid at wrap, handed back to the caller before the
//! uid is released (and recorded in the uid's lease first, so that if the
//! host is killed the uid's next holder hands it back before it runs,
//! `uid.rs`). Every touch is `cordon_core::hostfs`'s (no link followed).

use std::path::{Path, PathBuf};

use cordon_core::{SandboxPolicy, WrapError};

use super::uid::SandboxIds;
use super::wrap_err;

/// A host dir the sandbox's leased uid owns while it runs: before that
/// uid may go to another sandbox, the dir is handed to the caller
/// (`hostfs::hand_over_dir`: 0700, the caller's), so whatever of the
/// sandbox's is left below it (a removal that failed, a removal still to
/// come) is out of the next holder's reach.
#[derive(Debug)]
pub(crate) struct ScratchHandback {
    scratch: PathBuf,
    sandbox_uid: u32,
    caller: (u32, u32),
}

impl ScratchHandback {
    /// Gives a root host's fresh `scratch` (core's private 0700 dir,
    /// removed after the sandbox) to the sandbox's uid; `None` where the
    /// sandbox runs as the caller or the scratch is not fresh.
    pub(crate) fn give(
        policy: &SandboxPolicy,
        scratch: &Path,
        ids: &SandboxIds,
        caller: (u32, u32),
    ) -> Result<Option<ScratchHandback>, WrapError> {
        if !(ids.root_host && policy.scratch_is_fresh) {
            return Ok(None);
        }
        let (uid, gid) = ids.host;
        if let Some(lease) = &ids.lease {
            lease.record_scratch(scratch).map_err(|e| {
                wrap_err(format!("cannot record the scratch given to uid {uid}: {e}"))
                    .with_source(e)
            })?;
        }
        let cannot = |why: String| {
            wrap_err(format!(
                "cannot give the scratch dir `{}` to uid {uid}: {why}",
                scratch.display()
            ))
        };
        match cordon_core::hostfs::hand_over_dir(scratch, caller.0, (uid, gid)) {
            Ok(true) => {}
            Ok(false) => return Err(cannot(format!("it is gone or not uid {}'s", caller.0))),
            Err(e) => return Err(cannot(e.to_string()).with_source(e)),
        }
        Ok(Some(ScratchHandback {
            scratch: scratch.to_path_buf(),
            sandbox_uid: uid,
            caller,
        }))
    }

    /// Hands the scratch back (a scratch already removed counts as done);
    /// `false` when it could not be, and the uid must then stay leased.
    pub(crate) fn hand_back(self) -> bool {
        match cordon_core::hostfs::hand_over_dir(&self.scratch, self.sandbox_uid, self.caller) {
            Ok(_) => true,
            Err(e) => {
                tracing::error!(
                    path = %self.scratch.display(),
                    uid = self.sandbox_uid,
                    error = %e,
                    "cannot hand the scratch back from the sandbox's uid: the uid is not released"
                );
                false
            }
        }
    }
}
