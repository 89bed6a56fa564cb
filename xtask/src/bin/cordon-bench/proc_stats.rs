//! What the host holds: fds, children, RSS, and what sandboxes could leave
//! behind (cgroups, mounts, scratch dirs).

/// Open fds of this process.
pub fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .map(|d| d.count())
        .unwrap_or(0)
}

/// A field of `/proc/<pid>/status` in KiB (e.g. `VmRSS`, `VmHWM`).
pub fn status_kib(pid: &str, field: &str) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines()
        .find(|l| l.starts_with(field) && l[field.len()..].starts_with(':'))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
}

/// A field of `/proc/<pid>/smaps_rollup` in KiB (`Pss`, `Private_Dirty`, …).
pub fn rollup_kib(pid: &str, field: &str) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).ok()?;
    s.lines()
        .find(|l| l.starts_with(field) && l[field.len()..].starts_with(':'))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
}

/// Resets VmHWM so the next reading is the peak of what follows.
pub fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// Processes whose parent is this process, and those that are not zombies
/// (a zombie child here is one the host failed to reap; a live one leaked).
pub fn children() -> (usize, usize) {
    let me = std::process::id().to_string();
    let mut all = 0;
    let mut live = 0;
    if let Ok(dir) = std::fs::read_dir("/proc") {
        for e in dir.flatten() {
            let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
                continue;
            };
            let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
                continue;
            };
            let mut f = rest.split_whitespace();
            let state = f.next().unwrap_or("");
            if f.next() == Some(me.as_str()) {
                all += 1;
                if state != "Z" {
                    live += 1;
                }
            }
        }
    }
    (all, live)
}

/// Bytes the allocator has handed out and not yet freed (glibc), or 0.
pub fn heap_in_use() -> usize {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: mallinfo2 only reads allocator statistics.
        unsafe { libc::mallinfo2().uordblks }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        0
    }
}

/// What sandboxes could leave on the host, counted so a run can compare
/// before and after: this process's sandbox cgroups (`cordon-<pid>-*`
/// beside its own cgroup in every hierarchy), the lines of its mount
/// table, and the `cordon-*` entries of the temp dir other than the
/// shared scratch mount point the Linux backend reuses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leftovers {
    pub cgroups: usize,
    pub mounts: usize,
    pub scratch_dirs: usize,
}

impl std::fmt::Display for Leftovers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} cgroups, {} mounts, {} scratch dirs",
            self.cgroups, self.mounts, self.scratch_dirs
        )
    }
}

pub fn leftovers() -> Leftovers {
    let prefix = format!("cordon-{}-", std::process::id());
    let mut cgroups = 0;
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let mut seen = std::collections::BTreeSet::new();
    for line in own.lines() {
        let Some(path) = line.splitn(3, ':').nth(2) else {
            continue;
        };
        let hierarchies = std::fs::read_dir("/sys/fs/cgroup")
            .map(|d| d.flatten().map(|e| e.path()).collect::<Vec<_>>())
            .unwrap_or_default();
        for h in hierarchies
            .into_iter()
            .chain([std::path::PathBuf::from("/sys/fs/cgroup")])
        {
            let dir = h.join(path.trim_start_matches('/'));
            let Ok(canonical) = dir.canonicalize() else {
                continue;
            };
            if !seen.insert(canonical.clone()) {
                continue;
            }
            if let Ok(entries) = std::fs::read_dir(&canonical) {
                cgroups += entries
                    .flatten()
                    .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
                    .count();
            }
        }
    }
    let mounts = std::fs::read_to_string("/proc/self/mountinfo")
        .map(|m| m.lines().count())
        .unwrap_or(0);
    let scratch_dirs = std::fs::read_dir(std::env::temp_dir())
        .map(|d| {
            d.flatten()
                .filter(|e| {
                    let n = e.file_name().to_string_lossy().into_owned();
                    n.starts_with("cordon-") && !n.starts_with(".cordon-scratch-")
                })
                .count()
        })
        .unwrap_or(0);
    Leftovers {
        cgroups,
        mounts,
        scratch_dirs,
    }
}
