//! P3 — no inherited fd: with the host holding an fd open without
//! `O_CLOEXEC`, no fd other than 0, 1, 2 is open in the child (each number
//! checked with `fcntl(F_GETFD)`), and the host's fd cannot be fetched
//! either through `/proc/<host>/fd/N` or `pidfd_getfd`.

use std::collections::BTreeMap;
use std::os::fd::AsRawFd;

use cordon_core::{CheckResult, ProbeStatus};

use crate::child::{self, errno, Reporter};
use crate::harness::{unreachable, Ctx};

pub(crate) async fn host(ctx: &Ctx) -> Vec<CheckResult> {
    let leaked = match std::fs::File::open(&ctx.package_file) {
        Ok(f) => f,
        Err(e) => return vec![unreachable("leak-fd", e.to_string())],
    };
    let fd = leaked.as_raw_fd();
    // SAFETY: clearing FD_CLOEXEC on an fd we own.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFD);
        libc::fcntl(fd, libc::F_SETFD, flags & !libc::FD_CLOEXEC);
    }
    let run = ctx
        .run(
            "P3",
            &[
                ("fd".into(), fd.to_string()),
                ("host_pid".into(), std::process::id().to_string()),
            ],
        )
        .await;
    drop(leaked);
    run.into_checks()
}

pub(crate) fn child(r: &mut Reporter, args: &BTreeMap<String, String>) {
    let leaked: i32 = args.get("fd").and_then(|s| s.parse().ok()).unwrap_or(-1);
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into rl.
    unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut rl) };
    let upper = (rl.rlim_cur.min(65536) as i32).max(leaked + 1);

    // Positive control: the scan does see an fd that is open.
    match child::open("/dev/null", libc::O_RDONLY).or_else(|_| child::open(".", libc::O_RDONLY)) {
        Ok(probe_fd) => {
            // SAFETY: fcntl on an int.
            let seen = unsafe { libc::fcntl(probe_fd, libc::F_GETFD) } >= 0;
            child::close(probe_fd);
            r.control(
                "control-fd-scan",
                if seen {
                    Ok(())
                } else {
                    Err("fcntl missed an open fd".into())
                },
            );
        }
        Err(e) => r.control("control-fd-scan", Err(child::errno_name(e))),
    }

    let open: Vec<i32> = (3..upper)
        // SAFETY: fcntl on an int.
        .filter(|fd| unsafe { libc::fcntl(*fd, libc::F_GETFD) } >= 0)
        .collect();
    if open.is_empty() {
        r.check(
            "inherited-fds",
            ProbeStatus::Pass,
            format!("fds 3..{upper} are all closed"),
        );
    } else {
        r.check(
            "inherited-fds",
            ProbeStatus::Fail,
            format!("open fds beyond stdio: {open:?}"),
        );
    }

    let Some(host_pid) = args.get("host_pid").and_then(|s| s.parse::<i32>().ok()) else {
        return;
    };
    let denied = [libc::EACCES, libc::EPERM];
    r.forbidden(
        "reopen-host-fd-via-proc",
        child::open(&format!("/proc/{host_pid}/fd/{leaked}"), libc::O_RDONLY).map(|fd| {
            child::close(fd);
            "reopened the host's fd".into()
        }),
        &denied,
    );
    // SAFETY: raw pidfd syscalls on integers.
    let got = unsafe {
        let pidfd = libc::syscall(libc::SYS_pidfd_open, host_pid, 0);
        if pidfd < 0 {
            Err(errno())
        } else {
            let fd = libc::syscall(libc::SYS_pidfd_getfd, pidfd as i32, leaked, 0);
            let e = errno();
            libc::close(pidfd as i32);
            if fd >= 0 {
                libc::close(fd as i32);
                Ok("copied the host's fd".to_string())
            } else {
                Err(e)
            }
        }
    };
    r.forbidden("pidfd-getfd", got, &denied);
}
