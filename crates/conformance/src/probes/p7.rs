//! P7 — no privilege re-escalation: `NoNewPrivs` is 1; the effective,
//! permitted, inheritable, ambient and bounding capability sets are empty;
//! `setuid(0)` fails; a new user namespace cannot be created; bpf,
//! perf_event_open, userfaultfd, keyctl, kexec_load, init_module and mount
//! are refused.
//!
//! Each dangerous interface is called so that a refusal by policy
//! (`EPERM`/`EACCES`, from seccomp or a missing capability) is told apart
//! from a call that got through to argument checking (`EINVAL`, `EFAULT`,
//! ...), which means the interface is reachable: a `Fail`. `ENOSYS` (the
//! kernel lacks the interface, or a filter says so) counts as refused. The arguments are
//! chosen so that a reachable call still changes nothing.

use std::collections::BTreeMap;

use cordon_core::{CheckResult, ProbeStatus};

use crate::child::{errno, errno_name, Reporter};
use crate::harness::Ctx;

pub(crate) async fn host(ctx: &Ctx) -> Vec<CheckResult> {
    ctx.run("P7", &[]).await.into_checks()
}

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: i32,
}

#[repr(C)]
#[derive(Default, Clone, Copy)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

pub(crate) fn child(r: &mut Reporter, _args: &BTreeMap<String, String>) {
    // SAFETY: prctl queries.
    let nnp = unsafe { libc::prctl(libc::PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) };
    r.check(
        "no-new-privs",
        if nnp == 1 {
            ProbeStatus::Pass
        } else {
            ProbeStatus::Fail
        },
        format!("NoNewPrivs = {nnp}"),
    );

    let mut hdr = CapHeader {
        version: 0x2008_0522,
        pid: 0,
    };
    let mut data = [CapData::default(); 2];
    // SAFETY: capget v3 fills two CapData.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_capget,
            &mut hdr as *mut CapHeader,
            data.as_mut_ptr(),
        )
    };
    if rc != 0 {
        r.check(
            "capability-sets",
            ProbeStatus::Unreachable,
            format!("capget: {}", errno_name(errno())),
        );
    } else {
        type Field = fn(&CapData) -> u32;
        let sets: [(&str, Field); 3] = [
            ("effective", |d| d.effective),
            ("permitted", |d| d.permitted),
            ("inheritable", |d| d.inheritable),
        ];
        let held: Vec<&str> = sets
            .iter()
            .filter(|(_, f)| data.iter().any(|d| f(d) != 0))
            .map(|(n, _)| *n)
            .collect();
        if held.is_empty() {
            r.check(
                "capability-sets",
                ProbeStatus::Pass,
                "effective, permitted and inheritable are empty",
            );
        } else {
            r.check(
                "capability-sets",
                ProbeStatus::Fail,
                format!("non-empty: {}", held.join(", ")),
            );
        }
    }
    let mut bounding = Vec::new();
    let mut ambient = Vec::new();
    for cap in 0..64 {
        // SAFETY: prctl queries.
        let b = unsafe { libc::prctl(libc::PR_CAPBSET_READ, cap, 0, 0, 0) };
        if b < 0 {
            break;
        }
        if b == 1 {
            bounding.push(cap);
        }
        let a =
            unsafe { libc::prctl(libc::PR_CAP_AMBIENT, libc::PR_CAP_AMBIENT_IS_SET, cap, 0, 0) };
        if a == 1 {
            ambient.push(cap);
        }
    }
    for (name, set) in [("bounding-set", bounding), ("ambient-set", ambient)] {
        if set.is_empty() {
            r.check(name, ProbeStatus::Pass, "empty");
        } else {
            r.check(
                name,
                ProbeStatus::Fail,
                format!("holds capabilities {set:?}"),
            );
        }
    }

    // SAFETY: setuid(0) either fails or (on a breach) changes nothing that
    // outlives this probe process.
    let rc = unsafe { libc::setuid(0) };
    r.forbidden(
        "setuid-0",
        if rc == 0 {
            Ok("became uid 0".into())
        } else {
            Err(errno())
        },
        &[libc::EPERM, libc::EINVAL],
    );
    let rc = unsafe { libc::unshare(libc::CLONE_NEWUSER) };
    r.forbidden(
        "new-user-namespace",
        if rc == 0 {
            Ok("created a user namespace".into())
        } else {
            Err(errno())
        },
        &[libc::EPERM, libc::EACCES, libc::ENOSPC, libc::EUSERS],
    );

    refused(r, "bpf", || {
        // BPF_MAP_CREATE with an invalid map type: EINVAL if reachable.
        let mut attr = [0u32; 32];
        attr[0] = 0xffff;
        unsafe {
            libc::syscall(
                libc::SYS_bpf,
                0,
                attr.as_mut_ptr(),
                std::mem::size_of_val(&attr),
            )
        }
    });
    refused(r, "perf_event_open", || {
        // A software dummy event on ourselves, user space only.
        let mut attr = [0u64; 16];
        let size = std::mem::size_of_val(&attr) as u64;
        attr[0] = 1 | (size << 32); // type = PERF_TYPE_SOFTWARE, size
        attr[1] = 9; // config = PERF_COUNT_SW_DUMMY
        attr[5] = (1 << 5) | (1 << 6); // exclude_kernel | exclude_hv
        unsafe { libc::syscall(libc::SYS_perf_event_open, attr.as_ptr(), 0, -1, -1, 0) }
    });
    refused(r, "userfaultfd", || unsafe {
        // UFFD_USER_MODE_ONLY is allowed to unprivileged users by default.
        libc::syscall(libc::SYS_userfaultfd, libc::O_CLOEXEC | 1)
    });
    refused(r, "keyctl", || unsafe {
        // KEYCTL_GET_KEYRING_ID of the session keyring, without creating it.
        libc::syscall(libc::SYS_keyctl, 0, -3i64, 0)
    });
    refused(r, "kexec_load", || unsafe {
        // Invalid flags: EINVAL once past the capability check.
        libc::syscall(libc::SYS_kexec_load, 0, 0, 0, 0xffff_0000u64)
    });
    refused(r, "init_module", || unsafe {
        libc::syscall(
            libc::SYS_init_module,
            std::ptr::null::<u8>(),
            0,
            c"".as_ptr(),
        )
    });
    refused(r, "mount", || unsafe {
        // Remount of a non-mount point: EINVAL once past the capability check.
        libc::mount(
            std::ptr::null(),
            c".".as_ptr(),
            std::ptr::null(),
            libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY,
            std::ptr::null(),
        ) as i64
    });
}

/// Calls a dangerous interface: refused by policy is a pass; success or any
/// argument error means it is reachable.
fn refused(r: &mut Reporter, name: &str, call: impl FnOnce() -> i64) {
    let rc = call();
    if rc >= 0 {
        if name == "perf_event_open" || name == "userfaultfd" {
            // SAFETY: closing the fd the breach gave us.
            unsafe { libc::close(rc as i32) };
        }
        r.check(name, ProbeStatus::Fail, format!("{name} succeeded"));
        return;
    }
    let e = errno();
    if [libc::EPERM, libc::EACCES].contains(&e) {
        r.check(
            name,
            ProbeStatus::Pass,
            format!("refused ({})", errno_name(e)),
        );
    } else if e == libc::ENOSYS {
        r.check(name, ProbeStatus::Pass, "not present (ENOSYS)");
    } else {
        r.check(
            name,
            ProbeStatus::Fail,
            format!(
                "reachable: failed only on its arguments ({})",
                errno_name(e)
            ),
        );
    }
}
