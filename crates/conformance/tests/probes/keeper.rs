//! The baseline's keeper on its own: a control run's processes die with
//! the host even when they left its process group and session, and without
//! the suite's watchdog. The "host" here is a shell this test starts and
//! SIGKILLs; the control run is the probe binary's `P6-tree` mode (a child
//! that forks a grandchild which calls `setsid()`; both wait forever), found
//! by a token of this test's own.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const PROBE: &str = env!("CARGO_BIN_EXE_cordon-probe");

fn token() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("keeper{}{nanos}", std::process::id())
}

/// Live (non-zombie) pids whose argv holds `token=<token>`.
fn bearing(token: &str) -> Vec<i32> {
    let wanted = format!("token={token}");
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|c| c.split(|b| *b == 0).any(|a| a == wanted.as_bytes()))
                .unwrap_or(false)
                && std::fs::read_to_string(format!("/proc/{pid}/stat"))
                    .ok()
                    .and_then(|s| {
                        s.rsplit_once(')')
                            .map(|(_, r)| r.trim_start().starts_with('Z'))
                    })
                    == Some(false)
        })
        .collect()
}

/// Waits (up to 20 s) until `want(n)` holds for the number of processes
/// bearing `token`; returns it. For their start, which has no event to
/// wait on.
fn wait_for(token: &str, want: impl Fn(usize) -> bool) -> usize {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let n = bearing(token).len();
        if want(n) || Instant::now() > deadline {
            return n;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Pidfds of the processes bearing `token` now, each checked again once
/// held (a pidfd names that very process, whatever later reuses its pid).
fn held(token: &str) -> Vec<OwnedFd> {
    bearing(token)
        .into_iter()
        .filter_map(|pid| {
            // SAFETY: pidfd_open on integers; it returns a fresh fd.
            let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
            // SAFETY: a fresh fd we own.
            let fd = (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd as libc::c_int) })?;
            bearing(token).contains(&pid).then_some(fd)
        })
        .collect()
}

/// Waits until the process of `pidfd` has exited (its pidfd polls
/// readable); false if it still runs after `limit`, a bound that only
/// turns a hang into a failure (the tree waits forever).
fn exits_within(pidfd: &OwnedFd, limit: Duration) -> bool {
    let mut p = libc::pollfd {
        fd: pidfd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    unsafe { libc::poll(&mut p, 1, limit.as_millis() as libc::c_int) == 1 }
}

/// Starts the tree under a shell, with or without the keeper, waits until
/// its two processes run, SIGKILLs the shell, and returns how many of them
/// are left once things settle (then kills those).
fn survivors(keeper: bool) -> usize {
    let t = token();
    let argv = format!("cordon-probe\x1f__cordon-probe\x1fP6-tree\x1ftoken={t}");
    let script = if keeper {
        format!("\"{PROBE}\" __cordon-probe keeper & wait")
    } else {
        format!("\"{PROBE}\" __cordon-probe P6-tree token={t} & wait")
    };
    let mut host = Command::new("/bin/sh")
        .args(["-c", &script])
        .env("CORDON_KEEPER_ARGV", argv)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let started = wait_for(&t, |n| n >= 2);
    assert!(started >= 2, "the tree did not start ({started} processes)");
    let tree = held(&t);
    assert!(
        tree.len() >= 2,
        "the tree's processes ended before the host"
    );
    host.kill().unwrap();
    host.wait().unwrap();
    if keeper {
        // Their exits are the events to wait for; nothing else ends them.
        for pidfd in &tree {
            exits_within(pidfd, Duration::from_secs(20));
        }
    }
    // Without the keeper nothing would end them: counted once the shell
    // is gone.
    let left = bearing(&t).len();
    for pid in bearing(&t) {
        // SAFETY: a process bearing this test's own token.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    left
}

#[test]
fn a_control_tree_dies_with_its_host_through_the_keeper_alone() {
    // The check can fail: without the keeper, the setsid grandchild (and
    // its parent) outlive the shell.
    assert!(
        survivors(false) > 0,
        "control: without the keeper nothing outlived the host"
    );
    assert_eq!(survivors(true), 0, "processes outlived the keeper's host");
}
