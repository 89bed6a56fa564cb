//! The gate's cgroup: every process of the unconfined baseline runs in it,
//! and it is killed whole.
//!
//! The keeper (`keeper.rs`) and the watchdog (`watchdog.rs`) find the
//! baseline's processes by ancestry and by token, and neither is enough
//! alone: the runner's deadline SIGKILLs the keeper's process group (the
//! keeper leads it), a suite dropped early (a panic, an embedder's
//! timeout) kills it the same way and then tells the watchdog `done`, and
//! a process the keeper or the watchdog did not reach in its time is
//! reparented to the host's init for good. That is how 686 unconfined root
//! processes outlived their gates. A cgroup holds them whatever their
//! ancestry: the baseline's hook moves the keeper into it before exec, so
//! everything the control forks is in it, and a kill of the cgroup reaches
//! every one of them, forks racing it included:
//!
//! - cgroup v2 (`cgroup.kill`, Linux 5.14): one write kills the whole
//!   subtree, and the kernel refuses forks into it meanwhile;
//! - cgroup v1 `freezer`: frozen, every listed process SIGKILLed (a frozen
//!   process neither forks nor exits, so no pid is reused under us), thawed.
//!
//! The suite kills it when the run ends (and on drop, so a panic does
//! too), the watchdog when the host dies without saying `done` (and when it
//! says it), and the next gate on this host, if both died, removes any
//! whose gate is dead ([`sweep`]). Where no hierarchy is writable (not
//! root, a read-only cgroupfs) the baseline runs without one, as the
//! keeper and the watchdog alone allow.

use std::io::Write as _;
use std::os::fd::{AsRawFd, RawFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The name every gate cgroup starts with; the gate's pid and start time
/// follow, so a sweep can tell whether its gate still lives.
pub(crate) const PREFIX: &str = "cordon-gate-";

/// Which kind of hierarchy a gate cgroup is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// cgroup v2 with `cgroup.kill`.
    V2,
    /// cgroup v1, `freezer` controller.
    Freezer,
}

/// One gate's cgroup, made for one suite run. Dropping it kills every
/// process in it and removes it.
#[derive(Debug)]
pub(crate) struct GateCgroup {
    dir: PathBuf,
    kind: Kind,
    /// Its `cgroup.procs`, open for the baseline's hook to write `0` to.
    procs: std::fs::File,
}

impl GateCgroup {
    /// Makes this gate's cgroup, after sweeping those of dead gates. `None`
    /// where no hierarchy is usable.
    pub(crate) fn create() -> Option<GateCgroup> {
        let (parent, kind) = hierarchy()?;
        sweep_in(&parent, kind);
        let dir = parent.join(format!(
            "{PREFIX}{}-{}-{}",
            std::process::id(),
            start_time(std::process::id() as i32)?,
            crate::verdict::random_token()
        ));
        std::fs::create_dir(&dir).ok()?;
        let procs = std::fs::OpenOptions::new()
            .write(true)
            .open(dir.join("cgroup.procs"));
        match procs {
            Ok(procs) => Some(GateCgroup { dir, kind, procs }),
            Err(_) => {
                let _ = std::fs::remove_dir(&dir);
                None
            }
        }
    }

    /// The cgroup's directory.
    pub(crate) fn path(&self) -> &Path {
        &self.dir
    }

    /// The fd a process writes `0` to in order to join (after fork, before
    /// exec: a `write` is async-signal-safe).
    pub(crate) fn join_fd(&self) -> RawFd {
        self.procs.as_raw_fd()
    }

    /// Kills every process in it (waiting until none is left, bounded) and
    /// removes it. Returns whether it is gone.
    pub(crate) fn kill(&self) -> bool {
        kill_and_remove(&self.dir, self.kind)
    }
}

impl Drop for GateCgroup {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Moves the calling process into the cgroup whose `cgroup.procs` is open
/// as `fd`. Async-signal-safe.
pub(crate) fn join(fd: RawFd) -> std::io::Result<()> {
    // SAFETY: a write of a static byte to an fd the caller holds open.
    if unsafe { libc::write(fd, b"0".as_ptr().cast(), 1) } == 1 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Where this process may make a gate cgroup: its own v2 cgroup where
/// children there have `cgroup.kill`, else its own v1 freezer cgroup.
fn hierarchy() -> Option<(PathBuf, Kind)> {
    let cgroups = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let mounts = cordon_core::mountinfo::read().ok()?;
    for (controller, kind) in [(None, Kind::V2), (Some("freezer"), Kind::Freezer)] {
        let Some(dir) = cordon_core::mountinfo::own_cgroup_dir(&cgroups, &mounts, controller)
        else {
            continue;
        };
        if usable(&dir, kind) {
            return Some((dir, kind));
        }
    }
    None
}

/// Whether a child cgroup can be made in `dir` and killed as `kind` asks:
/// made, looked at and removed.
fn usable(dir: &Path, kind: Kind) -> bool {
    let probe = dir.join(format!("{PREFIX}probe-{}", crate::verdict::random_token()));
    if std::fs::create_dir(&probe).is_err() {
        return false;
    }
    let file = match kind {
        Kind::V2 => "cgroup.kill",
        Kind::Freezer => "freezer.state",
    };
    let ok = probe.join(file).exists();
    let _ = std::fs::remove_dir(&probe);
    ok
}

/// A process's start time (field 22 of `/proc/<pid>/stat`), which tells a
/// live gate from a later process given the same pid.
fn start_time(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// Whether `name` is a gate cgroup's name whose gate is not alive (no
/// process with that pid and start time).
fn of_dead_gate(name: &str) -> bool {
    let Some(rest) = name.strip_prefix(PREFIX) else {
        return false;
    };
    let mut parts = rest.split('-');
    let (Some(pid), Some(start)) = (
        parts.next().and_then(|p| p.parse::<i32>().ok()),
        parts.next().and_then(|s| s.parse::<u64>().ok()),
    ) else {
        return false;
    };
    start_time(pid) != Some(start)
}

/// Kills and removes the cgroups of dead gates in `parent` (their gate and
/// its watchdog both died: killed together, say).
fn sweep_in(parent: &Path, kind: Kind) {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        if name.to_str().is_some_and(of_dead_gate) && kill_and_remove(&e.path(), kind) {
            tracing::info!(cgroup = %e.path().display(), "removed the baseline cgroup of a gate that died");
        }
    }
}

/// Kills every process of a gate cgroup `dir` (named as this module names
/// them, in a cgroup filesystem) and removes it. For the watchdog, which
/// is told the path: `false` for anything else.
pub(crate) fn kill_path(dir: &Path) -> bool {
    let named = dir
        .file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with(PREFIX));
    if !named || !dir.is_absolute() {
        return false;
    }
    if !dir.exists() {
        // Killed and removed already (by the suite, as it ends).
        return true;
    }
    if !in_cgroupfs(dir) {
        return false;
    }
    let kind = if dir.join("cgroup.kill").exists() {
        Kind::V2
    } else {
        Kind::Freezer
    };
    kill_and_remove(dir, kind)
}

/// Whether `dir` is on a cgroup filesystem (v1 or v2).
fn in_cgroupfs(dir: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: a plain C struct, zeroed for statfs to fill.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: statfs into that struct, on a NUL-terminated path.
    if unsafe { libc::statfs(c.as_ptr(), &mut st) } != 0 {
        return false;
    }
    const CGROUP_SUPER_MAGIC: i64 = 0x0027_e0eb;
    const CGROUP2_SUPER_MAGIC: i64 = 0x6367_7270;
    matches!(st.f_type as i64, CGROUP_SUPER_MAGIC | CGROUP2_SUPER_MAGIC)
}

/// The pids `cgroup.procs` of `dir` lists.
fn procs(dir: &Path) -> Vec<i32> {
    std::fs::read_to_string(dir.join("cgroup.procs"))
        .map(|t| {
            t.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

fn write(file: &Path, value: &str) -> bool {
    std::fs::OpenOptions::new()
        .write(true)
        .open(file)
        .and_then(|mut f| f.write_all(value.as_bytes()))
        .is_ok()
}

/// Kills everything in `dir` until it is empty (10 s at most), then
/// removes it. Returns whether it is gone.
fn kill_and_remove(dir: &Path, kind: Kind) -> bool {
    if !dir.exists() {
        return true;
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match kind {
            Kind::V2 => {
                write(&dir.join("cgroup.kill"), "1");
            }
            Kind::Freezer => freeze_and_kill(dir, deadline),
        }
        if procs(dir).is_empty() && std::fs::remove_dir(dir).is_ok() {
            return true;
        }
        if Instant::now() > deadline {
            tracing::warn!(cgroup = %dir.display(), "the baseline's cgroup could not be emptied");
            return false;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// v1: freezes `dir` (until frozen, bounded by `deadline`), SIGKILLs
/// every process listed, thaws it so that they die.
fn freeze_and_kill(dir: &Path, deadline: Instant) {
    let state = dir.join("freezer.state");
    write(&state, "FROZEN");
    while Instant::now() < deadline {
        let now = std::fs::read_to_string(&state).unwrap_or_default();
        if now.trim() == "FROZEN" || now.is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    for pid in procs(dir) {
        // SAFETY: SIGKILL to a process of the gate's cgroup; frozen, it
        // can neither exit nor have its pid reused before this.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    write(&state, "THAWED");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_dead_gates_names_are_swept() {
        let me = std::process::id() as i32;
        let start = start_time(me).unwrap();
        assert!(!of_dead_gate(&format!("{PREFIX}{me}-{start}-abc")));
        assert!(of_dead_gate(&format!("{PREFIX}{me}-{}-abc", start + 1)));
        for not in ["cordon-7-1", "other", &format!("{PREFIX}x-1-a"), PREFIX] {
            assert!(!of_dead_gate(not), "{not}");
        }
    }

    #[test]
    fn only_gate_cgroups_are_killed_by_path() {
        let t = tempfile::tempdir().unwrap();
        let planted = t.path().join("cordon-gate-1-2-x");
        std::fs::create_dir(&planted).unwrap();
        for not in [
            planted.as_path(),
            Path::new("/sys/fs/cgroup"),
            Path::new("relative/cordon-gate-1"),
        ] {
            assert!(!kill_path(not), "{}", not.display());
        }
        assert!(planted.exists(), "a dir outside cgroupfs is left alone");
    }
}
