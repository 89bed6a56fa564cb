//! `wrap`, in the parent: checks the policy and the host, prepares
//! everything the child's steps need ([`ChildPlan`]: the Landlock ruleset,
//! the seccomp filter, the mounts, the ids and maps, the cgroup, the init's
//! memory, the egress socketpair) for the backend's tier, and installs
//! [`confine`] as the command's pre-exec hook. Any error here means
//! nothing is started.
//!
//! [`confine`]: super::confine::confine

use std::path::{Path, PathBuf};
use std::sync::Arc;

use cordon_core::{SandboxPolicy, WrapError};
use cordon_egress::PROXY_PORT;

use super::landlock_rules::{self, Grant};
use super::maps::IdMaps;
use super::mounts::{self, MountPlan};
use super::plan::ChildPlan;
use super::tier::Choice;
use super::uid::{self, SandboxIds};
use super::{
    caps, cgroup, check_memory_floor, compiled_filters, confine, explain, net, probe, quotas,
    rlimits, seccomp, tree, unshare_flags, wrap_err,
};
use crate::{Layers, Tier};

mod grants;
mod recorders;

use grants::Grants;
use recorders::explain_recorders;

pub(crate) fn wrap(
    cmd: &mut cordon_core::ChildCommand,
    policy: &SandboxPolicy,
    layers: Layers,
    choice: &Choice,
    pool: Result<&uid::UidPool, &str>,
) -> Result<cordon_core::WrapResources, WrapError> {
    wrap_inner(cmd, policy, layers, choice, pool).inspect_err(|e| {
        tracing::warn!(error = %e, "linux backend refused to confine a child; nothing will run");
    })
}

fn wrap_inner(
    cmd: &mut cordon_core::ChildCommand,
    policy: &SandboxPolicy,
    layers: Layers,
    choice: &Choice,
    pool: Result<&uid::UidPool, &str>,
) -> Result<cordon_core::WrapResources, WrapError> {
    let tier = choice.tier().map_err(wrap_err)?;
    let landlock_tier = tier == Tier::Landlock;
    // SAFETY: geteuid/getegid/getpid have no preconditions.
    let (euid, egid, parent_pid) = unsafe { (libc::geteuid(), libc::getegid(), libc::getpid()) };
    if landlock_tier {
        landlock_tier_admits(policy, euid == 0)?;
    }
    if let Some(root) = &policy.container {
        if landlock_tier || !layers.mount_namespace || !layers.pid_namespace {
            return Err(wrap_err(
                "entering a container's root needs mount and PID namespaces of the sandbox's \
                 own: tier namespaces with every layer",
            ));
        }
        root.check().map_err(wrap_err)?;
    }
    // Entering a running container (an OCI runtime's `exec`): its
    // namespaces, maps, mounts and egress listener exist; the sandbox
    // joins them (container/join.rs) and makes the rest as any other.
    let joining = policy.container.as_ref().and_then(|r| r.enter);
    if joining.is_some() && policy.explain {
        return Err(wrap_err(
            "explain mode when entering a running container is not supported",
        ));
    }
    // A PID namespace too: every process of the sandbox is gone when the
    // program's wait returns, so none still writes the layer the host
    // then reads.
    if !policy.reviewed.is_empty()
        && (landlock_tier || !layers.mount_namespace || !layers.pid_namespace)
    {
        return Err(wrap_err(
            "a reviewed directory (--rw-review) needs a mount namespace to put its layer over \
             it: tier namespaces with every layer (tier landlock would have the program write \
             the directory itself); allow user namespaces, or grant it with --rw",
        ));
    }
    if !policy.placed.is_empty() && (landlock_tier || !layers.mount_namespace) {
        return Err(wrap_err(
            "placing a file over one the sandbox sees (the credential broker's trust bundle) \
             needs a mount namespace: tier namespaces with every layer",
        ));
    }
    if !policy.masked.is_empty() && (landlock_tier || !layers.mount_namespace) {
        return Err(wrap_err(
            "tier landlock cannot hide a path inside a grant (a mask): with no mount namespace \
             there is nothing to cover it with, and Landlock only adds access, it cannot take a \
             subpath back out of a granted tree; allow user namespaces for tier namespaces, or \
             drop the masks and grant only the subtrees the program needs",
        ));
    }
    let allow_hosts = net::allowlist(&policy.network, layers).map_err(wrap_err)?;
    // TCP bounded by a network namespace of the sandbox's own (made, or a
    // container's joined): never without one.
    let own_network = matches!(policy.network, cordon_core::Network::Namespace);
    if own_network && (landlock_tier || !layers.seccomp_allowlist) {
        return Err(wrap_err(
            "Network::Namespace needs a network namespace of the sandbox's own and the seccomp \
             allowlist: tier namespaces with every layer",
        ));
    }
    // Only a joined one (a pod's): in a namespace of its own a sandbox
    // would listen for nobody but itself, and the connections a listener
    // has not accepted are charged to no cgroup (the kernel charges a
    // socket when it is accepted), so they would be a way into the
    // host's TCP memory with nothing gained.
    if own_network
        && policy
            .container
            .as_ref()
            .and_then(|r| r.network.as_ref())
            .is_none()
    {
        return Err(wrap_err(
            "Network::Namespace is given in a joined network namespace only (a container's \
             `ContainerRoot::network`, a pod's): use Network::Deny for a sandbox of its own",
        ));
    }
    // Every container of a root host has a uid of its own: without it the
    // containers of one pod would share one, and `SO_REUSEPORT` lets a
    // listener of one uid take another's connections.
    if own_network && euid == 0 && !layers.own_uid {
        return Err(wrap_err(
            "Network::Namespace on a root host needs a uid of the sandbox's own (the own_uid \
             layer)",
        ));
    }
    let abi = probe::landlock_abi().map_err(wrap_err)?;
    if landlock_tier && abi < probe::SCOPING_ABI {
        return Err(wrap_err(format!(
            "tier landlock needs Landlock ABI {} (signal and abstract-socket scoping); this \
             kernel has {abi}",
            probe::SCOPING_ABI
        )));
    }
    probe::seccomp().map_err(wrap_err)?;

    let grants = Grants::of(policy, layers, tier)?;
    let net_rules = match (&allow_hosts, own_network) {
        (Some(_), _) => landlock_rules::NetRules::ProxyPort(PROXY_PORT),
        (None, true) => landlock_rules::NetRules::Open,
        (None, false) => landlock_rules::NetRules::Denied,
    };
    let ruleset = landlock_rules::build(abi, &grants.rules, net_rules).map_err(wrap_err)?;
    // Network::Namespace's sockets: TCP only, clients and servers.
    let sockets = match (&allow_hosts, own_network) {
        (Some(_), _) => super::Sockets::Proxy,
        (None, true) => super::Sockets::OwnNetwork,
        (None, false) => super::Sockets::None,
    };
    let filter = super::filter_for(layers, Some(tier), sockets, euid != 0);
    let mut seccomp = compiled_filters(filter).map_err(wrap_err)?;
    if seccomp.is_empty() {
        return Err(wrap_err(
            "no seccomp filter was built: refusing to run unfiltered",
        ));
    }
    // The caller's own profile, after Cordon's filter: it can only take
    // away. Explain mode's notifying filter must stay the last one, so
    // the two do not go together.
    if let Some(profile) = &policy.seccomp {
        if policy.explain {
            return Err(wrap_err(
                "explain mode with a seccomp profile of the caller's is not supported",
            ));
        }
        // Stacked on the allowlist only: on the deny-list (which allows
        // what it does not name) a call the profile's rules leave out would
        // run.
        if !layers.seccomp_allowlist {
            return Err(wrap_err(
                "a seccomp profile of the caller's is stacked on the seccomp allowlist only \
                 (the seccomp_allowlist layer)",
            ));
        }
        let mut all: Vec<seccomp::Program> = seccomp.iter().cloned().collect();
        all.extend(seccomp::stacked::compile(profile).map_err(wrap_err)?);
        // The kernel's bounds, checked here: past them the install would
        // fail in the child, after the namespaces were made.
        let total: usize = all.iter().map(|p| p.len() + 4).sum();
        if all.iter().any(|p| p.len() > seccomp::MAX_INSNS)
            || total > seccomp::MAX_INSNS_PER_PROCESS
        {
            return Err(wrap_err(format!(
                "the seccomp profile compiles to {total} instructions with Cordon's filter, past \
                 the kernel's {} per process (or one filter past {}): simplify it",
                seccomp::MAX_INSNS_PER_PROCESS,
                seccomp::MAX_INSNS
            )));
        }
        seccomp = Arc::new(all);
    }

    // A running container's sandbox has its uid already (its ids inside
    // map to it): no lease of another.
    // Entering a running container: its init is a subreaper that ends
    // the sandbox by process group, so the program may not leave it; and
    // the container's processes (other Landlock domains) must not signal
    // it, which only Landlock's scoping stops.
    if joining.is_some() {
        if abi < probe::SCOPING_ABI {
            return Err(wrap_err(format!(
                "entering a running container needs Landlock ABI {} (signal scoping): this \
                 kernel has {abi}",
                probe::SCOPING_ABI
            )));
        }
        let mut all: Vec<seccomp::Program> = seccomp.iter().cloned().collect();
        all.push(seccomp::same_group().map_err(wrap_err)?);
        seccomp = Arc::new(all);
    }
    // A TCP server's sockets: no upper-layer protocol (`TCP_ULP`) on
    // them, the path of the listening-socket bugs (CVE-2023-0461).
    if own_network {
        let mut all: Vec<seccomp::Program> = seccomp.iter().cloned().collect();
        all.push(seccomp::no_tcp_ulp().map_err(wrap_err)?);
        seccomp = Arc::new(all);
    }
    let ids = if joining.is_some() {
        SandboxIds::of_running((euid, egid))
    } else {
        SandboxIds::choose((euid, egid), layers, pool).map_err(wrap_err)?
    };
    // A pod's network namespace, joined instead of a new one.
    let join_network = match policy.container.as_ref().and_then(|r| r.network.as_deref()) {
        Some(_) if joining.is_some() => None,
        Some(path) => {
            if allow_hosts.is_some() {
                return Err(wrap_err(
                    "an egress allowlist needs a network namespace of the sandbox's own, not a \
                     joined one",
                ));
            }
            Some(super::container::join::open_network(path, ids.root_host).map_err(wrap_err)?)
        }
        None => None,
    };
    let join = match (joining, &policy.container) {
        (Some(running), Some(root)) => Some(
            super::container::join::JoinPlan::open(root, running, ids.inside, ids.root_host)
                .map_err(wrap_err)?,
        ),
        _ => None,
    };
    // Without a mount namespace (tier landlock; test layers) a fresh
    // scratch is the host's dir itself, given to the sandbox's uid and
    // handed back before that uid is released.
    let (mounts, handback) = if join.is_some() {
        (None, None)
    } else if landlock_tier || !layers.mount_namespace {
        (
            None,
            super::scratch::ScratchHandback::give(policy, &grants.scratch, &ids, (euid, egid))?,
        )
    } else {
        (mount_plan(policy, &grants, &ids, (euid, egid))?, None)
    };
    let cgroup = sandbox_cgroup(policy, layers)?;
    // TCP memory is one pool for the host: without a cgroup of the
    // sandbox's own nothing bounds its part (cgroup.rs).
    if own_network
        && !cgroup
            .as_ref()
            .is_some_and(cgroup::SandboxCgroup::bounds_tcp)
    {
        return Err(wrap_err(
            "Network::Namespace needs a cgroup of the sandbox's own that bounds its TCP \
             buffers (one pool for the host): run as root (cgroup v1), or with a delegated \
             cgroup v2 memory controller and a memory limit",
        ));
    }
    let id_maps = (layers.mount_namespace && !landlock_tier && join.is_none())
        .then(|| IdMaps::new(ids.inside, ids.host));
    // A root host's maps are written by a helper that stays root (maps.rs),
    // on the slot's stack; with a PID namespace (or in tier landlock) the
    // slot holds the init's memory and the status it leaves too (kept by
    // the resources for the child's whole life).
    let map_writer = ids.root_host && id_maps.is_some();
    // Entering a running container, the init is not its PID namespace's
    // pid 1 (the container's is): a subreaper, as in tier landlock.
    let tree_mode = match tier {
        Tier::Landlock => Some(tree::Mode::Subreaper),
        Tier::Namespaces if join.is_some() => Some(tree::Mode::Subreaper),
        Tier::Namespaces if layers.pid_namespace => Some(tree::Mode::PidNamespace),
        Tier::Namespaces => None,
    };
    let tree = if tree_mode.is_some() || map_writer {
        let slot = tree::TreeSlot::reserve().map_err(|e| {
            wrap_err(format!("cannot reserve the sandbox's init stack: {e}")).with_source(e)
        })?;
        // The init leads the program's session: it takes the pty.
        slot.set_terminal(tree_mode.is_some() && cmd.controlling_terminal());
        Some(slot)
    } else {
        None
    };
    if ids.root_host {
        make_non_dumpable()?;
    }
    // The egress allowlist: a network namespace of its own, whose listener
    // comes out over a socketpair (net.rs), and the proxy variables.
    // A running container's listener exists already, in the namespace
    // joined.
    let (egress_plan, egress_session) = match allow_hosts.filter(|_| join.is_none()) {
        Some(hosts) => {
            let (plan, session) = net::prepare(cmd, hosts).map_err(|e| {
                wrap_err(format!("cannot make the egress proxy's socketpair: {e}")).with_source(e)
            })?;
            (Some(plan), Some(session))
        }
        None => (None, None),
    };
    let mut unshare = if landlock_tier || join.is_some() {
        0
    } else {
        unshare_flags(layers)
    };
    if egress_plan.is_some() {
        unshare |= libc::CLONE_NEWNET;
    }
    // A container has a network namespace of its own (none of the host's
    // connection tables, interfaces or routes; its fresh sysfs needs one)
    // and a cgroup namespace (its cgroup paths relative to its own).
    if policy.container.is_some() && join.is_none() {
        unshare |= libc::CLONE_NEWCGROUP;
        if join_network.is_none() {
            unshare |= libc::CLONE_NEWNET;
        }
    }
    // The sandbox's own helpers (the init, and in tier landlock its
    // warden) count against RLIMIT_NPROC like its processes; with no user
    // namespace and no uid of its own, so does every task of the caller's
    // uid (rlimits.rs).
    let helpers = match tree_mode {
        Some(tree::Mode::Subreaper) => 2,
        Some(tree::Mode::PidNamespace) => 1,
        None => 0,
    };
    // Explain mode: the notifying filter, and the thread that answers it
    // (started before the caller's tasks are counted just below).
    let egress_session = egress_session.map(|mut s| {
        if policy.explain {
            s.refusals = Some(Arc::new(cordon_core::explain::DenialLog::new()));
        }
        s
    });
    let (seccomp, syscall_watch, seccomp_listener) = if policy.explain {
        let net = if egress_plan.is_some() || own_network {
            explain::NetMode::Allowlist
        } else {
            explain::NetMode::Denied
        };
        let (watch, send) =
            explain::SyscallWatch::start(Arc::clone(&seccomp), net).map_err(|e| {
                wrap_err(format!(
                    "cannot start recording the sandbox's refused calls: {e}"
                ))
                .with_source(e)
            })?;
        // The filter with its last program notifying; the guard is
        // installed after it (its EPERM outranks the notifications).
        let guard = seccomp::emulate::no_listener_guard().map_err(wrap_err)?;
        let mut notifying: Vec<_> = seccomp.iter().cloned().collect();
        if let Some(last) = notifying.last_mut() {
            *last = seccomp::emulate::notify_variant(last);
        }
        (Arc::new(notifying), Some(watch), Some((send, guard)))
    } else {
        (seccomp, None, None)
    };
    // File denials: Landlock's audit records, where this caller may read
    // them (audit.rs); forks refused at the process limit: a pids cgroup,
    // where this process may make one (cgroup/pids.rs); else the reason,
    // for the explanation.
    let recorders = match syscall_watch {
        Some(syscalls) => Some(explain_recorders(
            syscalls,
            policy,
            &ids,
            abi,
            euid,
            landlock_tier,
            cgroup.is_some(),
        )?),
        None => None,
    };
    let landlock_flags = match recorders.as_ref().map(|r| &r.files) {
        Some(Ok(_)) => landlock_rules::LOG_NEW_EXEC_ON,
        _ => 0,
    };
    let fork_count = recorders.as_ref().and_then(explain::Recorders::fork_count);
    let uid_tasks = if landlock_tier && !ids.root_host {
        rlimits::tasks_of_uid(ids.host.0)
    } else {
        0
    };
    let plan = ChildPlan {
        cgroup_join: cgroup
            .as_ref()
            .map(cgroup::SandboxCgroup::join_fds)
            .unwrap_or_default()
            .into_iter()
            .chain(fork_count.and_then(cgroup::pids::ForkCount::join_fd))
            .collect(),
        drop_to: (ids.root_host && join.is_none()).then_some(ids.host),
        parent_pid,
        unshare_flags: unshare,
        id_maps,
        mounts,
        quotas: (layers.kernel_quotas && !landlock_tier && join.is_none())
            .then(quotas::QuotaPlan::new),
        hostname: (layers.uts_namespace && !landlock_tier && join.is_none())
            .then(|| {
                let name = policy
                    .container
                    .as_ref()
                    .and_then(|r| r.hostname.as_deref())
                    .unwrap_or(quotas::HOSTNAME);
                std::ffi::CString::new(name)
                    .map_err(|_| wrap_err("the container's hostname has a NUL byte"))
            })
            .transpose()?,
        scratch_rights: landlock_rules::rights(landlock::ABI::from(abi), Grant::Scratch, true)
            .bits(),
        review_rights: landlock_rules::rights(landlock::ABI::from(abi), Grant::ReadWrite, true)
            .bits(),
        rlimits: rlimits::plan(
            &policy.limits,
            layers,
            cgroup.is_some(),
            layers.mount_namespace && !landlock_tier && !policy.scratch_persists,
            helpers + uid_tasks,
            fork_count.is_some(),
        ),
        last_cap: probe::last_cap(),
        bounding: match (landlock_tier, ids.root_host) {
            (false, _) => caps::Bounding::WithTheRest,
            (true, true) => caps::Bounding::BeforeCredentials,
            (true, false) => caps::Bounding::CannotDrop,
        },
        ruleset,
        landlock_flags,
        seccomp,
        tree: tree
            .as_ref()
            .zip(tree_mode)
            .map(|(slot, mode)| (slot.addr(), mode)),
        map_writer_stack: tree
            .as_ref()
            .filter(|_| map_writer)
            .map(tree::TreeSlot::stack_top),
        egress: egress_plan,
        seccomp_listener,
        join,
        join_network,
    };
    tracing::debug!(
        landlock_abi = abi,
        rules = grants.rules.len(),
        scratch = %grants.scratch.display(),
        scratch_is_private = grants.scratch_is_private,
        sandbox_uid = ids.host.0,
        %tier,
        ?layers,
        seccomp_insns = plan.seccomp.iter().map(Vec::len).sum::<usize>(),
        "linux backend confining child"
    );
    // SAFETY: `confine` only issues raw syscalls on data prepared above and
    // builds io::Error from errno (no allocation): async-signal-safe.
    unsafe {
        cmd.pre_exec(move |ctx| confine::confine(&plan, ctx));
    }
    let holds_something = layers.sandbox_limits
        || tree.is_some()
        || egress_session.is_some()
        || ids.lease.is_some()
        || handback.is_some()
        || recorders.is_some();
    Ok(holds_something.then(|| {
        Box::new(super::resources::LinuxResources::new(
            cgroup,
            layers.sandbox_limits && tree_mode.is_some(),
            tree,
            egress_session,
            ids.lease,
            handback,
            recorders,
        )) as Box<dyn cordon_core::SandboxResources>
    }))
}

/// What tier landlock refuses outright: an egress allowlist (no network
/// namespace to make the proxy the only way out: Landlock's TCP rule names
/// a port, not an address, so that port would be open on every host
/// address), and on a root host a writable host directory that outlives
/// the sandbox (no idmapped mount: what the sandbox wrote there would be
/// stored as its leased uid, which a later sandbox may get).
fn landlock_tier_admits(policy: &SandboxPolicy, root_host: bool) -> Result<(), WrapError> {
    if matches!(policy.network, cordon_core::Network::Namespace) {
        return Err(wrap_err(
            "Network::Namespace needs a network namespace of the sandbox's own, which tier \
             landlock has not: allow user namespaces for tier namespaces, or run without \
             network",
        ));
    }
    if !matches!(policy.network, cordon_core::Network::Deny) {
        return Err(wrap_err(
            "tier landlock cannot hold an egress allowlist (Network::Allow, cordon run \
             --allow-host): with no network namespace of its own, Landlock's rule for the \
             proxy's port would allow that port on every address of the host, so the proxy \
             would not be the only way out; allow user namespaces for tier namespaces, or run \
             without network",
        ));
    }
    if root_host && (policy.scratch_persists || !policy.read_write.is_empty()) {
        return Err(wrap_err(
            "tier landlock on a root host cannot give the sandbox a host directory that \
             outlives it (a kept scratch, --scratch DIR, or a read-write grant): with no \
             idmapped mount, its files would be stored as the sandbox's leased uid, which a \
             later sandbox may get; use a fresh, discarded scratch and no --rw, or allow user \
             namespaces for tier namespaces",
        ));
    }
    Ok(())
}

mod mount_plan;
#[allow(unused_imports)]
use mount_plan::*;
/// Sandbox-wide limits: a cgroup where this process can make one.
fn sandbox_cgroup(
    policy: &SandboxPolicy,
    layers: Layers,
) -> Result<Option<cgroup::SandboxCgroup>, WrapError> {
    let (true, Some(h)) = (layers.sandbox_limits, cgroup::hierarchy()) else {
        return Ok(None);
    };
    check_memory_floor(&policy.limits)?;
    let tcp = matches!(policy.network, cordon_core::Network::Namespace);
    cgroup::SandboxCgroup::create(h, &policy.limits, tcp)
        .map(Some)
        .map_err(|e| {
            wrap_err(format!(
                "cannot make the sandbox's cgroup under {h:?}: {e}; nothing was run"
            ))
            .with_source(e)
        })
}

/// The launcher, the init and the program until its exec share this
/// process's memory while they run as the sandbox's uid: were it
/// dumpable, a process of that uid could trace them and write it
/// (maps.rs). No host process has a sandbox's own uid; this holds for the
/// shared uid of the test layers too.
fn make_non_dumpable() -> Result<(), WrapError> {
    // SAFETY: prctl on integers.
    if unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) } == 0 {
        return Ok(());
    }
    let e = std::io::Error::last_os_error();
    Err(wrap_err(format!(
        "cannot make this process non-dumpable, which a root host must be before it starts \
         sandboxes: {e}"
    ))
    .with_source(e))
}
