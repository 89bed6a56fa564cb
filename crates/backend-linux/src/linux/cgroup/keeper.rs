//! The cgroup keeper: one background thread per host process that takes
//! the cgroup work off the spawn's and the wait's path.
//!
//! - **Removal**: a sandbox's cgroups are removed once every process of it
//!   is gone ([`remove_later`]; on v2 `cgroup.kill` first, for anything
//!   left). A process still exiting makes `rmdir` fail with `EBUSY` for a
//!   moment: retried for up to 2 s, then left to the next sweep.
//! - **Stock**: making a memory cgroup is the dearest step of a sandbox's
//!   limits (a `mkdir` that allocates the controller's per-CPU state; ~60
//!   µs per spawn on a 2-core Linux 6.18 host, cgroup v1). A process that
//!   has made two sandboxes probably makes more, so from then on the
//!   keeper keeps one set of cgroups made ahead ([`take`]), and the next
//!   spawn only writes its limits and opens the files its child joins
//!   through. A set in stock is fresh: made by this process, never joined,
//!   with its parent's defaults (no limit of its own) until
//!   `SandboxCgroup::create` writes the sandbox's. A process that makes one
//!   sandbox (`cordon run`) never stocks one. What is in stock at `exit`
//!   is removed then (`atexit`); a host killed first leaves it, empty, to
//!   the next process's sweep, as any cgroup of a dead creator.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc::{channel, SendError, Sender};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use super::{write, CgroupSet, Hierarchy};

/// How many sets the keeper keeps made ahead.
const STOCK: usize = 1;

enum Job {
    Remove(Vec<PathBuf>),
    Refill(&'static Hierarchy),
}

/// Sets made ahead of use.
static STOCKED: Mutex<Vec<CgroupSet>> = Mutex::new(Vec::new());

/// How many sets this process has used.
static USED: AtomicU32 = AtomicU32::new(0);

fn keeper() -> Option<&'static Mutex<Sender<Job>>> {
    static KEEPER: OnceLock<Option<Mutex<Sender<Job>>>> = OnceLock::new();
    KEEPER
        .get_or_init(|| {
            let (tx, rx) = channel::<Job>();
            std::thread::Builder::new()
                .name("cordon-cgroup-keeper".into())
                .spawn(move || {
                    while let Ok(job) = rx.recv() {
                        match job {
                            Job::Remove(dirs) => remove(dirs),
                            Job::Refill(h) => refill(h),
                        }
                    }
                })
                .ok()
                .map(|_| Mutex::new(tx))
        })
        .as_ref()
}

/// Sends `job` to the keeper; gives it back if there is no keeper.
fn submit(job: Job) -> Result<(), Job> {
    let Some(tx) = keeper() else {
        return Err(job);
    };
    tx.lock()
        .unwrap_or_else(|p| p.into_inner())
        .send(job)
        .map_err(|SendError(job)| job)
}

/// A set of `h`'s cgroups for one sandbox: one from stock, else made now.
/// From this process's second set on, the keeper makes the next one ahead.
pub(super) fn take(h: &'static Hierarchy) -> std::io::Result<CgroupSet> {
    let stocked = STOCKED.lock().unwrap_or_else(|p| p.into_inner()).pop();
    let set = match stocked {
        Some(set) => set,
        None => CgroupSet::make(h)?,
    };
    if USED.fetch_add(1, Ordering::Relaxed) >= 1 {
        let _ = submit(Job::Refill(h));
    }
    Ok(set)
}

fn refill(h: &'static Hierarchy) {
    static AT_EXIT: OnceLock<()> = OnceLock::new();
    AT_EXIT.get_or_init(|| {
        // SAFETY: registers a function without arguments, run by exit().
        unsafe { libc::atexit(remove_stock) };
    });
    if STOCKED.lock().unwrap_or_else(|p| p.into_inner()).len() >= STOCK {
        return;
    }
    match CgroupSet::make(h) {
        Ok(set) => STOCKED.lock().unwrap_or_else(|p| p.into_inner()).push(set),
        Err(e) => tracing::debug!(error = %e, "could not make a cgroup set ahead"),
    }
}

/// At exit: removes the stock (fresh, empty cgroups: `rmdir` succeeds at
/// once). `try_lock`: a thread that held the lock at exit leaves its set
/// to the next sweep rather than hang the exit.
extern "C" fn remove_stock() {
    if let Ok(mut stock) = STOCKED.try_lock() {
        for set in stock.drain(..) {
            for dir in set.dirs.iter().rev() {
                let _ = std::fs::remove_dir(dir);
            }
        }
    }
}

/// Hands `dirs` to the keeper, which removes them off the caller's path;
/// inline if the thread cannot start.
pub(super) fn remove_later(dirs: Vec<PathBuf>) {
    if let Err(Job::Remove(dirs)) = submit(Job::Remove(dirs)) {
        remove(dirs);
    }
}

/// Removes a sandbox's cgroups, children first.
fn remove(mut dirs: Vec<PathBuf>) {
    // On v2, anything still in the cgroup (there should be nothing) is
    // killed by the kernel in one step; v1 has no such file, and the PID
    // namespace's end has killed the sandbox there.
    for dir in &dirs {
        let kill = dir.join("cgroup.kill");
        if kill.exists() {
            let _ = write(&kill, 1);
        }
    }
    dirs.reverse();
    for _ in 0..100 {
        dirs.retain(|dir| match std::fs::remove_dir(dir) {
            Ok(()) => false,
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => true,
            Err(e) => {
                if e.kind() != std::io::ErrorKind::NotFound {
                    tracing::warn!(cgroup = %dir.display(), error = %e, "could not remove a sandbox's cgroup");
                }
                false
            }
        });
        if dirs.is_empty() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    tracing::warn!(
        ?dirs,
        "sandbox cgroups still busy after 2 s; left for the next sweep"
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::linux::cgroup::{hierarchy, SandboxCgroup};

    /// Needs a hierarchy this process may write (root on the development
    /// machine and in CI); without one there is no stock to test, and the
    /// backend must then not claim sandbox-wide limits.
    #[test]
    fn from_the_second_set_on_one_is_made_ahead_and_limited_only_when_used() {
        let Some(h) = hierarchy() else {
            use cordon_core::SandboxBackend as _;
            let facts = crate::LinuxBackend::new().host_facts();
            assert!(
                !facts["limit_memory"].starts_with("sandbox:"),
                "no writable cgroup hierarchy, yet the backend claims {:?}",
                facts["limit_memory"]
            );
            return;
        };
        let limits = |mib: u64| cordon_core::Limits {
            memory_bytes: Some(mib << 20),
            ..cordon_core::Limits::default()
        };
        let stocked = || STOCKED.lock().unwrap().len();
        let first = SandboxCgroup::create(h, &limits(64)).expect("first");
        assert_eq!(stocked(), 0, "one sandbox made; nothing may be stocked yet");
        let second = SandboxCgroup::create(h, &limits(64)).expect("second");
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while stocked() == 0 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        let ahead = STOCKED.lock().unwrap()[0].memory.clone();
        // Fresh: no limit of its own yet (the parent's default, far above).
        let file = match h {
            Hierarchy::V1 { .. } => "memory.limit_in_bytes",
            Hierarchy::V2 { .. } => "memory.max",
        };
        let read = |dir: &std::path::Path| std::fs::read_to_string(dir.join(file)).unwrap();
        assert_ne!(read(&ahead).trim(), (32u64 << 20).to_string());
        let third = SandboxCgroup::create(h, &limits(32)).expect("third");
        assert!(
            third.dirs.contains(&ahead),
            "the third sandbox did not get the stocked set {ahead:?}: {:?}",
            third.dirs
        );
        assert_eq!(read(&ahead).trim(), (32u64 << 20).to_string());
        let dirs: Vec<PathBuf> = [&first, &second, &third]
            .iter()
            .flat_map(|c| c.dirs.clone())
            .collect();
        drop((first, second, third));
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while dirs.iter().any(|d| d.exists()) && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(dirs.iter().all(|d| !d.exists()), "used cgroups left behind");
        // The third take asked for the next set ahead: exit removes it.
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while stocked() == 0 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        let next: Vec<PathBuf> = STOCKED.lock().unwrap()[0].dirs.clone();
        remove_stock();
        assert!(
            next.iter().all(|d| !d.exists()),
            "stock left at exit: {next:?}"
        );
    }
}
