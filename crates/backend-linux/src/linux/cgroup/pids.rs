//! Explain mode's record of the forks `Limits::max_processes` refused.
//!
//! `RLIMIT_NPROC`, which holds the limit otherwise, leaves no record of a
//! fork it refused. A `pids` cgroup does: its `pids.events` counts every
//! fork that its `pids.max` refused (`max N`). So in explain mode, where
//! this process may make one (root with cgroup v1's `pids` controller, or
//! a v2 cgroup that delegates `pids`), the program joins a `pids` cgroup
//! of its own whose `pids.max` is the limit, and `RLIMIT_NPROC` is set one
//! higher, so that the cgroup refuses first (the kernel checks the rlimit
//! before the cgroup, and a fork the rlimit refused would not be counted).
//! The cgroup holds the program's processes (it joins with the sandbox's
//! other cgroups, after the init and the warden exist), so the program
//! still gets exactly `max_processes`; the rlimit stays as a backstop.
//!
//! Elsewhere the explanation says in one line that these refusals are not
//! observable. The cgroup is made per sandbox (explain mode only: off, a
//! spawn does not pay for it) and removed once its processes are gone.

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;

use cordon_core::explain::{DenialKind, DenialLog, Remedy};

/// Where this process can make `pids` cgroups: its own v1 `pids` cgroup,
/// or its own v2 cgroup when that delegates `pids`. Looked up (and swept
/// of what a killed host left) once.
fn parent() -> Option<&'static PathBuf> {
    static DIR: OnceLock<Option<PathBuf>> = OnceLock::new();
    DIR.get_or_init(|| {
        let cgroups = std::fs::read_to_string("/proc/self/cgroup").ok()?;
        let mounts = cordon_core::mountinfo::read().ok()?;
        let dir = super::own_dir(&cgroups, &mounts, Some("pids")).or_else(|| {
            super::own_dir(&cgroups, &mounts, None).filter(|d| super::delegates(d, "pids"))
        })?;
        super::sweep_dir(&dir);
        Some(dir)
    })
    .as_ref()
}

/// The line for the explanation where no `pids` cgroup can be made.
fn unavailable(euid: u32) -> String {
    let who = if euid == 0 {
        "this host".to_string()
    } else {
        format!("uid {euid} on this host")
    };
    format!(
        "processes: a fork refused at the process limit is not observable for {who}: \
         RLIMIT_NPROC, which holds it, leaves no record, and no pids cgroup can be made here \
         (root with cgroup v1's pids controller, or a cgroup v2 that delegates pids)"
    )
}

/// The most pids the kernel can ever have (`PID_MAX_LIMIT`, 64-bit);
/// `pids.max` takes no more, and `max` holds anything above.
const PID_MAX_LIMIT: u64 = 4 * 1024 * 1024;

/// One sandbox's `pids` cgroup.
#[derive(Debug)]
pub(crate) struct ForkCount {
    dir: PathBuf,
    /// `tasks` (v1) or `cgroup.procs` (v2), for the program to join.
    join: Option<OwnedFd>,
    limit: u64,
}

static SEQ: AtomicU32 = AtomicU32::new(0);

impl ForkCount {
    /// A `pids` cgroup holding `limit` processes, or (`Ok(Err)`) why this
    /// process can make none, for the explanation. `sandbox_cgroup`: the
    /// sandbox joins its own cgroups (`SandboxCgroup`); a `pids` cgroup in
    /// the same hierarchy as one of them (cgroup v2, or v1 with `pids`
    /// mounted with `memory` or `cpuacct`) would take the program out of
    /// it (a process is in one cgroup per hierarchy), so there is none
    /// then. An error after the mkdir removes it.
    pub(crate) fn create(
        limit: u64,
        euid: u32,
        sandbox_cgroup: bool,
    ) -> std::io::Result<Result<ForkCount, String>> {
        let Some(parent) = parent() else {
            return Ok(Err(unavailable(euid)));
        };
        let shared = sandbox_cgroup
            && super::hierarchy().is_some_and(|h| h.dirs().contains(&parent.as_path()));
        if shared {
            return Ok(Err(
                "processes: a fork refused at the process limit is not observable here: the \
                 pids controller shares a hierarchy with the sandbox's memory or CPU cgroup, so no \
                 pids cgroup of its own can be joined"
                    .into(),
            ));
        }
        let dir = parent.join(format!(
            "{}{}-pids-{}",
            super::PREFIX,
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir(&dir)?;
        let mut made = ForkCount {
            dir,
            join: None,
            limit,
        };
        let max = if limit >= PID_MAX_LIMIT {
            "max".to_string()
        } else {
            limit.to_string()
        };
        std::fs::write(made.dir.join("pids.max"), max)?;
        let v1 = made.dir.join("tasks").exists();
        let join = std::fs::OpenOptions::new()
            .write(true)
            .open(made.dir.join(if v1 { "tasks" } else { "cgroup.procs" }))?;
        made.join = Some(OwnedFd::from(join));
        Ok(Ok(made))
    }

    /// The fd the program writes `0` to, with the sandbox's other cgroups.
    pub(crate) fn join_fd(&self) -> Option<libc::c_int> {
        self.join.as_ref().map(AsRawFd::as_raw_fd)
    }

    /// Records the forks refused at the limit (`max N` of `pids.events`),
    /// or why they cannot be read.
    pub(crate) fn finish(&self, log: &DenialLog) {
        match refused(&self.dir) {
            Some(0) => {}
            Some(n) => log.record_n(
                DenialKind::Limit,
                &format!("processes {}", self.limit),
                "fork refused",
                Remedy::RaiseLimit("max_processes".into()),
                n,
            ),
            None => log.unobservable(format!(
                "processes: cannot read {}: the forks refused at the limit are unknown",
                self.dir.join("pids.events").display()
            )),
        }
    }
}

/// The `max` count of `dir`'s `pids.events`.
fn refused(dir: &Path) -> Option<u64> {
    let text = std::fs::read_to_string(dir.join("pids.events")).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("max "))
        .and_then(|n| n.trim().parse().ok())
}

impl Drop for ForkCount {
    fn drop(&mut self) {
        // Dropped with the sandbox's resources, once its processes are
        // gone; one still exiting makes the rmdir wait (the keeper's).
        self.join = None;
        super::keeper::remove_soon(vec![self.dir.clone()]);
    }
}
