//! The sandbox's rlimits: computed in the parent from its `Limits` and
//! layers, set (soft = hard) in the program before its exec, never above
//! the hard limit it would otherwise have (raising one needs
//! `CAP_SYS_RESOURCE` on the host; the result is only ever stricter).

use cordon_core::Limits;

use super::quotas;
use super::sys::check_long;
use crate::Layers;

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
///
/// `others` is added to `RLIMIT_NPROC`: the tasks its count includes
/// that are not the program's — the sandbox's own helpers (the init with
/// a PID namespace; the init and the warden in tier landlock), so that
/// the program's processes number `max_processes`, and in tier landlock
/// on an unprivileged host every task the caller's uid already had (no
/// user namespace counts the sandbox alone). (The launcher is counted too
/// until it exits, a few microseconds after the program's exec: a program
/// that forks at once may meanwhile find one process fewer, never one
/// more. In tier landlock on an unprivileged host, though, a task of the
/// caller's uid that ends after the count leaves the sandbox one more:
/// the README says so.)
///
/// `forks_counted`: in explain mode, a pids cgroup holds the limit and
/// counts what it refuses (`cgroup/pids.rs`); `RLIMIT_NPROC` is then one
/// higher, a backstop the cgroup reaches first.
///
/// `scratch_on_tmpfs`: the scratch is a private tmpfs of `disk_bytes`,
/// which holds that limit for the scratch as a whole. Otherwise (tier
/// landlock; a kept or caller's scratch) the scratch is on the host's
/// disk and `disk_bytes` holds per file, as `RLIMIT_FSIZE` (the smaller
/// of it and `file_size_bytes`).
pub(crate) fn plan(
    l: &Limits,
    layers: Layers,
    cgroup_memory: bool,
    scratch_on_tmpfs: bool,
    others: u64,
    forks_counted: bool,
) -> [(libc::__rlimit_resource_t, Option<u64>); COUNT] {
    let memory = l.memory_bytes.filter(|_| !cgroup_memory);
    let quota = |i: usize| {
        let (resource, _, value) = quotas::RLIMITS[i];
        (resource, layers.kernel_quotas.then_some(value))
    };
    [
        (
            libc::RLIMIT_NPROC,
            l.max_processes
                .map(|n| n.saturating_add(others + u64::from(forks_counted))),
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
        (libc::RLIMIT_CPU, l.cpu_rlimit_seconds()),
        (libc::RLIMIT_FSIZE, l.file_size_rlimit(!scratch_on_tmpfs)),
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

/// How many tasks (threads) of real uid `uid` exist: what the kernel
/// compares `RLIMIT_NPROC` with when a task of that uid forks (outside a
/// user namespace of its own). Read in the parent, from every process's
/// `/proc/<pid>/status` (`Uid:` and `Threads:`); a process that ends
/// meanwhile is skipped.
pub(crate) fn tasks_of_uid(uid: u32) -> u64 {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return 0;
    };
    let mut tasks = 0;
    for e in dir.flatten() {
        let name = e.file_name();
        if !name.as_encoded_bytes().iter().all(u8::is_ascii_digit) {
            continue;
        }
        let Ok(status) = std::fs::read_to_string(e.path().join("status")) else {
            continue;
        };
        let field = |key: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(key))
                .and_then(|v| v.split_whitespace().next())
                .and_then(|v| v.parse::<u64>().ok())
        };
        if field("Uid:") == Some(u64::from(uid)) {
            tasks += field("Threads:").unwrap_or(1);
        }
    }
    tasks
}

#[cfg(test)]
mod tests {
    /// The count includes every thread of this process, and a thread
    /// started now; a uid nothing runs as has none.
    #[test]
    fn the_tasks_of_a_uid_include_this_process_and_its_threads() {
        // SAFETY: getuid has no preconditions.
        let me = unsafe { libc::getuid() };
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let t = std::thread::spawn(move || rx.recv());
        let own: u64 = std::fs::read_to_string("/proc/self/status")
            .unwrap()
            .lines()
            .find_map(|l| l.strip_prefix("Threads:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap();
        assert!(own >= 2, "this process and the thread just started");
        assert!(super::tasks_of_uid(me) >= own);
        drop(tx);
        let _ = t.join();
        assert_eq!(super::tasks_of_uid(4_000_000_123), 0);
    }
}
