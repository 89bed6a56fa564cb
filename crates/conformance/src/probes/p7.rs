//! P7 — no privilege re-escalation. The child calls bpf, perf_event_open,
//! userfaultfd, keyctl, kexec_load, init_module and mount, then tries
//! `setuid(0)` and `unshare(CLONE_NEWUSER)`, and is held; the host reads the
//! live program's `/proc/<pid>/status` and namespace links:
//! `NoNewPrivs` is 1, `Seccomp` is 2 (a filter is installed), the
//! effective, permitted, inheritable, bounding and ambient capability sets
//! are empty, no uid or gid is 0 (as the host sees them, so a uid 0 that is
//! only root inside a user namespace is not mistaken for the host's root,
//! and the real one is caught), and its user namespace is the one it had
//! before (`unshare` made none, whatever errno it gave).
//!
//! Each dangerous interface is called so that a refusal by policy
//! (`EPERM`/`EACCES`, from seccomp or a missing capability) is told apart
//! from a call that got through to argument checking (`EINVAL`, `EFAULT`,
//! ...), which means the interface is reachable: a `Fail`. `ENOSYS` counts
//! as refused only when the host saw `ENOSYS` too (the kernel lacks the
//! call, see `kernel.rs`); where the kernel has it, `ENOSYS` came from a
//! filter and is `Unreachable`: a filter must answer `EPERM`. The arguments
//! are chosen so that a reachable call still changes nothing.

use std::collections::BTreeMap;

use cordon_core::{CheckResult, Evidence, ProbeId, ProbeStatus};

use crate::child::{errno, errno_name, Reporter};
use crate::harness::{unreachable, verdict, ProbeContext, Hold};
use crate::inspect;
use crate::kernel;
use crate::registry::{manifest, HostConditions, Manifest, Probe, ProbeArgs};

/// P7 in the registry (`probes/mod.rs`).
pub(crate) struct P7;

#[async_trait::async_trait]
impl Probe for P7 {
    fn id(&self) -> ProbeId {
        ProbeId::P7
    }

    fn title(&self) -> &'static str {
        "No privilege re-escalation"
    }

    fn checks(&self, _: &HostConditions) -> Manifest {
        manifest(CHECKS)
    }

    async fn host(&self, ctx: &ProbeContext) -> Vec<CheckResult> {
        let mut user_ns_before = None;
        let mut on_hold = |h: &Hold<'_>| {
            let Some(pid) = h.pid else {
                let names: &[&str] = if h.label == "before" {
                    &BEFORE_CHECKS
                } else {
                    &AFTER_CHECKS
                };
                return names
                    .iter()
                    .map(|n| unreachable(n, "the program was not found by its token"))
                    .collect();
            };
            if h.label == "before" {
                user_ns_before = inspect::namespace(pid, "user");
                before(pid)
            } else {
                after(pid, user_ns_before)
            }
        };
        let run = ctx
            .run_held(
                "P7",
                &[("kernel_missing".into(), ctx.kernel.missing_arg())],
                &mut on_hold,
            )
            .await;
        let mut checks = run.missed_hold("before", &BEFORE_CHECKS);
        checks.extend(run.missed_hold("after", &AFTER_CHECKS));
        checks.extend(run.into_checks());
        checks
    }

    fn child(&self, r: &mut Reporter, args: &ProbeArgs) {
        let missing: Vec<&str> = args
            .get("kernel_missing")
            .map(|s| s.split(',').filter(|n| !n.is_empty()).collect())
            .unwrap_or_default();
        r.hold("before");
        for (name, call) in kernel::CALLS {
            if name == "io_uring_setup" {
                continue; // P4's business.
            }
            refused(r, name, kernel::try_call(call), &missing);
        }
        // Remount of a fresh, empty dir that is not a mount point: EINVAL once
        // past the capability check, and nothing to change even if reached.
        let _ = std::fs::create_dir("mnt-target");
        // SAFETY: valid C strings; a remount of a non-mount point.
        let rc = unsafe {
            libc::mount(
                std::ptr::null(),
                c"mnt-target".as_ptr(),
                std::ptr::null(),
                libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY,
                std::ptr::null(),
            )
        };
        refused(
            r,
            "mount",
            if rc == 0 { Ok(()) } else { Err(errno()) },
            &missing,
        );

        // Last, and judged by the host: a breach here would change what this
        // process may do in the calls above.
        // SAFETY: setuid(0) either fails or (on a breach) changes nothing that
        // outlives this probe process.
        let rc = unsafe { libc::setuid(0) };
        r.info(
            "setuid-0",
            if rc == 0 {
                "succeeded".to_string()
            } else {
                errno_name(errno())
            },
        );
        // SAFETY: as above, for a new user namespace.
        let rc = unsafe { libc::unshare(libc::CLONE_NEWUSER) };
        r.info(
            "unshare-user",
            if rc == 0 {
                "succeeded".to_string()
            } else {
                errno_name(errno())
            },
        );
        r.hold("after");
    }
}

/// Every check P7 makes on any host.
const CHECKS: &[(&str, Evidence)] = &[
    ("no-new-privs", Evidence::Host),
    ("seccomp-filter", Evidence::Host),
    ("capability-sets", Evidence::Host),
    ("bounding-set", Evidence::Host),
    ("ambient-set", Evidence::Host),
    ("bpf", Evidence::Child),
    ("perf_event_open", Evidence::Child),
    ("userfaultfd", Evidence::Child),
    ("keyctl", Evidence::Child),
    ("kexec_load", Evidence::Child),
    ("init_module", Evidence::Child),
    ("mount", Evidence::Child),
    ("setuid-0", Evidence::Host),
    ("new-user-namespace", Evidence::Host),
];

/// The checks the host makes at hold `before`: how the program runs.
const BEFORE_CHECKS: [&str; 5] = [
    "no-new-privs",
    "seccomp-filter",
    "capability-sets",
    "bounding-set",
    "ambient-set",
];

/// The checks the host makes at hold `after`: what the attempts changed.
const AFTER_CHECKS: [&str; 2] = ["setuid-0", "new-user-namespace"];

/// Parses a `Cap*` hex mask.
fn caps(status: &BTreeMap<String, String>, key: &str) -> Option<u64> {
    u64::from_str_radix(status.get(key)?, 16).ok()
}

/// The host's checks at hold `before`, from the program's status.
fn before(pid: i32) -> Vec<CheckResult> {
    let Some(st) = inspect::status(pid) else {
        return BEFORE_CHECKS
            .iter()
            .map(|n| unreachable(n, "cannot read the program's status"))
            .collect();
    };
    let field = |k: &str| st.get(k).cloned().unwrap_or_else(|| "absent".into());
    let mut out = vec![
        verdict(
            "no-new-privs",
            field("NoNewPrivs") == "1",
            format!("NoNewPrivs = {}", field("NoNewPrivs")),
        ),
        {
            // More filters than the host itself runs under: a host already
            // inside a seccomp filter (a container) passes its own to
            // every child, which shows nothing of the backend's.
            let host = crate::host_state::HostConfinement::current().filters();
            let program: u64 = field("Seccomp_filters").parse().unwrap_or(0);
            verdict(
                "seccomp-filter",
                field("Seccomp") == "2" && program > host,
                format!(
                    "Seccomp = {} (2 = filter), {program} filter(s); the host runs under {host}",
                    field("Seccomp"),
                ),
            )
        },
    ];
    let sets: Vec<(&str, Option<u64>)> = ["CapInh", "CapPrm", "CapEff"]
        .iter()
        .map(|k| (*k, caps(&st, k)))
        .collect();
    out.push(if sets.iter().any(|(_, v)| v.is_none()) {
        unreachable("capability-sets", "Cap* lines missing from the status")
    } else {
        let held: Vec<String> = sets
            .iter()
            .filter(|(_, v)| *v != Some(0))
            .map(|(k, v)| format!("{k} {:016x}", v.unwrap_or(0)))
            .collect();
        verdict(
            "capability-sets",
            held.is_empty(),
            if held.is_empty() {
                "effective, permitted and inheritable are empty".to_string()
            } else {
                format!("non-empty: {}", held.join(", "))
            },
        )
    });
    for (name, key) in [("bounding-set", "CapBnd"), ("ambient-set", "CapAmb")] {
        out.push(match caps(&st, key) {
            Some(v) => verdict(name, v == 0, format!("{key} = {v:016x}")),
            None => unreachable(name, format!("no {key} line in the status")),
        });
    }
    out
}

/// The host's checks at hold `after`: no uid or gid 0, the same user
/// namespace as at `before`.
fn after(pid: i32, user_ns_before: Option<u64>) -> Vec<CheckResult> {
    let Some(st) = inspect::status(pid) else {
        return AFTER_CHECKS
            .iter()
            .map(|n| unreachable(n, "cannot read the program's status"))
            .collect();
    };
    let field = |k: &str| st.get(k).cloned().unwrap_or_else(|| "absent".into());
    let (uids, gids) = (field("Uid"), field("Gid"));
    let root = uids
        .split_whitespace()
        .chain(gids.split_whitespace())
        .any(|v| v == "0");
    vec![
        verdict(
            "setuid-0",
            !root,
            format!("after setuid(0): uids {uids}, gids {gids}"),
        ),
        match (user_ns_before, inspect::namespace(pid, "user")) {
            (Some(a), Some(b)) => verdict(
                "new-user-namespace",
                a == b,
                if a == b {
                    "the program is still in its own user namespace".to_string()
                } else {
                    format!("the program entered a new user namespace ({a} -> {b})")
                },
            ),
            _ => unreachable(
                "new-user-namespace",
                "cannot read the program's user namespace",
            ),
        },
    ]
}

/// Judges a dangerous call: refused by policy is a pass; success or any
/// argument error means it is reachable; `ENOSYS` see the module doc.
fn refused(r: &mut Reporter, name: &str, res: Result<(), i32>, kernel_missing: &[&str]) {
    match res {
        Ok(()) => r.check(name, ProbeStatus::Fail, format!("{name} succeeded")),
        Err(e) if [libc::EPERM, libc::EACCES].contains(&e) => r.check(
            name,
            ProbeStatus::Pass,
            format!("refused ({})", errno_name(e)),
        ),
        Err(libc::ENOSYS) if kernel_missing.contains(&name) => r.check(
            name,
            ProbeStatus::Pass,
            "the kernel has no such call (the host sees ENOSYS too)",
        ),
        Err(libc::ENOSYS) => r.check(
            name,
            ProbeStatus::Unreachable,
            "ENOSYS, but the kernel has this call: a filter answered; refuse it with EPERM so \
             refusal and absence can be told apart",
        ),
        Err(e) => r.check(
            name,
            ProbeStatus::Fail,
            format!(
                "reachable: failed only on its arguments ({})",
                errno_name(e)
            ),
        ),
    }
}
