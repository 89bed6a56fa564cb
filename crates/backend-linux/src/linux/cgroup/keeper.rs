//! The cgroup keeper: one background thread per host process that takes
//! the cgroup work off the spawn's and the wait's path.
//!
//! - **Stock**: making a memory cgroup and removing it again is the
//!   dearest part of a sandbox's limits (the `mkdir` allocates the
//!   controller's per-CPU state, ~65 µs on a 2-core Linux 6.18 host with
//!   cgroup v1; the `rmdir` and the kernel's deferred freeing as much
//!   again). A process that has made two sandboxes probably makes more, so
//!   from then on the keeper keeps a set of cgroups ready ([`take`]); the
//!   next spawn at most writes its limit and opens the files its child
//!   joins through (a set in stock holds no fd). A process that makes one sandbox (`cordon run`)
//!   keeps none: its set is removed as soon as its sandbox is gone.
//! - **Recycling**: a sandbox's set is retired once every process of it is
//!   gone ([`retire`]). The keeper uses it again, for a later sandbox of
//!   this process, only when it is as good as fresh: no thread left in it,
//!   at most [`RESIDUE_MAX`] of memory and swap still charged to it once
//!   the page cache it filled is reclaimed (the kernel objects its sandbox
//!   left cached, dentries and slab) and its peak
//!   and failure counters zeroed; the counters that cannot be reset (OOM
//!   kills, CPU time) are read then and subtracted (`SandboxCgroup`). The
//!   limit stays as it was, and the next sandbox writes only what differs
//!   (often nothing: the same policy again). A set whose limit write
//!   failed halfway is never recycled. Anything else, or a full stock, and
//!   the set is removed (on v2 `cgroup.kill` first, for anything left; a
//!   process still exiting makes `rmdir` fail with `EBUSY` for a moment:
//!   retried for up to 2 s, then left to the next sweep).
//! - **Exit**: what is in stock then is removed (`atexit`, by the process
//!   that registered it only, not a forked child); what is retired after
//!   is removed, not stocked. A host killed first leaves its stock, empty,
//!   to the next process's sweep, as any cgroup of a dead creator.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::mpsc::{channel, SendError, Sender};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use super::{write, CgroupSet, Hierarchy};

/// How many sets the keeper makes ahead when the stock is empty.
const STOCK: usize = 1;

/// How many sets the stock holds at most (made ahead or recycled).
const STOCK_MAX: usize = 2;

/// The most a retired set may still have charged to its memory controller
/// and be used again.
pub(super) const RESIDUE_MAX: u64 = 1 << 20;

enum Job {
    Retire(Box<CgroupSet>),
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
                            Job::Retire(set) => recycle_or_remove(*set),
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
    static AT_EXIT: OnceLock<()> = OnceLock::new();
    AT_EXIT.get_or_init(|| {
        OWNER.store(std::process::id(), Ordering::Relaxed);
        // SAFETY: registers a function without arguments, run by exit().
        unsafe { libc::atexit(remove_stock) };
    });
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
    if STOCKED.lock().unwrap_or_else(|p| p.into_inner()).len() >= STOCK {
        return;
    }
    match CgroupSet::make(h) {
        Ok(set) => {
            let mut stock = STOCKED.lock().unwrap_or_else(|p| p.into_inner());
            if EXITING.load(Ordering::Relaxed) {
                drop(stock);
                remove_now(set);
            } else {
                stock.push(set);
            }
        }
        Err(e) => tracing::debug!(error = %e, "could not make a cgroup set ahead"),
    }
}

/// At exit: removes the stock (fresh, empty cgroups: `rmdir` succeeds at
/// once). `try_lock`: a thread that held the lock at exit leaves its set
/// to the next sweep rather than hang the exit.
/// A child made by a plain `fork` that calls `exit` runs the handlers too:
/// only the process that registered it removes anything. After it ran,
/// the keeper stocks nothing more ([`EXITING`]).
extern "C" fn remove_stock() {
    if OWNER.load(Ordering::Relaxed) != std::process::id() {
        return;
    }
    EXITING.store(true, Ordering::Relaxed);
    if let Ok(mut stock) = STOCKED.try_lock() {
        for set in stock.drain(..) {
            remove_now(set);
        }
    }
}

/// The process whose exit removes the stock.
static OWNER: AtomicU32 = AtomicU32::new(0);

/// Set once the stock was removed at exit: what is retired from then on
/// is removed, not stocked.
static EXITING: AtomicBool = AtomicBool::new(false);

/// Hands a sandbox's set to the keeper once every process of the sandbox
/// is gone; it is recycled or removed off the caller's path (inline if
/// the thread cannot start).
pub(super) fn retire(mut set: CgroupSet) {
    // Closed here, not by the keeper later: once a sandbox is gone no fd
    // of its cgroups stays open in the embedder's process.
    set.join.clear();
    // A process that has made one sandbox (`cordon run`) may exit at any
    // moment, and would leave its set to the next process's sweep: it is
    // removed here at once instead (what is still busy, by the keeper).
    if USED.load(Ordering::Relaxed) <= 1 {
        let CgroupSet { dirs, join, .. } = set;
        drop(join);
        remove_soon(dirs);
        return;
    }
    if let Err(Job::Retire(set)) = submit(Job::Retire(Box::new(set))) {
        remove_now(*set);
    }
}

fn recycle_or_remove(mut set: CgroupSet) {
    match recycle(&mut set) {
        Ok(()) => {
            let mut stock = STOCKED.lock().unwrap_or_else(|p| p.into_inner());
            if stock.len() < STOCK_MAX && !EXITING.load(Ordering::Relaxed) {
                stock.push(set);
                return;
            }
        }
        Err(why) => tracing::debug!(cgroup = %set.memory.display(), %why, "not recycled"),
    }
    remove_now(set);
}

/// Makes a retired `set` as good as fresh, or says why it is not.
fn recycle(set: &mut CgroupSet) -> Result<(), String> {
    if set.limit.is_err() {
        return Err("a limit write failed halfway".into());
    }
    // Closed: the next sandbox opens its own (and the stock holds none).
    set.join.clear();
    // v1: `tasks`, every thread (a zombie leader's live threads too).
    let members = if set.v1 { "tasks" } else { "cgroup.procs" };
    let empty = |dir: &PathBuf| {
        std::fs::read_to_string(dir.join(members)).is_ok_and(|p| p.trim().is_empty())
    };
    let mut tries = 0;
    while !set.dirs.iter().all(empty) {
        tries += 1;
        if tries > 100 {
            return Err("processes still in it after 2 s".into());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    // Memory and swap: pages of its tmpfs files on the host swapped out
    // would come back charged to the next sandbox. v1's memsw usage is
    // memory + swap (where swap is accounted).
    let read = |name: &str| -> Result<Option<u64>, String> {
        let file = set.memory.join(name);
        match std::fs::read_to_string(&file) {
            Ok(text) => text
                .trim()
                .parse()
                .map(Some)
                .map_err(|e| format!("{}: {e}", file.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(format!("{}: {e}", file.display())),
        }
    };
    let charged_now = || -> Result<u64, String> {
        Ok(if set.v1 {
            match read("memory.memsw.usage_in_bytes")? {
                Some(both) => both,
                None => read("memory.usage_in_bytes")?.ok_or("no memory.usage_in_bytes")?,
            }
        } else {
            read("memory.current")?.ok_or("no memory.current")?
                + read("memory.swap.current")?.unwrap_or(0)
                + read("memory.zswap.current")?.unwrap_or(0)
        })
    };
    let mut charged = charged_now()?;
    if charged > RESIDUE_MAX {
        // Mostly page cache of files the sandbox read first (a fresh
        // host's Python, say): reclaimed from the empty cgroup, off the
        // spawn's path (v1 `memory.force_empty`, v2 `memory.reclaim`).
        let (file, value) = if set.v1 {
            ("memory.force_empty", "0".to_string())
        } else {
            ("memory.reclaim", charged.to_string())
        };
        let _ = std::fs::write(set.memory.join(file), value);
        charged = charged_now()?;
    }
    let usage = charged;
    if usage > RESIDUE_MAX {
        return Err(format!("{usage} bytes of memory and swap still charged"));
    }
    if set.v1 {
        for counter in [
            "memory.max_usage_in_bytes",
            "memory.failcnt",
            "memory.memsw.max_usage_in_bytes",
            "memory.memsw.failcnt",
        ] {
            let file = set.memory.join(counter);
            if file.exists() {
                write(&file, 0).map_err(|e| format!("{}: {e}", file.display()))?;
            }
        }
    }
    // Empty, so these stand still until the next sandbox joins.
    set.oom_base = set.oom_kills().ok_or("no OOM kill count")?;
    set.cpu_base = set.cpu_time().ok_or("no CPU time")?;
    Ok(())
}

/// Removes a set at once, on the caller's thread (one just made).
pub(super) fn remove_now(set: CgroupSet) {
    let CgroupSet { dirs, join, .. } = set;
    drop(join);
    remove(dirs);
}

/// Removes `dirs` (children first) now, and what is still busy later,
/// off the caller's path (inline if the keeper cannot start).
pub(super) fn remove_soon(dirs: Vec<PathBuf>) {
    let busy = remove_once(dirs);
    if busy.is_empty() {
        return;
    }
    if let Err(Job::Remove(busy)) = submit(Job::Remove(busy)) {
        remove(busy);
    }
}

/// One `rmdir` of each of `dirs` (children first); returns those still
/// busy (`EBUSY`: a process of the sandbox still exiting).
fn remove_once(dirs: Vec<PathBuf>) -> Vec<PathBuf> {
    dirs.into_iter()
        .rev()
        .filter(|dir| {
            std::fs::remove_dir(dir).is_err_and(|e| e.raw_os_error() == Some(libc::EBUSY))
        })
        .rev()
        .collect()
}

/// Removes a sandbox's cgroups, children first.
fn remove(mut dirs: Vec<PathBuf>) {
    if dirs.is_empty() {
        return;
    }
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
    use std::os::unix::process::CommandExt as _;
    use std::time::Instant;

    /// The tests share the keeper's stock.
    static SERIAL: Mutex<()> = Mutex::new(());

    /// The writable hierarchy (root on the development machine and in CI).
    /// Without one there is nothing to keep: the backend must then not
    /// claim sandbox-wide limits (checked), and the test fails rather than
    /// pass having shown nothing.
    fn writable_hierarchy() -> Option<&'static Hierarchy> {
        let h = hierarchy();
        if h.is_none() {
            use cordon_core::SandboxBackend as _;
            let facts = crate::LinuxBackend::new().host_facts();
            assert!(
                !facts["limit_memory"].starts_with("sandbox:"),
                "no writable cgroup hierarchy, yet the backend claims {:?}",
                facts["limit_memory"]
            );
            panic!(
                "no writable cgroup hierarchy here: the keeper's tests need one (run them as \
                 root, as CI does); the backend rightly claims no sandbox-wide limits"
            );
        }
        h
    }

    fn limits(mib: u64) -> cordon_core::Limits {
        cordon_core::Limits {
            memory_bytes: Some(mib << 20),
            ..cordon_core::Limits::default()
        }
    }

    /// Removes the stock as exit does, and lets the keeper stock again.
    fn empty_stock() {
        OWNER.store(std::process::id(), Ordering::Relaxed);
        remove_stock();
        EXITING.store(false, Ordering::Relaxed);
    }

    fn stocked() -> Vec<PathBuf> {
        STOCKED
            .lock()
            .unwrap()
            .iter()
            .map(|s| s.memory.clone())
            .collect()
    }

    fn until(what: &str, ok: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(5);
        while !ok() {
            assert!(Instant::now() < deadline, "timed out waiting: {what}");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    fn memory_of(c: &SandboxCgroup) -> PathBuf {
        c.set.as_ref().unwrap().memory.clone()
    }

    fn limit_of(c: &SandboxCgroup) -> String {
        let set = c.set.as_ref().unwrap();
        let file = set.memory_file("memory.limit_in_bytes", "memory.max");
        std::fs::read_to_string(file).unwrap().trim().to_string()
    }

    /// What a limit file says when there is no limit.
    fn unlimited(text: &str) -> bool {
        text == "max" || text.parse::<u64>().is_ok_and(|b| b > 1 << 60)
    }

    /// Runs `python3 -c code` inside `c` (the way a sandbox's child joins:
    /// a write of `0` to each join fd before exec); its exit status.
    fn run_in(c: &SandboxCgroup, code: &str) -> std::process::ExitStatus {
        let fds = c.join_fds();
        let mut cmd = std::process::Command::new("python3");
        cmd.args(["-c", code]);
        // SAFETY: only write(2) on fds the cgroup holds open.
        unsafe {
            cmd.pre_exec(move || super::super::join(&fds));
        }
        cmd.status().expect("python3")
    }

    #[test]
    fn from_the_second_set_on_one_is_made_ahead_and_limited_only_when_used() {
        let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
        let Some(h) = writable_hierarchy() else {
            return;
        };
        empty_stock();
        USED.store(0, Ordering::Relaxed);
        // A process's only sandbox: its set is gone when it is.
        let only = SandboxCgroup::create(h, &limits(64), false).expect("only");
        let dir = memory_of(&only);
        drop(only);
        assert!(
            !dir.exists() && stocked().is_empty(),
            "the only set was kept"
        );
        USED.store(0, Ordering::Relaxed);
        let first = SandboxCgroup::create(h, &limits(64), false).expect("first");
        assert!(
            stocked().is_empty(),
            "one sandbox made; nothing may be stocked yet"
        );
        let second = SandboxCgroup::create(h, &limits(64), false).expect("second");
        until("a set made ahead", || !stocked().is_empty());
        let ahead = stocked()[0].clone();
        let third = SandboxCgroup::create(h, &limits(32), false).expect("third");
        assert_eq!(
            memory_of(&third),
            ahead,
            "the third sandbox did not get the stocked set"
        );
        assert_eq!(limit_of(&third), (32u64 << 20).to_string());
        let used: Vec<PathBuf> = [&first, &second, &third]
            .iter()
            .map(|c| memory_of(c))
            .collect();
        drop((first, second, third));
        // Recycled into the stock (at most STOCK_MAX) or removed.
        until("the used sets recycled or removed", || {
            let stock = stocked();
            stock.len() <= STOCK_MAX && used.iter().all(|d| stock.contains(d) || !d.exists())
        });
        let all: Vec<PathBuf> = used.iter().chain(stocked().iter()).cloned().collect();
        remove_stock();
        assert!(
            all.iter().all(|d| !d.exists()),
            "stock left at exit: {all:?}"
        );
    }

    /// A set whose sandbox was OOM-killed comes back with no limit of its
    /// own, counts no OOM kill and no CPU time for the next sandbox, and
    /// holds that sandbox's limit.
    #[test]
    fn a_recycled_set_starts_from_nothing() {
        let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
        let Some(h) = writable_hierarchy() else {
            return;
        };
        empty_stock();
        // As in a process past its first sandbox (the first is removed).
        USED.store(2, Ordering::Relaxed);
        let a = SandboxCgroup::create(h, &limits(32), false).expect("a");
        let status = run_in(
            &a,
            "x = bytearray(512 << 20)\nfor i in range(0, len(x), 4096): x[i] = 1",
        );
        assert!(!status.success(), "512 MiB under a 32 MiB limit: {status}");
        assert!(a.oom_killed(), "the OOM kill is not seen");
        assert!(a.cpu_time().unwrap() > Duration::ZERO);
        let dir = memory_of(&a);
        drop(a);
        until("the OOM-killed set recycled", || stocked().contains(&dir));
        let b = SandboxCgroup::create(h, &limits(64), false).expect("b");
        assert_eq!(memory_of(&b), dir, "b did not get the recycled set");
        assert!(!b.oom_killed(), "b counts a's OOM kill");
        assert!(
            b.cpu_time().unwrap() < Duration::from_millis(1),
            "b counts a's CPU time"
        );
        assert_eq!(limit_of(&b), (64u64 << 20).to_string());
        assert!(run_in(&b, "x = bytearray(16 << 20)").success());
        assert!(!b.oom_killed());
        drop(b);
        until("b recycled", || stocked().contains(&dir));
        // A sandbox without a memory limit after one with: none is left.
        let c = SandboxCgroup::create(h, &cordon_core::Limits::default(), false).expect("c");
        assert_eq!(memory_of(&c), dir);
        assert!(
            unlimited(&limit_of(&c)),
            "b's limit stayed: {}",
            limit_of(&c)
        );
        // And a smaller one than b's after none.
        drop(c);
        until("c recycled", || stocked().contains(&dir));
        let b = SandboxCgroup::create(h, &limits(48), false).expect("d");
        assert_eq!(limit_of(&b), (48u64 << 20).to_string());
        drop(b);
        until("b recycled", || stocked().contains(&dir));
        remove_stock();
        assert!(!dir.exists());
    }
}
