//! The baseline's keeper on its own: a control run's processes die with
//! the host even when they left its process group and session, and without
//! the suite's watchdog. The "host" here is a shell this test starts and
//! SIGKILLs; the control run is the probe binary's `P6-tree` mode (a child
//! that forks a grandchild which calls `setsid()`; both wait forever), found
//! by a token of this test's own.
#![cfg(target_os = "linux")]

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
/// bearing `token`; returns it.
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
    host.kill().unwrap();
    host.wait().unwrap();
    let left = if keeper {
        wait_for(&t, |n| n == 0)
    } else {
        // Nothing would end them: count them once the shell is gone.
        bearing(&t).len()
    };
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
