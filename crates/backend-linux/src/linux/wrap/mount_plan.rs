//! The policy's mount namespace as a plan (`mounts.rs`), idmapped on a root host.

#[allow(unused_imports)]
use super::*;

/// The mount namespace's plan. On a root host every host directory the
/// sandbox may write is mounted idmapped from the caller's ids to the
/// sandbox's (mounts.rs): what it creates there is the caller's.
pub(super) fn mount_plan(
    policy: &SandboxPolicy,
    grants: &Grants,
    ids: &SandboxIds,
    caller: (u32, u32),
) -> Result<Option<MountPlan>, WrapError> {
    // A writable container root is stored as the caller's too (its tree
    // is checked for privileged files where it is cloned: mounts.rs).
    let writable_root = policy.container.as_ref().is_some_and(|r| !r.readonly);
    let persistent_writable = policy.scratch_persists
        || !grants.read_write.is_empty()
        || writable_root
        || !policy.reviewed.is_empty();
    let idmap = if ids.root_host && persistent_writable {
        for dir in grants.read_write.iter().chain(
            policy
                .scratch_persists
                .then_some(&grants.scratch)
                .filter(|_| !policy.scratch_is_fresh),
        ) {
            super::super::privileged::refuse_in_dir(dir, "grant").map_err(wrap_err)?;
        }
        // A reviewed dir's layer: the overlay is mounted by the sandbox's
        // namespace, whose root is the sandbox's uid on the host; it must
        // own the upper and work dirs (made by the caller in a store the
        // uid can pass through but not list: cordon's `review` module).
        for r in &policy.reviewed {
            super::super::privileged::refuse_in_dir(&r.dir, "reviewed dir").map_err(wrap_err)?;
            for d in [&r.upper, &r.work] {
                let handed = cordon_core::hostfs::hand_over_dir(d, caller.0, ids.host)
                    .map_err(|e| wrap_err(format!("cannot hand `{}` over: {e}", d.display())))?;
                if !handed {
                    return Err(wrap_err(format!(
                        "the review layer's `{}` is not the caller's: refused",
                        d.display()
                    )));
                }
            }
        }
        Some(mounts::Idmap::new(caller, ids.host).map_err(wrap_err)?)
    } else {
        None
    };
    let rw: Vec<&Path> = grants.read_write.iter().map(PathBuf::as_path).collect();
    let plan = MountPlan::prepare(
        policy,
        &grants.scratch,
        &rw,
        ids.inside,
        idmap.as_ref(),
        ids.root_host,
    )
    .map_err(wrap_err)?;
    debug_assert_eq!(grants.scratch_is_private, plan.scratch_is_private());
    Ok(Some(plan))
}
