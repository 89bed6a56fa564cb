//! What the Linux backend holds for one sandbox until every process of
//! it is gone ([`LinuxResources`], core's `SandboxResources`): its
//! cgroups, its init's memory, its egress proxy, its explain recorders,
//! its scratch handback and, released last, its uid.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use cordon_core::SandboxResources;

use super::cgroup::SandboxCgroup;

/// What the Linux backend holds for one sandbox: its cgroups if any, the
/// memory of its init (with a PID namespace), and the pid of the init,
/// whose subtree is the sandbox.
#[derive(Debug)]
pub(crate) struct LinuxResources {
    pub cgroup: Option<SandboxCgroup>,
    /// With a PID namespace, the tree under the init holds every process
    /// of the sandbox, so its CPU time can be summed from /proc.
    pub tree_accounting: bool,
    tree: Option<super::tree::TreeSlot>,
    leader: AtomicU64,
    /// With an egress allowlist: the proxy, started once the program runs
    /// and stopped when the sandbox is gone (these resources are dropped).
    egress: Option<super::net::EgressSession>,
    /// In explain mode: what the sandbox's layers refused (`explain.rs`).
    recorders: Option<super::explain::Recorders>,
    /// A fresh scratch the sandbox's uid owns (tier landlock on a root
    /// host): given back to the caller before the uid is released.
    handback: Option<super::scratch::ScratchHandback>,
    /// The sandbox's own uid (a root host): released last, once every
    /// process of the sandbox is gone and its cgroup is empty, and never
    /// while a scratch it owned could not be handed back.
    uid: Option<super::uid::UidLease>,
}

impl Drop for LinuxResources {
    fn drop(&mut self) {
        // Fail closed: a uid whose scratch could not be handed back stays
        // leased (locked) for this process's life rather than go to a
        // sandbox that could reach the dir.
        if let Some(h) = self.handback.take() {
            if h.hand_back() {
                if let Some(lease) = &self.uid {
                    lease.clear_scratch();
                }
            } else {
                std::mem::forget(self.uid.take());
            }
        }
    }
}

impl LinuxResources {
    pub(crate) fn new(
        cgroup: Option<SandboxCgroup>,
        tree_accounting: bool,
        tree: Option<super::tree::TreeSlot>,
        egress: Option<super::net::EgressSession>,
        uid: Option<super::uid::UidLease>,
        handback: Option<super::scratch::ScratchHandback>,
        recorders: Option<super::explain::Recorders>,
    ) -> Self {
        LinuxResources {
            cgroup,
            tree_accounting,
            tree,
            leader: AtomicU64::new(0),
            egress,
            recorders,
            handback,
            uid,
        }
    }
}

impl SandboxResources for LinuxResources {
    fn cpu_time(&self) -> Option<Duration> {
        if let Some(cg) = &self.cgroup {
            return cg.cpu_time();
        }
        if !self.tree_accounting {
            return None;
        }
        match self.leader.load(Ordering::Relaxed) {
            0 => Some(Duration::ZERO),
            pid => Some(tree_cpu_time(pid as u32)),
        }
    }

    fn memory_limit_hit(&self) -> bool {
        self.cgroup.as_ref().is_some_and(SandboxCgroup::oom_killed)
    }

    fn explain(&self, log: &cordon_core::explain::DenialLog) -> bool {
        if let Some(refusals) = self.egress.as_ref().and_then(|e| e.refusals.as_ref()) {
            log.absorb(refusals);
        }
        if let Some(r) = &self.recorders {
            r.finish(log);
        }
        true
    }

    fn processes_left(&self) -> Option<bool> {
        self.cgroup.as_ref()?.processes_left()
    }

    fn started(&self, pid: u32) {
        self.leader.store(u64::from(pid), Ordering::Relaxed);
        if let Some(egress) = &self.egress {
            egress.start();
        }
    }

    fn exit_status(&self, _leader_status: i32) -> Option<i32> {
        // The init exits 0 once it has recorded the program's status; if
        // it ended otherwise (killed by the runner, or it could not start
        // the program), its own status stands.
        self.tree.as_ref()?.program_status()
    }
}

/// User + system time of `pid` and every live descendant, each with what
/// its reaped children used (`cutime`/`cstime`): every CPU second of the
/// tree counted once, at any instant.
fn tree_cpu_time(root: u32) -> Duration {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    let mut ticks = 0u64;
    let mut stack = vec![root];
    let mut seen = 0;
    while let Some(pid) = stack.pop() {
        seen += 1;
        if seen > 100_000 {
            break;
        }
        if let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            if let Some((_, rest)) = stat.rsplit_once(')') {
                // After the comm: state is field 3; utime 14, stime 15,
                // cutime 16, cstime 17 (1-based).
                let f: Vec<&str> = rest.split_whitespace().collect();
                for i in 11..15 {
                    ticks += f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
                }
            }
        }
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
            continue;
        };
        for t in tasks.flatten() {
            if let Ok(children) = std::fs::read_to_string(t.path().join("children")) {
                stack.extend(
                    children
                        .split_whitespace()
                        .filter_map(|c| c.parse::<u32>().ok()),
                );
            }
        }
    }
    Duration::from_millis(ticks * 1000 / hz)
}
