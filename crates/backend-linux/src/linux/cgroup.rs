//! Limits for the sandbox as a whole: a cgroup per sandbox where the host
//! lets this process make one, and (best effort) the CPU time of the
//! sandbox's process tree where it does not.
//!
//! - **cgroup v1** (the controllers `memory` and `cpuacct`; root,
//!   typically): a child cgroup of this process's own in each, with
//!   `memory.limit_in_bytes` (and `memory.memsw.limit_in_bytes` when swap
//!   is accounted) = `memory_bytes`. Memory there counts every page the
//!   sandbox's processes charge: anonymous memory, memfd, SysV shm and
//!   tmpfs pages (the private scratch too).
//! - **cgroup v2** where this process's cgroup already delegates `memory`
//!   to its children (its `cgroup.subtree_control` has it, as a systemd
//!   user slice set up for delegation does): a child cgroup with
//!   `memory.max` and `memory.swap.max` = 0; `cpu.stat` is there without
//!   any controller. (Not exercised by the tests on the machine this was
//!   written on, whose v2 hierarchy has no controllers; the code path is
//!   the same as v1's otherwise.)
//!
//! - **TCP buffers** (`Network::Namespace`, whose TCP sockets are not
//!   bounded by the proxy's): `net.ipv4.tcp_mem` is one pool for the
//!   host. On v1 the memory controller counts a cgroup's socket memory
//!   only once `memory.kmem.tcp.limit_in_bytes` is set, which is then
//!   [`TCP_MEMORY_BYTES`] (apart from `memory.limit_in_bytes`); on v2 it
//!   is part of `memory.max`.
//!
//! The process count needs no cgroup: `RLIMIT_NPROC` is counted in the
//! sandbox's own user namespace, so it already holds for the sandbox as a
//! whole (a `pids` cgroup would only add a mkdir, an attach and an rmdir
//! to every spawn).
//!
//! The child joins its cgroups before anything else of the sandbox exists
//! (with a PID namespace the program does, so that the init, which shares
//! the host's memory, stays out of reach of the cgroup's OOM killer): it
//! writes `0` to a file opened here in the parent. On v1 that file is
//! `tasks`, which moves only the calling thread (the whole of the child,
//! a single-threaded process): the kernel
//! then skips the global threadgroup lock that a write to `cgroup.procs`
//! takes, whose RCU grace period cost ~300 µs on average and up to 30 ms
//! per spawn on a 2-core Linux 6.18 host (against ~15 µs). On v2,
//! where `tasks` does not exist, it is `cgroup.procs`. CPU time is read from
//! `cpuacct.usage` (v1) or `cpu.stat` (v2) and enforced by the runner
//! (`SandboxResources::cpu_time`). Without a cgroup, the CPU time of the
//! sandbox's process tree is summed from `/proc` instead (the init's
//! subtree: every process of the sandbox is a descendant of the init, and
//! what a reaped process used is in its reaper's `cutime`/`cstime`). That
//! sum is **best effort**: a child reaped automatically (its parent ignores
//! `SIGCHLD`) adds its time to no one, so a program can hide CPU time from
//! it, and the host facts call the CPU limit per-process there.
//!
//! The cgroups are removed after every process of the sandbox is gone, and
//! from a process's second sandbox on one set is made ahead, both by the
//! cgroup keeper thread (`cgroup/keeper.rs`), off the spawn's and the
//! wait's path; ones left by a host that was killed are removed the next
//! time the hierarchy is looked up, once their creator is dead.

use std::io::Write as _;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

use cordon_core::Limits;

mod keeper;
pub(crate) mod pids;

/// Where this process can make child cgroups.
#[derive(Debug)]
pub(crate) enum Hierarchy {
    /// Directories (this process's own cgroup) per v1 controller; two
    /// controllers mounted together share one directory.
    V1 { memory: PathBuf, cpuacct: PathBuf },
    /// This process's own v2 cgroup, which delegates memory.
    V2 { dir: PathBuf },
}

/// The cgroup hierarchy this process can use, detected once.
pub(crate) fn hierarchy() -> Option<&'static Hierarchy> {
    static H: OnceLock<Option<Hierarchy>> = OnceLock::new();
    H.get_or_init(|| {
        let h = detect();
        if let Some(h) = &h {
            sweep(h);
        }
        h
    })
    .as_ref()
}

/// This process's own cgroup directories, by controller (v1) or the v2
/// one, where it may make children.
fn detect() -> Option<Hierarchy> {
    let cgroups = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let mounts = cordon_core::mountinfo::read().ok()?;
    let dir = |controller| own_dir(&cgroups, &mounts, controller);
    if let (Some(memory), Some(cpuacct)) = (dir(Some("memory")), dir(Some("cpuacct"))) {
        return Some(Hierarchy::V1 { memory, cpuacct });
    }
    let v2 = dir(None)?;
    delegates(&v2, "memory").then_some(Hierarchy::V2 { dir: v2 })
}

/// This process's own cgroup of `controller` (v1; `None`: the v2 one), if
/// this process may make children there: `/proc/self/cgroup` gives the
/// path (controllers, path per line), mountinfo the mount point.
fn own_dir(
    cgroups: &str,
    mounts: &[cordon_core::mountinfo::Mount],
    controller: Option<&str>,
) -> Option<PathBuf> {
    let dir = cordon_core::mountinfo::own_cgroup_dir(cgroups, mounts, controller)?;
    writable(&dir).then_some(dir)
}

/// Whether the v2 cgroup `dir` gives `controller` to its children.
fn delegates(dir: &Path, controller: &str) -> bool {
    std::fs::read_to_string(dir.join("cgroup.subtree_control"))
        .is_ok_and(|d| d.split_whitespace().any(|c| c == controller))
}

fn writable(dir: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: a valid NUL-terminated path.
    unsafe { libc::access(c.as_ptr(), libc::W_OK | libc::X_OK) == 0 }
}

/// The prefix of every cgroup this crate makes; the host pid follows, so a
/// sweep can tell whose it is.
const PREFIX: &str = "cordon-";

/// Removes cgroups a killed host left behind: ours by name, with a dead
/// creator, and empty (rmdir fails on a cgroup that still has tasks).
fn sweep(h: &Hierarchy) {
    for dir in h.dirs() {
        sweep_dir(dir);
    }
}

/// [`sweep`] in one parent directory.
fn sweep_dir(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix(PREFIX)) else {
            continue;
        };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<i32>().ok()) else {
            continue;
        };
        // SAFETY: signal 0 only checks existence.
        let alive = unsafe { libc::kill(pid, 0) } == 0
            || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM);
        if !alive && std::fs::remove_dir(e.path()).is_ok() {
            tracing::info!(cgroup = %e.path().display(), "removed a cgroup a killed host left behind");
        }
    }
}

impl Hierarchy {
    /// The distinct parent directories (co-mounted v1 controllers share).
    fn dirs(&self) -> Vec<&Path> {
        let mut v: Vec<&Path> = match self {
            Hierarchy::V1 { memory, cpuacct } => vec![memory, cpuacct],
            Hierarchy::V2 { dir } => vec![dir],
        };
        v.dedup();
        v.sort();
        v.dedup();
        v
    }

    /// Whether the memory controller accounts swap here (`file`, a swap
    /// limit file of a sandbox's cgroup, exists), looked up once: there is
    /// one hierarchy per process. A lookup that fails is an error (the
    /// spawn fails), never taken for "no swap", which would leave swap
    /// unbounded.
    fn swap_accounted(&self, file: &Path) -> std::io::Result<bool> {
        static SWAP: OnceLock<bool> = OnceLock::new();
        if let Some(known) = SWAP.get() {
            return Ok(*known);
        }
        let found = file.try_exists()?;
        Ok(*SWAP.get_or_init(|| found))
    }

    /// What `host_facts` says about the limits this hierarchy holds.
    pub(crate) fn describe(&self) -> &'static str {
        match self {
            Hierarchy::V1 { .. } => "cgroup v1 (memory, cpuacct)",
            Hierarchy::V2 { .. } => "cgroup v2 (memory, cpu.stat)",
        }
    }
}

/// One sandbox's cgroups, taken in `wrap`.
#[derive(Debug)]
pub(crate) struct SandboxCgroup {
    /// The cgroups; `None` once handed back to the keeper.
    set: Option<CgroupSet>,
}

static SEQ: AtomicU32 = AtomicU32::new(0);

/// The most TCP buffer memory one sandbox's sockets hold on cgroup v1
/// (`memory.kmem.tcp.limit_in_bytes`): past it, its sockets are under
/// memory pressure (sends wait, receive windows shrink), never the host's.
pub(crate) const TCP_MEMORY_BYTES: u64 = 64 << 20;

/// The cgroups of one sandbox, fresh or recycled by the keeper
/// (`keeper.rs`), with what a spawn needs of them known: the limit they
/// hold now and the counters that cannot be reset, as they stand; and,
/// once taken, the files its child joins through, open.
#[derive(Debug)]
pub(crate) struct CgroupSet {
    /// Every directory made, parents' order (for removal in reverse).
    dirs: Vec<PathBuf>,
    /// The one the memory controller counts in.
    memory: PathBuf,
    /// The one CPU time is read from.
    cpu: PathBuf,
    /// cgroup v1 (else v2): which files hold what.
    v1: bool,
    /// `tasks` (v1) or `cgroup.procs` (v2) of each directory, for the
    /// child to join.
    join: Vec<OwnedFd>,
    /// The memory limit its files hold (`None`: none, as made); `Err` once
    /// a write failed halfway, when nobody knows (never recycled then).
    limit: Result<Option<u64>, ()>,
    /// `memory.kmem.tcp.limit_in_bytes` holds [`TCP_MEMORY_BYTES`] (v1;
    /// written once, kept while recycled).
    tcp_bounded: bool,
    /// OOM kills and CPU time counted before the sandbox that takes it
    /// (zero when fresh).
    oom_base: u64,
    cpu_base: Duration,
}

impl CgroupSet {
    /// Makes one child cgroup per distinct directory of `h`, named after
    /// this process; an error removes what was made.
    fn make(h: &Hierarchy) -> std::io::Result<CgroupSet> {
        let name = format!(
            "{PREFIX}{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        );
        let (memory_parent, cpu_parent, v1) = match h {
            Hierarchy::V1 { memory, cpuacct } => (memory, cpuacct, true),
            Hierarchy::V2 { dir } => (dir, dir, false),
        };
        let mut set = CgroupSet {
            memory: memory_parent.join(&name),
            cpu: cpu_parent.join(&name),
            dirs: Vec::new(),
            v1,
            join: Vec::new(),
            limit: Ok(None),
            tcp_bounded: false,
            oom_base: 0,
            cpu_base: Duration::ZERO,
        };
        for parent in [memory_parent, cpu_parent] {
            let dir = parent.join(&name);
            if set.dirs.contains(&dir) {
                continue;
            }
            if let Err(e) = std::fs::create_dir(&dir) {
                keeper::remove_now(set);
                return Err(e);
            }
            set.dirs.push(dir);
        }
        Ok(set)
    }

    /// Opens the files the sandbox's child joins through (a set in stock
    /// holds no fds: an embedder counting its own sees none of ours).
    fn open_join_files(&mut self) -> std::io::Result<()> {
        let join_file = if self.v1 { "tasks" } else { "cgroup.procs" };
        let mut join = Vec::with_capacity(self.dirs.len());
        for dir in &self.dirs {
            let f = std::fs::OpenOptions::new()
                .write(true)
                .open(dir.join(join_file))?;
            join.push(OwnedFd::from(f));
        }
        self.join = join;
        Ok(())
    }

    /// The memory controller's file `v1` or `v2` (by this set's version).
    fn memory_file(&self, v1: &str, v2: &str) -> PathBuf {
        self.memory.join(if self.v1 { v1 } else { v2 })
    }

    /// Makes the files hold `want`, writing only what differs. On v1,
    /// memory + swap (when accounted) is bounded with memory, and must
    /// never be below it: it is written first when the bound grows.
    fn set_limit(&mut self, want: Option<u64>, h: &Hierarchy) -> std::io::Result<()> {
        if self.limit == Ok(want) {
            return Ok(());
        }
        let memory = self.memory_file("memory.limit_in_bytes", "memory.max");
        let swap = self.memory_file("memory.memsw.limit_in_bytes", "memory.swap.max");
        let none = if self.v1 { "-1" } else { "max" };
        let text = |v: Option<u64>| v.map_or_else(|| none.to_string(), |b| b.to_string());
        // v1: memory + swap at the memory bound; v2: no swap under a bound.
        let swap_text = match (self.v1, want) {
            (true, _) => text(want),
            (false, Some(_)) => "0".to_string(),
            (false, None) => none.to_string(),
        };
        let grows = match (self.limit, want) {
            (Ok(Some(old)), Some(new)) => new > old,
            (Ok(None), _) => false,
            _ => true,
        };
        self.limit = Err(());
        let swap_too = h.swap_accounted(&swap)?;
        let mut writes = vec![(&memory, text(want))];
        if swap_too {
            let w = (&swap, swap_text);
            if grows {
                writes.insert(0, w);
            } else {
                writes.push(w);
            }
        }
        for (file, value) in writes {
            std::fs::write(file, value)?;
        }
        self.limit = Ok(want);
        Ok(())
    }

    /// Bounds the TCP buffer memory of the sockets made here (v1; on v2
    /// `memory.max` holds it already).
    fn bound_tcp(&mut self) -> std::io::Result<()> {
        if self.v1 && !self.tcp_bounded {
            std::fs::write(
                self.memory.join("memory.kmem.tcp.limit_in_bytes"),
                TCP_MEMORY_BYTES.to_string(),
            )?;
            self.tcp_bounded = true;
        }
        Ok(())
    }

    /// How many processes the memory controller's OOM killer has killed
    /// here: the `oom_kill N` line of `memory.oom_control` (v1) or
    /// `memory.events` (v2).
    fn oom_kills(&self) -> Option<u64> {
        let text = std::fs::read_to_string(self.memory_file("memory.oom_control", "memory.events"))
            .ok()?;
        text.lines()
            .find_map(|l| l.strip_prefix("oom_kill "))
            .and_then(|n| n.trim().parse().ok())
    }

    /// The CPU time counted here: `cpuacct.usage` (v1, ns) or the
    /// `usage_usec` of `cpu.stat` (v2).
    fn cpu_time(&self) -> Option<Duration> {
        if self.v1 {
            let ns: u64 = std::fs::read_to_string(self.cpu.join("cpuacct.usage"))
                .ok()?
                .trim()
                .parse()
                .ok()?;
            return Some(Duration::from_nanos(ns));
        }
        let text = std::fs::read_to_string(self.cpu.join("cpu.stat")).ok()?;
        let us: u64 = text
            .lines()
            .find_map(|l| l.strip_prefix("usage_usec "))?
            .trim()
            .parse()
            .ok()?;
        Some(Duration::from_micros(us))
    }
}

impl SandboxCgroup {
    /// Takes the cgroups of one sandbox (from the keeper's stock, or made
    /// now) and sets its limit. Any error hands them back to the keeper.
    pub(crate) fn create(
        h: &'static Hierarchy,
        limits: &Limits,
        tcp: bool,
    ) -> std::io::Result<Self> {
        let mut made = SandboxCgroup {
            set: Some(keeper::take(h)?),
        };
        let set = made.set.as_mut().expect("just taken");
        set.set_limit(limits.memory_bytes, h)?;
        if tcp {
            set.bound_tcp()?;
        }
        set.open_join_files()?;
        Ok(made)
    }

    /// The fds the child writes `0` to (to join), while it is still one
    /// thread.
    pub(crate) fn join_fds(&self) -> Vec<libc::c_int> {
        self.set
            .iter()
            .flat_map(|s| s.join.iter().map(AsRawFd::as_raw_fd))
            .collect()
    }

    /// The CPU time of this sandbox's processes.
    pub(crate) fn cpu_time(&self) -> Option<Duration> {
        let set = self.set.as_ref()?;
        Some(set.cpu_time()?.saturating_sub(set.cpu_base))
    }

    /// Whether a thread of the sandbox is still in its cgroups (every
    /// process of the program's tree is; zombies are not listed): `tasks`
    /// (v1) or `cgroup.procs` (v2). `None` when they cannot be read.
    pub(crate) fn processes_left(&self) -> Option<bool> {
        let set = self.set.as_ref()?;
        let members = if set.v1 { "tasks" } else { "cgroup.procs" };
        let mut left = false;
        for dir in &set.dirs {
            left |= !std::fs::read_to_string(dir.join(members))
                .ok()?
                .trim()
                .is_empty();
        }
        Some(left)
    }

    /// Whether the cgroup's OOM killer killed any of this sandbox's
    /// processes.
    pub(crate) fn oom_killed(&self) -> bool {
        self.set
            .as_ref()
            .is_some_and(|s| s.oom_kills().is_some_and(|n| n > s.oom_base))
    }

    /// Whether the TCP buffers of the sockets its processes accept or make
    /// are bounded: on v1 by `memory.kmem.tcp.limit_in_bytes`, on v2 by
    /// `memory.max`, which only a memory limit sets.
    pub(crate) fn bounds_tcp(&self) -> bool {
        self.set.as_ref().is_some_and(|s| {
            if s.v1 {
                s.tcp_bounded
            } else {
                matches!(s.limit, Ok(Some(_)))
            }
        })
    }
}

impl Drop for SandboxCgroup {
    fn drop(&mut self) {
        // The cgroups are empty once every process of the sandbox is gone
        // (the runner drops us then); the keeper recycles or removes them.
        if let Some(set) = self.set.take() {
            keeper::retire(set);
        }
    }
}

fn write(path: &Path, value: u64) -> std::io::Result<()> {
    let mut f = std::fs::OpenOptions::new().write(true).open(path)?;
    f.write_all(value.to_string().as_bytes())
}

/// Moves the calling process into the sandbox's cgroups: writes `0` to
/// each `tasks` (v1) or `cgroup.procs` (v2) fd, opened by the host (whose
/// credentials the kernel checks). Async-signal-safe.
pub(crate) fn join(fds: &[libc::c_int]) -> std::io::Result<()> {
    for fd in fds {
        // SAFETY: a write of a static byte to an fd the plan holds open.
        if unsafe { libc::write(*fd, b"0".as_ptr().cast(), 1) } != 1 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}
