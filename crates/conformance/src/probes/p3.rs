//! P3 — no inherited fd: the host holds an fd open without `O_CLOEXEC`;
//! while the child is held, the host lists the program's fds
//! (`/proc/<pid>/fd`) and finds nothing beyond 0, 1, 2. The child then
//! tries to fetch the host's fd through `/proc/<host>/fd/N` and
//! `pidfd_getfd`, keeps whatever it got open and is held again: the host
//! confirms no fd of the program refers to the host's file.

use std::os::fd::AsRawFd;

use cordon_core::{CheckResult, Evidence, ProbeId, ProbeStatus};

use crate::child::{self, errno, Reporter, HOST_PID_DENIED, PROC_PID_DENIED};
use crate::harness::{unreachable, verdict, ProbeContext, Hold};
use crate::inspect;
use crate::registry::{manifest, HostConditions, Manifest, Probe, ProbeArgs};

/// P3 in the registry (`probes/mod.rs`).
pub(crate) struct P3;

#[async_trait::async_trait]
impl Probe for P3 {
    fn id(&self) -> ProbeId {
        ProbeId::P3
    }

    fn title(&self) -> &'static str {
        "No inherited fd"
    }

    fn checks(&self, _: &HostConditions) -> Manifest {
        manifest(CHECKS)
    }

    async fn host(&self, ctx: &ProbeContext) -> Vec<CheckResult> {
        use std::os::unix::fs::MetadataExt;
        let leaked = match std::fs::File::open(&ctx.package_file) {
            Ok(f) => f,
            Err(e) => return vec![unreachable("leak-fd", e.to_string())],
        };
        let fd = leaked.as_raw_fd();
        let target = leaked.metadata().map(|m| (m.dev(), m.ino())).ok();
        // SAFETY: clearing FD_CLOEXEC on an fd we own.
        unsafe {
            let flags = libc::fcntl(fd, libc::F_GETFD);
            libc::fcntl(fd, libc::F_SETFD, flags & !libc::FD_CLOEXEC);
        }
        let mut on_hold = |h: &Hold<'_>| match h.label {
            "start" => vec![inherited(h.pid)],
            _ => vec![not_fetched(h.pid, target)],
        };
        let run = ctx
            .run_held(
                "P3",
                &[
                    ("fd".into(), fd.to_string()),
                    ("host_pid".into(), std::process::id().to_string()),
                ],
                &mut on_hold,
            )
            .await;
        drop(leaked);
        let mut checks = run.missed_hold("start", &["inherited-fds"]);
        checks.extend(run.missed_hold("fetched", &["host-fd-not-fetched"]));
        checks.extend(run.into_checks());
        checks
    }

    fn child(&self, r: &mut Reporter, args: &ProbeArgs) {
        r.hold("start");
        let leaked: i32 = args.get("fd").and_then(|s| s.parse().ok()).unwrap_or(-1);
        let Some(host_pid) = args.get("host_pid").and_then(|s| s.parse::<i32>().ok()) else {
            r.check("args", ProbeStatus::Unreachable, "no host pid given");
            return;
        };
        let mut got = Vec::new();
        let reopened = child::open(&format!("/proc/{host_pid}/fd/{leaked}"), libc::O_RDONLY);
        if let Ok(fd) = reopened {
            got.push(fd);
        }
        r.forbidden(
            "reopen-host-fd-via-proc",
            reopened.map(|_| "reopened the host's fd".to_string()),
            &PROC_PID_DENIED,
        );
        // SAFETY: raw pidfd syscalls on integers.
        let fetched = unsafe {
            let pidfd = libc::syscall(libc::SYS_pidfd_open, host_pid, 0);
            if pidfd < 0 {
                Err(errno())
            } else {
                let fd = libc::syscall(libc::SYS_pidfd_getfd, pidfd as i32, leaked, 0);
                let e = errno();
                libc::close(pidfd as i32);
                if fd >= 0 {
                    got.push(fd as i32);
                    Ok("copied the host's fd".to_string())
                } else {
                    Err(e)
                }
            }
        };
        r.forbidden("pidfd-getfd", fetched, &HOST_PID_DENIED);
        // The host looks for the fetched fds while they are open.
        r.hold("fetched");
        for fd in got {
            child::close(fd);
        }
    }
}

/// Every check P3 makes on any host.
const CHECKS: &[(&str, Evidence)] = &[
    ("inherited-fds", Evidence::Host),
    ("reopen-host-fd-via-proc", Evidence::Child),
    ("pidfd-getfd", Evidence::Child),
    ("host-fd-not-fetched", Evidence::Host),
];

/// At the first hold: the program has fds 0, 1, 2 and nothing else.
fn inherited(pid: Option<i32>) -> CheckResult {
    const NAME: &str = "inherited-fds";
    let Some(pid) = pid else {
        return unreachable(NAME, "the program was not found by its token");
    };
    match inspect::fds(pid) {
        Ok(fds) => {
            // Positive control: the listing shows the stdio the child has.
            if !(0..3).all(|n| fds.iter().any(|(f, _)| *f == n)) {
                return unreachable(NAME, format!("fds 0-2 missing from the listing: {fds:?}"));
            }
            let extra: Vec<String> = fds
                .iter()
                .filter(|(n, _)| *n > 2)
                .map(|(n, p)| format!("{n} -> {}", p.display()))
                .collect();
            verdict(
                NAME,
                extra.is_empty(),
                if extra.is_empty() {
                    "the program holds only fds 0, 1, 2".to_string()
                } else {
                    format!("open fds beyond stdio: {}", extra.join(", "))
                },
            )
        }
        Err(e) => unreachable(NAME, format!("cannot list the program's fds: {e}")),
    }
}

/// At the second hold: no fd of the program refers to the host's file.
fn not_fetched(pid: Option<i32>, target: Option<(u64, u64)>) -> CheckResult {
    use std::os::unix::fs::MetadataExt;
    const NAME: &str = "host-fd-not-fetched";
    let (Some(pid), Some(target)) = (pid, target) else {
        return unreachable(NAME, "the program or the host's file cannot be identified");
    };
    match inspect::fds(pid) {
        Ok(fds) => {
            let hits: Vec<i32> = fds
                .iter()
                .filter(|(n, _)| {
                    std::fs::metadata(format!("/proc/{pid}/fd/{n}"))
                        .is_ok_and(|m| (m.dev(), m.ino()) == target)
                })
                .map(|(n, _)| *n)
                .collect();
            verdict(
                NAME,
                hits.is_empty(),
                if hits.is_empty() {
                    "no fd of the program refers to the host's file".to_string()
                } else {
                    format!("the program holds the host's file as fd {hits:?}")
                },
            )
        }
        Err(e) => unreachable(NAME, format!("cannot list the program's fds: {e}")),
    }
}

