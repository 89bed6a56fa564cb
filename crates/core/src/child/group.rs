//! The child's process group: killed whole, and waited for until no
//! live process of it is left.

pub(super) fn kill_group(pid: u32) {
    if pid > 1 {
        // SAFETY: killpg with a positive pgid; errors (ESRCH) are fine.
        unsafe {
            libc::killpg(pid as libc::pid_t, libc::SIGKILL);
        }
    }
}

/// Polls until no live process is left in the group (up to ~200 ms), so the
/// scratch dir is removed after the last writer is gone. Zombies do not
/// count: once killed, orphans are reaped by init (or, on hosts whose init
/// does not reap, stay zombies that hold no files). Where the backend can
/// tell whether any process of the sandbox is left
/// ([`SandboxResources::processes_left`]: its cgroup, say) that answer is
/// used; otherwise the group is looked for in `/proc`, a scan of every
/// process of the host (~0.8 ms with 130 of them).
pub(super) async fn wait_group_gone(
    pid: u32,
    resources: Option<&dyn crate::backend::SandboxResources>,
) {
    if pid <= 1 {
        return;
    }
    for i in 0..100 {
        let left = match resources.and_then(|r| r.processes_left()) {
            Some(left) => left,
            None => {
                // SAFETY: signal 0 only checks existence.
                let r = unsafe { libc::killpg(pid as libc::pid_t, 0) };
                r == 0 && live_group_members(pid) > 0
            }
        };
        if !left {
            return;
        }
        // What was just killed is usually gone a few microseconds later:
        // look again at once a few times before sleeping (tokio's timer
        // counts whole milliseconds).
        if i < 4 {
            tokio::task::yield_now().await;
        } else {
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        }
    }
}

/// Counts processes in process group `pgid` that are not zombies (Linux:
/// from `/proc`; elsewhere: 0 or 1 from `killpg(pgid, 0)`, zombies included).
pub(crate) fn live_group_members(pgid: u32) -> usize {
    if !cfg!(target_os = "linux") {
        // SAFETY: signal 0 only checks existence.
        return usize::from(unsafe { libc::killpg(pgid as libc::pid_t, 0) } == 0);
    }
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return 0;
    };
    dir.filter_map(Result::ok)
        .filter(|e| {
            e.file_name()
                .as_encoded_bytes()
                .iter()
                .all(u8::is_ascii_digit)
        })
        .filter_map(|e| {
            // One read: the fields needed come in the first hundred bytes
            // (std's read_to_string would read in growing pieces: five
            // reads a process, on a scan of every process of the host).
            use std::io::Read as _;
            let mut buf = [0u8; 512];
            let n = std::fs::File::open(e.path().join("stat"))
                .and_then(|mut f| f.read(&mut buf))
                .ok()?;
            Some(String::from_utf8_lossy(&buf[..n]).into_owned())
        })
        .filter(|stat| {
            // Fields after the parenthesised comm: state ppid pgrp ...
            let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
                return false;
            };
            let mut f = rest.split_whitespace();
            let state = f.next();
            let _ppid = f.next();
            let pgrp = f.next().and_then(|p| p.parse::<u32>().ok());
            pgrp == Some(pgid) && state != Some("Z") && state != Some("X")
        })
        .count()
}
