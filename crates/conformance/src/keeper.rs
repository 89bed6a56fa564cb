//! The keeper: the unconfined control runs die with the host, whatever
//! stops it.
//!
//! The baseline runs the probes' hostile code with no sandbox: processes
//! that fork on, start sessions of their own and outlive their parent on
//! purpose. The baseline's backend (`baseline.rs`) therefore does not run
//! a control's probe child directly: its pre-exec hook executes the probe
//! binary in `keeper` mode, which
//!
//! - makes itself a **child subreaper** (`PR_SET_CHILD_SUBREAPER`): every
//!   process of the control that loses its parent is reparented to it, not
//!   to the host's init, however it detached (`setsid`, double fork), so it
//!   can always find all of them among its descendants;
//! - arms its parent-death signal as `SIGTERM`, which it waits for: when
//!   the host dies (SIGKILL, a crash, SIGSTOP then SIGKILL), the kernel
//!   tells it;
//! - starts the probe child (the same binary, with the control's own
//!   argument list, which the keeper itself does not bear: the host finds
//!   the program by its token, and the keeper has none), in a session of
//!   its own as it would have without the keeper;
//! - when the probe child ends, or the host dies, kills every descendant
//!   (pass after pass until a pass finds none: each killed process's
//!   children come to it) and ends as the probe child did.
//!
//! Only a SIGKILL of the keeper itself defeats it (and then the suite's
//! watchdog, which kills by token, is what remains).

use std::ffi::{CString, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::time::{Duration, Instant};

/// The mode argument that runs the keeper.
pub(crate) const MODE: &str = "keeper";

/// The environment variable that carries the probe child's argv (its
/// elements separated by [`SEP`]); the keeper removes it.
pub(crate) const ARGV_ENV: &str = "CORDON_KEEPER_ARGV";

/// Separates the argv elements in [`ARGV_ENV`] (no probe argument holds it).
pub(crate) const SEP: u8 = 0x1f;

/// The keeper's argv (what the baseline's hook executes), and the variable
/// that tells it the probe child's: `argv` joined by [`SEP`].
pub(crate) fn encode(argv: &[OsString]) -> OsString {
    let mut out = Vec::new();
    for (i, a) in argv.iter().enumerate() {
        if i > 0 {
            out.push(SEP);
        }
        out.extend_from_slice(a.as_bytes());
    }
    OsString::from_vec(out)
}

/// The keeper process. Returns only on an error before the probe child
/// started (its exit code).
pub(crate) fn run() -> i32 {
    let Some(argv) = std::env::var_os(ARGV_ENV) else {
        eprintln!("cordon keeper: no {ARGV_ENV}");
        return 2;
    };
    std::env::remove_var(ARGV_ENV);
    let argv: Vec<CString> = argv
        .as_bytes()
        .split(|b| *b == SEP)
        .filter_map(|a| CString::new(a).ok())
        .collect();
    if argv.is_empty() {
        return 2;
    }
    let mut ptrs: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).collect();
    ptrs.push(std::ptr::null());
    let waited: [libc::c_int; 4] = [libc::SIGCHLD, libc::SIGTERM, libc::SIGINT, libc::SIGHUP];
    // SAFETY: signal-mask and prctl calls on integers and a zeroed set of
    // this single-threaded process; fork, then in the child only execv
    // (or _exit) on data made before the fork.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in waited {
            libc::sigaddset(&mut set, s);
        }
        libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        let host = libc::getppid();
        if libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0
            || libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGTERM as libc::c_ulong,
                0,
                0,
                0,
            ) != 0
        {
            return 2;
        }
        // Until now the hygiene's SIGKILL parent-death signal stood: had
        // the host died, this process would be gone.
        if libc::getppid() != host {
            return 2;
        }
        let exe = c"/proc/self/exe";
        let child = libc::fork();
        if child < 0 {
            return 2;
        }
        if child == 0 {
            // A session of its own, as the probe child would have without
            // a keeper (the hygiene made the keeper's).
            libc::setsid();
            libc::sigprocmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
            libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGKILL as libc::c_ulong,
                0,
                0,
                0,
            );
            libc::execv(exe.as_ptr(), ptrs.as_ptr());
            libc::_exit(127);
        }
        let status = loop {
            let sig = libc::sigwaitinfo(&set, std::ptr::null_mut());
            if sig == libc::SIGCHLD {
                if let Some(st) = reap(child) {
                    break Some(st);
                }
                continue;
            }
            if sig > 0 {
                // The host is gone (or told us to stop).
                break None;
            }
        };
        kill_descendants();
        match status {
            Some(st) if libc::WIFSIGNALED(st) => {
                let sig = libc::WTERMSIG(st);
                libc::signal(sig, libc::SIG_DFL);
                libc::sigprocmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
                libc::raise(sig);
                128 + sig
            }
            Some(st) => libc::WEXITSTATUS(st),
            None => 128 + libc::SIGTERM,
        }
    }
}

/// Reaps every child that has ended; the status of `main` if it was one.
fn reap(main: libc::pid_t) -> Option<libc::c_int> {
    let mut main_status = None;
    loop {
        let mut st = 0;
        // SAFETY: waitpid for any child, without blocking.
        let pid = unsafe { libc::waitpid(-1, &mut st, libc::WNOHANG | libc::__WALL) };
        if pid <= 0 {
            return main_status;
        }
        if pid == main {
            main_status = Some(st);
        }
    }
}

/// Every process below this one: the children of each of its tasks, and
/// theirs.
fn descendants() -> Vec<i32> {
    let mut out = Vec::new();
    let mut todo = vec![std::process::id() as i32];
    while let Some(p) = todo.pop() {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{p}/task")) else {
            continue;
        };
        for t in tasks.flatten() {
            if let Ok(c) = std::fs::read_to_string(t.path().join("children")) {
                for k in c.split_whitespace().filter_map(|k| k.parse::<i32>().ok()) {
                    if !out.contains(&k) {
                        out.push(k);
                        todo.push(k);
                    }
                }
            }
        }
        if out.len() > 100_000 {
            break;
        }
    }
    out
}

/// SIGKILLs every descendant, pass after pass (a killed process's
/// children are reparented to this subreaper, and show up in the next),
/// reaping as it goes, until a pass finds none or 10 s have passed.
fn kill_descendants() {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let found = descendants();
        for &p in &found {
            // SAFETY: SIGKILL to a process below this one: it is our
            // descendant (a child, or a child of one), so its pid cannot
            // have been reused by anyone else while it is unreaped.
            unsafe { libc::kill(p, libc::SIGKILL) };
        }
        let _ = reap(0);
        if found.is_empty() || Instant::now() > deadline {
            return;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}
