//! The Linux implementation: probes, `wrap`, and the pre-exec hook.

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use cordon_core::egress::PROXY_PORT;
use cordon_core::{Limits, SandboxPolicy, WrapError};

use crate::Layers;

mod caps;
mod cgroup;
mod confine;
mod creds;
mod facts;
mod landlock_rules;
mod maps;
mod mounts;
mod namespaces;
mod net;
mod plan;
mod probe;
mod quotas;
mod rlimits;
mod seccomp;
mod sys;
mod tree;
pub(crate) mod uid;

pub(crate) use confine::Step;
pub(crate) use facts::{availability, host_facts};
use landlock_rules::{Grant, PathRule};
use maps::IdMaps;
pub(crate) use mounts::shared_mountpoint;
use mounts::MountPlan;
use plan::ChildPlan;
use uid::SandboxIds;

const NAME: &str = "linux";

fn wrap_err(message: impl Into<String>) -> WrapError {
    WrapError::new(NAME, message)
}

/// The system directories every sandbox may read and execute from.
pub(crate) fn exec_dirs() -> Vec<PathBuf> {
    landlock_rules::SYSTEM_EXEC_DIRS
        .iter()
        .map(PathBuf::from)
        .collect()
}

/// The seccomp filters, compiled once per process: they depend on nothing
/// but the architecture and the layer set, and compiling them on every
/// spawn cost more than the rest of `wrap`.
/// `egress`: the variant for an egress allowlist (TCP sockets allowed;
/// the legacy pair already allows them).
fn compiled_filters(allowlist: bool, egress: bool) -> Result<Arc<Vec<seccomp::Program>>, String> {
    type Compiled = Result<Arc<Vec<seccomp::Program>>, String>;
    static FULL: OnceLock<Compiled> = OnceLock::new();
    static EGRESS: OnceLock<Compiled> = OnceLock::new();
    static LEGACY: OnceLock<Compiled> = OnceLock::new();
    if allowlist && egress {
        EGRESS
            .get_or_init(|| seccomp::egress_programs().map(Arc::new))
            .clone()
    } else if allowlist {
        FULL.get_or_init(|| seccomp::programs().map(Arc::new))
            .clone()
    } else {
        LEGACY
            .get_or_init(|| seccomp::legacy_programs().map(Arc::new))
            .clone()
    }
}

pub(crate) use namespaces::{names as namespace_names, unshare_flags};

/// The smallest sandbox-wide memory limit a sandbox is started with.
/// Until its exec the program shares the host's memory, and what the
/// kernel charges for its set-up (namespaces, mounts, filters, the exec
/// itself) counts against the sandbox's cgroup: were that to reach the
/// limit, the OOM killer would pick the process whose memory is the
/// host's, and kill every process that shares it, the host included. The
/// set-up needs well under a megabyte; no program starts in less than this.
pub(crate) const MIN_SANDBOX_MEMORY: u64 = 16 << 20;

/// Refuses a sandbox-wide memory limit below [`MIN_SANDBOX_MEMORY`].
fn check_memory_floor(limits: &Limits) -> Result<(), WrapError> {
    match limits.memory_bytes {
        Some(bytes) if bytes < MIN_SANDBOX_MEMORY => Err(wrap_err(format!(
            "a memory limit of {bytes} bytes is below the {} MiB a sandbox needs to start \
             (the kernel charges its set-up to the sandbox before the program runs): raise \
             memory_bytes (cordon run --mem)",
            MIN_SANDBOX_MEMORY >> 20
        ))),
        _ => Ok(()),
    }
}

pub(crate) fn wrap(
    cmd: &mut cordon_core::ChildCommand,
    policy: &SandboxPolicy,
    layers: Layers,
    pool: Result<&uid::UidPool, &str>,
) -> Result<cordon_core::WrapResources, WrapError> {
    wrap_inner(cmd, policy, layers, pool).inspect_err(|e| {
        tracing::warn!(error = %e, "linux backend refused to confine a child; nothing will run");
    })
}

fn wrap_inner(
    cmd: &mut cordon_core::ChildCommand,
    policy: &SandboxPolicy,
    layers: Layers,
    pool: Result<&uid::UidPool, &str>,
) -> Result<cordon_core::WrapResources, WrapError> {
    let allow_hosts = net::allowlist(&policy.network, layers).map_err(wrap_err)?;

    let abi = probe::landlock_abi().map_err(wrap_err)?;
    probe::seccomp().map_err(wrap_err)?;

    // Paths: canonical, existing; the scratch dir must be a directory.
    let mut path_rules: Vec<PathRule> = Vec::new();
    let (scratch, scratch_is_dir) =
        landlock_rules::canonical_grant("scratch", &policy.scratch_dir).map_err(wrap_err)?;
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
        optional: false,
    });
    for f in &policy.program_files {
        let (path, is_dir) = landlock_rules::canonical_grant("program", f).map_err(wrap_err)?;
        path_rules.push(PathRule {
            path,
            is_dir,
            grant: Grant::ReadExec,
            optional: false,
        });
    }
    if let Some(pkg) = &policy.package_dir {
        let (path, is_dir) = landlock_rules::canonical_grant("package", pkg).map_err(wrap_err)?;
        path_rules.push(PathRule {
            path,
            is_dir,
            grant: Grant::ReadExec,
            optional: false,
        });
    }
    for p in &policy.read_only {
        let (path, is_dir) =
            landlock_rules::canonical_grant("read-only grant", p).map_err(wrap_err)?;
        path_rules.push(PathRule {
            path,
            is_dir,
            grant: Grant::ReadOnly,
            optional: false,
        });
    }
    for p in &policy.read_write {
        let (path, is_dir) =
            landlock_rules::canonical_grant("read-write grant", p).map_err(wrap_err)?;
        path_rules.push(PathRule {
            path,
            is_dir,
            grant: Grant::ReadWrite,
            optional: false,
        });
    }
    landlock_rules::check_no_read_only_under_writable(&path_rules).map_err(wrap_err)?;
    // A scratch dir backed by a private tmpfs gets its Landlock rule in the
    // child, on the tmpfs root (see landlock_rules::add_scratch_rule): a rule on the
    // host directory underneath would not apply to it.
    let scratch_is_private = layers.mount_namespace && !policy.scratch_persists;
    if scratch_is_private {
        path_rules.retain(|r| r.grant != Grant::Scratch);
    }
    let read_write: Vec<PathBuf> = path_rules
        .iter()
        .filter(|r| r.grant == Grant::ReadWrite)
        .map(|r| r.path.clone())
        .collect();
    path_rules.extend(landlock_rules::system_rules());

    let connect_port = allow_hosts.as_ref().map(|_| PROXY_PORT);
    let ruleset = landlock_rules::build(abi, &path_rules, connect_port).map_err(wrap_err)?;
    let seccomp =
        compiled_filters(layers.seccomp_allowlist, allow_hosts.is_some()).map_err(wrap_err)?;
    if seccomp.is_empty() {
        return Err(wrap_err(
            "no seccomp filter was built: refusing to run unfiltered",
        ));
    }

    // SAFETY: geteuid/getegid/getpid have no preconditions.
    let (euid, egid, parent_pid) = unsafe { (libc::geteuid(), libc::getegid(), libc::getpid()) };
    let ids = SandboxIds::choose((euid, egid), layers, pool).map_err(wrap_err)?;
    // Every host directory the sandbox may write is, on a root host,
    // mounted idmapped from the caller's ids to the sandbox's (mounts.rs):
    // what it creates there is the caller's.
    let persistent_writable = policy.scratch_persists || !read_write.is_empty();
    let idmap = if ids.root_host && layers.mount_namespace && persistent_writable {
        Some(mounts::Idmap::new((euid, egid), ids.host).map_err(wrap_err)?)
    } else {
        None
    };
    let mounts = if layers.mount_namespace {
        let rw: Vec<&std::path::Path> = read_write.iter().map(PathBuf::as_path).collect();
        Some(
            MountPlan::prepare(policy, &scratch, &rw, ids.inside, idmap.as_ref())
                .map_err(wrap_err)?,
        )
    } else {
        None
    };
    debug_assert_eq!(
        scratch_is_private,
        mounts.as_ref().is_some_and(MountPlan::scratch_is_private)
    );
    // Without a mount namespace (test layers only) a fresh scratch is the
    // host's dir itself: the sandbox's uid must own it.
    if ids.root_host && policy.scratch_is_fresh && !layers.mount_namespace {
        std::os::unix::fs::chown(&scratch, Some(ids.host.0), Some(ids.host.1)).map_err(|e| {
            wrap_err(format!(
                "cannot give the scratch dir `{}` to uid {}: {e}",
                scratch.display(),
                ids.host.0
            ))
            .with_source(e)
        })?;
    }

    // Sandbox-wide limits: a cgroup where this process can make one.
    let cgroup = match (layers.sandbox_limits, cgroup::hierarchy()) {
        (true, Some(h)) => Some({
            check_memory_floor(&policy.limits)?;
            cgroup::SandboxCgroup::create(h, &policy.limits).map_err(|e| {
                wrap_err(format!(
                    "cannot make the sandbox's cgroup under {h:?}: {e}; nothing was run"
                ))
                .with_source(e)
            })?
        }),
        _ => None,
    };
    let cgroup_join = cgroup
        .as_ref()
        .map(cgroup::SandboxCgroup::join_fds)
        .unwrap_or_default();
    // The memory of the init and the status it leaves (held by the
    // resources for the child's whole life).
    let id_maps = layers
        .mount_namespace
        .then(|| IdMaps::new(ids.inside, ids.host));
    // A root host's maps are written by a helper that stays root (maps.rs),
    // on the slot's stack.
    let map_writer = ids.root_host && id_maps.is_some();
    let tree = if layers.pid_namespace || map_writer {
        Some(tree::TreeSlot::reserve().map_err(|e| {
            wrap_err(format!("cannot reserve the sandbox's init stack: {e}")).with_source(e)
        })?)
    } else {
        None
    };
    if ids.root_host {
        // The launcher, the init and the program until its exec share this
        // process's memory while they run as the sandbox's uid: were it
        // dumpable, a process of that uid could trace them and write it
        // (maps.rs). No host process has a sandbox's own uid; this holds
        // for the shared uid of the test layers too.
        // SAFETY: prctl on integers.
        if unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) } != 0 {
            let e = std::io::Error::last_os_error();
            return Err(wrap_err(format!(
                "cannot make this process non-dumpable, which a root host must be before it \
                 starts sandboxes: {e}"
            ))
            .with_source(e));
        }
    }
    // The egress allowlist: a network namespace of its own, whose listener
    // comes out over a socketpair (net.rs), and the proxy variables.
    let (egress_plan, egress_session) = match allow_hosts {
        Some(hosts) => {
            let (plan, session) = net::prepare(cmd, hosts).map_err(|e| {
                wrap_err(format!("cannot make the egress proxy's socketpair: {e}")).with_source(e)
            })?;
            (Some(plan), Some(session))
        }
        None => (None, None),
    };
    let mut unshare = unshare_flags(layers);
    let quotas = layers.kernel_quotas.then(quotas::QuotaPlan::new);
    if egress_plan.is_some() {
        unshare |= libc::CLONE_NEWNET;
    }
    let plan = ChildPlan {
        cgroup_join,
        drop_to: ids.root_host.then_some(ids.host),
        parent_pid,
        unshare_flags: unshare,
        id_maps,
        mounts,
        quotas,
        hostname: layers.uts_namespace,
        scratch_rights: landlock_rules::rights(landlock::ABI::from(abi), Grant::Scratch, true)
            .bits(),
        rlimits: rlimits::plan(&policy.limits, layers, cgroup.is_some()),
        last_cap: probe::last_cap(),
        ruleset,
        seccomp,
        tree_slot: tree
            .as_ref()
            .filter(|_| layers.pid_namespace)
            .map(tree::TreeSlot::addr),
        map_writer_stack: tree
            .as_ref()
            .filter(|_| map_writer)
            .map(tree::TreeSlot::stack_top),
        egress: egress_plan,
    };

    tracing::debug!(
        landlock_abi = abi,
        rules = path_rules.len(),
        scratch = %scratch.display(),
        scratch_is_private,
        sandbox_uid = ids.host.0,
        ?layers,
        seccomp_insns = plan.seccomp.iter().map(Vec::len).sum::<usize>(),
        "linux backend confining child"
    );

    // SAFETY: `confine` only issues raw syscalls on data prepared above and
    // builds io::Error from errno (no allocation): async-signal-safe.
    unsafe {
        cmd.pre_exec(move |ctx| confine::confine(&plan, ctx));
    }
    Ok(
        (layers.sandbox_limits
            || tree.is_some()
            || egress_session.is_some()
            || ids.lease.is_some())
        .then(|| {
            Box::new(cgroup::LinuxResources::new(
                cgroup,
                layers.sandbox_limits && layers.pid_namespace,
                tree,
                egress_session,
                ids.lease,
            )) as Box<dyn cordon_core::SandboxResources>
        }),
    )
}
