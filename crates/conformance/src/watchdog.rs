//! The baseline's watchdog: the unconfined control runs die with the host.
//!
//! The baseline runs the probes' hostile code with no sandbox (fork loops,
//! `setsid` trees, processes that outlive their parent on purpose). The
//! harness kills what a probe leaves behind by its token once the probe
//! ends; if the host itself dies first (SIGKILL, a crash, the user's
//! Ctrl-C), nothing would, and only the probe child itself has a
//! parent-death signal. So each suite run starts a watchdog: the probe
//! binary in `watchdog` mode, in a process group of its own (a terminal's
//! Ctrl-C does not reach it), reading the baseline's tokens from a pipe
//! the host holds. When the pipe ends without the host's `done` line, the
//! host is gone: the watchdog SIGKILLs every process that bears one of
//! those tokens, pass after pass until none is left, removes the IPC
//! objects under those tokens (P1's sacrificial targets and what its
//! control run leaves on purpose), the suite's temp dirs and the files a
//! probe made in the host's temp dir, and exits. It kills the gate's
//! cgroup (`gate_cgroup.rs`), which holds every process of the baseline
//! whatever its ancestry or argv, in either case: on `done` the suite has
//! already done so, unless it was dropped while its children ran. As
//! root, it is the last process the OOM killer would choose.

use std::io::{BufRead, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::child::PROBE_ARG;
use crate::harness::Ids;

/// The mode argument that starts the watchdog.
pub(crate) const MODE: &str = "watchdog";

/// The line that tells the watchdog the host ended normally.
const DONE: &str = "done";

/// The host's handle: tokens go to the watchdog before their probe child
/// starts. Dropping it sends `done` and reaps the watchdog.
pub(crate) struct Watchdog {
    child: Mutex<(Child, Option<ChildStdin>)>,
}

impl Watchdog {
    /// Starts the watchdog from the probe executable `exe` (a host-side
    /// helper, not a probe child: spawned directly).
    pub(crate) fn start(exe: &Path, sandbox: Ids) -> std::io::Result<Watchdog> {
        use std::os::unix::process::CommandExt;
        let mut child = Command::new(exe)
            .args([PROBE_ARG, MODE])
            .arg(format!("sandbox_uid={}", sandbox.uid))
            .arg(format!("sandbox_gid={}", sandbox.gid))
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()?;
        let stdin = child.stdin.take();
        Ok(Watchdog {
            child: Mutex::new((child, stdin)),
        })
    }

    /// Registers `token` before the probe child bearing it starts.
    pub(crate) fn guard(&self, token: &str) -> std::io::Result<()> {
        self.send(&format!("{TOKEN} {token}"))
    }

    /// Registers ids a program of the suite ran as (a backend may choose
    /// them per sandbox): IPC objects of theirs under a registered token
    /// are removed too.
    pub(crate) fn guard_ids(&self, ids: Ids) -> std::io::Result<()> {
        self.send(&format!("{IDS} {} {}", ids.uid, ids.gid))
    }

    /// Registers the gate's cgroup, to kill whole when the suite ends.
    pub(crate) fn guard_cgroup(&self, dir: &Path) -> std::io::Result<()> {
        self.send(&format!("{CGROUP} {}", one_line(dir)?))
    }

    /// Registers a file a probe may make in the host's temp dir (named
    /// `cordon-p5-*`), to remove if the host dies before it does.
    pub(crate) fn guard_path(&self, path: &Path) -> std::io::Result<()> {
        self.send(&format!("{PATH} {}", one_line(path)?))
    }

    /// Registers a suite dir (a `cordon-conformance-*` temp dir, with its
    /// copy of the probe executable) to remove if the host dies.
    pub(crate) fn guard_dir(&self, dir: &Path) -> std::io::Result<()> {
        self.send(&format!("{DIR} {}", one_line(dir)?))
    }

    fn send(&self, line: &str) -> std::io::Result<()> {
        let mut g = self.child.lock().unwrap_or_else(|e| e.into_inner());
        match g.1.as_mut() {
            Some(w) => writeln!(w, "{line}").and_then(|()| w.flush()),
            None => Err(std::io::Error::other("the watchdog is stopped")),
        }
    }
}

/// `path` as one line of UTF-8.
fn one_line(path: &Path) -> std::io::Result<&str> {
    path.to_str()
        .filter(|d| !d.contains('\n'))
        .ok_or_else(|| std::io::Error::other("a path that is not one line of UTF-8"))
}

/// The line prefix of the gate's cgroup.
const CGROUP: &str = "cgroup";
/// The line prefix of a probe's file in the host's temp dir.
const PATH: &str = "path";
/// The line prefix of a token to guard.
const TOKEN: &str = "token";
/// The line prefix of a suite dir to remove.
const DIR: &str = "dir";
/// The line prefix of ids a program ran as.
const IDS: &str = "ids";

/// Whether `path` is a probe's file the watchdog may remove: an absolute
/// path with no `..`, named `cordon-p5-*` (P5's targets in the temp dir).
fn is_probe_path(path: &Path) -> bool {
    use std::path::Component;
    path.is_absolute()
        && path
            .components()
            .all(|c| !matches!(c, Component::ParentDir))
        && path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("cordon-p5-"))
}

/// Removes a probe's file (or dir) at `path`, never through a link, if
/// one of `owners` owns it.
fn remove_probe_path(path: &Path, owners: &[u32]) {
    use std::os::unix::fs::MetadataExt;
    let Ok(m) = path.symlink_metadata() else {
        return;
    };
    if !owners.contains(&m.uid()) {
        return;
    }
    let _ = if m.is_dir() {
        std::fs::remove_dir_all(path)
    } else {
        std::fs::remove_file(path)
    };
}

/// Whether `dir` is a suite dir the watchdog may remove: an absolute path
/// with no `..`, named `cordon-conformance-*` (`ProbeContext::new` makes them).
fn is_suite_dir(dir: &Path) -> bool {
    use std::path::Component;
    dir.is_absolute()
        && dir.components().all(|c| !matches!(c, Component::ParentDir))
        && dir
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("cordon-conformance-"))
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        let mut g = self.child.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(mut w) = g.1.take() {
            let _ = writeln!(w, "{DONE}");
        }
        let _ = g.0.wait();
    }
}

/// The watchdog process: collects tokens until its stdin ends; without the
/// `done` line, kills every process bearing one of them.
pub(crate) fn run(args: &std::collections::BTreeMap<String, String>) -> i32 {
    // Best effort (root only): the OOM killer takes anything before it.
    let _ = std::fs::write("/proc/self/oom_score_adj", "-1000");
    let (mut tokens, mut dirs, mut ids) = (Vec::new(), Vec::new(), Vec::new());
    let (mut cgroups, mut paths) = (Vec::new(), Vec::new());
    let mut done = false;
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        match line.split_once(' ') {
            _ if line == DONE => {
                done = true;
                break;
            }
            Some((TOKEN, t)) => tokens.push(t.to_owned()),
            Some((DIR, d)) if is_suite_dir(Path::new(d)) => dirs.push(d.to_owned()),
            Some((CGROUP, d)) => cgroups.push(d.to_owned()),
            Some((PATH, p)) if is_probe_path(Path::new(p)) => paths.push(p.to_owned()),
            Some((IDS, v)) => {
                let mut n = v.split(' ').filter_map(|x| x.parse::<u32>().ok());
                if let (Some(uid), Some(gid)) = (n.next(), n.next()) {
                    ids.push(Ids { uid, gid });
                }
            }
            _ => {}
        }
    }
    // Whole, however the suite ended (a gate dropped mid-run says `done`
    // too): every process of the baseline, forks racing the kill included.
    let mut clean = true;
    for c in &cgroups {
        clean &= crate::gate_cgroup::kill_path(Path::new(c));
    }
    // SAFETY: geteuid cannot fail.
    let me = unsafe { libc::geteuid() };
    let id = |k: &str| args.get(k).and_then(|v| v.parse().ok()).unwrap_or(me);
    let sandbox = Ids {
        uid: id("sandbox_uid"),
        gid: id("sandbox_gid"),
    };
    let owners: Vec<u32> = [me, sandbox.uid]
        .into_iter()
        .chain(ids.iter().map(|i| i.uid))
        .collect();
    // The suite ends what bears its tokens and removes its probes' IPC
    // objects and files after each probe, and its dirs when it ends; one
    // dropped mid-probe (a panic) did none of it but the dirs.
    let mut clean_tokens = true;
    if done {
        if cgroups.is_empty() {
            kill_bearers(&tokens);
        }
    } else {
        // Forks may appear while we kill: repeat until a pass finds nothing.
        let deadline = Instant::now() + Duration::from_secs(10);
        clean_tokens = false;
        while Instant::now() < deadline && !clean_tokens {
            let mut found = 0;
            for t in &tokens {
                found += crate::harness::kill_token_survivors(t);
            }
            clean_tokens = found == 0;
            if !clean_tokens {
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
    // The IPC objects under those tokens (P1's sacrificial targets, what
    // its control run leaves on purpose).
    for t in &tokens {
        for owner in std::iter::once(sandbox).chain(ids.iter().copied()) {
            crate::probes::p1::ipc::remove_for_token(t, owner, me);
        }
    }
    // The suite dirs (each holds a copy of the probe executable), and the
    // probes' files in the host's temp dir.
    if !done {
        for d in &dirs {
            let _ = std::fs::remove_dir_all(d);
        }
    }
    for p in &paths {
        remove_probe_path(Path::new(p), &owners);
    }
    i32::from(!(clean && clean_tokens))
}

/// One pass over `/proc`: SIGKILLs every process bearing one of `tokens`.
fn kill_bearers(tokens: &[String]) {
    use crate::inspect::TOKEN_ARG;
    let wanted: std::collections::BTreeSet<Vec<u8>> = tokens
        .iter()
        .map(|t| format!("{TOKEN_ARG}{t}").into_bytes())
        .collect();
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return;
    };
    for e in procs.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|p| p.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
            continue;
        };
        if cmdline.split(|b| *b == 0).any(|a| wanted.contains(a)) {
            // SAFETY: SIGKILL to a process that bore a suite token just now.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::is_suite_dir;
    use std::path::Path;

    #[test]
    fn only_suite_dirs_are_removed() {
        assert!(is_suite_dir(Path::new("/tmp/cordon-conformance-abc123")));
        for not in [
            "/",
            "/tmp",
            "tmp/cordon-conformance-x",
            "/tmp/cordon-conformance-x/..",
            "/tmp/../cordon-conformance-x",
            "/home/user",
            "/tmp/other",
        ] {
            assert!(!is_suite_dir(Path::new(not)), "{not}");
        }
    }
}
