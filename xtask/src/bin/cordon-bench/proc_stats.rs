//! What the host holds: fds, children, RSS.

/// Open fds of this process.
pub fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .map(|d| d.count())
        .unwrap_or(0)
}

/// A field of /proc/<pid>/status in KiB (e.g. `VmRSS`, `VmHWM`).
pub fn status_kib(pid: &str, field: &str) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
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
