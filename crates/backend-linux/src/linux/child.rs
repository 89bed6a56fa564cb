//! What runs in the child between its launch and its `exec`: credentials,
//! the namespaces with their quotas and hostname, mounts, rlimits,
//! capabilities, no_new_privs, Landlock, seccomp, and — with a PID
//! namespace — the process tree that keeps the sandbox inside it.
//!
//! Everything here is async-signal-safe: raw syscalls on data prepared in
//! the parent ([`ChildPlan`]), `io::Error` built from errno, no allocation,
//! no locks. Any error returned from [`confine`] makes core report the
//! spawn as failed before the program is executed.
//!
//! This runs in core's launcher, a `clone(CLONE_VM)` child in the host's
//! memory: credentials change through raw syscalls (glibc's
//! `setresuid` and `setgroups` would signal every thread of the host). With
//! a PID namespace the launcher hands over to the init once the namespaces
//! exist, and the rest runs in the program process that
//! [`tree::split`](super::tree::split) creates inside the new namespace
//! (see that module for the process tree and why it is not built with
//! `fork`s).

use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};

use cordon_core::ChildContext;

use super::filter;
use super::mounts::MountPlan;
use super::quotas::QuotaPlan;

/// Everything the child needs, computed in the parent. Moved into the
/// pre-exec hook, so it lives exactly as long as the `ChildCommand`.
pub(crate) struct ChildPlan {
    /// `tasks` (v1) or `cgroup.procs` (v2) of the sandbox's cgroups (held
    /// open by the resources the runner keeps): the launcher (or, with a
    /// PID namespace, the program), a single thread, writes `0` to each to
    /// join them.
    pub cgroup_join: Vec<libc::c_int>,
    /// On a root host: the uid and gid (on the host) the launcher becomes
    /// before it creates the user namespace, so that they own it: the
    /// sandbox's own (`uid.rs`).
    pub drop_to: Option<(u32, u32)>,
    pub parent_pid: libc::pid_t,
    /// `CLONE_NEWUSER` plus the namespaces of the enabled layers.
    pub unshare_flags: libc::c_int,
    /// Identity uid/gid maps for the new user namespace (needed for the
    /// mounts); `None` leaves it unmapped as the legacy layers did.
    pub id_maps: Option<IdMaps>,
    pub mounts: Option<MountPlan>,
    /// The sandbox's quotas in its user namespace (`quotas.rs`).
    pub quotas: Option<QuotaPlan>,
    /// With a UTS namespace: set its hostname.
    pub hostname: bool,
    /// Landlock rights of the scratch dir, for the rule the child adds on a
    /// private tmpfs scratch: Landlock ignores rules on a mount point that
    /// is hidden under a mount, so the rule must name the tmpfs root, which
    /// exists only in the child.
    pub scratch_rights: u64,
    pub rlimits: [(libc::__rlimit_resource_t, Option<u64>); 10],
    pub last_cap: libc::c_ulong,
    pub ruleset: OwnedFd,
    /// seccomp filters, installed in this order (compiled once per
    /// process and shared).
    pub seccomp: std::sync::Arc<Vec<filter::Program>>,
    /// With `CLONE_NEWPID`: the address of the [`TreeSlot`] (held by the
    /// resources for the child's whole life) in which to make the init and
    /// the program.
    ///
    /// [`TreeSlot`]: super::tree::TreeSlot
    pub tree_slot: Option<usize>,
    /// On a root host with maps to write: the stack top for the helper that
    /// writes them as root (`maps.rs`).
    pub map_writer_stack: Option<usize>,
    /// With an egress allowlist: how to open the sandbox's one way out
    /// (`net.rs`; `unshare_flags` then has `CLONE_NEWNET`).
    pub egress: Option<super::net::EgressPlan>,
}

/// `"deny"` for `/proc/self/setgroups` and the one-line maps.
pub(crate) struct IdMaps {
    pub uid_map: Vec<u8>,
    pub gid_map: Vec<u8>,
}

impl IdMaps {
    /// Writes `setgroups` (`deny`, required before an unprivileged
    /// `gid_map`), then the uid and gid maps of the calling process.
    /// Async-signal-safe.
    pub(crate) fn write(&self) -> std::io::Result<()> {
        write_file(c"/proc/self/setgroups", b"deny")?;
        write_file(c"/proc/self/uid_map", &self.uid_map)?;
        write_file(c"/proc/self/gid_map", &self.gid_map)
    }

    /// Maps `inside` (the ids the program sees) to `outside` (its ids on
    /// the host). On an unprivileged host they are the same, the caller's;
    /// on a root host the program is `nobody` inside and has a uid of its
    /// own outside.
    pub(crate) fn new(inside: (u32, u32), outside: (u32, u32)) -> IdMaps {
        IdMaps {
            uid_map: format!("{} {} 1\n", inside.0, outside.0).into_bytes(),
            gid_map: format!("{} {} 1\n", inside.1, outside.1).into_bytes(),
        }
    }
}

/// `struct __user_cap_header_struct`.
#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

/// `struct __user_cap_data_struct`.
#[repr(C)]
#[derive(Clone, Copy)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;

fn check(r: libc::c_int) -> std::io::Result<()> {
    if r < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(())
    }
}

fn check_long(r: libc::c_long) -> std::io::Result<()> {
    if r < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Writes `data` to the file at `path` (one `write`).
fn write_file(path: &std::ffi::CStr, data: &[u8]) -> std::io::Result<()> {
    // SAFETY: raw syscalls on a NUL-terminated path and a byte slice.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let n = libc::write(fd, data.as_ptr().cast(), data.len());
        let err = std::io::Error::last_os_error();
        libc::close(fd);
        if n != data.len() as isize {
            return Err(if n < 0 {
                err
            } else {
                std::io::Error::from_raw_os_error(libc::EIO)
            });
        }
    }
    Ok(())
}

/// Runs in the child before exec. Returns only in the process that is to
/// execute the program; with a PID namespace the launcher hands over and
/// the init never returns (both exit).
pub(crate) fn confine(plan: &ChildPlan, ctx: &ChildContext) -> std::io::Result<()> {
    // SAFETY: every call below is a raw syscall on integers or on memory
    // owned by `plan`, which outlives the call.
    unsafe {
        // Into the sandbox's cgroups first, while still allowed to write
        // there: every process it makes is counted from now on. With a PID
        // namespace the program joins instead (below): the init shares the
        // host's memory, and the cgroup's OOM killer, which kills every
        // process that shares its victim's memory, must never pick it.
        if plan.tree_slot.is_none() {
            join_cgroups(plan)?;
        }
        // On a root host, the maps are written by a helper that stays root,
        // made before the uid changes (see maps.rs): this process shares
        // the host's memory, which must not be dumpable while it runs as
        // the sandbox's uid.
        let mut writer_args = super::maps::WriterArgs::new();
        let writer = match (plan.map_writer_stack, &plan.id_maps) {
            (Some(stack), Some(maps)) => Some(super::maps::MapWriter::start(
                maps,
                stack,
                &mut writer_args,
            )?),
            _ => None,
        };
        // Root host: become the sandbox's uid, with no supplementary
        // groups. Raw syscalls: this process shares the host's memory, and
        // glibc's wrappers would change the credentials of every host
        // thread.
        if let Some((uid, gid)) = plan.drop_to {
            check_long(libc::syscall(
                libc::SYS_setgroups,
                0usize,
                std::ptr::null::<libc::gid_t>(),
            ))?;
            check_long(libc::syscall(libc::SYS_setresgid, gid, gid, gid))?;
            check_long(libc::syscall(libc::SYS_setresuid, uid, uid, uid))?;
        }
        // A user namespace of our own (RLIMIT_NPROC then counts only the
        // sandbox's processes) and, created inside it, the other namespaces.
        check(libc::unshare(plan.unshare_flags))?;
        match (writer, &plan.id_maps) {
            (Some(writer), _) => writer.finish()?,
            (None, Some(maps)) => {
                // A host that keeps its uid writes its own maps, which needs
                // its `/proc/self` files to be its own: its (the host's)
                // memory dumpable. It is put back after, and launches of
                // this host take turns here, or one could put it back while
                // another writes.
                let turn = CredTurn::take()?;
                check(libc::prctl(libc::PR_SET_DUMPABLE, 1, 0, 0, 0))?;
                maps.write()?;
                turn.end()?;
            }
            (None, None) => {}
        }
        // While this process holds the new user namespace's capabilities:
        // its quotas and its UTS namespace's name.
        if let Some(quotas) = &plan.quotas {
            quotas.apply()?;
        }
        if plan.hostname {
            super::quotas::set_hostname()?;
        }
        // Credential changes cleared the parent-death signal.
        check(libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGKILL as libc::c_ulong,
            0,
            0,
            0,
        ))?;
        if libc::getppid() != plan.parent_pid {
            return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
        }
        // In the new network namespace, while this process still has the
        // user namespace's capabilities: the proxy's listener, sent out.
        if let Some(egress) = &plan.egress {
            super::net::open_way_out(egress)?;
        }
    }
    // From here on, with a PID namespace, this is the program (pid 2): the
    // launcher hands over to the init once the program runs.
    if let Some(slot) = plan.tree_slot {
        // SAFETY: the slot is held by the resources, which outlive the
        // launch.
        unsafe { super::tree::split(slot, ctx)? };
        join_cgroups(plan)?;
    }
    // SAFETY: as above.
    unsafe {
        if let Some(mounts) = &plan.mounts {
            mounts.apply(plan.tree_slot.is_some())?;
            if mounts.scratch_is_private() {
                add_scratch_rule(plan)?;
            }
        }
        // Resource limits (soft = hard), never above the current hard limit
        // (raising it would need CAP_SYS_RESOURCE on the host).
        for (resource, value) in plan.rlimits {
            let Some(value) = value else { continue };
            let mut cur = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            check(libc::getrlimit(resource, &mut cur))?;
            let v = (value as libc::rlim_t).min(cur.rlim_max);
            let new = libc::rlimit {
                rlim_cur: v,
                rlim_max: v,
            };
            check(libc::setrlimit(resource, &new))?;
        }
        // No capabilities: ambient, bounding set, then the sets.
        check(libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
            0,
            0,
            0,
        ))?;
        let mut cap: libc::c_ulong = 0;
        while cap <= plan.last_cap {
            check(libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0))?;
            cap += 1;
        }
        let header = CapHeader {
            version: LINUX_CAPABILITY_VERSION_3,
            pid: 0,
        };
        let data = [CapData {
            effective: 0,
            permitted: 0,
            inheritable: 0,
        }; 2];
        check_long(libc::syscall(
            libc::SYS_capset,
            &header as *const CapHeader,
            data.as_ptr(),
        ))?;
        // No privilege gain through exec (setuid, file caps).
        check(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))?;
        check_long(libc::syscall(
            libc::SYS_landlock_restrict_self,
            plan.ruleset.as_raw_fd(),
            0u32,
        ))?;
        // seccomp last, so nothing above is itself filtered. This runs in
        // the program only: the init (made before, `tree::split`) runs raw
        // syscalls and never execs, and the program can neither trace nor
        // signal it (this filter, no capabilities, Landlock's ptrace and
        // signal scoping).
        for prog in plan.seccomp.iter() {
            let fprog = libc::sock_fprog {
                len: prog.len() as libc::c_ushort,
                filter: prog.as_ptr() as *mut libc::sock_filter,
            };
            check_long(libc::syscall(
                libc::SYS_seccomp,
                libc::SECCOMP_SET_MODE_FILTER as libc::c_ulong,
                0 as libc::c_ulong,
                &fprog as *const libc::sock_fprog,
            ))?;
        }
    }
    Ok(())
}

/// Whose turn it is to change the shared dumpable flag (a host that keeps
/// its uid): every launcher of this host shares this word (they run in its
/// memory).
static CRED_TURN: AtomicBool = AtomicBool::new(false);

/// Holding the turn, with the host's dumpable flag as it was; dropping it
/// puts the flag back (on every path, errors included) and passes the turn
/// on. A spin lock with a bound: no futex or allocation in a launcher, and
/// a launcher that died holding it (only with the host itself) makes the
/// next spawns fail, not hang.
struct CredTurn {
    dumpable: libc::c_int,
}

impl CredTurn {
    fn take() -> std::io::Result<CredTurn> {
        // About a second of yields: the turn is held for a few syscalls.
        for _ in 0..200_000 {
            if CRED_TURN
                .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                // SAFETY: prctl on integers.
                let dumpable = unsafe { libc::prctl(libc::PR_GET_DUMPABLE, 0, 0, 0, 0) };
                return Ok(CredTurn { dumpable });
            }
            // SAFETY: sched_yield has no preconditions.
            unsafe { libc::sched_yield() };
        }
        Err(std::io::Error::from_raw_os_error(libc::EBUSY))
    }

    /// Puts the flag back and passes the turn on, reporting a failure.
    fn end(self) -> std::io::Result<()> {
        let r = self.restore();
        std::mem::forget(self);
        CRED_TURN.store(false, Ordering::Release);
        r
    }

    fn restore(&self) -> std::io::Result<()> {
        if self.dumpable >= 0 {
            // SAFETY: prctl on integers.
            check(unsafe { libc::prctl(libc::PR_SET_DUMPABLE, self.dumpable, 0, 0, 0) })?;
        }
        Ok(())
    }
}

impl Drop for CredTurn {
    fn drop(&mut self) {
        let _ = self.restore();
        CRED_TURN.store(false, Ordering::Release);
    }
}

/// Moves the calling process into the sandbox's cgroups (the files were
/// opened by the host, whose credentials the kernel checks).
fn join_cgroups(plan: &ChildPlan) -> std::io::Result<()> {
    for fd in &plan.cgroup_join {
        // SAFETY: a write of a static byte to an fd the plan holds open.
        if unsafe { libc::write(*fd, b"0".as_ptr().cast(), 1) } != 1 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// `struct landlock_path_beneath_attr` (packed in the kernel's UAPI).
#[repr(C, packed)]
struct PathBeneathAttr {
    allowed_access: u64,
    parent_fd: i32,
}

/// `LANDLOCK_RULE_PATH_BENEATH`.
const LANDLOCK_RULE_PATH_BENEATH: libc::c_uint = 1;

/// Adds the scratch rule for the tmpfs now mounted on the cwd to the
/// ruleset (before `landlock_restrict_self`, which snapshots it).
fn add_scratch_rule(plan: &ChildPlan) -> std::io::Result<()> {
    // SAFETY: raw syscalls on a NUL-terminated string, an fd we own and a
    // struct the kernel reads `size_of` bytes from.
    unsafe {
        let dir = libc::open(
            c".".as_ptr(),
            libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
        );
        if dir < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let attr = PathBeneathAttr {
            allowed_access: plan.scratch_rights,
            parent_fd: dir,
        };
        let r = libc::syscall(
            libc::SYS_landlock_add_rule,
            plan.ruleset.as_raw_fd(),
            LANDLOCK_RULE_PATH_BENEATH,
            &attr as *const PathBeneathAttr,
            0u32,
        );
        let err = std::io::Error::last_os_error();
        libc::close(dir);
        if r < 0 {
            return Err(err);
        }
    }
    Ok(())
}
