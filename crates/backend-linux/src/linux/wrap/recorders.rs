//! Explain mode's recorders, made in `wrap` ([`explain_recorders`]).

use cordon_core::{SandboxPolicy, WrapError};

use super::super::uid::SandboxIds;
use super::super::{audit, cgroup, explain, wrap_err};

/// Explain mode's records beside the refused calls' (`explain.rs`).
pub(super) fn explain_recorders(
    syscalls: explain::SyscallWatch,
    policy: &SandboxPolicy,
    ids: &SandboxIds,
    abi: i32,
    euid: u32,
    landlock_tier: bool,
    cgroup_memory: bool,
) -> Result<explain::Recorders, WrapError> {
    let files = match audit::unavailable(ids.root_host, ids.lease.is_some(), abi) {
        Some(why) => Err(why),
        None => audit::AuditWatch::start(ids.host.0),
    };
    if let (Ok(watch), false) = (&files, landlock_tier) {
        watch.note(
            "files: a write or a creation outside the read-write grants fails with EROFS (the \
             host's files are mounted read-only in the sandbox) before Landlock sees it: not \
             recorded",
        );
    }
    let forks = match policy.limits.max_processes {
        None => None,
        Some(limit) => match cgroup::pids::ForkCount::create(limit, euid, cgroup_memory) {
            Ok(made) => Some(made),
            Err(e) => {
                return Err(wrap_err(format!(
                    "cannot make the pids cgroup that counts the forks --pids refuses: {e}; \
                     nothing was run"
                ))
                .with_source(e))
            }
        },
    };
    // Without a cgroup the memory limit holds per process, as rlimits: an
    // allocation they refuse fails in the program and leaves no record.
    let unobservable = (policy.limits.memory_bytes.is_some() && !cgroup_memory)
        .then(|| {
            "memory: the limit holds per process here (RLIMIT_DATA and RLIMIT_AS: no cgroup \
             this process may make); an allocation it refuses fails in the program (ENOMEM) \
             and leaves no record"
                .to_string()
        })
        .into_iter()
        .collect();
    Ok(explain::Recorders {
        syscalls,
        files,
        forks,
        unobservable,
    })
}
