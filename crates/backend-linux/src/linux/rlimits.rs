//! The sandbox's rlimits: computed in the parent from its `Limits` and
//! layers, set (soft = hard) in the program before its exec, never above
//! the hard limit it would otherwise have (raising one needs
//! `CAP_SYS_RESOURCE` on the host; the result is only ever stricter).

use cordon_core::Limits;

use super::quotas;
use super::sys::check_long;
use crate::Layers;

/// The sandbox's own helper process that shares its user namespace, and so
/// its `RLIMIT_NPROC` count, with a PID namespace: the init. It is added to
/// the limit so that the program's processes number `max_processes`. (The
/// launcher is counted too until it exits, a few microseconds after the
/// program's exec: a program that forks at once may meanwhile find one
/// process fewer, never one more.)
const HELPER_PROCESSES: u64 = 1;

/// Address space each process may reserve beyond `memory_bytes` when no
/// cgroup holds memory. Runtimes reserve far more than they touch (a JVM
/// reserves its heap, 1 GiB of compressed class space and its code cache
/// up front; it does not start under a 2 GiB address-space limit, and
/// does under 1 GiB of data plus 3 GiB of headroom); what a process can
/// actually write privately is held to `memory_bytes` by `RLIMIT_DATA`.
pub(crate) const ADDRESS_SPACE_HEADROOM: u64 = 3 << 30;

/// How many rlimits a sandbox sets.
pub(crate) const COUNT: usize = 10;

/// The rlimits of the sandbox, `None` where a limit is not set.
/// `cgroup_memory`: a cgroup holds memory for the sandbox as a whole, so
/// no per-process memory rlimit is set (it would only stop the runtimes
/// that reserve large ranges). With `Layers::kernel_quotas`, the quotas'
/// rlimits too (`quotas.rs`).
pub(crate) fn plan(
    l: &Limits,
    layers: Layers,
    cgroup_memory: bool,
) -> [(libc::__rlimit_resource_t, Option<u64>); COUNT] {
    let helpers = if layers.pid_namespace {
        HELPER_PROCESSES
    } else {
        0
    };
    let memory = l.memory_bytes.filter(|_| !cgroup_memory);
    let quota = |i: usize| {
        let (resource, _, value) = quotas::RLIMITS[i];
        (resource, layers.kernel_quotas.then_some(value))
    };
    [
        (
            libc::RLIMIT_NPROC,
            l.max_processes.map(|n| n.saturating_add(helpers)),
        ),
        // Private writable memory (heap, anonymous private maps, thread
        // stacks), counted when mapped writable.
        (libc::RLIMIT_DATA, memory),
        // Everything mapped, shared memory included, with the headroom.
        (
            libc::RLIMIT_AS,
            memory.map(|m| m.saturating_add(ADDRESS_SPACE_HEADROOM)),
        ),
        (libc::RLIMIT_NOFILE, l.open_files),
        (libc::RLIMIT_CPU, l.cpu_seconds),
        (libc::RLIMIT_FSIZE, l.file_size_bytes),
        (libc::RLIMIT_CORE, Some(0)),
        quota(0),
        quota(1),
        quota(2),
    ]
}

/// Sets each limit, soft = hard, lowered to the current hard limit.
/// Async-signal-safe.
pub(crate) fn apply(limits: &[(libc::__rlimit_resource_t, Option<u64>)]) -> std::io::Result<()> {
    for &(resource, value) in limits {
        let Some(value) = value else { continue };
        let mut cur = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit/setrlimit on a local struct.
        unsafe {
            check_long(libc::getrlimit(resource, &mut cur).into())?;
            let v = (value as libc::rlim_t).min(cur.rlim_max);
            let new = libc::rlimit {
                rlim_cur: v,
                rlim_max: v,
            };
            check_long(libc::setrlimit(resource, &new).into())?;
        }
    }
    Ok(())
}
