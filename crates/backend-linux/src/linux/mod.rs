//! The Linux implementation: probes, `wrap`, and the pre-exec hook.

use std::collections::BTreeMap;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::Command;

use cordon_core::{Availability, Limits, Network, SandboxPolicy, WrapError};

use crate::{Layers, SANDBOX_GID, SANDBOX_UID};

mod filter;
mod probe;
mod rules;

use rules::{Grant, PathRule};

const NAME: &str = "linux";

fn wrap_err(message: impl Into<String>) -> WrapError {
    WrapError::new(NAME, message)
}

/// Why the backend cannot run here, one reason per missing mechanism.
fn missing() -> Vec<String> {
    let mut reasons = Vec::new();
    if let Err(r) = probe::landlock_abi() {
        reasons.push(r);
    }
    if let Err(r) = probe::seccomp() {
        reasons.push(r);
    }
    if let Err(r) = filter::programs() {
        reasons.push(r);
    }
    if let Err(r) = probe::user_namespaces() {
        reasons.push(r);
    }
    reasons
}

pub(crate) fn availability() -> Availability {
    let reasons = missing();
    if reasons.is_empty() {
        if let Ok(abi) = probe::landlock_abi() {
            if abi < probe::SCOPING_ABI {
                tracing::warn!(
                    landlock_abi = abi,
                    "Landlock ABI < 6: signal and abstract UNIX socket scoping are missing; \
                     conformance probe P1 will fail"
                );
            }
        }
        Availability::Available
    } else {
        Availability::Unavailable {
            reason: reasons.join("; "),
        }
    }
}

pub(crate) fn host_facts(_layers: Layers) -> BTreeMap<String, String> {
    let mut f = BTreeMap::new();
    match probe::landlock_abi() {
        Ok(abi) => {
            f.insert("landlock_abi".into(), abi.to_string());
            f.insert(
                "landlock_scoping".into(),
                if abi >= probe::SCOPING_ABI {
                    "signal, abstract_unix_socket".into()
                } else {
                    format!(
                        "missing: Landlock ABI {abi} < 6 has no signal or abstract UNIX socket \
                         scoping, so P1 will fail (upgrade to Linux >= 6.12)"
                    )
                },
            );
            f.insert(
                "landlock_net".into(),
                if abi >= 4 {
                    "tcp bind/connect denied".into()
                } else {
                    "missing (ABI < 4): TCP is denied by seccomp only".into()
                },
            );
        }
        Err(r) => {
            f.insert("landlock_abi".into(), format!("unavailable: {r}"));
        }
    }
    f.insert(
        "seccomp".into(),
        match probe::seccomp() {
            Ok(()) => "filter".into(),
            Err(r) => format!("unavailable: {r}"),
        },
    );
    f.insert(
        "user_namespaces".into(),
        match probe::user_namespaces() {
            Ok(()) => "yes".into(),
            Err(r) => format!("no: {r}"),
        },
    );
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    f.insert("uid".into(), uid.to_string());
    f.insert(
        "sandbox_uid".into(),
        if uid == 0 { SANDBOX_UID } else { uid }.to_string(),
    );
    f.insert("arch".into(), std::env::consts::ARCH.into());
    f
}

/// Everything the child needs, computed in the parent. Moved into the
/// pre-exec closure, so it lives exactly as long as the `Command`.
struct ChildPlan {
    drop_to_nobody: bool,
    parent_pid: libc::pid_t,
    rlimits: [(libc::__rlimit_resource_t, Option<u64>); 6],
    last_cap: libc::c_ulong,
    ruleset: OwnedFd,
    /// The seccomp filters, in install order.
    seccomp: Vec<filter::Program>,
}

fn rlimits(l: &Limits) -> [(libc::__rlimit_resource_t, Option<u64>); 6] {
    [
        (libc::RLIMIT_NPROC, l.max_processes),
        (libc::RLIMIT_AS, l.memory_bytes),
        (libc::RLIMIT_NOFILE, l.open_files),
        (libc::RLIMIT_CPU, l.cpu_seconds),
        (libc::RLIMIT_FSIZE, l.file_size_bytes),
        (libc::RLIMIT_CORE, Some(0)),
    ]
}

pub(crate) fn wrap(
    cmd: &mut Command,
    policy: &SandboxPolicy,
    layers: Layers,
) -> Result<(), WrapError> {
    wrap_inner(cmd, policy, layers).inspect_err(|e| {
        tracing::warn!(error = %e, "linux backend refused to confine a child; nothing will run");
    })
}

fn wrap_inner(cmd: &mut Command, policy: &SandboxPolicy, layers: Layers) -> Result<(), WrapError> {
    match policy.network {
        Network::Deny => {}
        other => {
            return Err(wrap_err(format!(
                "network policy {other:?} is not supported by the Linux backend (only Deny): \
                 upgrade cordon-backend-linux or use Network::Deny"
            )))
        }
    }

    let abi = probe::landlock_abi().map_err(wrap_err)?;
    probe::seccomp().map_err(wrap_err)?;

    // Paths: canonical, existing; the scratch dir must be a directory.
    let mut path_rules: Vec<PathRule> = Vec::new();
    let (scratch, scratch_is_dir) =
        rules::canonical_grant("scratch", &policy.scratch_dir).map_err(wrap_err)?;
    if !scratch_is_dir {
        return Err(wrap_err(format!(
            "scratch path `{}` is not a directory",
            policy.scratch_dir.display()
        )));
    }
    path_rules.push(PathRule {
        path: scratch.clone(),
        is_dir: true,
        grant: Grant::Scratch,
    });
    for f in &policy.program_files {
        let (path, is_dir) = rules::canonical_grant("program", f).map_err(wrap_err)?;
        path_rules.push(PathRule {
            path,
            is_dir,
            grant: Grant::ReadExec,
        });
    }
    if let Some(pkg) = &policy.package_dir {
        let (path, is_dir) = rules::canonical_grant("package", pkg).map_err(wrap_err)?;
        path_rules.push(PathRule {
            path,
            is_dir,
            grant: Grant::ReadExec,
        });
    }
    for p in &policy.read_only {
        let (path, is_dir) = rules::canonical_grant("read-only grant", p).map_err(wrap_err)?;
        path_rules.push(PathRule {
            path,
            is_dir,
            grant: Grant::ReadOnly,
        });
    }
    for p in &policy.read_write {
        let (path, is_dir) = rules::canonical_grant("read-write grant", p).map_err(wrap_err)?;
        path_rules.push(PathRule {
            path,
            is_dir,
            grant: Grant::ReadWrite,
        });
    }
    rules::check_no_read_only_under_writable(&path_rules).map_err(wrap_err)?;
    path_rules.extend(rules::system_rules());

    let ruleset = rules::build(abi, &path_rules).map_err(wrap_err)?;
    let seccomp = if layers.seccomp_allowlist {
        filter::programs()
    } else {
        filter::legacy_programs()
    }
    .map_err(wrap_err)?;
    if seccomp.is_empty() {
        return Err(wrap_err(
            "no seccomp filter was built: refusing to run unfiltered",
        ));
    }

    // SAFETY: geteuid/getpid have no preconditions.
    let drop_to_nobody = unsafe { libc::geteuid() } == 0;
    // Only a scratch dir the runner made for this child is handed to the
    // sandbox uid; a caller's own dir is left as it is (it must already be
    // writable by that uid).
    if drop_to_nobody && policy.scratch_is_fresh {
        std::os::unix::fs::chown(&scratch, Some(SANDBOX_UID), Some(SANDBOX_GID)).map_err(|e| {
            wrap_err(format!(
                "cannot give the scratch dir `{}` to uid {SANDBOX_UID}: {e}",
                scratch.display()
            ))
            .with_source(e)
        })?;
    }

    let plan = ChildPlan {
        drop_to_nobody,
        // SAFETY: as above.
        parent_pid: unsafe { libc::getpid() },
        rlimits: rlimits(&policy.limits),
        last_cap: probe::last_cap(),
        ruleset,
        seccomp,
    };

    tracing::debug!(
        landlock_abi = abi,
        rules = path_rules.len(),
        scratch = %scratch.display(),
        drop_to_nobody,
        seccomp_insns = plan.seccomp.iter().map(Vec::len).sum::<usize>(),
        "linux backend confining child"
    );

    // SAFETY: `confine` only issues raw syscalls on data prepared above and
    // builds io::Error from errno (no allocation): async-signal-safe.
    unsafe {
        cmd.pre_exec(move || confine(&plan));
    }
    Ok(())
}

/// `struct __user_cap_header_struct`.
#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

/// `struct __user_cap_data_struct`.
#[repr(C)]
#[derive(Clone, Copy)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;

fn check(r: libc::c_int) -> std::io::Result<()> {
    if r < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(())
    }
}

fn check_long(r: libc::c_long) -> std::io::Result<()> {
    if r < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Runs in the child between fork and exec. Async-signal-safe: raw
/// syscalls only, no allocation, no locks. Any error aborts the spawn.
fn confine(plan: &ChildPlan) -> std::io::Result<()> {
    // SAFETY: every call below is a raw syscall on integers or on memory
    // owned by `plan`, which outlives the call.
    unsafe {
        // (1) Root host: become nobody, with no supplementary groups.
        if plan.drop_to_nobody {
            check(libc::setgroups(0, std::ptr::null()))?;
            check(libc::setresgid(SANDBOX_GID, SANDBOX_GID, SANDBOX_GID))?;
            check(libc::setresuid(SANDBOX_UID, SANDBOX_UID, SANDBOX_UID))?;
        }
        // (2) A user namespace of our own: RLIMIT_NPROC then counts only the
        // sandbox's processes.
        check(libc::unshare(libc::CLONE_NEWUSER))?;
        // (3) Credential changes cleared the parent-death signal.
        check(libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGKILL as libc::c_ulong,
            0,
            0,
            0,
        ))?;
        if libc::getppid() != plan.parent_pid {
            return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
        }
        // (4) Resource limits (soft = hard), never above the current hard
        // limit (raising it would need CAP_SYS_RESOURCE on the host).
        for (resource, value) in plan.rlimits {
            let Some(value) = value else { continue };
            let mut cur = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            check(libc::getrlimit(resource, &mut cur))?;
            let v = (value as libc::rlim_t).min(cur.rlim_max);
            let new = libc::rlimit {
                rlim_cur: v,
                rlim_max: v,
            };
            check(libc::setrlimit(resource, &new))?;
        }
        // (5) No capabilities: ambient, bounding set, then the sets.
        check(libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
            0,
            0,
            0,
        ))?;
        let mut cap: libc::c_ulong = 0;
        while cap <= plan.last_cap {
            check(libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0))?;
            cap += 1;
        }
        let header = CapHeader {
            version: LINUX_CAPABILITY_VERSION_3,
            pid: 0,
        };
        let data = [CapData {
            effective: 0,
            permitted: 0,
            inheritable: 0,
        }; 2];
        check_long(libc::syscall(
            libc::SYS_capset,
            &header as *const CapHeader,
            data.as_ptr(),
        ))?;
        // (6) No privilege gain through exec (setuid, file caps).
        check(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))?;
        // (7) Landlock.
        check_long(libc::syscall(
            libc::SYS_landlock_restrict_self,
            plan.ruleset.as_raw_fd(),
            0u32,
        ))?;
        // (8) seccomp, last, in the order `filter` gives.
        for prog in &plan.seccomp {
            let fprog = libc::sock_fprog {
                len: prog.len() as libc::c_ushort,
                filter: prog.as_ptr() as *mut libc::sock_filter,
            };
            check_long(libc::syscall(
                libc::SYS_seccomp,
                libc::SECCOMP_SET_MODE_FILTER as libc::c_ulong,
                0 as libc::c_ulong,
                &fprog as *const libc::sock_fprog,
            ))?;
        }
    }
    Ok(())
}
