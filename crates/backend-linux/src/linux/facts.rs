//! What the backend says about this host: whether it can run here
//! (`availability`), its host facts, and the scope each limit holds at.

use std::collections::BTreeMap;

use cordon_core::Availability;

use super::tier::{self, Choice};
use super::{cgroup, namespace_names, probe, uid};
use crate::{Layers, Tier, SANDBOX_GID, SANDBOX_UID};

/// Every fact the backend's
/// [`host_facts`](cordon_core::SandboxBackend::host_facts) may report,
/// with what it says (the backend README's table is generated from this
/// list by `cargo xtask docs`). A test holds `host_facts` to it.
pub const HOST_FACTS: &[(&str, &str)] = &[
    ("arch", "the CPU architecture (`std::env::consts::ARCH`)"),
    (
        "gives_up",
        "tier landlock: the protections it does not give, by the names the conformance suite \
         reports their checks under (`hostname`, `host-pid-existence`, and on an unprivileged \
         host `capability-bounding-set`)",
    ),
    (
        "landlock_abi",
        "the kernel's Landlock ABI version, or why Landlock is unavailable",
    ),
    (
        "landlock_net",
        "whether Landlock denies TCP bind/connect (ABI ≥ 4)",
    ),
    (
        "landlock_scoping",
        "whether Landlock scopes signals and abstract UNIX sockets (ABI ≥ 6; P1 needs it)",
    ),
    (
        "layers",
        "which of the backend's layers are on (`all`, or the partial set)",
    ),
    ("limit_cpu", "the scope `cpu_ms` holds at, and how"),
    ("limit_disk", "the scope `disk_bytes` holds at, and how"),
    (
        "limit_memory",
        "the scope `memory_bytes` holds at, and how (the cgroup hierarchy used)",
    ),
    (
        "limit_processes",
        "the scope `max_processes` holds at, and how",
    ),
    (
        "mounts",
        "the sandbox's mount table, or the host's (no mount namespace)",
    ),
    (
        "namespaces",
        "the namespaces each sandbox gets, or why they are unavailable",
    ),
    ("pid1", "the sandbox's init, or none"),
    (
        "sandbox_gid",
        "the gid the program runs as, as the host sees it (no uid of its own)",
    ),
    (
        "sandbox_uid",
        "the uid the program runs as, as the host sees it (no uid of its own)",
    ),
    (
        "sandbox_uid_inside",
        "root host: the uid and gid the program has inside its user namespace",
    ),
    (
        "sandbox_uids",
        "root host: the pool a uid of its own per sandbox is leased from",
    ),
    (
        "seccomp",
        "the seccomp filter the program runs under, or why seccomp is unavailable",
    ),
    (
        "tier",
        "the tier in use (`namespaces` or `landlock`), whether it was required, and why a \
         stronger tier was passed over; `none: ...` when no tier can run here",
    ),
    ("uid", "the host process's effective uid"),
];

pub(crate) fn availability(
    layers: Layers,
    choice: &Choice,
    pool: Result<&uid::UidPool, &str>,
) -> Availability {
    let tier = match choice.tier() {
        Ok(t) => t,
        Err(reason) => return Availability::Unavailable { reason },
    };
    let reasons = tier::missing(tier, layers, pool);
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
        let required = if choice.required {
            format!("tier {tier} is required and cannot run here: ")
        } else {
            String::new()
        };
        Availability::Unavailable {
            reason: format!("{required}{}", reasons.join("; ")),
        }
    }
}

pub(crate) fn host_facts(
    layers: Layers,
    choice: &Choice,
    pool: Result<&uid::UidPool, &str>,
) -> BTreeMap<String, String> {
    let mut f = BTreeMap::new();
    let tier = choice.tier().ok();
    let landlock_tier = tier == Some(Tier::Landlock);
    f.insert("tier".into(), choice.describe());
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if landlock_tier {
        f.insert("gives_up".into(), gives_up(root).join(", "));
    }
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
    // SAFETY: geteuid/getegid have no preconditions.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    let filter = super::filter_for(layers, tier, super::Sockets::None, uid != 0);
    f.insert(
        "seccomp".into(),
        match probe::seccomp() {
            Ok(()) => filter.description().into(),
            Err(r) => format!("unavailable: {r}"),
        },
    );
    f.insert(
        "layers".into(),
        match layers {
            Layers::ALL => "all".into(),
            Layers::BASE => {
                "base (every optional layer off: fails the probes for what it leaves open)".into()
            }
            other => format!("partial {other:?} (fails the probes for what it leaves open)"),
        },
    );
    f.insert(
        "namespaces".into(),
        if landlock_tier {
            "none (tier landlock)".into()
        } else {
            match probe::namespaces(layers) {
                Ok(()) => namespace_names(layers).join(", "),
                Err(r) => format!("unavailable: {r}"),
            }
        },
    );
    f.insert(
        "pid1".into(),
        if landlock_tier {
            "none (no PID namespace): the program's parent is the sandbox's init, a subreaper \
             outside the Landlock domain, with a warden beside it; the sandbox cannot leave \
             their process group, which is killed when the program ends, the init is killed \
             or the host dies"
                .into()
        } else if layers.pid_namespace {
            "minimal init; its death kills every sandbox process".into()
        } else {
            "none: the program leads a process group in the host's PID namespace".into()
        },
    );
    f.insert(
        "mounts".into(),
        if landlock_tier {
            "the host's mount table (no mount namespace): Landlock alone decides which paths \
             the sandbox may use; the scratch is a private 0700 host dir, removed after"
                .into()
        } else if layers.mount_namespace {
            "host read-only,nosuid (private propagation); discarded scratch: private tmpfs \
             nosuid,nodev of disk_bytes; kept or caller's scratch and read-write grants: \
             nosuid,nodev binds"
                .into()
        } else {
            "the host's mount table (no mount namespace)".into()
        },
    );
    for (k, v) in limit_scopes(layers, tier.unwrap_or(Tier::Namespaces)) {
        f.insert(k.into(), v);
    }
    f.insert("uid".into(), uid.to_string());
    if uid == 0 && layers.own_uid {
        f.insert(
            "sandbox_uids".into(),
            match pool {
                Ok(p) => uid::describe(p),
                Err(e) => format!("unavailable: {e}"),
            },
        );
        f.insert(
            "sandbox_uid_inside".into(),
            if landlock_tier {
                "the same as on the host (no user namespace)".into()
            } else {
                format!("{SANDBOX_UID} (nobody), gid {SANDBOX_GID}")
            },
        );
    } else {
        f.insert(
            "sandbox_uid".into(),
            if uid == 0 { SANDBOX_UID } else { uid }.to_string(),
        );
        f.insert(
            "sandbox_gid".into(),
            if uid == 0 { SANDBOX_GID } else { gid }.to_string(),
        );
    }
    f.insert("arch".into(), std::env::consts::ARCH.into());
    f
}

/// What [`Tier::Landlock`] gives up, as the `gives_up` host fact names it
/// (`root`: the host runs as root): the protections of a namespace that no
/// other mechanism gives — the host's hostname and the existence of host
/// pids stay visible — and on an unprivileged host the capability
/// bounding set, which takes `CAP_SETPCAP` to empty (no_new_privs keeps
/// every exec from using it). The conformance suite knows each name and
/// reports the checks of that protection as given up, not as passed.
pub(crate) fn gives_up(root: bool) -> Vec<&'static str> {
    let mut v = vec!["hostname", "host-pid-existence"];
    if !root {
        v.push("capability-bounding-set");
    }
    v
}

/// The scope of each limit on this host with `layers` in `tier`:
/// `sandbox: ...` when it holds for the sandbox as a whole, `per-process:
/// ...` (or `per-file: ...`, `per-uid: ...`) when each process (file, the
/// caller's uid) has its own, and how. The conformance probe P6 tests
/// each limit at the scope claimed here, and `cordon run` warns about the
/// ones that are not sandbox-wide.
pub(crate) fn limit_scopes(layers: Layers, tier: Tier) -> Vec<(&'static str, String)> {
    let landlock_tier = tier == Tier::Landlock;
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let cgroup = if layers.sandbox_limits {
        cgroup::hierarchy()
    } else {
        None
    };
    let memory = match cgroup {
        Some(h) => format!(
            "sandbox: {} memory limit (anonymous, memfd, SysV shm and tmpfs pages all count)",
            h.describe()
        ),
        None if landlock_tier => "per-process: RLIMIT_DATA (private writable memory) and \
                 RLIMIT_AS with 3 GiB of headroom for runtimes' reservations; a memfd is capped \
                 by RLIMIT_FSIZE; SysV shared memory is refused"
            .into(),
        None => "per-process: RLIMIT_DATA (private writable memory) and RLIMIT_AS with 3 GiB of \
                 headroom for runtimes' reservations; a memfd is capped by RLIMIT_FSIZE, a \
                 discarded scratch by disk_bytes, SysV shm is freed with the sandbox's IPC \
                 namespace"
            .into(),
    };
    let processes = match (landlock_tier, root && layers.own_uid) {
        (false, _) => "sandbox: RLIMIT_NPROC counted in the sandbox's own user namespace",
        (true, true) => {
            "sandbox: RLIMIT_NPROC counted for the sandbox's own uid, which no other process has"
        }
        (true, false) => {
            "per-uid: RLIMIT_NPROC = the tasks the caller's uid had when the sandbox started + \
             max_processes (no user namespace counts the sandbox alone, so the uid's other \
             processes share that budget)"
        }
    };
    let tree_sum = layers.sandbox_limits && (layers.pid_namespace || landlock_tier);
    let cpu = match (cgroup, tree_sum) {
        (Some(h), _) => format!(
            "sandbox: {} CPU time of all its processes, enforced by the runner (RLIMIT_CPU per \
             process too)",
            h.describe()
        ),
        (None, true) => "per-process: RLIMIT_CPU; the runner also sums the CPU time of the \
                         sandbox's process tree from /proc and kills it past the limit, but a \
                         child reaped automatically (SIGCHLD ignored) escapes that sum"
            .into(),
        (None, false) => "per-process: RLIMIT_CPU (a forked child starts afresh)".into(),
    };
    let disk = if layers.mount_namespace && !landlock_tier {
        "sandbox: a discarded scratch is a private tmpfs of disk_bytes; a kept or caller's \
         scratch dir is limited only per file (RLIMIT_FSIZE)"
    } else {
        "per-file: RLIMIT_FSIZE (scratch is on the host's disk)"
    };
    vec![
        ("limit_memory", memory),
        ("limit_processes", processes.into()),
        ("limit_cpu", cpu),
        ("limit_disk", disk.into()),
    ]
}

#[cfg(test)]
mod tests {
    use super::HOST_FACTS;
    use crate::Layers;

    /// Every fact reported, under every layer set, is in [`HOST_FACTS`];
    /// the list is sorted and names each fact once.
    #[test]
    fn every_reported_fact_is_documented() {
        let names: Vec<&str> = HOST_FACTS.iter().map(|(k, _)| *k).collect();
        let mut sorted = names.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(names, sorted, "HOST_FACTS must be sorted, each name once");
        let pool = crate::UidPool::from_env();
        let pool = pool.as_ref().map_err(String::as_str);
        for layers in [Layers::ALL, Layers::BASE] {
            for tier in crate::Tier::ALL {
                let choice = super::Choice::decide(Some(tier), layers, pool);
                for key in super::host_facts(layers, &choice, pool).keys() {
                    assert!(names.contains(&key.as_str()), "{key} is not in HOST_FACTS");
                }
            }
        }
    }
}
